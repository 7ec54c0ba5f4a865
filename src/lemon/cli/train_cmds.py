"""`lemon sft`, `lemon train`, `lemon plot`, `lemon export-gguf`: thin typer commands over `lemon.train`.

Option parsing and progress display only; the work is in the library. Registered on the main app by
`register(app)`. The training stack (torch, transformers) is imported inside the commands, so `lemon --help`
stays fast and works without the [train] extra.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lemon.cli.options import DEFAULT_POOL, DataDirOpt, NoCacheOpt, ThreadsOpt, consoles, opt
from lemon.errors import LemonError

# Worker models in their own server processes (lemon.llm.serve), or loaded in this one.
ServeWorkersOpt = Annotated[bool | None, typer.Option(
    "--serve-workers/--embedded-workers", help="Run the pool's embedded worker models in their own server "
    "processes (llama_cpp.server; ports from LEMON_WORKER_PORT, default 8700), or in this process. Default: "
    "served whenever torch uses a GPU (a CUDA llama.cpp cannot share its process).")]


def _need_train_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise LemonError(f"training needs the [train] extra ({exc.name} is missing): "
                         "pip install -e '.[train]'") from None
    # The CLI draws its own progress bars; transformers' per-load bars would interleave with them.
    transformers.utils.logging.disable_progress_bar()


def _families(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from lemon.train.config import FAMILIES

    fams = tuple(f.strip() for f in value.split(",") if f.strip())
    bad = [f for f in fams if f not in FAMILIES]
    if bad or not fams:
        raise LemonError(f"--families {value!r}: expected a comma-separated subset of {','.join(FAMILIES)}")
    return fams


def _progress(console: Any) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[info]}"), console=console, transient=False)


def sft_cmd(
    out: Annotated[Path, opt("out", help="Output directory (model/, sft.json, sft_data.jsonl).")],
    benchmark: Annotated[str, typer.Option(
        help="Benchmark whose TRAIN split supplies the tasks, or a mixture: gsm8k,svamp,multiarith.")] = "gsm8k",
    teacher_pool: Annotated[str, typer.Option(help="Pool of the teacher: cpu, tiny or a pool YAML.")] = DEFAULT_POOL,
    teacher_level: Annotated[str, typer.Option(help="Teacher's level in that pool.")] = "large",
    teacher: Annotated[str, typer.Option(help="prompted: the prompted orchestrator at --teacher-level writes "
                                              "each target; library: one fixed team per task, drawn uniformly "
                                              "from the default team and the baselines at every level (no "
                                              "model call).")] = "prompted",
    policy: Annotated[str | None, typer.Option(help="Policy to fine-tune (HF dir); default SmolLM2-135M.")] = None,
    limit: Annotated[int, opt("limit", help="The first N training-split items: the teacher writes their specs."
                               )] = 200,
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
                           verified=verified, teacher=teacher, serve_workers=serve_workers)
    with _progress(err_console) as bar:
        ids: dict[str, Any] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in ids:
                ids[phase] = bar.add_task(phase, total=total, info="")
            bar.update(ids[phase], completed=done, total=total)

        report = asyncio.run(run_sft(settings, progress=progress))
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


def train_cmd(
    out: Annotated[Path, opt("out", help="Run directory (checkpoints, metrics, final/); --resume continues it.")],
    benchmark: Annotated[str, typer.Option(
        help="Benchmark whose TRAIN split supplies the tasks, or a mixture: gsm8k,svamp,multiarith.")] = "gsm8k",
    pool: Annotated[str, opt("pool", help="Worker pool: cpu, tiny, or a pool YAML file (tiny is faster, cpu "
                                          "is the pool lemon eval measures with).")] = DEFAULT_POOL,
    policy: Annotated[str | None, typer.Option(help="Initial policy (HF dir, e.g. the SFT model).")] = None,
    steps: Annotated[int, typer.Option(help="Total optimiser steps (a resumed run continues to this).")] = 100,
    limit: Annotated[int | None, opt("limit", help="Use the first N items of the train split.")] = None,
    config: Annotated[Path | None, typer.Option(help="Training config YAML (default: packaged).")] = None,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N steps (and at the end).")] = 50,
    keep_checkpoints: Annotated[int, typer.Option(help="Checkpoints kept on disk.")] = 2,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint.")] = False,
    no_cf: Annotated[bool, typer.Option("--no-cf", help="Ablation: global GRPO only.")] = False,
    families: Annotated[str | None, typer.Option(help="Counterfactual families, e.g. edge,role.")] = None,
    confidence_discount: Annotated[bool | None, typer.Option(
        "--confidence-discount/--no-confidence-discount", help="Override sampler.confidence_discount (score a "
        "counterfactual by |delta| x its group's disagreement on the edited field).", show_default=False)] = None,
    cf_form: Annotated[str | None, typer.Option(help="Override credit.cf_form: span (delta on the field's "
                                                     "tokens) or pairwise (a preference between the written "
                                                     "and the edited value).")] = None,
    fixed_roles: Annotated[bool, typer.Option("--fixed-roles", help="Ablation: base roles only.")] = False,
    fixed_capacity: Annotated[str | None, typer.Option(help="Ablation: run every agent at LEVEL.")] = None,
    fixed_structure: Annotated[str | None, typer.Option(help="Ablation: 'chain'.")] = None,
    group_size: Annotated[int | None, typer.Option(help="Override group.group_size.")] = None,
    tasks_per_step: Annotated[int | None, typer.Option(help="Override rollout.tasks_per_step.")] = None,
    policy_max_tokens: Annotated[int | None, opt("policy_max_tokens", help="Max new tokens of the policy writing "
                                                 "one spec (overrides rollout.max_new_tokens).")] = None,
    kl_beta: Annotated[float | None, typer.Option(help="Override credit.kl_beta (0 = no reference).")] = None,
    lr: Annotated[float | None, typer.Option(help="Override optim.lr.")] = None,
    worker_samples: Annotated[int | None, typer.Option(help="Override workers.samples (worker seeds per spec; "
                                                            "the success term is their mean).")] = None,
    uncertain: Annotated[int | None, typer.Option(help="Keep only tasks one CoT agent at the strongest level "
                                                       "solves under some but not all of N worker seeds.")] = None,
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter.")] = False,
    epochs: Annotated[int | None, typer.Option(help="Override optim.epochs (optimiser steps per batch; "
                                                    "> 1 uses the clipped ratio).")] = None,
    precision: Annotated[str | None, typer.Option(help="Override optim.precision: auto, fp32 or bf16.")] = None,
    gradient_checkpointing: Annotated[bool | None, typer.Option(
        "--gradient-checkpointing/--no-gradient-checkpointing", help="Override optim.gradient_checkpointing.",
        show_default=False)] = None,
    data_dir: DataDirOpt = None,
    seed: Annotated[int, opt("seed", help="Seed of sampling, task order and counterfactual choices.")] = 0,
    threads: ThreadsOpt = 2,
    serve_workers: ServeWorkersOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Orchestration-level GRPO with localized counterfactual credit on a benchmark's training split.

    Data-parallel on N devices: accelerate launch --multi_gpu --num_processes N -m lemon.cli.main train ...
    """
    _need_train_extra()
    from lemon.train.grpo import TrainSettings, train
    from lemon.train.rollout import Ablation

    console, err_console = consoles()
    if fixed_structure not in (None, "chain"):
        raise LemonError(f"--fixed-structure {fixed_structure!r}: only 'chain' is supported")
    if steps < 1 or save_every < 1:
        raise LemonError("--steps and --save-every must be at least 1")
    settings = TrainSettings(
        run_dir=out, benchmark=benchmark, pool=pool, policy=policy, steps=steps, limit_tasks=limit,
        data_dir=str(data_dir) if data_dir else None, config_path=str(config) if config else None,
        save_every=save_every, keep_checkpoints=keep_checkpoints, seed=seed, resume=resume, cf=not no_cf,
        families=_families(families), confidence_discount=confidence_discount, cf_form=cf_form,
        ablation=Ablation(fixed_roles=fixed_roles, fixed_capacity=fixed_capacity,
                          fixed_structure=fixed_structure),  # type: ignore[arg-type]
        lora=lora, cache=not no_cache, threads=threads, group_size=group_size, max_new_tokens=policy_max_tokens,
        kl_beta=kl_beta, lr=lr, tasks_per_step=tasks_per_step, worker_samples=worker_samples,
        uncertain_samples=uncertain, epochs=epochs, precision=precision,
        gradient_checkpointing=gradient_checkpointing, serve_workers=serve_workers)
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
    for name, fn in (("sft", sft_cmd), ("train", train_cmd), ("plot", plot_cmd),
                     ("export-gguf", export_gguf_cmd)):
        if name not in names:
            app.command(name)(fn)
