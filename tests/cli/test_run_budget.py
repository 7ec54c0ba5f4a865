"""`lemon run --budget-tokens` covers the orchestrator's tokens as well as the workers' (issue 12)."""

from __future__ import annotations

import re
from pathlib import Path

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


POOL = ("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n"
        "  - {name: medium, backend: scripted, model: m}\n  - {name: large, backend: scripted, model: l}\n")


def test_a_budget_below_one_calls_worst_case_is_refused_up_front_saying_what_one_call_needs(
        tmp_path: Path, _isolated_home: Path) -> None:
    """Issue 52: `--budget-tokens 100` loaded the models, then stopped with "run token budget of 100 used up" with
    nothing used. Now one line before anything runs, naming the call's need; that need is enough to run."""
    from tests.cli.test_cli_core import assert_clean_error, lemon

    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    proc = lemon("run", "What is 2 + 4?", "--pool", str(pool), "--budget-tokens", "100", "--json", home=_isolated_home)
    assert_clean_error(proc, "--budget-tokens 100 is a token budget below one call's worst case: agent 'solver' "
                             "may take")
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout  # no spec, no trace: nothing ran
    need = int(re.search(r"raise --budget-tokens to (\d+) or lower --max-tokens", proc.stderr).group(1))  # type: ignore[union-attr]
    assert lemon("run", "What is 2 + 4?", "--pool", str(pool), "--budget-tokens", str(need), "--json",
                 home=_isolated_home).returncode == 0
    lower = lemon("run", "What is 2 + 4?", "--pool", str(pool), "--budget-tokens", str(need), "--max-tokens", "300",
                  home=_isolated_home)
    assert lower.returncode == 0, lower.stderr


def test_what_the_orchestrator_left_is_the_budget_one_call_must_fit_in() -> None:
    from lemon.api.session import check_budget_covers_a_call
    from lemon.llm.scripted import ScriptedBackend
    from tests.pools import scripted_pool

    pool, roles = scripted_pool(ScriptedBackend("scripted")), RoleLibrary.load()
    with pytest.raises(LemonError) as err:
        check_budget_covers_a_call(pool, roles, SPEC, "2+2?", _opts(100), spent=900)
    assert str(err.value).startswith("--budget-tokens 1000 leaves the workers a token budget of 100 after the "
                                     "orchestrator's 900, below one call's worst case: agent 'a' may take ")
    check_budget_covers_a_call(pool, roles, SPEC, "2+2?", _opts(2000), spent=900)  # room for one call: no error
    check_budget_covers_a_call(pool, roles, SPEC, "2+2?", _opts(None))  # no cap
