"""Baselines as specs: each method is a spec on the same runtime and pools; methods differ ONLY in their spec.

That is the point of this module. A baseline is not separate code with its own prompts, retries or parsing;
it is a fixed `Spec` executed by the same `Executor` on the same pool, with the same task prompt, answer
extraction and checker as LEMON's own specs. Any difference in accuracy or tokens is then due to the
topology and roles alone.

Roles come from the role library, chosen by the benchmark's answer kind. A "team" of four roles is used:

| kind     | first (root)   | primary (solver)   | checker   | final                  |
|----------|----------------|--------------------|-----------|------------------------|
| `number` | `analyst`      | `math_solver`      | `critic`  | `final_decision_maker` |
| `choice` | `analyst`      | `knowledge_expert` | `critic`  | `final_decision_maker` |
| `code`   | `planner`      | `programmer`       | `tester`  | `final_decision_maker` |

Shapes (every agent at the same `level` capacity; arrows point from a parent to the agent reading it):

- `vanilla`: one agent, `solver` = primary role, empty duty (the base role as is).
- `cot`: one agent, primary role, duty "Think step by step, then give the final answer."
- `sc-cot` (self-consistency): `n` (default 5) CoT agents `cot_1..cot_n`, all parallel, then `vote`, a
  `majority_vote` agent depending on all of them. The vote is deterministic (no model call): the runtime
  extracts each parent's answer with the benchmark's extractor and picks the most common one. Samples must
  differ per agent: the runtime derives a per-agent seed when temperature > 0 (at temperature 0 the five
  agents would be identical, so evaluate with the default sampling temperature). For `code` the vote is over
  the extracted code text, so it only helps when several samples are identical.
- `esc` and `asc` (the adaptive-stopping anchors): sc-cot's team whose vote carries a stop rule, so its
  voters run in order only until the answer is settled: `esc` stops once 2 voters agree (Early-Stopping
  Self-Consistency, Li et al. ICLR 2024, with a window of 2), `asc` once the leading answer is the majority
  with Beta posterior >= 0.95 (Adaptive-Consistency, Aggarwal et al. EMNLP 2023); both at most `n` (5).
- `gate` (ours): `esc` behind a logprob gate, `stop: {agree: 2, logprob: GATE_LOGPROB}`: a voter whose reply
  the model was sure of (summed token log-probability >= the threshold) is taken alone, so an easy item costs
  one voter, not the two that agreement needs. Needs a pool whose levels can score replies (embedded).
- `cges`: sc-cot's team whose vote stops once the answer it gives has a confidence-weighted posterior >=
  `CGES_POSTERIOR`, `stop: {posterior: c}` (after CGES, Confidence-Guided Early Stopping, arXiv 2511.02603: each
  voter's answer weighed by its reply's per-token probability, `lemon.spec.stops.posterior`); at most `n` (5).
  Like `gate`, it needs a pool whose levels can score replies.
- `exsc` (ours, code benchmarks only): sc-cot's team whose vote carries the `examples` gate, `stop: {examples:
  true}`: voters run one at a time, and the first whose program passes the examples the task's docstring shows
  (run in the sandbox, `lemon.runtime.examples_gate`) is taken alone; with none passing, the five programs'
  vote stands, as in sc-cot. Its voters are sc-cot's (the same samples), so the comparison is paired.
- `pot`, `sc-pot` and `pot-esc` (program of thought, number benchmarks only): `pot` is one `program_solver`
  agent, whose reply is a Python program that the runtime runs in the sandbox for its answer
  (`lemon.runtime.programs`); `sc-pot` is sc-cot with program voters (PAL with a majority vote, 5 voters),
  `pot-esc` is `esc` with program voters (stop once 2 of at most 5 agree); `mixed-esc` asks two program
  voters, then CoT voters, and stops once 2 agree (prose breaks a tie between programs); `cross-check` is the
  program cross-check as a fixed rule: a CoT voter, then a program voter, stop if their answers agree, else go
  on with CoT voters until any 2 answers agree (esc over the rest, the program's answer counted), at most `n`
  (5): `voter_team`'s `CPCCC`, the rule `experiments/learn_stop_rule.py` restates as "program cross-check". A
  program costs a fraction of a prose solution's tokens (docs/results.md, "Program voters").
- `chain`: `n` (default 3) agents in sequence: primary -> checker -> final (for n > 3, extra checkers
  are inserted before the final agent; n = 2 is primary -> final).
- `tree`: `root` (first role: analysis / plan) fans out to two workers `worker_1`, `worker_2` (primary role,
  each with its own duty so they do not produce the same text at temperature 0), then `aggregator`
  (final role) reads both workers:

      root -> worker_1 -> aggregator
      root -> worker_2 -> aggregator

- `complete`: `n` (default 4) agents; agent i depends on EVERY earlier agent (a fully connected DAG).
  Roles, in order: first, primary, checker, final (extra agents repeat the primary role).
- `random`: `n` (default 4) agents with the `complete` roles, each forward edge i -> j (i < j) kept with
  probability 1/2 from `random.Random(seed)`; then every agent other than the last that has no child gets an
  edge to the last agent, so the last agent is the single sink and the answer. Same seed, same graph.

The registry (issue 53). Each baseline is one `BaselineKind` (`base.py`: its name, a one-line description, its
builder, its default `n` and bounds, the answer kinds it answers, whether its agents write programs or its stop
rule reads reply scores), in its family's file: `single.py` (vanilla, cot), `votes.py` (sc-cot and the stopping
votes), `programs.py` (the program-of-thought teams and `voter_team`), `shapes.py` (chain, tree, complete,
random). `_FILES` below lists the files in report order; every caller asks this registry (`methods.py` for the
`--method` values, `report.py` and `teams.py` for which methods are fixed), never a table of names. A new
baseline is one `BaselineKind` in a family's file (or a file of its own plus one line in `_FILES`); one defined
elsewhere (a test, a plug-in) enters with `register` (or `registered`, which takes it out again).

`method_names()` lists the names; `baseline_spec(method, kind, level=..., seed=..., n=...)` builds one.
"""

from __future__ import annotations

from lemon.errors import LemonError
from lemon.evaluation.baselines.base import COT_DUTY, BaselineKind, Builder
from lemon.evaluation.baselines.programs import MAX_ORDER, program_role, voter_team
from lemon.evaluation.baselines.votes import ASC_CONFIDENCE, CGES_POSTERIOR, GATE_LOGPROB
from lemon.orchestrator.kinds import find_kind
from lemon.registry import Registry
from lemon.spec.model import Spec

#: The family files, in the order reports list their baselines; each exposes `BASELINES`.
_FILES = (
    "single",
    "votes",
    "programs",
    "shapes",
)


_REGISTRY: Registry[BaselineKind] = Registry.from_files("baseline", lambda b: b.name, __name__, _FILES,
                                                        "BASELINES")
#: Add a baseline defined outside the family files (a plug-in, a test; its name new); or one for a `with` block.
register, registered = _REGISTRY.register, _REGISTRY.registered


def baselines() -> tuple[BaselineKind, ...]:
    """Every registered baseline, in report order."""
    return _REGISTRY.values()


def method_names() -> tuple[str, ...]:
    """The baseline method names, in the order reports list them."""
    return _REGISTRY.names()


def find_baseline(name: str) -> BaselineKind | None:
    """The baseline registered as `name`, or None (an orchestrating method, or no method)."""
    return _REGISTRY.get(name)


def get_baseline(name: str) -> BaselineKind:
    """The baseline registered as `name`; a one-line error lists the valid ones."""
    found = _REGISTRY.get(name)
    if found is None:
        raise LemonError(f"unknown baseline {name!r}; valid: {', '.join(_REGISTRY.names())}")
    return found


def supports(method: str, kind: str) -> bool:
    """Whether baseline `method` has a spec for benchmarks whose answers are of `kind` (the program-of-thought
    ones only for numbers, `exsc` only for code)."""
    found = find_kind(kind)
    return found is not None and get_baseline(method).applies_to(found)


def baseline_spec(method: str, kind: str, *, level: str, seed: int = 0, n: int | None = None) -> Spec:
    """The fixed spec of baseline `method` for a benchmark whose answers are of `kind`.

    `n` is the number of agents (voters for sc-cot) for the sized methods (`BaselineKind.default_n`); None means
    the default, and it is ignored by the fixed shapes. `seed` only matters for `random` (the graph). The
    result is built from the spec model's own validated types; callers that know the pool still run
    `validate_spec` on it like on any other spec (the level must be one of the pool's).
    """
    return get_baseline(method).spec(kind, level=level, seed=seed, n=n)


__all__ = ["ASC_CONFIDENCE", "CGES_POSTERIOR", "COT_DUTY", "GATE_LOGPROB", "MAX_ORDER", "BaselineKind", "Builder",
           "baseline_spec", "baselines", "find_baseline", "get_baseline", "method_names", "program_role",
           "register", "registered", "supports", "voter_team"]
