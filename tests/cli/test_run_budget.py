"""`lemon run --budget-tokens` covers the orchestrator's tokens as well as the workers' (issue 12)."""

from __future__ import annotations

import pytest

from lemon.api.session import RunSettings, propose_within_budget
from lemon.errors import LemonError
from lemon.llm.base import Message
from lemon.orchestrator.base import Proposal
from lemon.orchestrator.template import TemplateOrchestrator
from lemon.runtime.budget import prompt_token_bound
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary

SPEC = Spec(agents=(Agent(name="a", role="generalist", duty="", capacity="small"),), output="a")


class WritingOrchestrator:
    """Test double of a model-backed orchestrator: a known prompt, a generation limit, a known cost."""

    max_tokens = 50

    def __init__(self, spends: int) -> None:
        self.spends = spends
        self.asked = 0

    level = None

    def messages(self, task: str) -> list[Message]:
        return [Message("user", task)]

    def token_bound(self, task: str) -> int:
        return prompt_token_bound(self.messages(task)) + self.max_tokens

    async def aclose(self) -> None:
        return None

    async def propose(self, task: str, *, seed: int = 0) -> Proposal:
        self.asked += 1
        return Proposal(SPEC, "model", "raw", prompt_tokens=self.spends - 5, completion_tokens=5)


def _opts(budget: int | None) -> RunSettings:
    return RunSettings(max_tokens=64, budget_tokens=budget)


async def test_workers_get_what_the_orchestrator_left() -> None:
    proposal, opts = await propose_within_budget(WritingOrchestrator(40), "2+2?", _opts(1000))
    assert proposal.tokens == 40 and opts.budget_tokens == 960


async def test_a_budget_below_the_orchestrators_worst_case_is_refused_before_asking() -> None:
    orch = WritingOrchestrator(40)
    with pytest.raises(LemonError, match="worst case"):
        await propose_within_budget(orch, "2+2?", _opts(20))
    assert orch.asked == 0


async def test_the_template_orchestrator_costs_nothing_and_no_budget_means_no_cap() -> None:
    template = TemplateOrchestrator(RoleLibrary.load(), ("small", "medium", "large"))
    _, opts = await propose_within_budget(template, "2+2?", _opts(100))
    assert opts.budget_tokens == 100
    _, opts = await propose_within_budget(WritingOrchestrator(40), "2+2?", _opts(None))
    assert opts.budget_tokens is None
