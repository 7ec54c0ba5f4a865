"""The spec grammar (`lemon.spec.grammar`): every canonical text it should take, and nothing outside the subset,
checked by both engines that decode under it (llguidance over the SmolLM2 tokenizer, llama.cpp over the SmolLM2
GGUF vocabulary)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lemon.spec.grammar import int_range, name_node, spec_grammar
from lemon.spec.model import MAX_DUTY_LEN, Agent, Spec, StopRule
from lemon.spec.parse import parse_spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from tests.grammar_checks import LlamaGrammarCheck, guidance_accepts
from tests.spec_strategies import LEVELS, ROLES, specs, specs_with_copies, stop_rules

LIBRARY = RoleLibrary.load()
GRAMMAR = spec_grammar(LIBRARY, LEVELS)
GBNF = GRAMMAR.gbnf()


@pytest.fixture(scope="module")
def engines() -> tuple[Any, Any, LlamaGrammarCheck]:
    from transformers import AutoTokenizer

    from lemon.llm.constrained import SpecDecoding
    from lemon.llm.models import ensure_model
    from lemon.train.policy import ensure_default_policy

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_default_policy()))
    decoding = SpecDecoding(tokenizer, GRAMMAR.lark(), len(tokenizer), {tokenizer.eos_token_id})
    return decoding, tokenizer, LlamaGrammarCheck(str(ensure_model("smollm2-135m")))


def verdicts(engines: tuple[Any, Any, LlamaGrammarCheck], text: str) -> tuple[bool, bool]:
    decoding, tokenizer, llama = engines
    return guidance_accepts(decoding, tokenizer, text), llama.accepts(GBNF, text)


@st.composite
def voted_specs(draw: st.DrawFn) -> Spec:
    """A spec (with or without copies) whose last agent is a voter over the others, under a drawn stop rule."""
    spec = draw(specs_with_copies() | specs(max_agents=5))
    voter = Agent(name="zz_vote", role="majority_vote", capacity=draw(st.sampled_from(LEVELS)),
                  depends_on=spec.names, stop=draw(st.none() | stop_rules))
    return Spec(agents=(*spec.agents, voter), output="zz_vote")


@settings(max_examples=60)
@given(spec=specs() | specs_with_copies() | voted_specs())
def test_every_rendered_spec_is_in_the_grammar(engines: tuple[Any, Any, LlamaGrammarCheck], spec: Spec) -> None:
    text = render_spec(spec).text
    # The GGUF-derived SmolLM2 vocabulary cannot spell a few code points (e.g. U+40000): no policy can write such a
    # text, so it is outside the property (as in tests/train/test_token_spans.py).
    _, tokenizer, llama = engines
    assume(tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text)
    assume(llama.llm.detokenize(llama.llm.tokenize(text.encode(), add_bos=False, special=False)) == text.encode())
    assert verdicts(engines, text) == (True, True), text


# Texts just outside the subset: each parses (or nearly) as YAML, but is not what `render_spec` writes, or breaks
# a bound the schema states.
_BASE = "agents:\n  - name: a\n    role: math_solver\n    capacity: small\noutput: a\n"
_VOTE = ("agents:\n  - name: a\n    copies: 3\n    role: math_solver\n    capacity: small\n  - name: v\n"
         "    role: majority_vote\n    capacity: large\n    depends_on: [a]\n    stop: {STOP}\noutput: v\n")
OUTSIDE = {
    "keys in another order": "agents:\n  - name: a\n    capacity: small\n    role: math_solver\n",
    "an unknown role": _BASE.replace("math_solver", "wizard"),
    "an unknown level": _BASE.replace("small", "huge"),
    "a YAML keyword as a name": _BASE.replace("name: a", "name: no"),
    "a capital in a name": _BASE.replace("name: a", "name: Ab"),
    "a 25-character name": _BASE.replace("name: a", "name: " + "a" * 25),
    "copies on a 23-character name (its copies' names run past 24)":
        _BASE.replace("name: a\n", "name: " + "a" * 23 + "\n    copies: 2\n"),
    "copies: 1": _BASE.replace("name: a\n", "name: a\n    copies: 1\n"),
    "copies: 12": _BASE.replace("name: a\n", "name: a\n    copies: 12\n"),
    "an empty duty written out": _BASE.replace("    capacity", '    duty: ""\n    capacity'),
    "a duty one character too long": _BASE.replace("    capacity",
                                                   f'    duty: "{"x" * (MAX_DUTY_LEN + 1)}"\n    capacity'),
    "a duty with a line break": _BASE.replace("    capacity", '    duty: "a\\nb"\n    capacity'),
    "a single-quoted duty": _BASE.replace("    capacity", "    duty: 'go'\n    capacity"),
    "an empty depends_on written out": _BASE.replace("    capacity: small\n",
                                                     "    capacity: small\n    depends_on: []\n"),
    "thirteen agents": "agents:\n" + "".join(f"  - name: a{i}\n    role: critic\n    capacity: small\n"
                                             for i in range(13)),
    "a stop rule on a solver": _BASE.replace("capacity: small\n", "capacity: small\n    stop: {agree: 2}\n"),
    "agree: 1": _VOTE.replace("STOP", "agree: 1"),
    "confidence 0.50 (written 0.5)": _VOTE.replace("STOP", "confidence: 0.50"),
    "confidence 1.0": _VOTE.replace("STOP", "confidence: 1.0"),
    "a logprob of 0": _VOTE.replace("STOP", "logprob: 0"),
    "a logprob of -1001": _VOTE.replace("STOP", "logprob: -1001"),
    "examples: false": _VOTE.replace("STOP", "examples: false"),
    "an unknown learned policy": _VOTE.replace("STOP", "learned: nobody"),
    "a learned rule beside a criterion": _VOTE.replace("STOP", "learned: number, agree: 2"),
    "the criterion before the gate": _VOTE.replace("STOP", "agree: 2, logprob: -5"),
    "wave: 1 (the default) written out": _VOTE.replace("STOP", "agree: 2, wave: 1"),
    "max alone": _VOTE.replace("STOP", "max: 2"),
    "no final newline": _BASE.rstrip("\n"),
    "a fenced block": "```yaml\n" + _BASE + "```\n",
    "JSON": '{"agents": [{"name": "a", "role": "math_solver", "capacity": "small"}]}',
}


@pytest.mark.parametrize("why", sorted(OUTSIDE))
def test_text_outside_the_subset_is_refused(engines: tuple[Any, Any, LlamaGrammarCheck], why: str) -> None:
    assert verdicts(engines, OUTSIDE[why]) == (False, False), why


def test_the_bounds_themselves_are_inside(engines: tuple[Any, Any, LlamaGrammarCheck]) -> None:
    """The edges of each bound are accepted: they are valid specs, and their canonical text is in the grammar."""
    inside = [
        _BASE.replace("    capacity", f'    duty: "{"x" * MAX_DUTY_LEN}"\n    capacity'),
        _BASE.replace("name: a\n", "name: " + "a" * 21 + "\n    copies: 11\n"),
        _BASE.replace("name: a\n", "name: " + "a" * 22 + "\n    copies: 9\n"),
        _BASE.replace("name: a", "name: " + "a" * 24),
        "agents:\n" + "".join(f"  - name: a{i}\n    role: critic\n    capacity: small\n" for i in range(12)),
        _VOTE.replace("STOP", "logprob: -1000, confidence: 0.99, max: 11, wave: 11"),
        _VOTE.replace("STOP", "examples: true, agree: 3"),
        _VOTE.replace("STOP", "learned: number, max: 3"),
        _BASE.replace("name: a", "name: nob"),  # a keyword's extension is a name
    ]
    for text in inside:
        assert verdicts(engines, text) == (True, True), text
        parse_spec(text)  # and each parses


@given(st.integers(-1200, 1200), st.integers(-1200, 1200))
def test_int_range_is_exactly_the_integers_in_it(a: int, b: int) -> None:
    import re

    from lemon.spec.grammar import Grammar

    low, high = min(a, b), max(a, b)
    pattern = re.compile(Grammar({"n": int_range(low, high)}, frozenset({"n"})).lark().splitlines()[1][4:-1])
    for v in {low, high, low - 1, high + 1, (low + high) // 2, 0, -1, 10, 99, 100}:
        assert bool(pattern.fullmatch(str(v))) == (low <= v <= high), (low, high, v)
    assert not pattern.fullmatch("007") and not pattern.fullmatch("-0")


def test_roles_and_levels_are_the_pools_own() -> None:
    lark = spec_grammar(LIBRARY, ("lo", "hi")).lark()
    assert '"lo" | "hi"' in lark and '"small"' not in lark
    assert all(f'"{r}"' in lark for r in ROLES)
    assert name_node(1, 3) != name_node(1, 4)


@pytest.mark.parametrize("nats", [-1, -10, -100, -101, -999, -1000])
def test_every_logprob_gate_bound_is_in_both_grammars(engines: tuple[Any, Any, LlamaGrammarCheck], nats: int) -> None:
    """The numbers that are prefixes of -1000's digits (-10, -100, -101): llguidance's longest-lexeme lexer once
    read them as an unfinished "1000" and refused them, where GBNF took them (found by the property above)."""
    voter = Agent(name="zz_vote", role="majority_vote", capacity=LEVELS[0], depends_on=("a",),
                  stop=StopRule(logprob=nats))
    spec = Spec(agents=(Agent(name="a", role="analyst", capacity=LEVELS[0]), voter), output="zz_vote")
    assert verdicts(engines, render_spec(spec).text) == (True, True)
