"""The command line's one dialect: every option that several commands share is declared here, once.

Why: the options had grown command by command (`--limit` vs `--limit-tasks` vs `--n-train`, `--max-tokens`
vs `--max-new-tokens`, `--pool` defaulting to `tiny` in one place), so the same idea had several names,
meanings and defaults. Now a command takes `opt("pool")` (or `PoolOpt`) and gets the one spelling, help and
default; `tests/cli/test_dialect.py` walks every command and fails on a second spelling. The old spellings
still work (hidden, with a one-line notice) so existing scripts keep running.

Also here: the console pair every command prints through, and the command classes that keep the help clean
(no `<bool>` after a flag, `TASK` rather than `{task}`) and turn Ctrl-C into one line that says what is kept.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, NoReturn

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from lemon.errors import LemonError
from lemon.llm.defaults import DEFAULT_MAX_TOKENS as DEFAULT_MAX_TOKENS  # the CLI's defaults are the library's
from lemon.llm.defaults import DEFAULT_POOL as DEFAULT_POOL
from lemon.llm.defaults import DEFAULT_TEMPERATURE as DEFAULT_TEMPERATURE
from lemon.seeds import MAX_SEED, MAX_SEEDS

if TYPE_CHECKING:
    # The context type TyperCommand's and TyperGroup's methods declare: click's, which typer vendors (typer.Context
    # is its subclass, so an override taking only that would not accept what its base accepts).
    from typer._click.core import Context

STORE_HELP = "Results store (default LEMON_HOME/results.sqlite)."


class Shared(NamedTuple):
    flag: str
    help: str


# Parameter name -> its one flag and default help. A command may word the help for its context (`help=`),
# never the flag.
SHARED: dict[str, Shared] = {
    "pool": Shared("--pool", "Capacity pool: cpu, tiny, or a pool YAML file."),
    "no_cache": Shared("--no-cache", "Bypass the persistent LLM cache."),
    "data_dir": Shared("--data-dir", "Benchmark data (default LEMON_DATA_DIR)."),
    "threads": Shared("--threads", "CPU threads: torch's, and each embedded worker model's (a pool level's "
                                   "n_threads wins)."),
    "seed": Shared("--seed", "Seed for sampled calls."),
    "seeds": Shared("--seeds", "Seeds 0..K-1 (from --seed S: S..S+K-1); each is a sampled replicate."),
    "max_tokens": Shared("--max-tokens", f"Max new tokens per worker (agent) call; default {DEFAULT_MAX_TOKENS} "
                                         "for every pool."),
    "policy_max_tokens": Shared("--policy-max-tokens", "Max new tokens of the policy writing one spec."),
    "temperature": Shared("--temperature", "Worker sampling temperature in [0, 2]; 0 = greedy (a vote needs "
                                           "samples that differ)."),
    "limit": Shared("--limit", "Use the first N items of the split, in order."),
    "store": Shared("--store", STORE_HELP),
    "out": Shared("--out", "Folder to write the output into."),
    "file": Shared("--file", "File to write the output to."),
    "as_json": Shared("--json", "Print one JSON object on stdout and nothing else there (progress and notes go to "
                                "stderr)."),
    "model": Shared("--model", "Try one OpenAI-compatible endpoint without a pool file: the model name it "
                               "serves (with --base-url); every level of the pool is that model."),
    "base_url": Shared("--base-url", "The endpoint of --model, e.g. http://127.0.0.1:8080/v1."),
    "api_key_env": Shared("--api-key-env", "Environment variable holding the API key of --base-url."),
    "serve_workers": Shared("--serve-workers/--embedded-workers",
                            "Run the pool's embedded worker models in their own server processes (llama_cpp.server, "
                            "or the llama-server that LEMON_LLAMA_SERVER names; ports from LEMON_WORKER_PORT, default "
                            "8700), or in this process. Default: served whenever torch uses a GPU in this process "
                            "(a CUDA llama.cpp cannot share it)."),
}

_RUNNERS = frozenset({"run", "exec", "eval"})
_READERS = frozenset({"trace", "view", "report", "export csv", "export inspect", "export otel"})
# The dialect's table: shared option -> the commands that take it (every command it makes sense for), walked by
# tests/cli/test_dialect.py. `--out` is always a folder; a command that writes one file also takes `--file`.
TAKES: dict[str, frozenset[str]] = {
    "pool": _RUNNERS | {"validate", "models", "explain", "train", "serve"},
    "no_cache": _RUNNERS | {"explain", "train", "sft"},
    "data_dir": frozenset({"eval", "explain", "train", "sft", "report", "data fetch"}),
    "threads": _RUNNERS | {"explain", "train", "sft", "serve"},
    "seed": _RUNNERS | {"explain", "trace", "view", "train", "sft"},
    "seeds": frozenset({"eval"}),
    "max_tokens": _RUNNERS | {"explain"},
    "policy_max_tokens": frozenset({"train", "sft"}),
    "temperature": _RUNNERS,
    "limit": frozenset({"eval", "train", "sft"}),
    "store": (_READERS - {"report"}) | {"eval", "report", "explain", "runs", "runs list", "runs delete"},
    "out": _RUNNERS | _READERS | {"train", "sft", "plot", "serve"},
    "file": _READERS | {"plot"},
    "as_json": frozenset({"run", "exec", "eval", "report", "models", "trace", "explain", "runs", "runs list"}),
    "model": _RUNNERS,
    "base_url": _RUNNERS,
    "api_key_env": _RUNNERS,
    "serve_workers": frozenset({"eval", "train", "sft"}),
}

# Shared option -> the inclusive range of its values, checked as the command line is parsed (before any work):
# an unbounded value took all memory (`--seeds 1000000000`) or overflowed (`--seed 10**23`).
BOUNDS: dict[str, tuple[int, int]] = {
    "seed": (0, MAX_SEED),
    "seeds": (1, MAX_SEEDS),
}

# Old spelling -> the one spelling (accepted, hidden from help, with a one-line notice).
RENAMED: dict[str, str] = {
    "--limit-tasks": "--limit",
    "--n-train": "--limit",
    "--max-new-tokens": "--policy-max-tokens",
    "--run-dir": "--out",
    "--trace-dir": "--out",
}

# What Ctrl-C leaves behind, per command (the line printed on exit 130).
INTERRUPTED: dict[str, str] = {
    "eval": "every finished item is saved in the results store; re-run the same command to resume",
    "train": "the last checkpoint is kept; re-run the same command with --resume to continue",
    "sft": "the teacher's calls are in the LLM cache; re-run the same command to continue cheaply",
    "explain": "the edits already run are in the LLM cache; re-run the same command to continue cheaply",
    "view": "the page written last is kept; it stops refreshing",
    "fetch": "every file verified so far is in place, nothing else; re-run the same command to fetch the rest",
}


def opt(name: str, *, help: str | None = None, **kwargs: Any) -> Any:
    """The `typer.Option` of shared option `name` (one flag everywhere, its BOUNDS checked); `help` rewords it
    for a command."""
    shared = SHARED[name]
    if name in BOUNDS:
        kwargs.setdefault("callback", _in_range(shared.flag, *BOUNDS[name]))
    return typer.Option(shared.flag, help=help or shared.help, **kwargs)


def _in_range(flag: str, low: int, high: int) -> Callable[[int | None], int | None]:
    """A parse-time check of one bounded option: a LemonError (one line, exit 2) names the allowed range; click's
    own range error prints the usage and a framed message instead."""

    def check(value: int | None) -> int | None:
        if value is not None and not low <= value <= high:
            raise LemonError(f"{flag} must be in {low}..{high}, got {value}")
        return value

    return check


PoolOpt = Annotated[str, opt("pool")]
NoCacheOpt = Annotated[bool, opt("no_cache")]
DataDirOpt = Annotated[Path | None, opt("data_dir")]
ThreadsOpt = Annotated[int, opt("threads")]
MaybeThreadsOpt = Annotated[int | None, opt("threads")]
ServeWorkersOpt = Annotated[bool | None, opt("serve_workers")]
SeedOpt = Annotated[int, opt("seed")]
SeedsOpt = Annotated[int, opt("seeds")]
MaxTokensOpt = Annotated[int, opt("max_tokens")]
# `eval` knows its benchmark, and a benchmark may need longer replies (AQuA): None there means "its own".
BenchMaxTokensOpt = Annotated[int | None, opt("max_tokens", help="Max new tokens per worker (agent) call; default "
                                              f"the benchmark's own (AQuA and MMLU 1,024), else {DEFAULT_MAX_TOKENS}.")]
PolicyMaxTokensOpt = Annotated[int | None, opt("policy_max_tokens")]
TemperatureOpt = Annotated[float, opt("temperature")]
LimitOpt = Annotated[int | None, opt("limit")]
StoreOpt = Annotated[Path | None, opt("store")]
FileOpt = Annotated[Path | None, opt("file")]
JsonOpt = Annotated[bool, opt("as_json")]
ModelOpt = Annotated[str | None, opt("model")]
BaseUrlOpt = Annotated[str | None, opt("base_url")]
ApiKeyEnvOpt = Annotated[str | None, opt("api_key_env")]


class Consoles(NamedTuple):
    out: Console
    err: Console


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Stop as Ctrl-C does, once: a second TERM (a script's trap forwarding one to a job its process group's
    kill already reached) raised again inside the shutdown: a logged traceback after the one-line stop message,
    and whatever the shutdown had left to do cut short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM (kill's default, a timeout, a process manager, a script stopping its background jobs) stops a
    command as Ctrl-C does: what it keeps is kept and said, claims are released, exit 130. Python's default
    ended the process on the spot, so another process on the same run waited out the dead one's claims. A
    script's background job starts with SIGINT ignored and TERM is then the way to stop it
    (experiments/common.sh)."""
    signal.signal(signal.SIGTERM, _interrupt)


def stop_on_signals() -> None:
    """Ctrl-C as well as SIGTERM, even where SIGINT was handed over ignored (bash does so for a script's
    background jobs): for a command whose normal stop is Ctrl-C (`lemon serve`)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_on_sigterm()


@functools.cache
def consoles() -> Consoles:
    """The one stdout/stderr console pair of the CLI (made on first use; the log handler prints through `err`)."""
    return Consoles(Console(), Console(stderr=True))


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: dataclasses and mappings as objects, tuples as lists, paths as text, and
    NaN or infinity as null (Python's json writes them as `NaN`, which no JSON parser reads)."""
    import dataclasses
    import math

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def emit_json(data: Any) -> None:
    """`--json`: one JSON document on stdout, written as is (never wrapped or styled by rich)."""
    import json

    consoles().out.file.write(json.dumps(plain(data), ensure_ascii=False, indent=1, allow_nan=False) + "\n")


def check_worker_options(*, max_tokens: int | None = None, temperature: float | None = None) -> None:
    """Usage errors for values a backend would read as "unlimited" (0, -1) or cannot honour."""
    from lemon.runtime.budget import check_positive_int

    check_positive_int("--max-tokens", max_tokens)
    if temperature is not None and not 0.0 <= temperature <= 2.0:
        raise LemonError(f"--temperature must be in [0, 2], got {temperature}")


def output_file(out: Path | None, file: Path | None, default_name: str) -> Path | None:
    """Where a command writes its one file: `--file FILE`, or `default_name` in the folder `--out DIR`.

    `--out` is a folder for every command (run, eval, train write several files there). Before, it named the
    file for view, report, trace and export; such an `--out` (a name with a suffix that is not a folder)
    still works, with a one-line notice to use `--file`."""
    if out is not None and file is not None:
        raise LemonError("--out (a folder) and --file (a file) both say where to write; pass one of them")
    if file is not None or out is None:
        return file
    if out.suffix and not out.is_dir():
        consoles().err.print(f"note: --out {out} names a file; --out is now a folder, write --file {out} "
                             "(the old meaning will be removed)", markup=False, highlight=False, soft_wrap=True)
        return out
    return out / default_name


def check_task(task: str) -> str:
    """An empty (or blank) task is a usage error, not a run that spends calls on nothing."""
    if not task.strip():
        raise LemonError("the task is empty; pass the task text, e.g. lemon run \"What is 12 * 7?\"")
    return task


# ---- the command classes: clean help, renamed options, Ctrl-C ---------------------------------------------


def renamed_args(args: Sequence[str], console: Console) -> list[str]:
    """`args` with every old spelling (RENAMED) replaced by the one spelling, each noticed once on stderr."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + list(args[i:])
        old, eq, value = arg.partition("=")
        new = RENAMED.get(old)
        if new is None:
            out.append(arg)
            continue
        console.print(f"note: {old} is now {new} (the old spelling will be removed)", markup=False,
                      highlight=False)
        out.append(new + eq + value)
    return out


def _tidy_params(params: Sequence[Any]) -> None:
    """A flag takes no value, so its help shows no type; an argument reads as TASK, not {task}."""
    for p in params:
        kind = getattr(p, "param_type_name", "")
        if kind == "option" and getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
        elif kind == "argument" and p.metavar is None and p.name:
            p.metavar = p.name.upper()


def _interrupted_before_a_command() -> NoReturn:
    consoles().err.print("interrupted", markup=False, highlight=False)
    raise typer.Exit(130) from None


class LemonCommand(TyperCommand):
    """Every `lemon` command: the one dialect's parsing, clean help, and Ctrl-C as one line (exit 130)."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, renamed_args(args, consoles().err))

    def get_params(self, ctx: Context) -> list[Any]:
        params = super().get_params(ctx)
        _tidy_params(params)
        return params

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if getattr(p, "param_type_name", "") == "argument":
                name = str(p.metavar)
                pieces.append((name if p.required else f"[{name}]") + ("..." if p.nargs != 1 else ""))
        return pieces

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            kept = INTERRUPTED.get(self.name or "", "nothing was saved")
            consoles().err.print(f"interrupted: {kept}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None


class LemonGroup(TyperGroup):
    """The `lemon` app and its sub-apps: flags without a `<bool>` in the help, and Ctrl-C before a command runs
    (while the arguments are read, the logging set up) as one line and exit 130: typer's own handling exited
    130 without a word."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            _interrupted_before_a_command()

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # a command's own Ctrl-C is LemonCommand's: it arrives here as Exit(130)
            _interrupted_before_a_command()

    def get_params(self, ctx: Context) -> list[Any]:
        params = super().get_params(ctx)
        _tidy_params(params)
        return params


class LemonTyper(typer.Typer):
    """A Typer whose commands and groups are LEMON's (so no command can forget the dialect)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", LemonGroup)
        kwargs.setdefault("add_completion", False)
        kwargs.setdefault("pretty_exceptions_enable", False)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", LemonCommand)
        return super().command(*args, **kwargs)


def apply_threads(threads: int | None) -> None:
    """`--threads N` for a command whose compute is worker models: each embedded llama.cpp model gets N
    threads (`LEMON_THREADS`, inherited by Ray workers and subprocesses) and so does torch (a trained policy).
    None keeps the defaults (every core per embedded model)."""
    from lemon.llm.embedded import MAX_THREADS

    if threads is None:
        return
    if not 1 <= threads <= MAX_THREADS:
        raise LemonError(f"--threads must be in 1..{MAX_THREADS}, got {threads}")
    os.environ["LEMON_THREADS"] = str(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # torch reads it when it is first imported
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
