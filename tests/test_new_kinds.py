"""Kinds are objects registered once (issue 53): a new answer kind, role kind, stop criterion, edit family and
baseline, each defined and registered in this test only, work end to end through the real code that uses them
(the executor on the scripted test double, the spec's parser, renderer and edits, the baselines, the evaluation
harness and its store, the trainer's ablation), with no other change to LEMON."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from lemon.errors import LemonError
from lemon.evaluation import baselines
from lemon.evaluation.baselines import BaselineKind, baseline_spec, supports
from lemon.evaluation.baselines.votes import stopping_vote
from lemon.evaluation.methods import method_help, method_names, resolve_method, run_label, uses_level
from lemon.evaluation.store import ResultsStore
from lemon.inspection.tracefile import extracted_answer, vote_key
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.orchestrator.kinds import AnswerKind, registered, task_kind
from lemon.runtime import Executor
from lemon.spec import edits, roles
from lemon.spec.edits import draw_edit, family
from lemon.spec.edits.stop import StopFamily, stop_variants
from lemon.spec.model import Spec, StopRule
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldRef, render_spec
from lemon.spec.roles import RoleKind, RoleLibrary
from lemon.spec.stops import StopCriterion, answer_counts
from lemon.spec.stops import registered as criterion_registered
from lemon.spec.validate import load_spec, validate_spec
from lemon.train.rollout import Ablation
from tests.evalcall import evaluate_kw
from tests.pools import LEVELS, scripted_pool

ROLES = RoleLibrary.load()
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

DATE = AnswerKind("date", detect=lambda task: "which date" in task.lower(),
                  extract=lambda text: (_DATE.findall(text) or [None])[-1], team=lambda task: "number",
                  roles=("analyst", "generalist", "critic", "final_decision_maker"),
                  check_gold=lambda prediction, gold: prediction == gold)


def test_a_new_answer_kind_is_detected_and_gives_its_baselines_vote_key_and_grader() -> None:
    task = "Which date comes a week after 2024-01-01?"
    with registered(DATE):
        assert task_kind(task) == "date" and task_kind("How many apples?") == "number"
        spec = baseline_spec("sc-cot", "date", level="large", n=3)
        assert {a.role for a in spec.agents[:-1]} == {"generalist"}  # the kind's primary role
        assert supports("esc", "date") and not supports("pot", "date") and not supports("exsc", "date")
        key = vote_key("date")
        assert key is not None and key("It is 2024-01-08, not 2024-01-09. So 2024-01-08") == "2024-01-08"
        assert extracted_answer(task, "The answer: 2024-01-08.") == "2024-01-08"
    assert task_kind(task) == "number"  # registered in this test only


def test_the_executor_votes_with_the_new_kinds_key() -> None:
    """Five sampled voters write different prose around dates: the kind's extractor is the vote key (the vote
    counts dates, where whole texts would all differ and the first would win)."""
    prose = ("So 2024-01-0{}.", "I think the answer is 2024-01-0{}", "It is 2024-01-0{}, clearly.")

    def reply(request: ChatRequest) -> str:
        seed = request.params.seed or 0
        return prose[seed % 3].format(8 + seed % 2)

    with registered(DATE):
        spec = baseline_spec("sc-cot", "date", level="large", n=5)
        pool = scripted_pool(ScriptedBackend("m", responder=reply), defaults=GenParams(temperature=0.7))
        result = asyncio.run(Executor(pool, ROLES).run(spec, "Which date?", vote_key=vote_key("date")))
    votes = next(e["votes"] for e in result.trace.events if e["type"] == "return" and e.get("votes"))
    majority = max(set(votes.values()), key=list(votes.values()).count)
    assert result.status == "ok" and set(votes.values()) <= {"2024-01-08", "2024-01-09"}
    assert DATE.extract(result.answer) == majority


class Unanimous(StopCriterion):
    """A toy criterion: stop once the first k parents all gave one answer (no other answer seen yet)."""

    key = "unanimous"
    kind = "criterion"
    value_type = Annotated[int, Field(ge=2, le=11)]
    phrase = hint = "unanimous (a count)"

    def least_parents(self, value: Any) -> int | None:
        return int(value)

    def variants(self, value: Any, limit: int) -> list[Any]:
        return [k for k in (value + 1,) if k <= limit]

    def fires(self, value: Any, keys: Sequence[str | None]) -> bool:
        return answer_counts(keys) == [value] if len(keys) == value else False


TEAM = """agents:
  - name: v
    copies: 4
    role: math_solver
    capacity: large
  - name: vote
    role: majority_vote
    capacity: large
    depends_on: [v]
    stop: {unanimous: 2}
output: vote
"""


def test_a_new_stop_criterion_is_validated_rendered_run_and_edited() -> None:
    with criterion_registered(Unanimous()):
        spec = load_spec(TEAM, ROLES, LEVELS)
        rule = spec.agent("vote").stop
        assert rule is not None and rule.unanimous == 2 and rule.agree is None and rule.first_wave == 2
        rendered = render_spec(spec)
        span = rendered.spans[FieldRef("stop", "vote")]
        assert rendered.text[span.start:span.end] == "{unanimous: 2}" and parse_spec(rendered.text) == spec
        assert rule.model_dump()["unanimous"] == 2 and StopRule.model_validate(rule.model_dump()) == rule
        with pytest.raises(Exception, match=r"stop\.unanimous"):
            parse_spec(TEAM.replace("unanimous: 2", "unanimous: 1"))
        with pytest.raises(Exception, match=r"give exactly one of agree .* or unanimous"):
            parse_spec(TEAM.replace("unanimous: 2", "unanimous: 2, agree: 2"))
        assert stop_variants(spec.agent("vote"))[0] == StopRule(unanimous=3)  # its own notch first
        edit = draw_edit(spec, "stop", FieldRef("stop", "vote"), LEVELS, random.Random(1))
        assert StopFamily().describe(spec, edit.spec, edit.field).startswith(("remove the stop rule", "change"))
        pool = scripted_pool(ScriptedBackend("m", responder=lambda r: "The answer is 7."), concurrency=1)
        result = asyncio.run(Executor(pool, ROLES).run(spec, "How many?", vote_key=lambda t: t.split()[-1]))
    assert result.status == "ok" and result.unrun == ("v_3", "v_4")
    assert result.early_stops[0]["rule"] == "{unanimous: 2}" and result.early_stops[0]["fired"]
    with pytest.raises(Exception, match=r"stop\.unanimous: unknown field"):
        parse_spec(TEAM)  # registered in this test only


def test_a_new_role_kind_is_read_from_a_role_file_and_asked_by_what_it_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `tally` kind that votes like `vote` (no model call, may stop early): one entry in `ROLE_KINDS`."""
    monkeypatch.setitem(roles.ROLE_KINDS, "tally", RoleKind("tally", calls_model=False, votes=True))
    folder = tmp_path / "roles"
    folder.mkdir()
    (folder / "solver.yaml").write_text("name: math_solver\nsystem_prompt: Solve it.\n")
    (folder / "tally.yaml").write_text("name: tally\nkind: tally\nsystem_prompt: unused\n")
    library = RoleLibrary.load(folder)
    spec = validate_spec(parse_spec(TEAM.replace("majority_vote", "tally").replace("unanimous", "agree")),
                         library, LEVELS)
    pool = scripted_pool(ScriptedBackend("m", responder=lambda r: "The answer is 7."), concurrency=1)
    result = asyncio.run(Executor(pool, library).run(spec, "How many?", vote_key=lambda t: t.split()[-1]))
    assert result.status == "ok" and result.unrun == ("v_3", "v_4")
    assert result.tokens_by_agent["vote"]["model"] == "vote"  # no model call
    assert library.llm_role_names() == ("math_solver",)


class Shout:
    """A toy edit family of duties (registered in this test only)."""

    name = "shout"
    kind = "duty"
    model_only = False


def test_the_ablation_turns_off_a_new_family_by_the_field_it_edits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(edits._TABLE, "shout", Shout())
    assert family("shout").kind == "duty"
    names = ("edge", "role", "capacity", "level", "stop", "shout")
    assert Ablation(fixed_roles=True).families(names) == ("edge", "capacity", "level", "stop")
    assert Ablation(fixed_capacity="large").families(names) == ("edge", "role", "stop", "shout")
    assert Ablation(fixed_structure="chain").families(names) == ("role", "capacity", "level", "stop", "shout")


def _agree_3(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    return stopping_vote(kind, level, n, StopRule(agree=3))


#: A toy baseline: sc-cot's voters, whose vote stops once 3 agree (registered in this test only).
AGREE_3 = BaselineKind("agree-3", "sc-cot's vote that stops once 3 voters agree", _agree_3, default_n=5, most_n=11)


async def test_a_new_baseline_is_a_method_evaluated_end_to_end(tmp_path: Path, data_dir: Path) -> None:
    """One `BaselineKind` registered: it is a `--method` value, listed and resolved, evaluated by the harness
    into the store (its vote stops after the 3 agreeing voters), a fixed baseline for the report, and gone after."""
    pool = scripted_pool(ScriptedBackend("m", responder=lambda r: "So the answer is 7."), concurrency=1)
    with baselines.registered(AGREE_3):
        assert "agree-3" in baselines.method_names() and "agree-3" in method_names()
        assert "agree-3" in method_help() and uses_level("agree-3") and run_label("agree-3", "small") == "agree-3@small"
        assert supports("agree-3", "code") and baseline_spec("agree-3", "number", level="small", n=4).agents[-1].stop
        with pytest.raises(LemonError, match="n must be in"):
            baseline_spec("agree-3", "number", level="small", n=12)
        with pytest.raises(LemonError, match="registered already"):
            baselines.register(AGREE_3)
        summary = await evaluate_kw("multiarith", "agree-3", limit=2, seeds=1, pool="scripted", level="small",
                                    store=tmp_path / "r.sqlite", data_dir=data_dir, pool_factory=lambda: pool)
    assert summary.computed == 2
    with ResultsStore(tmp_path / "r.sqlite") as db:
        (run,) = db.runs()
        rows = db.items(run.run_id)
    assert run.method == "agree-3" and len(rows) == 2
    assert all(sorted(r.tokens) == ["cot_1", "cot_2", "cot_3", "vote"] and r.prediction == "7" for r in rows)
    assert "agree-3" not in method_names()  # registered in this test only
    with pytest.raises(LemonError, match="unknown method 'agree-3'"):
        resolve_method("agree-3")
