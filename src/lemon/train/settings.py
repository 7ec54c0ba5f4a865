"""The settings of a `lemon train` run, and the training config they resolve to.

A training setting is spelled once: as a field of the config dataclasses (`lemon.train.config`). A run
changes any of them with dotted overrides (`optim.lr=1e-5`, `--set` on the command line), applied onto the
config file and validated again; `CONFIG_OPTIONS` names the few that also have a command-line shortcut
(`--lr`), whose type and help the CLI reads from the config field itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lemon.errors import ConfigError
from lemon.train.config import TrainConfig, load_train_config
from lemon.train.rollout import Ablation

#: Command-line shortcuts of config settings: option name -> the dotted key it overrides.
CONFIG_OPTIONS: dict[str, str] = {
    "group_size": "group.group_size",
    "tasks_per_step": "rollout.tasks_per_step",
    "policy_max_tokens": "rollout.max_new_tokens",
    "kl_beta": "credit.kl_beta",
    "cf_form": "credit.cf_form",
    "lr": "optim.lr",
    "epochs": "optim.epochs",
    "precision": "optim.precision",
    "gradient_checkpointing": "optim.gradient_checkpointing",
    "worker_samples": "workers.samples",
    "families": "sampler.families",
    "confidence_discount": "sampler.confidence_discount",
}


@dataclass(frozen=True)
class TrainSettings:
    """Everything a `lemon train` run is configured with besides the config's settings, which `overrides`
    ("section.key=value", applied in order onto the config file) change."""

    run_dir: Path
    benchmark: str = "gsm8k"
    pool: str = "tiny"
    policy: str | None = None            # HF directory or hub id; None = the converted SmolLM2 default
    steps: int = 100
    limit_tasks: int | None = None        # first N items of the train split
    data_dir: str | None = None
    config_path: str | None = None
    overrides: tuple[str, ...] = ()
    save_every: int = 50
    keep_checkpoints: int = 2
    seed: int = 0
    resume: bool = False
    cf: bool = True
    ablation: Ablation = field(default_factory=Ablation)
    lora: bool = False
    cache: bool = True
    threads: int | None = 2
    # Keep only tasks one CoT agent solves under some but not all of this many worker seeds (curriculum.py).
    uncertain_samples: int | None = None
    # Worker models in their own server processes (`lemon.llm.serve`); None: whenever torch trains on a GPU,
    # where a CUDA llama.cpp in the trainer's process crashes it.
    serve_workers: bool | None = None


def effective_config(s: TrainSettings) -> TrainConfig:
    """The config file with the run's overrides applied (validated again)."""
    return apply_overrides(load_train_config(s.config_path), s.overrides)


def apply_overrides(cfg: TrainConfig, overrides: Sequence[str]) -> TrainConfig:
    """`cfg` with each "section.key=value" set, validated; a bad key or value is a one-line ConfigError."""
    data = cfg.model_dump()
    for item in overrides:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        model = getattr(cfg, section, None) if dot else None
        if not sep or not isinstance(model, BaseModel) or name not in type(model).model_fields:
            raise ConfigError(f"invalid training override {item!r}: expected section.key=value, the key one of "
                              f"{', '.join(_keys(cfg, section))}")
        current = getattr(model, name)
        data[section][name] = _value(value.strip(), current)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:  # one line naming the field (the text's last line is only a docs link)
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"invalid training override {loc}={err.get('input')!r}: {err['msg']}") from None


def _value(text: str, current: object) -> object:
    """The override's value as the config field takes it: a comma list for a tuple field, None for
    `none`/`null`, else the text (the config's validation converts and checks it)."""
    if text.lower() in ("none", "null"):
        return None
    if isinstance(current, tuple):
        return tuple(v.strip() for v in text.split(",") if v.strip())
    return text


def _keys(cfg: TrainConfig, section: str) -> list[str]:
    """The keys of `section`, or every section (as `section.*`) when it is not one."""
    sections = type(cfg).model_fields
    if section not in sections:
        return [f"{s}.*" for s in sections]
    return [f"{section}.{k}" for k in type(getattr(cfg, section)).model_fields]
