"""The prompt of the trained orchestrator policy and the strict reading of its output.

One function builds the chat messages for SFT targets, GRPO rollouts and inference alike: if training and
inference prompts drifted apart, the trained policy would be evaluated on a prompt it never saw. The policy
writes the canonical spec text (`lemon.spec.render`), so `strict_spec` accepts only what parses and
validates as written (no repair): that is the "valid-spec rate" the training reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from lemon.errors import SpecError
from lemon.orchestrator.repair import extract_object_text
from lemon.spec.model import Spec
from lemon.spec.parse import parse_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.yamlfile import load_yaml


@dataclass(frozen=True)
class PolicyTemplates:
    system: str
    user: str
    example: str


@cache
def policy_templates() -> PolicyTemplates:
    """The packaged template (`prompts/policy.yaml`); immutable, so caching it is safe."""
    text = (resources.files("lemon.orchestrator") / "prompts" / "policy.yaml").read_text("utf-8")
    data = load_yaml(text)
    return PolicyTemplates(data["system"].strip(), data["user"], data["example"].rstrip("\n"))


def policy_messages(task: str, roles: RoleLibrary, levels: Sequence[str]) -> list[dict[str, str]]:
    """Chat messages (HF `apply_chat_template` format) asking the policy for a spec for `task`."""
    t = policy_templates()
    # The example names the weakest and strongest levels; map them onto this pool's names.
    example = t.example.replace("capacity: small", f"capacity: {levels[0]}").replace(
        "capacity: large", f"capacity: {levels[-1]}")
    user = t.user.format(task=task.strip(), roles=", ".join(roles.llm_role_names()),
                         levels=", ".join(levels), example=example)
    return [{"role": "system", "content": t.system}, {"role": "user", "content": user.rstrip()}]


@dataclass(frozen=True)
class StrictResult:
    """`spec` (validated, normalised) and `parsed` (as written) when the text is a valid spec; else `error`."""

    spec: Spec | None
    parsed: Spec | None
    error: str | None


def strict_spec(text: str, roles: RoleLibrary, levels: Sequence[str]) -> StrictResult:
    """Parse + validate the policy's output exactly as written (a fenced block is unwrapped; no repair)."""
    try:
        parsed = parse_spec(extract_object_text(text))
        return StrictResult(validate_spec(parsed, roles, levels), parsed, None)
    except SpecError as exc:
        return StrictResult(None, None, str(exc))
