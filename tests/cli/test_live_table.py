"""The live table of `lemon run`: pruned agents are marked and said why (issue 11)."""

from __future__ import annotations

from rich.console import Console

from lemon.cli.session import AgentProgress
from lemon.spec.model import Agent, Spec

SPEC = Spec(agents=(
    Agent(name="solver", role="math_solver", duty="", capacity="large"),
    Agent(name="critic", role="critic", duty="", capacity="small", depends_on=("solver",)),
), output="solver")


def test_a_pruned_agent_is_marked_pruned_with_its_reason_not_left_waiting() -> None:
    progress = AgentProgress(SPEC)
    progress.on_event({"type": "despawn", "agent": "critic", "reason": "not an ancestor of the output agent"})
    progress.on_event({"type": "spawn", "agent": "solver"})
    progress.on_event({"type": "return", "agent": "solver", "tokens": 12})
    assert progress.rows["critic"]["state"] == "pruned"
    assert progress.pruned == {"critic": "not an ancestor of the output agent"}
    console = Console(record=True, width=100)
    console.print(progress)
    text = console.export_text()
    assert "pruned" in text and "waiting" not in text
