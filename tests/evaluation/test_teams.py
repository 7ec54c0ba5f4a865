"""The report's teams section: which teams an orchestrating method wrote, and agents run by item difficulty."""

from __future__ import annotations

import json
from pathlib import Path

from lemon.evaluation.report import build_report
from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.evaluation.teams import team_signature, teams_lines
from lemon.spec.model import Agent, Spec, StopRule

COT = "Think step by step, then give the final answer."


def _vote_team(n: int, rule: StopRule | None = None, duty: str = COT) -> Spec:
    voters = tuple(Agent(name=f"cot_{i}", role="math_solver", duty=duty, capacity="large") for i in range(1, n + 1))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(a.name for a in voters),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")


def _topology(spec: Spec) -> dict[str, object]:
    return {"agents": [a.model_dump(mode="json") for a in spec.agents], "output": spec.output}


def test_signature_folds_copies_and_shows_the_stop_rule() -> None:
    assert team_signature(_topology(_vote_team(5, StopRule(agree=2)))) == \
        "5 x math_solver@large+duty -> majority_vote@large {agree: 2}"
    assert team_signature(_topology(_vote_team(1))) == "math_solver@large+duty -> majority_vote@large"


def test_signature_ignores_a_duty_s_wording_but_not_structure() -> None:
    worded = _vote_team(3, duty="Solve it carefully.")
    assert team_signature(_topology(worded)) == team_signature(_topology(_vote_team(3)))
    # no duty is another worker prompt, so other draws: two policies' "same" team differed on 28 of 60 pairs
    assert team_signature(_topology(_vote_team(3, duty=""))) == "3 x math_solver@large -> majority_vote@large"
    chain = Spec(agents=(Agent(name="a", role="math_solver", capacity="large"),
                         Agent(name="b", role="math_solver", capacity="large", depends_on=("a",))), output="b")
    assert team_signature(_topology(chain)) == "math_solver@large -> math_solver@large"


def _row(item: str, spec: Spec, ran: int, correct: bool, votes: dict[str, str] | None = None,
         source: str | None = None) -> ItemRow:
    tokens = {f"cot_{i}": {"prompt": 10, "completion": 5, "capacity": "large", "model": "m"}
              for i in range(1, ran + 1)}
    tokens["vote"] = {"prompt": 0, "completion": 0, "capacity": "large", "model": "vote"}
    events: list[dict[str, object]] = []
    if source is not None:  # what the executor emits first when an orchestrator wrote the spec
        events.append({"type": "orchestrator_decision", "agent": "orchestrator", "source": source})
    if votes:
        events.append({"type": "return", "agent": "vote", "votes": votes})
    trace = {"topology": _topology(spec), "events": events}
    return ItemRow(item_id=item, seed=0, prediction="4", gold="4", correct=correct, tokens=tokens,  # type: ignore[arg-type]
                   total_tokens=15 * ran, latency_s=0.0, trace_id=None, status="ok", trace_json=json.dumps(trace))


def _store(tmp_path: Path, policy: str = "runs/p") -> ResultsStore:
    store = ResultsStore(tmp_path / "r.sqlite")
    store.ensure_run("bank", benchmark="gsm8k", split="test", method="sc-cot", pool="cpu", level="large", seeds=1,
                     n_items=3, config={"n_agents": 5})
    five = _vote_team(5)
    store.put("bank", _row("easy", five, 5, True, {f"cot_{i}": "4" for i in range(1, 6)}))
    store.put("bank", _row("mid", five, 5, True, {"cot_1": "4", "cot_2": "4", "cot_3": "4", "cot_4": "7",
                                                   "cot_5": "8"}))
    store.put("bank", _row("hard", five, 5, False, {f"cot_{i}": "9" for i in range(1, 6)}))
    store.ensure_run("pol", benchmark="gsm8k", split="test", method=f"trained:{policy}", pool="cpu", level="large",
                     seeds=1, n_items=3, config={})
    store.put("pol", _row("easy", _vote_team(1), 1, True))
    store.put("pol", _row("mid", _vote_team(5, StopRule(agree=2)), 3, True))
    store.put("pol", _row("hard", _vote_team(5, StopRule(agree=2)), 5, False))
    return store


def test_teams_lines_count_teams_and_track_difficulty(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        run = store.run("pol")
        assert run is not None
        text = "\n".join(teams_lines(store, run, store.spec_sources("pol")))
    assert "2 distinct teams" in text
    assert "| `5 x math_solver@large+duty -> majority_vote@large {agree: 2}` | 2 | 67 % | 50.0 | 4.00 |" in text
    assert "| `math_solver@large+duty -> majority_vote@large` | 1 | 33 % | 100.0 | 1.00 |" in text
    # difficulty from the 5-vote run: easy 0 wrong (1 agent), mid 2 wrong (3 agents), hard 5 wrong (5 agents)
    assert "| 0 of 5 | 1 | 1.00 | 100.0 |" in text
    assert "| 2 of 5 | 1 | 3.00 | 100.0 |" in text
    assert "| 5 of 5 | 1 | 5.00 | 0.0 |" in text


def test_report_shows_teams_for_orchestrating_methods_only(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        markdown = build_report(store).markdown
    assert "### Teams written by trained:runs/p" in markdown
    assert "Teams written by sc-cot" not in markdown  # a fixed baseline writes one team by definition


def test_teams_name_a_policy_under_lemon_home_by_its_place_there(tmp_path: Path, _isolated_home: Path) -> None:
    with _store(tmp_path, policy=str(_isolated_home / "runs" / "p")) as store:
        markdown = build_report(store).markdown
    assert "### Teams written by trained:$LEMON_HOME/runs/p (gsm8k `test`" in markdown


def test_a_policy_whose_specs_were_unusable_says_so_in_its_cell_and_teams(tmp_path: Path) -> None:
    """On MMLU the six-benchmark SFT policy's output was unusable on 28 of 60 pairs and the fallback ran in
    its place; its cell said nothing of it. The cell and the teams section now count each spec's source."""
    with _store(tmp_path) as store:
        store.ensure_run("odd", benchmark="svamp", split="test", method="trained:runs/q", pool="cpu",
                         level="large", seeds=1, n_items=3, config={})
        for item, source in (("a", "model"), ("b", "repaired"), ("c", "fallback")):
            store.put("odd", _row(item, _vote_team(1), 1, True, source=source))
        for item in ("a", "b", "c"):  # a policy that wrote every spec itself: nothing to say
            store.put("pol", _row(item + "2", _vote_team(1), 1, True, source="model"))
        assert store.spec_sources("odd") == {"model": 1, "repaired": 1, "fallback": 1}
        assert store.spec_sources("bank") == {}  # a fixed baseline has no orchestrator
        markdown = build_report(store).markdown
    odd = next(line for line in markdown.splitlines() if line.startswith("| trained:runs/q |"))
    assert "(test, 3 x 1, 33 % of specs unusable (the fallback ran), 33 % repaired) |" in odd
    pol = next(line for line in markdown.splitlines() if line.startswith("| trained:runs/p |"))
    assert "specs" not in pol
    assert "Specs: 1 as written, 1 repaired, 1 unusable, so the fallback ran" in markdown
    assert markdown.count("Specs: ") == 1


def test_the_report_prints_each_orchestrated_cell_s_share_of_specs_by_source(tmp_path: Path) -> None:
    """Issue 55: the share of items whose spec ran as written, after mechanical repair, and via the fallback, per
    orchestrated cell, and whether the usable ones reach 99 %; a fixed baseline has no such row."""
    with _store(tmp_path) as store:
        store.ensure_run("odd", benchmark="gsm8k", split="test", method="unconstrained:runs/q", pool="cpu",
                         level="large", seeds=1, n_items=4, config={})
        for item, source in (("a", "model"), ("b", "model"), ("c", "repaired"), ("d", "fallback")):
            store.put("odd", _row(item, _vote_team(1), 1, True, source=source))
        for item in ("a", "b", "c"):
            store.put("pol", _row(item + "2", _vote_team(1), 1, True, source="repaired" if item == "a" else "model"))
        markdown = build_report(store).markdown
    assert "| method | specs | as written (%) | repaired (%) | fallback (%) | usable | run |" in markdown
    assert "| unconstrained:runs/q | 4 | 50.0 | 25.0 | 25.0 | **no** | `odd` |" in markdown
    assert "| trained:runs/p | 3 | 66.7 | 33.3 | 0.0 | yes | `pol` |" in markdown
    assert "| sc-cot | " not in markdown.split("| method | specs |")[1]
