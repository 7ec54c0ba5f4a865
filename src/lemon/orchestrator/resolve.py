"""One resolver from an orchestrator's name to the orchestrator: `template`, `prompted`, or a trained policy
(`trained:PATH` or a bare PATH: decoding under the spec grammar; `unconstrained:PATH`: the same policy decoding
freely, as every policy did before the grammar; PATH a policy card replays one from the LLM cache). `lemon run` and
the evaluation methods both read names through it."""

from __future__ import annotations

from lemon.errors import ConfigError
from lemon.llm.pool import Pool
from lemon.orchestrator.base import Orchestrator
from lemon.spec.roles import RoleLibrary

TRAINED_PREFIX = "trained:"
UNCONSTRAINED_PREFIX = "unconstrained:"


def resolve_orchestrator(name: str, pool: Pool, roles: RoleLibrary, level: str | None = None) -> Orchestrator:
    """The orchestrator called `name` on `pool`; `level` picks the prompted orchestrator's model only (a
    one-line ConfigError otherwise, or when it is not a level of the pool)."""
    if level is not None and name != "prompted":
        raise ConfigError(f"--level chooses the model that writes the spec, so it applies only to --orchestrator "
                          f"prompted; {name!r} picks its own levels: drop --level")
    if name == "template":
        from lemon.orchestrator.template import TemplateOrchestrator

        return TemplateOrchestrator(roles, pool.level_names)
    if name == "prompted":
        from lemon.orchestrator.prompted import PromptedOrchestrator

        if level is not None and level not in pool.level_names:
            raise ConfigError(f"--level {level!r} is not a level of pool {pool.name!r}: {pool.level_names}")
        return PromptedOrchestrator(pool, roles, level=level)
    from lemon.orchestrator.trained import TrainedOrchestrator

    free = name.startswith(UNCONSTRAINED_PREFIX)
    path = name.removeprefix(UNCONSTRAINED_PREFIX) if free else name.removeprefix(TRAINED_PREFIX)
    if not path:
        raise ConfigError(f"orchestrator {name!r}: expected template, prompted, or a trained policy's path")
    return TrainedOrchestrator(path, roles, pool.level_names, grammar=not free, cache=pool.cache,
                               offline=pool.offline)
