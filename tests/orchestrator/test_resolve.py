"""One resolver from an orchestrator's name to the orchestrator, and the token bound each one states."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.errors import ConfigError
from lemon.llm.scripted import ScriptedBackend
from lemon.orchestrator.prompted import PromptedOrchestrator
from lemon.orchestrator.resolve import resolve_orchestrator
from lemon.orchestrator.template import TemplateOrchestrator
from lemon.runtime.budget import prompt_token_bound
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

ROLES = RoleLibrary.load()
POOL = scripted_pool(ScriptedBackend("m", responder=lambda req: "x"))


def test_names_resolve_to_orchestrators_with_their_token_bounds() -> None:
    template = resolve_orchestrator("template", POOL, ROLES)
    assert isinstance(template, TemplateOrchestrator) and template.level is None
    assert template.token_bound("2+2?") == 0
    prompted = resolve_orchestrator("prompted", POOL, ROLES, level="small")
    assert isinstance(prompted, PromptedOrchestrator) and prompted.level == "small"
    bound = prompted.token_bound("2+2?")
    assert bound == prompt_token_bound(prompted.messages("2+2?")) + prompted.max_tokens
    assert prompted.token_bound("a much longer task " * 20) > bound


@pytest.mark.parametrize(("name", "level", "message"), [
    ("template", "small", "applies only to --orchestrator prompted"),
    ("prompted", "huge", "not a level of pool"),
    ("trained:", None, "expected template, prompted"),
])
def test_a_bad_name_or_level_is_a_one_line_error(name: str, level: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        resolve_orchestrator(name, POOL, ROLES, level)
    assert "\n" not in str(info.value)


def test_a_trained_policy_is_named_by_its_path_with_or_without_the_prefix(tmp_path: Path) -> None:
    from lemon.errors import ModelFileError

    for name in (str(tmp_path / "nothing"), f"trained:{tmp_path / 'nothing'}"):
        with pytest.raises(ModelFileError, match="nothing"):
            resolve_orchestrator(name, POOL, ROLES)
