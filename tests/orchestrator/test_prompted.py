"""The prompted orchestrator: control flow with a scripted double, and real-model behaviour."""

from __future__ import annotations

import json

import pytest

from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.orchestrator.prompted import PromptedOrchestrator
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from tests.pools import LEVELS, scripted_pool

TASKS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Which gas do plants absorb from the air for photosynthesis? (A) Oxygen (B) Nitrogen (C) Carbon "
    "dioxide (D) Helium",
    "Write a Python function `is_palindrome(s: str) -> bool` that ignores case and spaces.",
    "A train travels 60 km in 45 minutes. What is its average speed in km per hour?",
    "Summarize in one sentence why the sky appears blue.",
]


def _pool(backend: ScriptedBackend) -> Pool:
    return scripted_pool(backend, concurrency=4)


async def test_prompted_orchestrator_uses_strongest_level_with_schema() -> None:
    reply = json.dumps({"agents": [{"name": "solver", "role": "math_solver", "duty": "Solve it.",
                                    "capacity": "large", "depends_on": []}], "output": "solver"})
    backend = ScriptedBackend("writer", responder=lambda req: reply)
    roles = RoleLibrary.load()
    proposal = await PromptedOrchestrator(_pool(backend), roles).propose(TASKS[0])
    assert proposal.source == "model" and proposal.spec.output == "solver"
    request = backend.calls[0]
    assert request.json_schema is not None
    assert "majority_vote" not in json.dumps(request.json_schema)  # vote is for fixed baselines only
    assert TASKS[0] in request.messages[-1].content


@pytest.mark.parametrize("levels", [LEVELS, ("weak", "strong"), ("only",)])
def test_every_example_is_a_valid_spec_for_the_pools_levels_and_tasks_see_all_of_them(levels: tuple[str, ...]) -> None:
    from lemon.orchestrator.prompted import PromptTemplates
    from lemon.orchestrator.repair import spec_from_output

    roles = RoleLibrary.load()
    templates = PromptTemplates.load()
    assert len(templates.examples) >= 3
    shown = {templates.example_for(f"task number {i}", levels) for i in range(64)}
    assert len(shown) == len(templates.examples)  # the hash spreads tasks over every example
    for example in shown:
        spec, source, warnings = spec_from_output(example, "2+2?", roles, levels)
        assert source == "model" and not warnings, (example, warnings)
        assert {a.capacity for a in spec.agents} <= set(levels)
    # the choice is stable: the same task always sees the same example
    assert templates.example_for(TASKS[0], levels) == templates.example_for(TASKS[0] + "  ", levels)


async def test_garbage_reply_falls_back_visibly() -> None:
    backend = ScriptedBackend("writer", responder=lambda req: "no idea")
    proposal = await PromptedOrchestrator(_pool(backend), RoleLibrary.load()).propose("2+2?")
    assert proposal.source == "fallback" and proposal.warnings


@pytest.mark.models
async def test_real_model_writes_a_valid_spec_for_five_tasks() -> None:
    from lemon.llm.pools import load_pool

    roles = RoleLibrary.load()
    pool = load_pool("cpu", cache=False)
    try:
        orch = PromptedOrchestrator(pool, roles, level="medium", max_tokens=384)
        sources = []
        for task in TASKS:
            proposal = await orch.propose(task)
            # Whatever the model wrote, what comes out validates against roles and pool levels.
            assert validate_spec(proposal.spec, roles, pool.level_names) == proposal.spec
            assert proposal.completion_tokens > 0
            sources.append(proposal.source)
        # Constrained decoding should make most replies usable without the fallback.
        assert sources.count("fallback") <= 2, sources
    finally:
        await pool.aclose()
