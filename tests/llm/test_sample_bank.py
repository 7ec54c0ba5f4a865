"""The LLM cache as a sample bank: a team replayed through an offline pool gives exactly what live execution
gives, because an agent's sample depends on its role and rank, not on the team around it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.evaluation.baselines import baseline_spec
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.cache import CachedBackend, CacheOnlyBackend, SQLiteCache
from lemon.llm.pools import load_pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.model import Spec, StopRule
from lemon.spec.roles import RoleLibrary
from tests.evaluation.test_cli import scripted_pool_yaml
from tests.pools import scripted_pool

ROLES = RoleLibrary.load()
PARAMS = GenParams(temperature=0.7, max_tokens=32)


def seeded_answer(request: ChatRequest) -> str:
    """A test double whose answer depends on the sampling seed, as a sampled model's does (3 answers)."""
    return f"The answer is {(request.params.seed or 0) % 3}."


def team(n: int, rule: StopRule | None, prefix: str = "cot_") -> Spec:
    """sc-cot's n voters (named `prefix`i) and its vote, carrying `rule`."""
    spec = baseline_spec("sc-cot", "number", level="large", n=n)
    voters = tuple(a.model_copy(update={"name": a.name.replace("cot_", prefix)}) for a in spec.agents[:-1])
    vote = spec.agents[-1].model_copy(update={"stop": rule, "depends_on": tuple(v.name for v in voters)})
    return spec.model_copy(update={"agents": (*voters, vote)})


async def _run(backend: object, spec: Spec, seed: int) -> tuple[str, int, tuple[str, ...]]:
    ex = Executor(scripted_pool(backend, defaults=PARAMS), ROLES, params=PARAMS)  # type: ignore[arg-type]
    r = await ex.run(spec, "How many?", seed=seed, vote_key=lambda t: t.split()[-1])
    assert r.status == "ok", r.stop_reason
    return r.answer, r.total_tokens, tuple(sorted(r.tokens_by_agent))


@pytest.mark.parametrize("rule", [None, StopRule(agree=2), StopRule(agree=3), StopRule(confidence=0.9)])
async def test_a_team_replayed_from_the_bank_equals_its_live_run(tmp_path: Path, rule: StopRule | None) -> None:
    cache = SQLiteCache(tmp_path / "bank.sqlite")
    for seed in range(6):  # the bank: the full 5-vote, live, once per seed
        await _run(CachedBackend(ScriptedBackend("m", responder=seeded_answer), cache), team(5, None), seed)
    offline = CachedBackend(CacheOnlyBackend("m"), cache)
    for n in (3, 5):  # other names than the bank's: a sample belongs to a role's rank, not to a name
        for seed in range(6):
            live = await _run(ScriptedBackend("m", responder=seeded_answer), team(n, rule, "v"), seed)
            assert await _run(offline, team(n, rule, "v"), seed) == live


async def test_an_offline_pool_refuses_a_request_the_bank_lacks(tmp_path: Path) -> None:
    pool = load_pool(str(scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)), cache_path=tmp_path / "c.sqlite",
                     offline=True)
    r = await Executor(pool, ROLES, params=PARAMS).run(team(3, None), "task", seed=1)
    assert r.status == "error" and "not in the LLM cache" in r.stop_reason and r.spent_tokens == 0


async def test_an_exported_bank_imported_elsewhere_replays_every_team_offline(tmp_path: Path) -> None:
    """The committed bank (`lemon cache export` here, `import` on another machine's empty cache) answers every
    team of its voters with no model call and exactly the live answers: what experiments/bank/ relies on."""
    from lemon.llm.cache_file import export_cache, import_cache

    drawn = SQLiteCache(tmp_path / "here.sqlite")
    for seed in range(4):
        await _run(CachedBackend(ScriptedBackend("m", responder=seeded_answer), drawn), team(5, None), seed)
    export_cache(drawn, tmp_path / "bank.jsonl.gz")
    elsewhere = SQLiteCache(tmp_path / "elsewhere.sqlite")
    import_cache(elsewhere, tmp_path / "bank.jsonl.gz")
    offline = CachedBackend(CacheOnlyBackend("m"), elsewhere)
    for seed in range(4):
        live = await _run(ScriptedBackend("m", responder=seeded_answer), team(5, StopRule(agree=2), "v"), seed)
        assert await _run(offline, team(5, StopRule(agree=2), "v"), seed) == live
    assert offline.hits > 0
