"""The prompt of the trained orchestrator policy and the strict reading of its output.

One function builds the chat messages for SFT targets, GRPO rollouts and inference alike: if training and
inference prompts drifted apart, the trained policy would be evaluated on a prompt it never saw. The policy
writes the canonical spec text (`lemon.spec.render`), so `strict_spec` accepts only what parses and
validates as written (no repair): that is the "valid-spec rate" the training reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from lemon.errors import ConfigError, ModelFileError, SpecError
from lemon.orchestrator.repair import extract_object_text
from lemon.spec.model import Spec
from lemon.spec.parse import parse_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.yamlfile import load_yaml

#: The prompt styles of `prompts/policy.yaml`: `full` names the roles and levels and shows an example (what a
#: policy needs before it has learned the format); `terse` is the task alone (what a fine-tuned policy needs,
#: at ~40 % of the tokens on GSM8K).
PROMPT_STYLES = ("full", "terse")
#: Beside a policy's weights (or its .gguf file, as `<name>.lemon-policy.json`): the style it was trained with.
POLICY_META = "lemon-policy.json"


def check_prompt_style(style: str) -> None:
    """ConfigError (one line, naming the choices) unless `style` is one of `PROMPT_STYLES`."""
    if style not in PROMPT_STYLES:
        raise ConfigError(f"unknown policy prompt {style!r}; use one of {', '.join(PROMPT_STYLES)}")


@dataclass(frozen=True)
class PolicyTemplates:
    system: str
    user: str
    example: str


@cache
def policy_templates(style: str = "full") -> PolicyTemplates:
    """The packaged template of `style` (`prompts/policy.yaml`); immutable, so caching it is safe."""
    text = (resources.files("lemon.orchestrator") / "prompts" / "policy.yaml").read_text("utf-8")
    data = load_yaml(text)
    check_prompt_style(style)
    if style == "full":
        return PolicyTemplates(data["system"].strip(), data["user"], data["example"].rstrip("\n"))
    return PolicyTemplates(data[style]["system"].strip(), data[style]["user"], "")


def _meta_path(policy: Path) -> Path:
    return policy / POLICY_META if policy.is_dir() else policy.with_name(f"{policy.stem}.{POLICY_META}")


def read_prompt_style(policy: Path) -> str:
    """The prompt style a policy (model directory or .gguf file) was trained with; `full` when it records none
    (every policy trained before styles existed was trained on it)."""
    meta = _meta_path(policy)
    if not meta.is_file():
        return "full"
    try:
        style = json.loads(meta.read_text(encoding="utf-8")).get("prompt", "full")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelFileError(f"{meta} is not a JSON object with a prompt style ({exc}); delete it to use the "
                             "full prompt, or write {\"prompt\": \"terse\"}") from exc
    if style not in PROMPT_STYLES:
        raise ModelFileError(f"{meta}: unknown prompt style {style!r}; use one of {', '.join(PROMPT_STYLES)}")
    return str(style)


def write_prompt_style(policy: Path, style: str) -> None:
    """Record beside a saved policy the prompt style it was trained with (`full`, the default, is the absence of
    a record: one left by an earlier policy at the same path is removed)."""
    check_prompt_style(style)
    meta = _meta_path(policy)
    if style == "full":
        meta.unlink(missing_ok=True)
    else:
        meta.write_text(json.dumps({"prompt": style}) + "\n", encoding="utf-8")


def policy_messages(task: str, roles: RoleLibrary, levels: Sequence[str],
                    style: str = "full") -> list[dict[str, str]]:
    """Chat messages (HF `apply_chat_template` format) asking the policy for a spec for `task`."""
    t = policy_templates(style)
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
