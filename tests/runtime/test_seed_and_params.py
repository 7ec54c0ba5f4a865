"""One seed recipe and one "pool defaults plus overrides" merge, checked against the recipes they replaced.

Stored run ids, LLM cache keys and every sampled result depend on these numbers: the shared functions must give
exactly what the copies they replaced gave (the copies are written out here, byte for byte)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from lemon.evaluation.item import item_seed
from lemon.llm.base import GenParams
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime.executor import derive_seed
from lemon.seeds import stable_seed
from lemon.spec.model import Spec
from tests.pools import scripted_pool


def _old_derive_seed(seed: int, agent: str) -> int:  # runtime/executor.py before the change
    return int.from_bytes(hashlib.sha256(f"{seed}\x00{agent}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def _old_eval_stable_seed(*parts: object) -> int:  # bench/evaluate.py's copy before the change
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@given(st.integers(min_value=0, max_value=2**63), st.text())
def test_derive_seed_is_the_shared_recipe_and_did_not_move(seed: int, agent: str) -> None:
    assert derive_seed(seed, agent) == _old_derive_seed(seed, agent) == stable_seed(seed, agent)


@given(st.sampled_from(["multiarith", "gsm8k", "humaneval"]), st.text(min_size=1), st.integers(0, 1000))
def test_item_seed_is_the_recipe_evaluate_used(benchmark: str, item_id: str, seed: int) -> None:
    assert item_seed(benchmark, item_id, seed) == _old_eval_stable_seed(benchmark, item_id, seed)


def test_known_values_are_pinned() -> None:
    # Computed with the code before the change; a different number here re-keys every cache and run.
    assert (derive_seed(0, "solver"), derive_seed(12345, "cot_3")) == (1981983110, 1282084009)
    assert item_seed("multiarith", "multiarith/3", 1) == 397585153


def _pool(defaults: GenParams) -> Pool:
    return scripted_pool(ScriptedBackend("s"), defaults=defaults)


def test_pool_params_overrides_and_none_keeps_the_default() -> None:
    pool = _pool(GenParams(temperature=0.2, max_tokens=64, top_p=0.9, repeat_penalty=1.1))
    assert pool.params() == pool.defaults
    merged = pool.params(temperature=0.7, max_tokens=None)
    assert merged == GenParams(temperature=0.7, max_tokens=64, top_p=0.9, repeat_penalty=1.1)
    assert pool.params(max_tokens=16).max_tokens == 16 and pool.defaults.max_tokens == 64  # defaults untouched


@given(st.none() | st.floats(0, 2), st.none() | st.integers(1, 4096))
def test_pool_params_equals_the_hand_merge_it_replaced(temperature: float | None, max_tokens: int | None) -> None:
    pool = _pool(GenParams(temperature=0.1, max_tokens=128, stop=("x",)))
    base = {f: getattr(pool.defaults, f) for f in pool.defaults.__dataclass_fields__}  # the old hand merge
    if temperature is not None:
        base["temperature"] = temperature
    if max_tokens is not None:
        base["max_tokens"] = max_tokens
    assert pool.params(temperature=temperature, max_tokens=max_tokens) == GenParams(**base)


def _vote(n: int, level: str = "large", prefix: str = "cot_") -> Spec:
    from lemon.spec.model import Agent

    voters = tuple(Agent(name=f"{prefix}{i}", role="math_solver", duty="Think.", capacity=level) for i in range(n))
    return Spec(agents=(*voters, Agent(name="vote", role="majority_vote", capacity=level,
                                       depends_on=tuple(v.name for v in voters))), output="vote")


def test_a_smaller_vote_draws_a_prefix_of_a_larger_vote_s_samples() -> None:
    """The sample bank: the k-th agent of a role draws the same sample in every team (names do not matter)."""
    from lemon.runtime.executor import Executor
    from lemon.spec.roles import RoleLibrary

    ex = Executor(_pool(GenParams(temperature=0.7)), RoleLibrary.load())
    seeds = {n: [ex.request(a, "t", {}, spec, 5).params.seed for a in spec.agents[:n]]
             for n, spec in ((3, _vote(3)), (5, _vote(5)))}
    assert seeds[3] == seeds[5][:3] and len(set(seeds[5])) == 5
    renamed = _vote(3, prefix="voter_")
    assert [ex.request(a, "t", {}, renamed, 5).params.seed for a in renamed.agents[:3]] == seeds[3]
