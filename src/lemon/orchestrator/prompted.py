"""The prompted (untrained) orchestrator: a pool model writes the spec under a bounded JSON schema.

Constrained decoding makes the syntax valid; it cannot make the spec meaningful (a tiny model may name a
final agent that does not exist), so every reply goes through `spec_from_output`: validate, repair what is
mechanical, otherwise fall back to the default orchestration's team for the task (`repair.fallback_spec`)
with a visible warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.pool import Pool
from lemon.orchestrator.base import Proposal
from lemon.orchestrator.repair import spec_from_output
from lemon.runtime.budget import prompt_token_bound
from lemon.spec.roles import RoleLibrary
from lemon.spec.schema import spec_json_schema
from lemon.yamlfile import load_yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptTemplates:
    system: str
    user: str
    examples: tuple[str, ...]

    @classmethod
    def load(cls) -> PromptTemplates:
        text = (resources.files("lemon.orchestrator") / "prompts" / "prompted.yaml").read_text("utf-8")
        data = load_yaml(text)
        return cls(system=data["system"].strip(), user=data["user"],
                   examples=tuple(e.strip() for e in data["examples"]))

    def example_for(self, task: str, levels: Sequence[str]) -> str:
        """The example shown for `task` (a stable choice by hash), with the pool's level names filled in."""
        index = int.from_bytes(hashlib.sha256(task.strip().encode()).digest()[:4], "big") % len(self.examples)
        weak, mid, strong = levels[0], levels[len(levels) // 2], levels[-1]
        return (self.examples[index].replace("<weak>", weak).replace("<mid>", mid)
                .replace("<strong>", strong))


class PromptedOrchestrator:
    """Asks the pool's `level` model (default: the strongest) to write a spec for each task."""

    def __init__(
        self,
        pool: Pool,
        roles: RoleLibrary,
        *,
        level: str | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        constrained: bool = True,
    ) -> None:
        self.pool = pool
        self.roles = roles
        self.level = level or pool.level_names[-1]
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.constrained = constrained
        self._templates = PromptTemplates.load()
        levels = pool.level_names
        # Roles a model may pick; vote aggregators are for fixed baselines, not free-form orchestration.
        self._role_names = roles.llm_role_names()
        self._schema = spec_json_schema(self._role_names, levels)

    def messages(self, task: str) -> tuple[Message, ...]:
        """The chat messages sent to the writer model (also used to build SFT data)."""
        role_lines = "\n".join(f"- {n}: {self.roles[n].description}" for n in self._role_names)
        user = self._templates.user.format(
            task=task.strip(),
            roles=role_lines,
            levels=", ".join(self.pool.level_names),
            example=self._templates.example_for(task, self.pool.level_names),
        )
        return (Message("system", self._templates.system), Message("user", user))

    def token_bound(self, task: str) -> int:
        """A bound on the prompt's tokens plus the generation limit."""
        return prompt_token_bound(self.messages(task)) + self.max_tokens

    async def aclose(self) -> None:
        """Nothing of its own to release: the pool it calls is its caller's (`Orchestrator.aclose`)."""

    async def propose(self, task: str, *, seed: int = 0) -> Proposal:
        request = ChatRequest(
            messages=self.messages(task),
            params=GenParams(
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                seed=seed if self.temperature > 0 else None,
                repeat_penalty=1.15,
            ),
            json_schema=self._schema if self.constrained else None,
        )
        completion = await self.pool.backend(self.level).complete(request)
        spec, source, warnings = spec_from_output(completion.text, task, self.roles, self.pool.level_names)
        for w in warnings:
            log.info("orchestrator: %s", w)  # the Proposal carries it; the caller shows it once
        return Proposal(
            spec=spec,
            source=source,  # type: ignore[arg-type]
            raw=completion.text,
            warnings=warnings,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            extra={"schema_bytes": len(json.dumps(self._schema)), "level": self.level},
        )
