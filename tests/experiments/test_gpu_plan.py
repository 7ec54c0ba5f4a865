"""experiments/gpu.sh, the one-command GPU experiment, without a GPU: its plan (dry run), the pieces it cuts
the carried files into and puts back together (sha256-checked), and where `run` resumes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.experiments import load_script

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "experiments" / "gpu.sh"


gpu = load_script("gpu_plan")


def _sh(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": path, "PYTHONPATH": str(ROOT / "src"), **env})


def test_the_dry_run_prints_the_plan_and_its_budget() -> None:
    res = _sh("--dry-run")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for stage in gpu.stages():
        assert f"  {stage.name} " in out
    n = len(gpu.pieces_of(gpu.carried_files()))
    assert f"{n} carrying calls" in out and f"NN = 00..{n - 1:02d}" in out
    assert "estimated device time" in out and "workers: cpu" in out and "Session 0" not in out
    cuda = _sh("--dry-run", WORKERS="cuda").stdout  # the CUDA build is worth a session of its own
    assert "Session 0" in cuda and "llama_cpp_python-0.3.36.tar.gz" in cuda


def test_the_plan_says_when_it_does_not_fit() -> None:
    assert "OVER BUDGET" in _sh("--dry-run", STEPS="200").stdout
    lease = _sh("--dry-run").stdout  # the default sizes are the 15-minute lease's
    assert "fits in 15 min" in lease and "OVER BUDGET" not in lease
    assert "OVER BUDGET" in _sh("--dry-run", WORKERS="cuda", POOL="cpu").stdout  # 1.7 GB + the build: no
    bad = _sh("--dry-run", WORKERS="gpu")
    assert bad.returncode != 0 and "WORKERS='gpu'" in bad.stderr and "Traceback" not in bad.stderr


def test_the_carried_models_are_the_pools_and_the_policys() -> None:
    lease = [name for name, _ in gpu.model_files()]
    assert lease == ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" in [n for n, _ in gpu.model_files("cpu")]
    assert [n for n, _ in gpu.model_files("tiny")] == lease  # the policy's GGUF travels whatever the pool


def test_the_repacked_llama_wheel_installs_and_imports_anywhere(tmp_path: Path) -> None:
    """WORKERS=cpu carries this machine's llama-cpp-python as a py3-none wheel: it must hold no module built for
    one CPython (else the GPU's 3.12 could not import a 3.11 build), install with pip and import from there."""
    import zipfile

    wheel = gpu.repack_installed("llama-cpp-python", tmp_path / "w")
    assert wheel.name == gpu.LLAMA_CPU_WHEEL[0]
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("llama_cpp/lib/") and ".so" in n for n in names)  # the ctypes-loaded libraries
    assert not [n for n in names if ".cpython-" in n or n.endswith(".abi3.so")]
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(wheel)]
    assert subprocess.run(pip, capture_output=True, text=True, timeout=120).returncode == 0
    code = "import llama_cpp; print(llama_cpp.__file__); llama_cpp.llama_backend_init()"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith(str(site))


def test_a_wheel_built_here_gets_libgomp_beside_its_libraries_and_a_record_that_matches(tmp_path: Path) -> None:
    """LLAMA_WHEEL (a CUDA build made here) travels with llama.cpp's OpenMP runtime, as the repacked CPU wheel
    does; pip checks RECORD's hashes, so every line must match the bytes it names."""
    import base64
    import hashlib
    import zipfile

    built = gpu.repack_installed("llama-cpp-python", tmp_path / "built", bundle=())  # no libgomp yet
    assert not [n for n in zipfile.ZipFile(built).namelist() if "libgomp" in n]
    wheel = gpu.bundle_libraries(built, tmp_path / "out")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "llama_cpp/lib/libgomp.so.1" in names and wheel.name == built.name
        record = next(n for n in names if n.endswith("RECORD"))
        rows = [line.split(",") for line in z.read(record).decode().splitlines()]
        assert sorted(r[0] for r in rows) == sorted(names)
        for name, digest, size in rows:
            if name != record:
                blob = z.read(name)
                assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(
                    b"=").decode() and int(size) == len(blob), name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=6), st.integers(1, 64))
def test_pieces_cover_every_byte_once_and_stay_under_the_limit(sizes: list[int], limit: int) -> None:
    files = [(f"f{i}", n) for i, n in enumerate(sizes)]
    pieces = gpu.pieces_of(files, limit)
    assert all(sum(n for _, _, n in p) <= limit for p in pieces)
    for name, size in files:
        chunks = sorted((o, n) for p in pieces for f, o, n in p if f == name)
        assert sum(n for _, n in chunks) == size
        assert all(o == sum(n for _, n in chunks[:k]) for k, (o, _) in enumerate(chunks))  # contiguous, in order


def test_carry_then_assemble_restores_the_files_and_refuses_a_corrupted_one(tmp_path: Path) -> None:
    sources = []
    for name, size in (("a.bin", 250), ("b.gguf", 1000), ("c.tar", 7)):
        p = tmp_path / "src" / name
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(os.urandom(size))
        sources.append((name, p))
    n = gpu.write_pieces(sources, tmp_path / "pieces", piece=300)
    assert n == 5
    work = tmp_path / "work"
    env = {"WORK": str(work), "PIECES": str(tmp_path / "pieces")}
    assert _sh("carry", "00", **env).returncode == 0 and _sh("carry", "01", **env).returncode == 0
    assert gpu.assemble(work) == 0  # a.bin is complete, b.gguf waits for its pieces
    assert (work / "files" / "a.bin").read_bytes() == sources[0][1].read_bytes()
    assert not (work / "files" / "b.gguf").exists()
    for k in range(2, n):
        assert _sh("carry", f"{k:02d}", **env).returncode == 0
    chunk = next((work / "chunks").glob("b.gguf.*"))
    data = chunk.read_bytes()
    chunk.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # always a different byte (a fixed b"x" was one in 256)
    assert gpu.assemble(work) == 2 and not (work / "files" / "b.gguf").exists()
    for k in range(n):  # carrying again repairs it
        _sh("carry", f"{k:02d}", **env)
    assert gpu.assemble(work) == 0
    for name, src in sources:
        assert (work / "files" / name).read_bytes() == src.read_bytes()


def test_run_resumes_after_the_stages_already_done_and_the_dry_run_marks_nothing(tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()
    for stage in ("wheels", "llama", "models", "policy", "sft", "train-cf"):
        (done / stage).touch()
    res = _sh("run", "--dry-run", WORK=str(tmp_path))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "# stage train-cf" not in out and "# stage sft" not in out
    assert out.index("# stage train-global") < out.index("# stage eval") < out.index("# stage report")
    assert "--no-cf" in out and "--lora --precision bf16 --gradient-checkpointing" in out
    assert "all stages done" in out
    assert sorted(p.name for p in done.iterdir()) == ["llama", "models", "policy", "sft", "train-cf", "wheels"]


# The wheel list experiments/gpu_plan.py carried until issue 25, written by hand: huggingface-hub 2.4.0
# imports httpx2, which neither the list nor the GPU image had (stage `policy`: ModuleNotFoundError).
HAND_WRITTEN = ("pydantic==2.14.3", "pydantic-core==2.50.4", "annotated-types==0.8.0", "typing-inspection==0.4.5",
                "gguf==0.19.0", "diskcache==5.6.3", "transformers==5.23.0", "huggingface-hub==2.4.0", "peft==0.21.2")


def test_the_image_list_is_the_one_the_gpu_note_gives() -> None:
    import re

    note = (ROOT.parent / "shared" / "notes" / "gpu.md").read_text()  # missing: fails, never skips
    block = note.split("Python packages of the image (2026-11-17):", 1)[1].strip().split("\n\n", 1)[0]
    names = {gpu.canonicalize_name(n.strip()) for n in block.replace("\n", " ").split(",") if n.strip()}
    has = re.search(r"What the machine has: Python [\d.]+ with (.+?); 16 cores", note, re.S)
    assert has is not None
    versions = {gpu.canonicalize_name(n): v for n, v in re.findall(r"([a-z][a-z0-9-]*) (\d+(?:\.\d+)+)", has[1])}
    image = gpu.read_image()
    assert set(image) == names
    assert {n: v for n, v in image.items() if v is not None} == versions


def test_the_hand_written_list_left_httpx2_unmet() -> None:
    gaps = gpu.unmet(HAND_WRITTEN, gpu.read_image())
    assert any(g.startswith("httpx2") and "huggingface-hub==2.4.0" in g for g in gaps), gaps


def test_the_computed_wheels_leave_no_requirement_unmet() -> None:
    image = gpu.read_image()
    wheels = gpu.wheel_closure(image=image)
    assert gpu.unmet(wheels, image) == []
    names = {w.split("==")[0] for w in wheels}
    assert {"transformers", "peft", "pydantic", "pydantic-core", "gguf", "diskcache", "uvicorn", "fastapi"} <= names
    assert "accelerate" in names  # the note says 1.15: not every 1.15.* meets ==1.15.0
    assert not names & {"torch", "llama-cpp-python", "huggingface-hub", "numpy", "aiohttp"}  # the image's
    assert all(w.split("==")[1] == gpu.metadata.version(w.split("==")[0]) for w in wheels)  # installed here


def test_a_carried_package_brings_what_it_requires_that_the_image_lacks() -> None:
    """Without huggingface-hub in the image, hub 2.4.0 travels, and so do httpx2 and its own requirements."""
    image = {n: v for n, v in gpu.read_image().items() if n != "huggingface-hub"}
    names = {w.split("==")[0] for w in gpu.wheel_closure(image=image)}
    assert {"huggingface-hub", "httpx2", "httpcore2"} <= names


def test_verify_names_what_the_machine_lacks_in_one_line(tmp_path: Path) -> None:
    ok = tmp_path / "ok.txt"
    ok.write_text("packaging>=1\nhypothesis\n")
    plan = [sys.executable, str(ROOT / "experiments" / "gpu_plan.py"), "verify"]
    assert subprocess.run([*plan, str(ok)], capture_output=True, text=True, timeout=60).returncode == 0
    bad = tmp_path / "bad.txt"
    bad.write_text("packaging>=1\nno-such-distribution-lemon>=1\npackaging<1\n")
    res = subprocess.run([*plan, str(bad)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "no-such-distribution-lemon>=1 (found nothing)" in res.stderr and "packaging<1" in res.stderr


def test_the_rehearsal_starts_afresh_only_in_a_folder_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("mine")
    res = _sh("rehearse", WORK=str(tmp_path))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "WORK=" in res.stderr
    assert (tmp_path / "thesis.tex").read_text() == "mine"


def test_the_table_plan_carries_the_large_model_alone_and_draws_on_the_gpu(monkeypatch) -> None:
    """PLAN=table: the six-benchmark cells' workers on the GPU, so only `large`'s GGUF travels, no policy and no
    training stage; asking for CPU workers, or a misspelt plan, is refused in one line."""
    for name in ("POOL", "WORKERS", "LLAMA_WHEEL", "TABLE_BENCHES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PLAN", "table")
    assert [n for n, _ in gpu.model_files()] == ["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
    assert [s.name for s in gpu.stages()] == ["wheels", "llama", "models", "table"]
    assert ("bwrap", gpu.sandbox_binary().stat().st_size) in gpu.carried_files()  # HumanEval's sandbox there
    assert gpu.table_cells()[0] == ["humaneval", "aqua", "mmlu"]
    plan = _sh("--dry-run", PLAN="table")
    assert plan.returncode == 0, plan.stderr
    assert "plan: table" in plan.stdout and "workers: cuda" in plan.stdout and "  policy " not in plan.stdout
    for bad, named in (({"WORKERS": "cpu"}, "WORKERS=cuda"), ({"PLAN": "tabel"}, "PLAN='tabel'")):
        res = _sh("--dry-run", **{"PLAN": "table", **bad})
        lines = res.stderr.strip().splitlines()
        assert res.returncode != 0 and len(lines) == 1 and named in lines[0], res.stderr


def test_the_table_stage_runs_one_script_per_benchmark_side_by_side(tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()
    for stage in ("wheels", "llama", "models"):
        (done / stage).touch()
    res = _sh("run", "--dry-run", WORK=str(tmp_path), PLAN="table", TABLE_BENCHES="aqua mmlu humaneval")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "# stage table" in out and "cache import" in out and "all stages done" in out
    assert [b for b in ("aqua", "mmlu", "humaneval") if f"BENCHES={b} PARTS=topologies" in out] == [
        "aqua", "mmlu", "humaneval"]
    assert sorted(p.name for p in done.iterdir()) == ["llama", "models", "wheels"]
