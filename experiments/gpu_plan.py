"""The GPU experiment's bookkeeping, used by experiments/gpu.sh: what travels, in which pieces, and the stages.

A lent GPU machine (docs: /work/shared/notes/gpu.md) has no network, takes at most 64 MiB per call, runs one
command for at most 10 minutes, and is lent for 15 minutes of device time; it forgets everything ~30 s after a
call. So everything it needs is packed HERE into pieces of at most PIECE_MIB (`pack`), each piece is sent by one
call (`carry N`, back to back), files are re-assembled and sha256-checked there (`assemble`), and the
experiment runs as stages that each leave a done-marker, so `run` can be called again and goes on where the
last call stopped (`next`). `plan` prints all of it with the time budget; nothing here needs the GPU.
Two plans (PLAN): `learn` (the default: SFT, GRPO +/- CF, eval, report) and `table` (the six-benchmark table's
cells named by TABLE_BENCHES / TABLE_METHODS, drawn by the workers on the GPU, their replies brought back as
a sample bank that this machine's table replays).
Subcommands: plan | pack [--dry-run] | carry N | assemble | next (the stage to run now) | ggufs (the model files
the pool and the policy need) | wheels (the computed wheel list) | requirements FILE (what `verify` checks) |
verify FILE (on the GPU: the carried requirements are met there) | verify-models (on the GPU: the carried
GGUFs, re-hashed) | table-benches (the table plan's benchmarks) | bundle WHEEL DIR (a CUDA wheel built here,
with libgomp beside its libraries, for LLAMA_WHEEL) | pack-rehearsal DIR (the CPU rehearsal's
pieces: the data, the llama-cpp-python wheel, llama-server and SmolLM2, cut and checked the same way)."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

MIB = 1 << 20
PIECE_MIB = 56                       # + the working tree (~2 MiB) stays under the 64 MiB a call carries
BUDGET_S = 15 * 60                   # device time of one session (the device README since 2026-11-26; was 30)
CALL_S = 600                         # one command at most
START_S = 90                         # a cold machine's start (device README: "a minute or more")
CARRY_CALL_S = 6                     # one warm call moving ~56 MiB: 5.5 s measured on an H100 (gpu.md)
SMOLLM2 = ("SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432)
POLICY_MODEL = "qwen2.5-coder-0.5b"  # the policy's GGUF, turned into an HF model there (stage policy)
# The workers' pool there. The `cpu` pool's two smaller levels: their GGUFs travel in ~12 calls, where `cpu`'s
# `large` (1.5B, 20 more pieces, 3x slower per token on the CPU) does not fit a 15-minute lease.
DEFAULT_POOL = Path(__file__).with_name("gpu-pool.yaml")
WHEELS_BYTES = 24 * MIB              # the carried wheels (`wheel_closure()`), about
# What the GPU must import and the image may lack: the project with its [train] extra. The wheels that travel
# are the closure of its Requires-Dist (`wheel_closure`), not a hand-written list: one missed `httpx2`
# (required by huggingface-hub 2.4.0) and stage `policy` died with ModuleNotFoundError (issue 25).
ROOT = "lemon-mas[train]"
IMAGE = Path(__file__).with_name("gpu_image.txt")
# Not carried, and their requirements not followed: not needed there.
SKIPPED = {"torch": "the image's CUDA build is used (the [train] pin is the CPU build this machine tests)",
           "trl": "only benchmarks/bench_train.py's anchor", "datasets": "not imported by lemon",
           "sentencepiece": "only `lemon export-gguf` (llama.cpp's converter), which the GPU plan does not run"}
# Not carried as a wheel but its requirements are followed: built there from the carried sdist.
BUILT_THERE = {"llama-cpp-python"}
# The GPU machine's interpreter (gpu.md: Python 3.12.3 on x86_64 Linux), for evaluating markers.
TARGET = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
          "implementation_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
          "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython",
          "platform_python_implementation": "CPython"}
LLAMA_SDIST = ("llama_cpp_python-0.3.36.tar.gz", 76_589_250)  # built there with CUDA (~5 min, gpu.md)
# WORKERS=cpu (the default): the llama-cpp-python installed HERE (the build the suite tests) is repacked as a
# wheel and carried; there the workers run on the 16 CPU cores in their own processes (lemon.llm.serve) while
# torch has the GPU. Its package is pure Python over ctypes-loaded libraries, so one wheel fits any CPython 3.
LLAMA_CPU_WHEEL = ("llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl", 9 * MIB)  # about
# With it travels llama.cpp's own llama-server (experiments/build_llama_server.sh: static llama.cpp, 15 MB):
# the stages serve the workers through it (LEMON_LLAMA_SERVER), 8 requests batched per model, where
# llama_cpp.server ran one at a time and was 76 % of a GRPO step on the H100 (docs/results.md).
LLAMA_SERVER = ("llama-server", 15 * MIB)  # about
BUILD_LLAMA_SERVER = Path(__file__).with_name("build_llama_server.sh")
DATA_BYTES = 13 * MIB                # the six benchmarks' files (../shared/data)


@dataclass(frozen=True)
class Stage:
    name: str
    estimate_s: float
    resumable: bool        # may be cut by the call's time limit and continued by the next call
    what: str


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def plan_kind() -> str:
    """`learn` (the default) or `table`: what the lease is for."""
    kind = os.environ.get("PLAN", "learn")
    if kind not in ("learn", "table"):
        raise SystemExit(f"PLAN={kind!r}: use learn (SFT, GRPO, eval) or table (six-benchmark cells on the GPU)")
    return kind


def workers_build() -> str:
    """Where the workers' llama.cpp runs there: `cpu` (the learn plan's default: the build carried from here, on
    the 16 CPU cores; a 15-minute lease cannot pay the ~5 min CUDA build) or `cuda` (built there, or
    LLAMA_WHEEL's; the table plan's only choice: its cells are the workers' tokens, which the GPU draws)."""
    table = plan_kind() == "table"
    build = os.environ.get("WORKERS", "cuda" if table else "cpu")
    if table and build == "cpu":
        raise SystemExit("PLAN=table draws the workers' replies on the GPU: use WORKERS=cuda (with LLAMA_WHEEL, "
                         "a CUDA build of llama-cpp-python, to save the ~5 min build there)")
    if build not in ("cpu", "cuda"):
        raise SystemExit(f"WORKERS={build!r}: use cpu (workers on the GPU machine's CPU cores) or cuda")
    return build


def llama_file() -> tuple[str, int]:
    """(name, bytes) of the llama-cpp-python that travels: LLAMA_WHEEL's, the CPU wheel, or the sdist."""
    wheel = os.environ.get("LLAMA_WHEEL")
    if wheel:
        return Path(wheel).name, Path(wheel).stat().st_size
    return LLAMA_CPU_WHEEL if workers_build() == "cpu" else LLAMA_SDIST


def model_files(pool: str | None = None) -> list[tuple[str, int]]:
    """(GGUF name, bytes) of the pool's embedded models and the policy's: what the run needs, nothing more.
    The table plan needs no policy and only `large`'s model (six_benchmarks.sh runs every topology agent there)."""
    from lemon.llm.models import MODELS
    from lemon.llm.pools import read_pool_config

    table = plan_kind() == "table"
    cfg = read_pool_config(pool or os.environ.get("POOL") or ("cpu" if table else str(DEFAULT_POOL)))
    levels = [lv for lv in cfg.levels if lv.backend == "embedded"]
    if table:
        levels = [lv for lv in levels if lv.name == "large"]
    ids = dict.fromkeys([lv.model for lv in levels] + ([] if table else [POLICY_MODEL]))
    unknown = [i for i in ids if i not in MODELS]
    if unknown:
        raise SystemExit(f"the pool names model files the plan cannot carry: {', '.join(unknown)}; use pinned ids "
                         f"({', '.join(MODELS)})")
    return [(MODELS[i].filename, MODELS[i].size) for i in ids]


def setup_stages() -> list[Stage]:
    """What every plan does first: the wheels, llama-cpp-python and the model files in place."""
    cpu = workers_build() == "cpu"
    carried = cpu or bool(os.environ.get("LLAMA_WHEEL"))
    return [
        Stage("wheels", 20, False, "pip install the carried wheels into $WORK/site"),
        Stage("llama", 10 if carried else 330, False,
              f"llama-cpp-python: install the carried {'CPU' if cpu else 'CUDA'} wheel" if carried else
              "llama-cpp-python: build from the sdist with -DGGML_CUDA=on (sm_90); the wheel goes to $OUT"),
        Stage("models", 20, False, "place the GGUFs, verify sha256"),
    ]


def table_cells() -> tuple[list[str], list[str]]:
    """(benchmarks, methods) of the table plan: TABLE_BENCHES x TABLE_METHODS, the costly cells. The default
    names the three benchmarks whose topology cells 2 cores take longest on; cells already in the carried bank
    replay there in seconds. HumanEval's checks run in the sandbox the plan carries (`sandbox_binary`)."""
    benches = os.environ.get("TABLE_BENCHES", "humaneval aqua mmlu").split()
    methods = os.environ.get("TABLE_METHODS", "chain tree complete random").split()
    return benches, methods


def stages() -> list[Stage]:
    """The experiment, in order, with ASSUMED costs on one H100 whose workers run on its 16 CPU cores (WORKERS=cpu;
    0.5B, ~3 s a reply) or on the GPU (cuda: ~374 tok/s, gpu.md). Defaults: what fits one 15-minute lease."""
    if plan_kind() == "table":
        benches, methods = table_cells()
        limit, seeds, jobs = env_int("LIMIT", 30), env_int("SEEDS", 2), env_int("TABLE_JOBS", 8)
        # one multi-agent item at `large` in one of the processes sharing the GPU: 14 s measured on an H200
        # (2026-11-28: 480 AQuA and MMLU items, 16 processes, 424 s)
        item_s = env_int("ITEM_S", 15)
        est = len(benches) * len(methods) * limit * seeds * item_s / (jobs * len(benches))
        if os.environ.get("BANK_STAGES"):  # runtime_bank.sh's stages instead: as long as the lease allows (resumes)
            return [*setup_stages(), Stage(
                "table", 540, True, f"runtime_bank.sh {os.environ['BANK_STAGES']}: issue 54's banks, {jobs} "
                "processes an evaluation, cut with time to bring the LLM cache back as a bank; resumes")]
        return [*setup_stages(), Stage(
            "table", est, True, f"six_benchmarks.sh topologies: {' '.join(methods)} on {' '.join(benches)}, "
            f"{limit} items x {seeds} seeds, {jobs} processes a benchmark; the LLM cache -> $OUT as a bank")]
    steps, n_train, limit, seeds = (env_int("STEPS", 2), env_int("N_TRAIN", 8), env_int("LIMIT", 5),
                                    env_int("SEEDS", 1))
    cpu = workers_build() == "cpu"
    step_s = env_int("STEP_S", 60 if cpu else 35)  # 2 tasks x group 4 specs x ~2 worker calls, served models
    item_s = env_int("ITEM_S", 6 if cpu else 2)    # one evaluated item of one method
    methods = 5
    return [
        *setup_stages(),
        Stage("policy", 60, False, "the Qwen2.5-Coder-0.5B-Instruct policy: GGUF -> HF safetensors"),
        Stage("sft", 60 + (4 if cpu else 1.2) * n_train, False,
              f"lemon sft: {n_train} teacher specs (the pool's strongest level), 3 epochs"),
        Stage("train-cf", 30 + steps * step_s, True,
              f"lemon train: {steps} steps GRPO + counterfactual credit, --lora --precision bf16 "
              "--gradient-checkpointing"),
        Stage("train-global", 30 + steps * step_s, True, f"lemon train --no-cf: the same {steps} steps"),
        Stage("eval", methods * limit * seeds * item_s, True,
              f"lemon eval multiarith: cf, global, sft, cot, vanilla on {limit} test items x {seeds} seed(s)"),
        Stage("report", 30, False, "lemon report + plots + step times -> $OUT"),
    ]


def verify_models() -> int:
    """ON THE GPU: every GGUF the plan carried is where lemon looks and matches its pinned sha256 (re-hashed)."""
    from lemon.llm.models import MODELS, ensure_model

    by_file = {m.filename: m.id for m in MODELS.values()}
    for name, _ in model_files():
        path = ensure_model(by_file[name], rehash=True)
        print(f"{by_file[name]}: {path} verified")
    return 0


def read_image(path: Path = IMAGE) -> dict[str, str | None]:
    """The image's distributions (canonical name -> the version gpu.md gives, or None when it gives none)."""
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.strip().partition(" ")
            out[canonicalize_name(name)] = version or None
    return out


def image_meets(req: Requirement, image: dict[str, str | None]) -> bool:
    """The image's copy satisfies `req`. A version gpu.md gives as X.Y must satisfy it for every X.Y.*; an
    unstated version is ASSUMED to (the plan lists those assumptions)."""
    name = canonicalize_name(req.name)
    if name not in image:
        return False
    version = image[name]
    if version is None:
        return True
    ends = [version] if len(Version(version).release) > 2 else [f"{version}.0", f"{version}.9999"]
    return all(req.specifier.contains(v, prereleases=True) for v in ends)


def requirements(name: str, extras: Iterable[str] = ()) -> list[Requirement]:
    """Requires-Dist of the distribution installed HERE whose markers hold on the GPU, with `extras`."""
    wanted = ["", *extras]
    reqs = [Requirement(text) for text in metadata.distribution(name).requires or []]
    return [r for r in reqs if r.marker is None or any(r.marker.evaluate({**TARGET, "extra": e}) for e in wanted)]


def wheel_closure(root: str = ROOT, image: dict[str, str | None] | None = None) -> list[str]:
    """`name==version` (the version installed here) of every distribution that `root` needs on the GPU,
    directly or through another carried one, and that the image lacks or has in a version that does not fit."""
    image = read_image() if image is None else image
    top = Requirement(root)
    todo, seen, pins = [(top.name, frozenset(top.extras))], set(), {}
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        for req in requirements(*item):
            dep = canonicalize_name(req.name)
            if dep in SKIPPED or image_meets(req, image):
                continue
            if dep not in BUILT_THERE:
                pins[dep] = metadata.version(dep)
            todo.append((dep, frozenset(req.extras)))
    wheels = sorted(f"{n}=={v}" for n, v in pins.items())
    gaps = unmet(wheels, image, root)
    if gaps:
        raise SystemExit(f"the carried wheels leave requirements unmet: {'; '.join(gaps)}")
    return wheels


def unmet(wheels: Sequence[str], image: dict[str, str | None], root: str = ROOT) -> list[str]:
    """What `root`, the carried `wheels` and what is built there require that neither the wheels nor the image
    provide. A wheel whose version is not the one installed here is named too: its metadata cannot be read."""
    pins = {canonicalize_name(n): v for n, _, v in (w.partition("==") for w in wheels)}
    top = Requirement(root)
    owners = [(root, requirements(top.name, top.extras))]
    owners += [(r.name, requirements(r.name, r.extras)) for r in owners[0][1] if canonicalize_name(r.name)
               in BUILT_THERE]
    gaps = []
    for name, version in pins.items():
        if _installed(name) != version:
            gaps.append(f"{name}=={version} (installed here: {_installed(name)}; its requirements cannot be read)")
        else:
            owners.append((f"{name}=={version}", requirements(name)))
    for owner, reqs in owners:
        gaps += [f"{req} (required by {owner})" for req in reqs if not _provided(req, pins, image)]
    return gaps


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _provided(req: Requirement, pins: dict[str, str], image: dict[str, str | None]) -> bool:
    dep = canonicalize_name(req.name)
    if dep in pins:
        return req.specifier.contains(pins[dep], prereleases=True)
    return dep in SKIPPED or dep in BUILT_THERE or image_meets(req, image)


def assumed(wheels: Sequence[str], image: dict[str, str | None], root: str = ROOT) -> list[str]:
    """Requirements with a version bound that the image is ASSUMED to meet (gpu.md names it, no version)."""
    pins = {canonicalize_name(w.partition("==")[0]) for w in wheels}
    top = Requirement(root)
    reqs = requirements(top.name, top.extras) + [r for w in wheels for r in requirements(w.partition("==")[0])]
    return sorted({str(r) for r in reqs if str(r.specifier) and canonicalize_name(r.name) not in pins
                   and canonicalize_name(r.name) not in SKIPPED and image.get(canonicalize_name(r.name), "") is None})


def gpu_requirements(wheels: Sequence[str], root: str = ROOT) -> list[str]:
    """Every requirement the GPU's environment must meet once the wheels are installed (markers evaluated for
    it, so dropped), for `verify` there: the image's unstated versions are checked on arrival."""
    top = Requirement(root)
    reqs = requirements(top.name, top.extras)
    reqs += [r for q in reqs if canonicalize_name(q.name) in BUILT_THERE for r in requirements(q.name, q.extras)]
    reqs += [r for w in wheels for r in requirements(w.partition("==")[0])]
    keep = {canonicalize_name(r.name) for r in reqs} - set(SKIPPED) - BUILT_THERE
    return sorted({f"{r.name}{r.specifier}" for r in reqs if canonicalize_name(r.name) in keep})


def write_requirements(path: Path, wheels: Sequence[str] | None = None) -> int:
    """The file `verify` checks on arrival; the rehearsal writes and verifies it on this machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(gpu_requirements(wheel_closure() if wheels is None else wheels)) + "\n")
    return 0


def pack_rehearsal(root: Path, data_dir: Path) -> int:
    """The CPU rehearsal's pieces (experiments/gpu.sh rehearse): the benchmark data, the repacked llama-cpp-python
    wheel (WORKERS=cpu's) and the tiny pool's SmolLM2 GGUF, cut by the same code as the GPU's pieces (small
    pieces, so there are several), then carried and assembled with their sha256 checked. Needs no network: the
    wheels are checked, not downloaded."""
    from lemon.llm.models import ensure_model

    stage = root.parent / "staging"
    stage.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-cf", str(stage / "data.tar"), "-C", str(data_dir.parent), data_dir.name], check=True)
    wheel = repack_installed("llama-cpp-python", stage)  # installed there as on the GPU: the same code path
    sources = [("data.tar", stage / "data.tar"), (wheel.name, wheel), (LLAMA_SERVER[0], built_llama_server()),
               (SMOLLM2[0], ensure_model("smollm2-135m"))]
    n = write_pieces(sources, root, piece=32 * MIB)
    print(f"packed {len(sources)} files into {n} pieces under {root}")
    return 0


def verify(path: Path) -> int:
    """ON THE GPU, after the wheels stage: every requirement in `path` (from `gpu_requirements`) is met by
    what Python finds there (the image plus $SITE); else one line naming the unmet ones, exit 2."""
    gaps = []
    for line in path.read_text().splitlines():
        req = Requirement(line)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            version = None
        if version is None or not req.specifier.contains(version, prereleases=True):
            gaps.append(f"{req} (found {version or 'nothing'})")
    if gaps:
        print(f"unmet on this machine: {'; '.join(gaps)}; give them their version there in "
              "experiments/gpu_image.txt (the closure then carries them) and pack again", file=sys.stderr)
        return 2
    print(f"all {len(path.read_text().splitlines())} requirements met")
    return 0


def sandbox_binary() -> Path:
    """This machine's `bwrap`: the table plan carries it, since the GPU image has none and HumanEval's checks run
    in LEMON's bubblewrap sandbox (a lease on 2026-11-28 ran the real sandbox there with this binary)."""
    found = shutil.which("bwrap")
    if not found:
        raise SystemExit("the table plan carries this machine's bwrap for HumanEval's sandbox, and there is none: "
                         "install bubblewrap (apt-get install bubblewrap)")
    return Path(found)


def carried_files() -> list[tuple[str, int]]:
    """(name, bytes) of what travels, setup first (so a short first session can build the CUDA wheel from
    the first pieces); the wheel of a previous session replaces the sdist when LLAMA_WHEEL names it."""
    server = [LLAMA_SERVER] if workers_build() == "cpu" else []
    sandbox = [("bwrap", sandbox_binary().stat().st_size)] if plan_kind() == "table" else []
    return [("wheels.tar", WHEELS_BYTES), ("data.tar", DATA_BYTES), llama_file(), *server, *sandbox,
            *model_files()]


def pieces_holding(files: list[tuple[str, int]], names: set[str]) -> int:
    """How many leading pieces hold every chunk of `names`."""
    last = 0
    for k, chunks in enumerate(pieces_of(files)):
        if any(n in names for n, _, _ in chunks):
            last = k
    return last + 1


def pieces_of(files: list[tuple[str, int]], piece: int = PIECE_MIB * MIB) -> list[list[tuple[str, int, int]]]:
    """Chunks (name, offset, length) bin-packed in order into pieces of at most `piece` bytes."""
    out: list[list[tuple[str, int, int]]] = [[]]
    room = piece
    for name, size in files:
        offset = 0
        while offset < size:
            if room == 0:
                out.append([])
                room = piece
            n = min(room, size - offset)
            out[-1].append((name, offset, n))
            offset += n
            room -= n
    return out


def print_wheels() -> int:
    """The computed wheel list, and the version bounds the image is assumed to meet (checked on arrival)."""
    image = read_image()
    wheels = wheel_closure(image=image)
    print(f"{len(wheels)} wheels carried (closure of {ROOT}'s Requires-Dist against {IMAGE.name}):")
    print("  " + " ".join(wheels))
    print("assumed met by the image (gpu.md gives no version; `verify` checks them there):")
    print("  " + " ".join(assumed(wheels, image)))
    return 0


def print_plan() -> int:
    files = carried_files()
    pieces = pieces_of(files)
    st = stages()
    carry_s = len(pieces) * CARRY_CALL_S
    run_s = sum(s.estimate_s for s in st)
    total = START_S + carry_s + run_s
    print(f"GPU experiment plan (budget {BUDGET_S // 60} min of device time, {CALL_S // 60} min per command)")
    print("\n1. HERE, once (needs PyPI): bash experiments/gpu.sh pack   -> .gpu/pieces/NN (git-ignored)")
    for name, size in files:
        print(f"     {name:48s} {size / MIB:8.1f} MiB")
    print(f"   = {sum(s for _, s in files) / MIB:.0f} MiB in {len(pieces)} pieces of <= {PIECE_MIB} MiB")
    if not os.environ.get("LLAMA_WHEEL") and workers_build() == "cuda":
        k = pieces_holding(files, {"wheels.tar", "data.tar", LLAMA_SDIST[0]})
        first = START_S + k * CARRY_CALL_S + st[0].estimate_s + st[1].estimate_s
        print(f"\n   Session 0 (optional, ~{first / 60:.1f} min): carry pieces 00..{k - 1:02d}, then run: it builds "
              "the CUDA wheel of llama-cpp-python and returns it in $OUT (llama-wheel.partNN); "
              "`cat` them and pack again with LLAMA_WHEEL=that.whl to save the build in the experiment session")
    pool = os.environ.get("POOL") or ("cpu" if plan_kind() == "table" else DEFAULT_POOL.name)
    print(f"   plan: {plan_kind()} (PLAN); workers: {workers_build()} (WORKERS), pool {pool} (POOL)")
    print(f"\n2. ON THE GPU, back to back (the machine forgets ~30 s after a call): {len(pieces)} carrying calls")
    print('     run(carry=[".gpu/pieces/NN"], command="bash experiments/gpu.sh carry NN")   NN = '
          f"00..{len(pieces) - 1:02d}   ~{carry_s / 60:.1f} min (assumed {CARRY_CALL_S} s a call)")
    print('\n3. ON THE GPU: run(command="bash experiments/gpu.sh run") until it prints "all stages done";')
    print("   each call runs the next stages that fit in its 10 minutes (resumable ones are cut and continued)")
    for s in st:
        print(f"     {s.name:13s} ~{s.estimate_s / 60:5.1f} min  {'(resumable) ' if s.resumable else ''}{s.what}")
    print(f"\nestimated device time: start {START_S / 60:.1f} + carrying {carry_s / 60:.1f} + stages "
          f"{run_s / 60:.1f} = {total / 60:.1f} min (stage costs are assumptions; STEP_S, ITEM_S override)")
    if total <= BUDGET_S:
        print(f"fits in {BUDGET_S // 60} min ({(BUDGET_S - total) / 60:.1f} min to spare)")
    else:
        print(f"OVER BUDGET by {(total - BUDGET_S) / 60:.1f} min: lower STEPS / LIMIT / N_TRAIN, or run session 0 "
              "first and pack with LLAMA_WHEEL (saves the ~5 min build)")
        if plan_kind() == "table":
            print("   (the table stage is cut at the call's limit and brings back what it drew: the next lease "
                  "goes on from there)")
    return 0


def pack(out: Path, data_dir: Path, dry_run: bool) -> int:
    """Gather the files HERE and cut them into pieces with a manifest (sha256 of every whole file)."""
    sources = _sources(out, data_dir, dry_run)
    if dry_run:
        for name, src in sources:
            print(f"would pack {name} from {src}")
        print(f"wheels.tar would hold: {' '.join(wheel_closure())}")
        return 0
    n = write_pieces(sources, out / "pieces")
    print(f"packed {len(sources)} files into {n} pieces under {out / 'pieces'}")
    return 0


def write_pieces(sources: list[tuple[str, Path]], root: Path, piece: int = PIECE_MIB * MIB) -> int:
    """Cut the files into root/NN/NAME.OFFSET chunks; piece 00 also holds the manifest (sizes, sha256)."""
    files = [(name, src.stat().st_size) for name, src in sources]
    paths = dict(sources)
    manifest: dict = {"files": {n: {"size": s, "sha256": _sha256(paths[n])} for n, s in files}, "pieces": []}
    for k, chunks in enumerate(pieces_of(files, piece)):
        folder = root / f"{k:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, offset, n in chunks:
            with paths[name].open("rb") as f, (folder / f"{name}.{offset:012d}").open("wb") as g:
                f.seek(offset)
                g.write(f.read(n))
        manifest["pieces"].append([[name, offset, n] for name, offset, n in chunks])
    (root / "00").mkdir(parents=True, exist_ok=True)
    (root / "00" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return len(manifest["pieces"])


def _sources(out: Path, data_dir: Path, dry_run: bool) -> list[tuple[str, Path]]:
    """The carried files in `carried_files()`'s order, gathered under out/staging (wheels from PyPI)."""
    from lemon.llm.models import MODELS, ensure_model

    stage = out / "staging"
    wheel, cpu = os.environ.get("LLAMA_WHEEL"), workers_build() == "cpu"
    llama = (Path(wheel).name, Path(wheel)) if wheel else (
        (LLAMA_CPU_WHEEL[0], stage / LLAMA_CPU_WHEEL[0]) if cpu else (LLAMA_SDIST[0], stage / LLAMA_SDIST[0]))
    found = [("wheels.tar", stage / "wheels.tar"), ("data.tar", stage / "data.tar"), llama]
    found += [("bwrap", sandbox_binary())] if plan_kind() == "table" else []
    by_file = {m.filename: m.id for m in MODELS.values()}
    if dry_run:
        server = [(LLAMA_SERVER[0], Path(f"<{BUILD_LLAMA_SERVER.name}>"))] if cpu else []
        return found + server + [(n, Path(f"<lemon models: {by_file[n]}>")) for n, _ in model_files()]
    stage.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(stage / "wheels")]
    wheels = wheel_closure()
    subprocess.run([*pip, "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", *wheels],
                   check=True)
    write_requirements(stage / "wheels" / "requirements.txt", wheels)
    if not wheel and cpu:
        repack_installed("llama-cpp-python", stage)
    elif not wheel:
        subprocess.run([*pip, "--no-binary", ":all:", "llama-cpp-python==0.3.36"], check=True)
        shutil.move(str(stage / "wheels" / LLAMA_SDIST[0]), stage / LLAMA_SDIST[0])
    subprocess.run(["tar", "-cf", str(stage / "wheels.tar"), "-C", str(stage), "wheels"], check=True)
    subprocess.run(["tar", "-cf", str(stage / "data.tar"), "-C", str(data_dir.parent), data_dir.name], check=True)
    server = [(LLAMA_SERVER[0], built_llama_server())] if cpu else []
    return found + server + [(n, ensure_model(by_file[n])) for n, _ in model_files()]


def built_llama_server() -> Path:
    """The llama-server binary build_llama_server.sh keeps (built first if it is not there: ~10 min)."""
    res = subprocess.run(["bash", str(BUILD_LLAMA_SERVER)], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{BUILD_LLAMA_SERVER.name} failed ({res.returncode}): {res.stderr.strip()[-300:]}")
    return Path(res.stdout.strip().splitlines()[-1])


def repack_installed(dist: str, out_dir: Path, bundle: Sequence[str] = ("libgomp.so.1",)) -> Path:
    """The distribution installed HERE as a `py3-none-linux_x86_64` wheel in `out_dir`: the build this machine's
    suite tested travels as it is, with no build there. Right for llama-cpp-python alone among the carried
    packages: it is pure Python over libraries it loads with ctypes, so no CPython ABI is baked in. Only its
    packages travel (its copies under site-packages/lib and include do not), and the system libraries in
    `bundle` go beside its own (their RUNPATH is $ORIGIN): llama.cpp's OpenMP runtime is not in every image."""
    d = metadata.distribution(dist)
    name, version = canonicalize_name(dist).replace("-", "_"), d.version
    info = f"{name}-{version}.dist-info"
    packages = {f.parts[0] for f in d.files or [] if f.name == "__init__.py" and len(f.parts) == 2}
    files = [f for f in d.files or [] if f.parts[0] in packages and "__pycache__" not in f.parts]
    libs = _library_folder(d, files)
    extra = {f"{info}/METADATA": (d.read_text("METADATA") or "").encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: lemon gpu_plan\nRoot-Is-Purelib: false\n"
                              b"Tag: py3-none-linux_x86_64\n"}
    extra |= {f"{libs}/{lib}": _system_library(lib, Path(d.locate_file(libs))).read_bytes() for lib in bundle}
    entries = {str(f): Path(d.locate_file(f)).read_bytes() for f in files} | extra
    return _write_wheel(out_dir / f"{name}-{version}-py3-none-linux_x86_64.whl", entries, info)


def bundle_libraries(wheel: Path, out_dir: Path, bundle: Sequence[str] = ("libgomp.so.1",)) -> Path:
    """`wheel` (a CUDA llama-cpp-python built HERE, for LLAMA_WHEEL) again in `out_dir`, with the system libraries
    in `bundle` beside its own, as `repack_installed` does for the CPU build: the GPU image need not have them. Like
    it, it keeps only the packages (and the metadata), so their libraries are the only copies."""
    import tempfile

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        packages = {n.split("/")[0] for n in names if n.endswith("/__init__.py") and n.count("/") == 1}
        # only its packages and metadata travel: scikit-build's copies under lib/ and include/ are not loaded
        data = {n: z.read(n) for n in names if n.split("/")[0] in packages or ".dist-info/" in n}
    libs = sorted({n.rsplit("/", 1)[0] for n in data if ".so" in n.rsplit("/", 1)[-1] and ".dist-info/" not in n})
    if not libs:
        raise SystemExit(f"{wheel.name} has no shared libraries to bundle beside")
    with tempfile.TemporaryDirectory() as tmp:
        for n in data:
            if n.startswith(libs[0] + "/") and ".so" in n:
                (Path(tmp) / n.rsplit("/", 1)[-1]).write_bytes(data[n])
        extra = {f"{libs[0]}/{lib}": _system_library(lib, Path(tmp)).read_bytes() for lib in bundle}
    info = next(n for n in data if n.endswith(".dist-info/RECORD")).rsplit("/", 1)[0]
    return _write_wheel(out_dir / wheel.name, {n: b for n, b in data.items() if n != f"{info}/RECORD"} | extra, info)


def _write_wheel(target: Path, entries: dict[str, bytes], info: str) -> Path:
    """A wheel at `target` holding `entries` (archive name -> bytes) and their RECORD in the `info` folder."""
    target.parent.mkdir(parents=True, exist_ok=True)
    record = [_record_line(arc, blob) for arc, blob in entries.items()] + [f"{info}/RECORD,,"]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, blob in entries.items():
            z.writestr(arc, blob)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return target


def _library_folder(d: metadata.Distribution, files: Sequence[Any]) -> str:
    """The folder (inside the wheel) holding the distribution's shared libraries."""
    found = sorted({str(f.parent) for f in files if ".so" in f.name})
    if not found:
        raise SystemExit(f"{d.metadata['Name']} has no shared libraries to bundle beside")
    return found[0]


def _system_library(soname: str, beside: Path) -> Path:
    """Where the dynamic loader finds `soname` for the libraries in `beside` (ldd's answer)."""
    for lib in sorted(beside.glob("*.so")):
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0] == soname and len(parts) > 2 and parts[2].startswith("/"):
                return Path(parts[2])
    raise SystemExit(f"{soname} is not among what {beside}'s libraries load; bundle nothing or name another")


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def carry(piece: Path, work: Path) -> int:
    """ON THE GPU: copy one carried piece's chunks into $WORK/chunks (idempotent)."""
    if not piece.is_dir():
        print(f"piece {piece} was not carried: name it in run(carry=[...])", file=sys.stderr)
        return 2
    target = work / "chunks"
    target.mkdir(parents=True, exist_ok=True)
    for f in piece.iterdir():
        shutil.copyfile(f, target / f.name)
    have = len(list(target.iterdir()))
    print(f"carried {piece.name}: {have} chunk files in {target}")
    return 0


def assemble(work: Path) -> int:
    """ON THE GPU: join the chunks of every file whose pieces have all come, check its sha256, name the rest."""
    chunks = work / "chunks"
    if not (chunks / "manifest.json").is_file():
        print("piece 00 (it holds the manifest) has not been carried: bash experiments/gpu.sh carry 00",
              file=sys.stderr)
        return 2
    manifest = json.loads((chunks / "manifest.json").read_text())
    have = {(n, o) for piece in manifest["pieces"] for n, o, _ in piece if (chunks / f"{n}.{o:012d}").is_file()}
    files = work / "files"
    files.mkdir(exist_ok=True)
    waiting = []
    for name, info in manifest["files"].items():
        target = files / name
        if target.is_file() and target.stat().st_size == info["size"]:
            continue
        if any((n, o) not in have for piece in manifest["pieces"] for n, o, _ in piece if n == name):
            waiting.append(name)  # a stage that needs it says so; carry its pieces
            continue
        parts = sorted((o, chunks / f"{n}.{o:012d}") for piece in manifest["pieces"] for n, o, _ in piece
                       if n == name)
        with target.open("wb") as out:
            for _, p in parts:
                out.write(p.read_bytes())
        if _sha256(target) != info["sha256"]:
            target.unlink()
            print(f"{name}: sha256 mismatch after assembly; carry its pieces again", file=sys.stderr)
            return 2
    print(f"assembled and verified in {files}: {len(manifest['files']) - len(waiting)} files"
          + (f"; not all pieces carried yet for: {', '.join(waiting)}" if waiting else ""))
    return 0


def policy(gguf: Path, target: Path) -> int:
    """ON THE GPU: an HF policy directory from a chat GGUF (dequantised by transformers, saved as safetensors)."""
    if (target / "config.json").is_file():
        return 0
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lemon.train.policy import _clear_quantizer, _ensure_pad_token  # the default policy's conversion steps

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _ensure_pad_token(tok)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    _clear_quantizer(model)
    model.config.pad_token_id = tok.pad_token_id
    tmp = target.with_name(target.name + ".tmp")
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    tmp.rename(target)
    return 0


def summary(runs: Path, out: Path) -> int:
    """ON THE GPU: mean seconds per step and phase of each training run, with the device (for docs/results.md)."""
    import torch

    report: dict[str, object] = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    for name in ("cf", "global"):
        path = runs / name / "metrics.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
        report[name] = {k: sum(r[k] for r in rows) / len(rows) for k in ("step_s", "gen_s", "exec_s", "update_s")
                        } | {"steps": len(rows)} if rows else {"steps": 0}
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0


def next_stage(work: Path) -> int:
    """The first stage without a done-marker (printed), or 'none'."""
    done = work / "done"
    for s in stages():
        if not (done / s.name).exists():
            print(f"{s.name} {int(s.estimate_s)} {int(s.resumable)}")
            return 0
    print("none")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("plan", "pack", "carry", "assemble", "next", "policy", "summary", "ggufs",
                                        "wheels", "verify", "requirements", "pack-rehearsal", "verify-models",
                                        "table-benches", "bundle"))
    ap.add_argument("arg", nargs="?")
    ap.add_argument("arg2", nargs="?")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    work = Path(os.environ.get("WORK", "/tmp/lemon-gpu"))
    if a.command == "plan":
        return print_plan()
    if a.command == "pack":
        return pack(Path(".gpu"), Path(os.environ.get("LEMON_DATA_DIR", "../shared/data")), a.dry_run)
    if a.command == "carry":
        return carry(Path(os.environ.get("PIECES", ".gpu/pieces")) / f"{int(a.arg or 0):02d}", work)
    if a.command == "assemble":
        return assemble(work)
    if a.command == "policy":
        return policy(Path(a.arg), Path(a.arg2))
    if a.command == "summary":
        return summary(Path(a.arg), Path(a.arg2))
    if a.command == "wheels":
        return print_wheels()
    if a.command == "ggufs":  # the GGUF files stage `models` places: the pool's (POOL) and the policy's
        print(" ".join(name for name, _ in model_files()))
        return 0
    if a.command == "verify":
        return verify(Path(a.arg))
    if a.command == "verify-models":
        return verify_models()
    if a.command == "bundle":  # a wheel built here (LLAMA_WHEEL) with libgomp beside its libraries
        print(bundle_libraries(Path(a.arg), Path(a.arg2)))
        return 0
    if a.command == "table-benches":  # stage table's benchmarks, one six_benchmarks.sh each
        print(" ".join(table_cells()[0]))
        return 0
    if a.command == "requirements":
        return write_requirements(Path(a.arg))
    if a.command == "pack-rehearsal":
        return pack_rehearsal(Path(a.arg), Path(os.environ.get("LEMON_DATA_DIR", "../shared/data")))
    return next_stage(work)


if __name__ == "__main__":
    sys.exit(main())
