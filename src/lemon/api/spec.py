"""`lemon.Spec`: a spec as a script handles it, parsed, checked and rendered in one object.

Why a class of its own: the pieces live in four modules of `lemon.spec` (`parse_spec`, `validate_spec` against a
role library and a pool's levels, `render_spec`, `spec_problems`), and a script had to know all four and build a
`RoleLibrary` to read one file. `lemon.Spec` is the spec model itself (every spec the runtime takes), with those
steps as methods; a spec compares equal to the plain model with the same agents.
"""

from __future__ import annotations

from pathlib import Path

from lemon.llm.defaults import DEFAULT_POOL
from lemon.llm.pool import Pool
from lemon.llm.pools import pool_level_names
from lemon.spec import model
from lemon.spec.parse import parse_spec, read_spec_file
from lemon.spec.render import RenderedSpec, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import spec_problems, validate_spec

PoolRef = str | Path | Pool  # a built-in pool's name, a pool file, or a loaded pool


def levels_of(pool: PoolRef) -> tuple[str, ...]:
    """The capacity levels a spec may name on `pool`, weakest first (no model is loaded)."""
    return pool.level_names if isinstance(pool, Pool) else pool_level_names(str(pool))


class Spec(model.Spec):
    """An executable spec: agents (each a role, a duty, a capacity level and its parents) and the output agent.

    `Spec.parse(text)` reads YAML or JSON and checks it against the role library and the pool's levels (a
    `SpecError` names the agent and field); `str(spec)` and `spec.text` are its canonical YAML;
    `spec.render()` adds each editable field's character span. Run it with `lemon.execute(spec, task)`.
    """

    @classmethod
    def parse(cls, text: str, *, pool: PoolRef = DEFAULT_POOL) -> Spec:
        """The spec in `text` (YAML, or JSON), checked and normalised (`output` filled in); `SpecError` on the
        first problem (`Spec.problems` lists them all)."""
        return cls.of(parse_spec(text)).checked(pool)

    @classmethod
    def read(cls, path: str | Path, *, pool: PoolRef = DEFAULT_POOL) -> Spec:
        """The spec in the file `path` (a regular file of bounded size), as `parse` reads text."""
        return cls.parse(read_spec_file(Path(path)), pool=pool)

    @classmethod
    def problems(cls, text: str, *, pool: PoolRef = DEFAULT_POOL) -> list[str]:
        """Every problem of spec `text`, one line each (what `lemon validate` lists); [] for a valid spec."""
        return spec_problems(text, RoleLibrary.load(), levels_of(pool))

    @classmethod
    def of(cls, spec: model.Spec) -> Spec:
        """`spec` (a plain `lemon.spec.model.Spec`, e.g. one an orchestrator wrote) as a `lemon.Spec`."""
        if isinstance(spec, cls):
            return spec
        return cls.model_construct(**{name: getattr(spec, name) for name in model.Spec.model_fields})

    def checked(self, pool: PoolRef = DEFAULT_POOL) -> Spec:
        """This spec checked against the role library and `pool`'s levels, normalised (`output` filled in)."""
        return Spec.of(validate_spec(self, RoleLibrary.load(), levels_of(pool)))

    @property
    def text(self) -> str:
        """The canonical YAML: what `lemon validate` prints and a trace records."""
        return render_spec(self).text

    def render(self) -> RenderedSpec:
        """The canonical YAML with the character span of every editable field (`RenderedSpec.spans`)."""
        return render_spec(self)

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        """Equal to any spec model with the same agents and output (pydantic compares the classes too)."""
        if not isinstance(other, model.Spec):
            return NotImplemented
        return (self.agents, self.output) == (other.agents, other.output)

    __hash__ = model.Spec.__hash__
