"""`lemon sft`, `lemon train`, `lemon plot`, `lemon export-gguf`: thin typer commands over `lemon.train`.

Option parsing and progress display only; the work is in the library. Registered on the main app by
`register(app)`. The training stack (torch, transformers) is imported inside the commands, so `lemon --help`
stays fast and works without the [train] extra.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lemon.cli.options import DEFAULT_POOL, DataDirOpt, NoCacheOpt, ServeWorkersOpt, ThreadsOpt, consoles, opt
from lemon.errors import LemonError

TEACHER_HELP = ("prompted: the prompted orchestrator at --teacher-level writes each target; library: one fixed "
                "team per task, drawn uniformly from the default team and the baselines at every level (no model "
                "call); bank: per task the best of the teams a sample bank answers (one CoT agent, votes of 3 and "
                "5, stopping votes), at the strongest level; bank-pooled: per benchmark the one with the best mean "
                "expected reward; bank-budget: per benchmark the most accurate one, logprob gates included, at "
                "<= 50 % of the 5-vote's tokens (the policy's prompt and spec counted); bank-budget-programs: the "
                "same with program voters on the menu (one program agent; programs and CoT voters in five orders).")


def _need_train_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise LemonError(f"training needs the [train] extra ({exc.name} is missing): "
                         "pip install -e '.[train]'") from None
    # The CLI draws its own progress bars; transformers' per-load bars would interleave with them.
    transformers.utils.logging.disable_progress_bar()


def _progress(console: Any) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[info]}"), console=console, transient=False)


def sft_cmd(
    out: Annotated[Path, opt("out", help="Output directory (model/, sft.json, sft_data.jsonl).")],
    benchmark: Annotated[str, typer.Option(
        help="Benchmark whose TRAIN split supplies the tasks, or a mixture: gsm8k,svamp,multiarith.")] = "gsm8k",
    teacher_pool: Annotated[str, typer.Option(help="Pool of the teacher: cpu, tiny or a pool YAML.")] = DEFAULT_POOL,
    teacher_level: Annotated[str, typer.Option(help="Teacher's level in that pool.")] = "large",
    teacher: Annotated[str, typer.Option(help=TEACHER_HELP)] = "prompted",
    prompt: Annotated[str, typer.Option(help="The policy's prompt: full (roles, levels and an example) or "
                                             "terse (the task alone, ~40 % of the tokens).")] = "full",
    bank_items: Annotated[int | None, typer.Option(help="The pooled bank teachers: the first N items of each "
                                                        "benchmark (the banked ones) choose its team; all --limit "
                                                        "are taught it.")] = None,
    decision_weight: Annotated[float, typer.Option(help="Loss weight of the target tokens of the fields whose "
                                                        "value differs between targets (1: all alike).")] = 1.0,
    policy: Annotated[str | None, typer.Option(help="Policy to fine-tune (HF dir); default SmolLM2-135M.")] = None,
    limit: Annotated[int, opt("limit", help="The first N training-split items (of each benchmark in a "
                               "mixture): the teacher writes their specs.")] = 200,
    n_eval: Annotated[int, typer.Option(help="Further held-out items for the valid-spec rate.")] = 50,
    epochs: Annotated[int, typer.Option(help="Passes over the teacher's specs.")] = 3,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 2e-5,
    batch_size: Annotated[int, typer.Option(help="Examples per optimiser step.")] = 4,
    require_correct: Annotated[bool, typer.Option("--require-correct",
                                                  help="Execute specs; keep only correct ones.")] = False,
    verified: Annotated[bool, typer.Option("--verified", help="Execution-verified targets: the best of the "
                                                              "teacher's, the default and the baseline teams, "
                                                              "kept only if right under every worker seed.")] = False,
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter (merged when saved).")] = False,
    policy_max_tokens: Annotated[int, opt("policy_max_tokens", help="Max new tokens of the policy writing one "
                                          "spec (when measuring validity).")] = 256,
    data_dir: DataDirOpt = None,
    seed: Annotated[int, opt("seed", help="Shuffling seed.")] = 0,
    threads: ThreadsOpt = 2,
    serve_workers: ServeWorkersOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Warm-start the policy on the teacher's valid specs; report the valid-spec rate before and after."""
    _need_train_extra()
    from lemon.train.sft import SFTSettings, run_sft

    console, err_console = consoles()
    settings = SFTSettings(out_dir=out, benchmark=benchmark, teacher_pool=teacher_pool,
                           teacher_level=teacher_level, policy=policy, n_train=limit, n_eval=n_eval,
                           epochs=epochs, lr=lr, batch_size=batch_size, require_correct=require_correct,
                           data_dir=str(data_dir) if data_dir else None, seed=seed,
                           max_new_tokens=policy_max_tokens, cache=not no_cache, threads=threads, lora=lora,
                           verified=verified, teacher=teacher, serve_workers=serve_workers, prompt=prompt,
                           bank_items=bank_items, decision_weight=decision_weight)
    with _progress(err_console) as bar:
        ids: dict[str, Any] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in ids:
                ids[phase] = bar.add_task(phase, total=total, info="")
            bar.update(ids[phase], completed=done, total=total)

        report = asyncio.run(run_sft(settings, progress=progress))
    _print_sft_report(console, report)


def _print_sft_report(console: Any, report: dict[str, Any]) -> None:
    before = report["valid_rate_before"]
    console.print(f"examples {report['n_examples']} (teacher: {report['teacher_counts']})", markup=False)
    console.print(f"valid-spec rate without grammar on {report['n_eval']} held-out tasks: "
                  f"before {before if before is None else f'{100 * before:.1f}%'} -> "
                  f"after {100 * report['valid_rate_after']:.1f}%")
    console.print(f"model: {report['model_dir']}", markup=False)


def _step_reporter(bar: Progress, steps: int) -> Any:
    """The `on_step` callback that moves the training bar and shows the step's reward, validity and teams."""
    task = bar.add_task("train", total=steps, info="")

    def on_step(step: int, row: dict[str, Any]) -> None:
        bar.update(task, completed=step, info=f"r {row['reward_mean']:+.3f} valid {row['valid_rate']:.2f} "
                                              f"teams {row['distinct_teams']} dW {row['weight_change']:.1e} "
                                              f"{row['step_s']:.0f}s")

    return on_step


def _config_option(name: str, key: str) -> inspect.Parameter:
    """The typed command-line shortcut `--name` of config setting `key`, its type and default read from the
    config field itself (a bool is a --name/--no-name flag; a list, a comma list; a choice, its values)."""
    from lemon.train.config import load_train_config

    section, field = key.split(".")
    packaged = getattr(load_train_config(), section)
    info = type(packaged).model_fields[field]
    kind = info.annotation if info.annotation in (int, float, bool) else str
    flag = f"--{name.replace('_', '-')}"
    choices = typing.get_args(info.annotation) if typing.get_origin(info.annotation) is typing.Literal else ()
    listed = isinstance(info.default, tuple)
    what = f" ({', '.join(map(str, choices))})" if choices else " (comma-separated)" if listed else ""
    help_ = f"Override {key}{what}; packaged default {_shown(getattr(packaged, field))}."
    option = (typer.Option(f"{flag}/--no-{flag[2:]}", help=help_, show_default=False) if kind is bool else
              SHARED_OPTIONS[name] if name in SHARED_OPTIONS else typer.Option(flag, help=help_))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[kind | None, option])


def _shown(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def with_config_options(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn` (which takes `overrides`) with one typed option per `CONFIG_OPTIONS` shortcut: a given one is
    passed on as the dotted override it stands for, after the `--set` ones."""
    from lemon.train.settings import CONFIG_OPTIONS

    @functools.wraps(fn)
    def command(**kwargs: Any) -> None:
        given = {n: kwargs.pop(n) for n in CONFIG_OPTIONS}
        overrides = [*(kwargs.pop("overrides", None) or []),
                     *(f"{CONFIG_OPTIONS[n]}={str(v).lower() if isinstance(v, bool) else v}"
                       for n, v in given.items() if v is not None)]
        fn(**kwargs, overrides=overrides)

    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "overrides"]
    settings = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    shortcuts = [_config_option(n, k) for n, k in CONFIG_OPTIONS.items()]
    command.__signature__ = inspect.Signature([*settings, _SET_PARAM, *shortcuts])  # type: ignore[attr-defined]
    command.__annotations__ = {}
    return command


_SET_PARAM = inspect.Parameter("overrides", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
    list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help="Override a training-config setting, "
                                   "e.g. --set optim.lr=1e-5 --set sampler.families=edge,role (repeatable).")])
SHARED_OPTIONS = {"policy_max_tokens": opt("policy_max_tokens", help="Max new tokens of the policy writing one "
                                           "spec (overrides rollout.max_new_tokens).")}


def train_cmd(
    out: Annotated[Path, opt("out", help="Run directory (checkpoints, metrics, final/); --resume continues it.")],
    benchmark: Annotated[str, typer.Option(
        help="Benchmark whose TRAIN split supplies the tasks, or a mixture: gsm8k,svamp,multiarith.")] = "gsm8k",
    pool: Annotated[str, opt("pool", help="Worker pool: cpu, tiny, or a pool YAML file (tiny is faster, cpu "
                                          "is the pool lemon eval measures with).")] = DEFAULT_POOL,
    policy: Annotated[str | None, typer.Option(help="Initial policy (HF dir, e.g. the SFT model).")] = None,
    steps: Annotated[int, typer.Option(help="Total optimiser steps (a resumed run continues to this).")] = 100,
    limit: Annotated[int | None, opt("limit", help="Use the first N items of the train split (of each "
                                          "benchmark in a mixture).")] = None,
    config: Annotated[Path | None, typer.Option(help="Training config YAML (default: packaged).")] = None,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N steps (and at the end).")] = 50,
    keep_checkpoints: Annotated[int, typer.Option(help="Checkpoints kept on disk.")] = 2,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint.")] = False,
    no_cf: Annotated[bool, typer.Option("--no-cf", help="Ablation: global GRPO only.")] = False,
    fixed_roles: Annotated[bool, typer.Option("--fixed-roles", help="Ablation: base roles only.")] = False,
    fixed_capacity: Annotated[str | None, typer.Option(help="Ablation: run every agent at LEVEL.")] = None,
    fixed_structure: Annotated[str | None, typer.Option(help="Ablation: 'chain'.")] = None,
    uncertain: Annotated[int | None, typer.Option(help="Keep only tasks one CoT agent at the strongest level "
                                                       "solves under some but not all of N worker seeds.")] = None,
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter.")] = False,
    data_dir: DataDirOpt = None,
    seed: Annotated[int, opt("seed", help="Seed of sampling, task order and counterfactual choices.")] = 0,
    threads: ThreadsOpt = 2,
    serve_workers: ServeWorkersOpt = None,
    no_cache: NoCacheOpt = False,
    overrides: list[str] | None = None,
) -> None:
    """Orchestration-level GRPO with localized counterfactual credit on a benchmark's training split.

    Data-parallel on N devices: accelerate launch --multi_gpu --num_processes N -m lemon.cli.main train ...
    """
    _need_train_extra()
    from lemon.train.grpo import train
    from lemon.train.rollout import Ablation
    from lemon.train.settings import TrainSettings, effective_config

    console, err_console = consoles()
    if fixed_structure not in (None, "chain"):
        raise LemonError(f"--fixed-structure {fixed_structure!r}: only 'chain' is supported")
    if steps < 1 or save_every < 1:
        raise LemonError("--steps and --save-every must be at least 1")
    settings = TrainSettings(
        run_dir=out, benchmark=benchmark, pool=pool, policy=policy, steps=steps, limit_tasks=limit,
        data_dir=str(data_dir) if data_dir else None, config_path=str(config) if config else None,
        overrides=tuple(overrides or ()), save_every=save_every, keep_checkpoints=keep_checkpoints, seed=seed,
        resume=resume, cf=not no_cf, ablation=Ablation(fixed_roles=fixed_roles, fixed_capacity=fixed_capacity,
                                                        fixed_structure=fixed_structure),  # type: ignore[arg-type]
        lora=lora, cache=not no_cache, threads=threads, uncertain_samples=uncertain, serve_workers=serve_workers)
    effective_config(settings)  # a bad override is a one-line error before anything loads
    with _progress(err_console) as bar:
        summary = asyncio.run(train(settings, on_step=_step_reporter(bar, steps)))
    console.print(f"steps {summary.first_step}..{summary.last_step} done; metrics {out / 'metrics.jsonl'}",
                  markup=False)
    console.print(f"trained orchestrator: {summary.final_dir}  (lemon run --orchestrator {summary.final_dir})",
                  markup=False)


def plot_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories (or their metrics.jsonl); several "
                                                        "share the axes, e.g. RUNS/cf RUNS/global.")],
    out: Annotated[Path | None, opt("out", help="Folder to write training.png into.")] = None,
    file: Annotated[Path | None, opt("file", help="The PNG to write (default ./training.png).")] = None,
    smooth: Annotated[int, typer.Option(help="Moving-average window in steps.")] = 1,
) -> None:
    """Draw the training curves of one run, or of several on the same axes, as a PNG."""
    from lemon.cli.options import output_file
    from lemon.train.plot import plot_runs

    console = consoles().out
    dest = output_file(out, file, "training.png") or Path("training.png")
    console.print(f"wrote {plot_runs(run_dirs, dest, smooth=max(1, smooth))}", markup=False)


def export_gguf_cmd(
    hf_dir: Annotated[Path, typer.Argument(help="Trained HF model directory (e.g. RUN/final).")],
    out: Annotated[Path, typer.Argument(help="Output .gguf file.")],
    outtype: Annotated[str, typer.Option(help="GGUF tensor type: q8_0, f16, f32.")] = "q8_0",
    converter: Annotated[Path | None, typer.Option(help="Path to llama.cpp's convert_hf_to_gguf.py.")] = None,
) -> None:
    """Convert a trained policy to GGUF for the embedded backend (lemon run --orchestrator OUT.gguf)."""
    from lemon.train.export import export_gguf

    console = consoles().out
    gguf = export_gguf(hf_dir, out, outtype=outtype, converter=str(converter) if converter else None)
    console.print(f"wrote {gguf}", markup=False)


def register(app: typer.Typer) -> None:
    """Add `sft`, `train`, `plot` and `export-gguf` to the main CLI app (idempotent)."""
    names = {c.name for c in app.registered_commands}
    for name, fn in (("sft", sft_cmd), ("train", with_config_options(train_cmd)), ("plot", plot_cmd),
                     ("export-gguf", export_gguf_cmd)):
        if name not in names:
            app.command(name)(fn)
