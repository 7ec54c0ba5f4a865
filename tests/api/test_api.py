"""`import lemon` is the public face (issue 53, point 1): a small documented API with the CLI's defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lemon
from lemon.errors import LemonError, SpecError
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.spec.model import Agent
from lemon.spec.model import Spec as SpecModel
from tests.api.specs import VOTE
from tests.pools import scripted_pool


def _python(code: str) -> str:
    env = {**os.environ, "PAGER": "cat", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    return proc.stdout


def test_help_lemon_lists_the_api() -> None:
    shown = _python("import lemon; help(lemon)")
    assert "lemon.run(" in shown  # the module's own summary
    listed = shown[shown.index("CLASSES"):]
    for name in lemon.API:
        assert any(f"{form}{name}(" in listed for form in ("\n    ", "\n    async ", "class ")), \
            f"help(lemon) does not list {name}"


def test_import_lemon_stays_light_and_the_face_is_the_api_layers() -> None:
    """The API loads on first use of a name: `import lemon` (and `lemon --version`) pulls in none of it."""
    assert _python("import sys, lemon; print(sorted(m for m in sys.modules if m.startswith('lemon')))").strip() == \
        "['lemon', 'lemon.errors']"
    from lemon import api

    assert tuple(api.__all__) == lemon.API and all(getattr(lemon, n) is getattr(api, n) for n in lemon.API)
    with pytest.raises(AttributeError):
        lemon.no_such_name  # noqa: B018


def test_spec_parses_checks_and_renders() -> None:
    spec = lemon.Spec.parse(VOTE)
    assert isinstance(spec, lemon.Spec) and spec.output == "vote"  # normalised: the one sink is the output
    assert str(spec) == spec.text and lemon.Spec.parse(spec.text) == spec  # the canonical text reads back
    plain = SpecModel.model_validate(spec.model_dump())
    assert plain == spec and spec == plain and hash(plain) == hash(spec) and lemon.Spec.of(plain) == spec
    with pytest.raises(SpecError, match="unknown level 'huge'"):
        lemon.Spec.parse(VOTE.replace("capacity: large}\n  - {name: solver_2", "capacity: huge}\n  - {name: solver_2"))
    assert len(lemon.Spec.problems("agents:\n  - {name: a, role: wizard, capacity: huge}\n")) == 2


def _seed_worded(request: ChatRequest) -> str:
    """Sampled voters: the wording differs with the seed, the answer does not."""
    return f"Working it out (draw {request.params.seed}). The answer is 6."


async def test_execute_votes_on_the_answer_of_the_tasks_kind(tmp_path: Path) -> None:
    """`lemon exec` voted on whole reply texts: sampled voters never agreed, so `stop: {agree: 2}` never fired
    and every voter ran. The API (which `lemon exec` now calls) compares the task kind's answers."""
    backend = ScriptedBackend("l", responder=_seed_worded)
    pool = scripted_pool(backend, defaults=GenParams(temperature=0.0, max_tokens=128))
    result = await lemon.aexecute(lemon.Spec.parse(VOTE, pool=pool), "What is 2 + 4?", pool=pool, trace_dir=tmp_path)
    assert result.ok and result.answer == "6" and result.run.unrun == ("solver_3",)
    assert len(backend.calls) == 2 and {c.params.temperature for c in backend.calls} == {0.7}
    assert {c.params.max_tokens for c in backend.calls} == {384}  # the CLI's defaults, not the pool file's
    assert result.trace_path == tmp_path / f"trace-{result.trace.trace_id}.json" and result.trace_path.is_file()


def test_run_answers_with_the_template_and_keeps_a_pool_given_open(tmp_path: Path) -> None:
    backend = ScriptedBackend("l", responder=_seed_worded)
    pool = scripted_pool(backend)
    result = lemon.run("What is 2 + 4?", pool=pool, save_trace=False)
    assert result.answer == "6" and result.trace_path is None and result.proposal is not None
    assert result.tokens == result.worker_tokens > 0 and result.orchestrator_tokens == 0
    assert result.spec.output == "vote" and isinstance(result.spec, lemon.Spec)
    assert lemon.run("What is 3 + 3?", pool=pool, save_trace=False).answer == "6"  # the pool is still usable
    assert result.to_json()["answer"] == "6" and result.to_json()["trace"] is None


async def test_run_inside_an_event_loop_runs_on_a_thread_of_its_own() -> None:
    """A notebook runs an event loop: `lemon.run` still works there (async code may await `lemon.arun`)."""
    pool = scripted_pool(ScriptedBackend("l", responder=_seed_worded))
    assert lemon.run("What is 2 + 4?", pool=pool, save_trace=False).answer == "6"


@pytest.mark.parametrize(("kwargs", "said"), [({"max_tokens": 0}, "max_tokens must be a positive integer"),
                                              ({"temperature": 3.0}, "temperature must be in"),
                                              ({"timeout": -1.0}, "timeout must be a positive")])
def test_bad_settings_are_one_line_before_anything_runs(kwargs: dict[str, float], said: str) -> None:
    backend = ScriptedBackend("l")
    with pytest.raises(LemonError, match=said):
        lemon.run("What is 2 + 4?", pool=scripted_pool(backend), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(LemonError, match="the task is empty"):
        lemon.run("  ", pool=scripted_pool(backend))
    assert not backend.calls


def test_a_trace_that_cannot_be_saved_says_so_and_the_result_is_kept(tmp_path: Path) -> None:
    pool = scripted_pool(ScriptedBackend("l"))
    result = lemon.execute(SpecModel(agents=(Agent(name="a", role="math_solver", capacity="small"),)), "What is 2+4?",
                           pool=pool, save_trace=False)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(lemon.TraceNotSaved, match="could not be saved"):
        result.save_trace(blocked)
    assert result.save_trace(tmp_path).trace_path is not None
