"""Hypothesis strategies for valid specs (DAGs over a known role library and level list)."""

from __future__ import annotations

from hypothesis import strategies as st

from lemon.spec.model import MAX_AGENTS, MAX_DUTY_LEN, RESERVED_NAMES, Agent, Spec
from tests.pools import LEVELS

ROLES = ("analyst", "critic", "final_decision_maker", "generalist", "knowledge_expert", "math_solver",
         "planner", "programmer", "tester")

names = st.from_regex(r"[a-z][a-z0-9_]{0,23}", fullmatch=True).filter(lambda s: s not in RESERVED_NAMES)
# Anything a duty may hold: printable text (incl. non-ASCII and YAML-significant characters like # : - [ ]).
duties = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"),
                           blacklist_characters='"\\\x7f\u2028\u2029\ufeff\ufffe\uffff\x85'),
    max_size=MAX_DUTY_LEN,
)


@st.composite
def specs(draw: st.DrawFn, max_agents: int = 6) -> Spec:
    """A valid spec: unique names, each agent depending on a subset of EARLIER agents, one explicit output."""
    agent_names = draw(st.lists(names, min_size=1, max_size=min(max_agents, MAX_AGENTS), unique=True))
    agents = []
    for i, name in enumerate(agent_names):
        deps = draw(st.lists(st.sampled_from(agent_names[:i]), unique=True, max_size=i)) if i else []
        agents.append(Agent(name=name, role=draw(st.sampled_from(ROLES)), duty=draw(duties),
                            capacity=draw(st.sampled_from(LEVELS)), depends_on=tuple(deps)))
    return Spec(agents=tuple(agents), output=draw(st.sampled_from(agent_names)))


@st.composite
def specs_with_copies(draw: st.DrawFn) -> Spec:
    """A valid spec with a run of identical agents `base_1 .. base_n` (what `copies: n` writes) among others,
    read by a later agent in full or (sometimes) in part, or with one copy changed, so both folded and
    unfoldable runs occur."""
    spec = draw(specs(max_agents=4))
    base = draw(names.filter(lambda s: len(s) <= 20 and s not in spec.names))
    n = draw(st.integers(2, 4))
    copy = Agent(name=f"{base}_1", role=draw(st.sampled_from(ROLES)), duty=draw(duties),
                 capacity=draw(st.sampled_from(LEVELS)))
    copies = [copy.model_copy(update={"name": f"{base}_{i}"}) for i in range(1, n + 1)]
    if draw(st.booleans()):  # one copy differs: the run must not fold
        k = draw(st.integers(0, n - 1))
        copies[k] = copies[k].model_copy(update={"duty": copies[k].duty + "x"})
    readers = draw(st.integers(0, n))  # how many of the copies the reader depends on (n: all of them)
    reader = Agent(name=draw(names.filter(lambda s: s not in spec.names and not s.startswith(base))),
                   role="critic", capacity=LEVELS[0], depends_on=tuple(c.name for c in copies[:readers]))
    taken = {*spec.names, *(c.name for c in copies)}
    if reader.name in taken:
        reader = reader.model_copy(update={"name": "zz_reader"})
    agents = (*spec.agents, *copies, reader) if readers else (*spec.agents, *copies)
    return Spec(agents=agents, output=spec.output)
