"""`lemon export-gguf`: convert a trained HF policy back to a GGUF file for the embedded backend.

The conversion itself is llama.cpp's `convert_hf_to_gguf.py`. PyPI's llama-cpp-python wheel does not ship
it, but its source distribution does (vendor/llama.cpp/convert_hf_to_gguf.py); rather than re-implement a
model-specific tensor and tokenizer mapping, this command runs that script (with the pinned `gguf`
package) and says exactly how to obtain it when it is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lemon.errors import LemonError
from lemon.orchestrator.policy_prompt import read_prompt_style, write_prompt_style

SCRIPT = "convert_hf_to_gguf.py"
ENV = "LEMON_CONVERT_HF_TO_GGUF"
HINT = (f"get it from the llama-cpp-python sdist: pip download --no-deps --no-binary :all: "
        f"llama-cpp-python==0.3.36, unpack it, and pass --converter <dir>/vendor/llama.cpp/{SCRIPT} "
        f"(or set {ENV})")


def find_converter(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The converter script: explicit path, else $LEMON_CONVERT_HF_TO_GGUF, else next to llama_cpp."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit).expanduser())
    elif os.environ.get(ENV):
        candidates.append(Path(os.environ[ENV]).expanduser())
    else:
        try:
            import llama_cpp

            root = Path(llama_cpp.__file__).resolve().parent
            candidates += [root / SCRIPT, root / "vendor" / "llama.cpp" / SCRIPT, root.parent / SCRIPT]
        except ImportError:
            pass
    for c in candidates:
        if c.is_file():
            return c
    where = ", ".join(str(c) for c in candidates) or "nowhere to look"
    raise LemonError(f"{SCRIPT} not found ({where}); {HINT}")


def export_gguf(hf_dir: Path, out: Path, *, outtype: str = "q8_0", converter: str | None = None,
                timeout_s: float = 900) -> Path:
    """Convert `hf_dir` (a model directory, e.g. run_dir/final) into `out` (.gguf)."""
    if not (hf_dir / "config.json").is_file():
        raise LemonError(f"{hf_dir} is not an HF model directory (no config.json)")
    if out.suffix != ".gguf":
        raise LemonError(f"output {out} must end in .gguf")
    script = find_converter(converter)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    cmd = [sys.executable, str(script), str(hf_dir), "--outfile", str(tmp), "--outtype", outtype]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise LemonError(f"{SCRIPT} took longer than {timeout_s:.0f}s") from None
    if proc.returncode != 0 or not tmp.is_file():
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise LemonError(f"{SCRIPT} failed (exit {proc.returncode}): {last[0][:300]}")
    os.replace(tmp, out)
    write_prompt_style(out, read_prompt_style(hf_dir))  # the .gguf is asked the way its weights were trained
    return out
