"""The sample bank read back: the teams its voters answer, and the (item, seed) pairs it holds.

A 5-voter sc-cot evaluation at one level (`experiments/adaptive_cpu.sh bank`, `train-bank`) fills the LLM
cache with 5 draws per (item, seed); every vote or stop-rule team over a prefix of those voters is then
answered from the cache (`runtime.executor.sample_slot`). Program voters are banked the same way (sc-pot), and
`baselines.voter_team` writes teams that mix them with prose voters in a given order. The bank teacher
(`lemon.train.verified`) and the replay scripts (`experiments/stop_rules_table.py`,
`experiments/answer_confidence.py`) build those teams and find those pairs here, one way.
"""

from __future__ import annotations

from lemon.errors import StorageError
from lemon.evaluation.baselines import MAX_ORDER, baseline_spec
from lemon.evaluation.item import WORKER_SEEDS
from lemon.evaluation.store import ResultsStore, RunInfo
from lemon.llm.base import GenParams
from lemon.llm.pool import Pool
from lemon.spec.model import Spec, StopRule

#: Voters per (item, seed) the bank holds.
BANK_VOTERS = MAX_ORDER


def vote_team(kind: str, level: str, voters: int, rule: StopRule | None = None) -> Spec:
    """`voters` CoT voters at `level` and a vote with `rule`; one voter is the lone CoT agent, which sends the
    same request as a vote's first voter (so it is banked too)."""
    if voters == 1:
        return baseline_spec("cot", kind, level=level)
    spec = baseline_spec("sc-cot", kind, level=level, n=voters)
    vote = spec.agents[-1].model_copy(update={"stop": rule})
    return spec.model_copy(update={"agents": (*spec.agents[:-1], vote)})


def is_bank_run(run: RunInfo) -> bool:
    """Whether `run` is a bank run: the 5-voter sc-cot, at any level and split."""
    return run.method == "sc-cot" and run.config.get("n_agents") == BANK_VOTERS


def bank_keys(store: ResultsStore, benchmark: str, level: str, seeds: int | None = None,
              split: str = "test") -> tuple[set[tuple[str, int]], dict[str, object]]:
    """The (item, seed) pairs of `benchmark`'s `split` that the bank holds (its 5-voter sc-cot runs at
    `level`, sampled as the bank samples: a new run identity for the same bank still hits the same cache),
    seeds below `seeds` only; and the config of one such run. StorageError if there is none."""
    keys: set[tuple[str, int]] = set()
    config: dict[str, object] | None = None
    for run in store.runs():
        if (is_bank_run(run) and (run.benchmark, run.split, run.level) == (benchmark, split, level)
                and run.config.get("worker_seeds") == WORKER_SEEDS):
            keys |= {k for k in store.done_keys(run.run_id) if seeds is None or k[1] < seeds}
            config = run.config
    if config is None:
        raise StorageError(f"no {BANK_VOTERS}-voter sc-cot run of {benchmark} {split} at {level} in the store: "
                           "run experiments/adaptive_cpu.sh bank (or train-bank) first")
    return keys, config


def bank_params(pool: Pool, config: dict[str, object]) -> GenParams:
    """The sampling parameters a bank run drew with (its config: temperature, reply limit; None: the pool's
    default), so a replay sends the same requests and the LLM cache answers them."""
    limit = config.get("max_tokens")
    return pool.params(temperature=float(config["temperature"]),  # type: ignore[arg-type]
                       max_tokens=None if limit is None else int(limit))  # type: ignore[call-overload]
