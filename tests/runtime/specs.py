"""The specs the executor tests and benchmarks/bench_runtime.py both run, written once: a fan-out (its width
is the parallelism to see) and a six-agent spec every counterfactual edit family applies to."""

from __future__ import annotations

from lemon.spec.model import Agent, Spec


def fan_out(width: int, tag: str = "") -> Spec:
    """`width` small generalists, one angle each, and a large final decision maker over them all; `tag` goes into
    every worker's duty (a benchmark's repeats then send requests of their own)."""
    workers = tuple(Agent(name=f"w{i}", role="generalist", duty=f"Angle {i}{tag}.", capacity="small")
                    for i in range(width))
    agg = Agent(name="agg", role="final_decision_maker", capacity="large", depends_on=tuple(w.name for w in workers))
    return Spec(agents=(*workers, agg), output="agg")


SIX = Spec(agents=(
    Agent(name="plan", role="planner", duty="Plan it.", capacity="large"),
    Agent(name="facts", role="analyst", duty="List facts.", capacity="medium"),
    Agent(name="solve", role="math_solver", duty="Solve.", capacity="large", depends_on=("plan", "facts")),
    Agent(name="alt", role="math_solver", duty="Solve another way.", capacity="medium", depends_on=("facts",)),
    Agent(name="check", role="critic", duty="Check both.", capacity="medium", depends_on=("solve", "alt")),
    Agent(name="final", role="final_decision_maker", duty="Decide.", capacity="large", depends_on=("check", "plan")),
), output="final")
