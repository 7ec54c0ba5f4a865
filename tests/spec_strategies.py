"""Hypothesis strategies for valid specs (DAGs over a known role library and level list)."""

from __future__ import annotations

from hypothesis import strategies as st

from lemon.spec.model import MAX_AGENTS, MAX_DUTY_LEN, MAX_LOGPROB, MIN_LOGPROB, RESERVED_NAMES, Agent, Spec, StopRule
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


#: A stop rule's `logprob` gate: absent, or any whole number of nats in its bounds (the ends included).
gates = st.none() | st.integers(MIN_LOGPROB, MAX_LOGPROB) | st.sampled_from([MIN_LOGPROB, MAX_LOGPROB])

#: Stop rules as written: agree k, or a confidence bound, each with or without a gate, or a gate alone; with or
#: without max and wave (a max below what the rule needs is drawn too: validation refuses it against the parents).
stop_rules = st.one_of(
    st.builds(lambda k, m, w, g: StopRule(agree=k, max=max(m, k) if m else None, wave=w, logprob=g),
              st.integers(2, 4), st.none() | st.integers(2, 6), st.integers(1, 3), gates),
    st.builds(lambda c, m, g: StopRule(confidence=c, max=m, logprob=g), st.sampled_from([0.5, 0.8, 0.95, 0.99]),
              st.none() | st.integers(2, 6), gates),
    st.builds(lambda m, w, g: StopRule(max=m, wave=w, logprob=g), st.none() | st.integers(1, 6), st.integers(1, 3),
              st.integers(MIN_LOGPROB, MAX_LOGPROB)),
    st.builds(lambda k, m, w: StopRule(agree=k, max=max(m, k or 1) if m else None, wave=w, examples=True),
              st.none() | st.integers(2, 4), st.none() | st.integers(1, 6), st.integers(1, 3)))
