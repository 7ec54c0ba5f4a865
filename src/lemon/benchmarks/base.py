"""What a benchmark is: one object giving its items, splits, prompt, answer kind, extractor and grader.

Why one object per benchmark (like inspect_ai's `Task` = dataset + solver + scorer): a benchmark used to be
spread over five tables in three modules, keyed by the same names, and adding one meant editing all five. Now
a benchmark is one file of `lemon.benchmarks` holding one `Benchmark` (usually a `DataBenchmark`), and
`lemon.benchmarks.registry` lists it in one line. The harness, the trainer and the inspection tools ask only
what the `Benchmark` protocol names, so a benchmark written elsewhere works the same (see the registry).

`Item` is the one shape every benchmark's items take; `AnswerKind` is what benchmarks with the same kind of
answer share (prompt, extractor, grader: `lemon.benchmarks.answers`); `SplitDef` names one split.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol

from lemon.errors import LemonError
from lemon.orchestrator.kinds import answer_kind
from lemon.paths import data_dir as resolve_data_dir
from lemon.spec.forward import Forward

log = logging.getLogger(__name__)

#: An answer kind's name: one of `lemon.orchestrator.kinds` (number, choice, code, or one registered there).
Kind = str
Role = Literal["eval", "train", "reference"]
Selection = Literal["all", "holdout", "rest"]
DataDir = str | os.PathLike[str] | None


@dataclass(frozen=True)
class Item:
    """One benchmark question with its gold answer as text.

    `answer`: a number as text ("18", "-2.5") for number benchmarks, a letter "A".."E" for choice ones, and
    the HumanEval test code for code. `choices`: the option texts, without their letter prefixes, in
    letter order. `meta`: benchmark specifics (HumanEval prompt/test/entry_point, MMLU subject, ...).
    """

    id: str
    question: str
    answer: str
    choices: tuple[str, ...] = ()
    meta: dict[str, object] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class SplitDef:
    """One named split: which source it is drawn from and how items are selected from it."""

    source: str
    role: Role
    size: int
    select: Selection = "all"
    holdout: int = 0
    disjoint_from: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class AnswerKind:
    """How items whose answers are of one kind are posed, read back and graded.

    `sandboxed`: grading runs model-written code (in `lemon.sandbox`): the harness runs it off the event loop,
    a few at a time, instead of inline."""

    name: Kind
    prompt: Callable[[Item], str]
    extract: Callable[[str, Item], str | None]
    check: Callable[[str, Item], bool]
    sandboxed: bool = False

    def __post_init__(self) -> None:
        answer_kind(self.name)  # a registered kind (its teams, baselines and readers): one line if not


@dataclass(frozen=True)
class Source:
    """One upstream file (or folder), relative to the data directory, with its parser and expected format."""

    path: str
    fmt: str  # the expected format, for error messages
    parse: Callable[[Path, str], list[Item]]


class Benchmark(Protocol):
    """What the harness, the trainer and the inspection tools need of a benchmark. Optional beyond these: an int
    `reply_tokens`, the worker tokens per reply its tasks need (read by `reply_tokens()`)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> Kind:
        """The answer kind: it picks the fixed teams (baselines) and is recorded with every run."""
        ...

    @property
    def sandboxed(self) -> bool:
        """Whether grading runs model-written code (slow, blocking: off the event loop)."""
        ...

    @property
    def splits(self) -> Mapping[str, SplitDef]: ...

    @property
    def default_split(self) -> str:
        """The evaluation split used when none is named."""
        ...

    @property
    def train_split(self) -> str:
        """The training pool, disjoint from every evaluation split."""
        ...

    def load_source(self, source: str, data_dir: DataDir = None) -> list[Item]:
        """All items of one source, in file order."""
        ...

    def prompt(self, item: Item) -> str:
        """The task text every method's agents are given for `item`."""
        ...

    def extract(self, text: str, item: Item) -> str | None:
        """The answer in an agent's reply, or None when it gives none."""
        ...

    def check(self, prediction: str, item: Item) -> bool:
        """Whether an extracted answer is right."""
        ...


def reply_tokens(benchmark: Benchmark) -> int | None:
    """The worker tokens per reply `benchmark` asks for (None: the caller's default). Not part of the protocol's
    required members: a benchmark defined elsewhere without it keeps the default."""
    value = getattr(benchmark, "reply_tokens", None)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise LemonError(f"benchmark {benchmark.name}: reply_tokens must be a positive integer, not {value!r}")
    return value


@dataclass(frozen=True)
class DataBenchmark:
    """A `Benchmark` read from files of the data directory and graded by one `AnswerKind`."""

    name: str
    answers: AnswerKind
    sources: Mapping[str, Source]
    splits: Mapping[str, SplitDef]
    default_split: str
    train_split: str
    # Worker tokens a reply needs here, where LEMON's default (384) cuts this benchmark's reasoning; None: the
    # default. The rule: set where a quarter or more of one CoT agent's replies at the `cpu` pool's `large` were
    # cut at 384 (AQuA 33 of 60, MMLU 15 of 60; GSM8K's 10 of 60 keeps 384, as issue 24's bank). Optional for a
    # benchmark written elsewhere: read it through `reply_tokens(benchmark)`.
    reply_tokens: int | None = None

    def __post_init__(self) -> None:
        # read-only views: a benchmark is a module-level constant, and nothing may change it behind the harness
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "splits", MappingProxyType(dict(self.splits)))
        for name in (self.default_split, self.train_split):
            if name not in self.splits:
                raise LemonError(f"benchmark {self.name}: split {name!r} is not one of its splits")

    kind = Forward[Kind]("answers.name")
    sandboxed = Forward[bool]("answers.sandboxed")

    def load_source(self, source: str, data_dir: DataDir = None) -> list[Item]:
        """All items of one upstream file (or MMLU folder), in file order."""
        try:
            src = self.sources[source]
        except KeyError:
            raise LemonError(f"unknown source {self.name}/{source}; valid: "
                             f"{', '.join(f'{self.name}/{s}' for s in self.sources)}") from None
        path = resolve_data_dir(data_dir) / src.path
        items = src.parse(path, src.fmt)
        log.debug("loaded %d items from %s", len(items), path)
        return items

    def prompt(self, item: Item) -> str:
        return self.answers.prompt(item)

    def extract(self, text: str, item: Item) -> str | None:
        return self.answers.extract(text, item)

    def check(self, prediction: str, item: Item) -> bool:
        return self.answers.check(prediction, item)
