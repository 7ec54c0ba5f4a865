"""The grammar of the canonical spec text, from one source, for constrained decoding of the trained policy.

`render_spec` writes one exact YAML subset (fixed key order and quoting, defaults left out, `copies: n` blocks,
one-line `stop: {...}` flow maps). `spec_grammar` describes exactly that subset, with the spec's bounds: the
name pattern (its YAML keywords left out, and a `copies` block's name short enough for its copies' names), the
duty's characters and length, at most `MAX_AGENTS` blocks and `MAX_AGENTS - 1` parents, the pool's roles and
levels as enumerations, a `stop` line on a voting role only, and each registered stop criterion's values as
its own validation accepts them. The grammar is built once as a small tree (`Grammar`) and written out in the
two notations the decoders read: `lark()` for llguidance (the transformers policy, `lemon.llm.constrained`)
and `gbnf()` for llama.cpp (an exported `.gguf` policy). A text the grammar accepts always parses; whether the
graph is sound (parents that exist, no cycle, one output) is still `validate_spec`'s and `repair`'s job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from lemon.spec.bounds import MAX_AGENTS, MAX_DUTY_LEN, MAX_NAME_LEN
from lemon.spec.model import RESERVED_NAMES
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops import StopCriterion, criteria

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Chars:
    """One character of the inclusive code-point `ranges` (or, `negated`, of none of them)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    item: Node
    low: int
    high: int


@dataclass(frozen=True)
class Ref:
    name: str


Node = Lit | Chars | Seq | Alt | Rep | Ref


def seq(*items: Node | str) -> Node:
    """The items in order (empty texts left out: neither notation writes an empty literal)."""
    parts = tuple(Lit(i) if isinstance(i, str) else i for i in items if i not in ("", Lit("")))
    return parts[0] if len(parts) == 1 else Seq(parts)


def alt(options: Iterable[Node | str]) -> Node:
    parts = tuple(Lit(o) if isinstance(o, str) else o for o in options)
    return parts[0] if len(parts) == 1 else Alt(parts)


def opt(item: Node) -> Node:
    return Rep(item, 0, 1)


# ---- the two notations ------------------------------------------------------------------------------------


def _gbnf_char(c: int, in_class: bool) -> str:
    special = '"\\' if not in_class else "]\\-^"
    if c == 10:
        return "\\n"
    if c < 32 or c == 127 or chr(c) in special or c > 126:
        return f"\\x{c:02X}" if c < 256 else f"\\u{c:04X}" if c < 65536 else f"\\U{c:08X}"
    return chr(c)


def _regex_char(c: int) -> str:
    if c < 32 or c > 126:
        return f"\\x{{{c:x}}}"
    return "\\" + chr(c) if chr(c) in "\\.+*?()|[]{}^$#&-~/\"" else chr(c)


def _class(node: Chars, char: Any) -> str:
    body = "".join(char(a) if a == b else f"{char(a)}-{char(b)}" for a, b in node.ranges)
    return f"[{'^' if node.negated else ''}{body}]"


@dataclass(frozen=True)
class _Notation:
    """How one notation writes each kind of node; `_write` walks the tree once for all of them."""

    lit: Callable[[str], str]
    chars: Callable[[Chars], str]
    ref: Callable[[str], str]
    sep: str  # between a sequence's items
    group: str  # what opens a group (an alternation, a repeated item); ")" closes it
    bar: str  # between alternatives


def _write(node: Node, notation: _Notation) -> str:
    if isinstance(node, Lit):
        return notation.lit(node.text)
    if isinstance(node, Chars):
        return notation.chars(node)
    if isinstance(node, Seq):
        return notation.sep.join(_write(i, notation) for i in node.items)
    if isinstance(node, Alt):
        return notation.group + notation.bar.join(_write(o, notation) for o in node.options) + ")"
    if isinstance(node, Rep):
        return f"{notation.group}{_write(node.item, notation)}){_count(node)}"
    return notation.ref(node.name)


def _count(node: Rep) -> str:
    if (node.low, node.high) == (0, 1):
        return "?"
    return f"{{{node.low}}}" if node.low == node.high else f"{{{node.low},{node.high}}}"


def _lark_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _regex_class(node: Chars) -> str:
    return _class(node, _regex_char)


#: llama.cpp's GBNF: a rule's name with `-` for `_`.
_GBNF = _Notation(lit=lambda text: '"' + "".join(_gbnf_char(ord(c), False) for c in text) + '"',
                  chars=lambda node: _class(node, lambda c: _gbnf_char(c, True)),
                  ref=lambda name: name.replace("_", "-"), sep=" ", group="(", bar=" | ")


def _regex_notation(rules: dict[str, Node]) -> _Notation:
    """One regular expression (Lark's terminal): a reference is the rule it names, written in place."""
    def ref(name: str) -> str:
        return _write(rules[name], notation)

    notation = _Notation(lit=lambda text: "".join(_regex_char(ord(c)) for c in text), chars=_regex_class, ref=ref,
                         sep="", group="(?:", bar="|")
    return notation


def _lark_literal(text: str) -> str:
    """A quoted string; digits alone one lexeme a digit. Why: llguidance's lexer takes the longest lexeme, so
    beside the string "1000" (the end of -1000..-1) the text `-10` or `-100` lexed as an unfinished "1000" and
    was refused, which GBNF (characters, no lexer) took (found by test_every_rendered_spec_is_in_the_grammar)."""
    if text.isascii() and text.isdigit():
        return " ".join(f"/{c}/" for c in text)
    return _lark_text(text)


def _lark_notation(terminals: frozenset[str]) -> _Notation:
    """llguidance's Lark: a terminal's name in capitals."""
    return _Notation(lit=_lark_literal, chars=lambda node: f"/{_regex_class(node)}/",
                     ref=lambda name: name.upper() if name in terminals else name, sep=" ", group="(", bar=" | ")


@dataclass(frozen=True)
class Grammar:
    """Named rules, the first the start; `terminals` are regular rules a lexer reads as one token (a name, a
    duty), written in Lark as one regular expression each (llguidance lexes them fast, and a duty character
    is not a parser step), and in GBNF as ordinary rules."""

    rules: dict[str, Node]
    terminals: frozenset[str]

    def gbnf(self) -> str:
        """llama.cpp's GBNF (`llama_cpp.LlamaGrammar.from_string`), the start rule named `root`."""
        names = list(self.rules)
        lines = [f"root ::= {names[0].replace('_', '-')}"]
        lines += [f"{n.replace('_', '-')} ::= {_write(node, _GBNF)}" for n, node in self.rules.items()]
        return "\n".join(lines) + "\n"

    def lark(self) -> str:
        """llguidance's Lark (`llguidance.grammar_from("lark", ...)`), the start rule named `start`."""
        names = list(self.rules)
        lines = [f"start: {names[0]}"]
        regex, lark = _regex_notation(self.rules), _lark_notation(self.terminals)
        for n, node in self.rules.items():
            if n in self.terminals:
                lines.append(f"{n.upper()}: /{_write(node, regex)}/")
            else:
                lines.append(f"{n}: {_write(node, lark)}")
        return "\n".join(lines) + "\n"


# ---- building blocks --------------------------------------------------------------------------------------

_DIGIT = Chars(((48, 57),))


def _same_length(low: str, high: str) -> Node:
    """The decimal strings of one length from `low` to `high` (digit-wise, no leading zero beyond `low`'s)."""
    if low == high:
        return Lit(low)
    a, b, rest = int(low[0]), int(high[0]), len(low) - 1
    if a == b:
        return seq(low[0], _same_length(low[1:], high[1:]))
    if rest == 0:
        return Chars(((48 + a, 48 + b),))
    out: list[Node] = [seq(low[0], _same_length(low[1:], "9" * rest))]
    if b - a > 1:
        out.append(seq(Chars(((49 + a, 47 + b),)), Rep(_DIGIT, rest, rest)))
    out.append(seq(high[0], _same_length("0" * rest, high[1:])))
    return alt(out)


def int_range(low: int, high: int) -> Node:
    """The integers from `low` to `high` as Python writes them (`str(n)`): no leading zeros, a minus sign."""
    if high < 0:
        return seq("-", int_range(-high, -low))
    if low < 0:
        return alt([seq("-", int_range(1, -low)), int_range(0, high)])
    out = []
    for width in range(len(str(low)), len(str(high)) + 1):
        a, b = max(low, 10 ** (width - 1) if width > 1 else 0), min(high, 10 ** width - 1)
        out.append(_same_length(str(a), str(b)))
    return alt(out)


def _minus(chars: Chars, taken: set[int]) -> Chars:
    """`chars` (not negated) without the code points in `taken`."""
    out: list[tuple[int, int]] = []
    for a, b in chars.ranges:
        start = a
        for c in sorted(t for t in taken if a <= t <= b):
            if c > start:
                out.append((start, c - 1))
            start = c + 1
        if start <= b:
            out.append((start, b))
    return Chars(tuple(out))


_FIRST = Chars(((97, 122),))  # NAME_PATTERN: [a-z][a-z0-9_]*
_REST = Chars(((48, 57), (95, 95), (97, 122)))


def _word(prefix: str, excluded: frozenset[str], low: int, high: int) -> Node | None:
    """The rest of a name that starts with `prefix` (a prefix of an excluded word), `low`..`high` characters in
    all, that is not an excluded word; `Lit("")` when only the end is left, None when there is no way on."""
    out: list[Node] = []
    if len(prefix) < high:
        nexts = {w[len(prefix)] for w in excluded if w.startswith(prefix) and len(w) > len(prefix)}
        for c in sorted(nexts):
            if (tail := _word(prefix + c, excluded, low, high)) is not None:
                out.append(seq(c, tail))
        free = _minus(_FIRST if not prefix else _REST, {ord(c) for c in nexts})
        n = len(prefix) + 1
        if free.ranges and n <= high:
            out.append(seq(free, Rep(_REST, max(0, low - n), high - n)) if high > n else free)
    ends = bool(prefix) and prefix not in excluded and low <= len(prefix)
    if not out:
        return Lit("") if ends else None
    return opt(alt(out)) if ends else alt(out)


def name_node(low: int = 1, high: int = MAX_NAME_LEN) -> Node:
    """A name of `low`..`high` characters that the spec accepts (`NAME_PATTERN`, not a YAML keyword)."""
    found = _word("", frozenset(w for w in RESERVED_NAMES if low <= len(w) <= high), low, high)
    assert found is not None
    return found


def _complement(taken: Sequence[tuple[int, int]]) -> Chars:
    """Every Unicode scalar value outside `taken` (sorted, disjoint ranges), as positive ranges: llama.cpp
    refuses the first byte of a multi-byte character that a NEGATED class would accept (its partial UTF-8
    check of a negated class asks whether any completion is excluded), so classes are written positively."""
    out: list[tuple[int, int]] = []
    start = 0
    for a, b in sorted([*taken, (0xD800, 0xDFFF)]):
        if a > start:
            out.append((start, a - 1))
        start = max(start, b + 1)
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return Chars(tuple(out))


#: DUTY_PATTERN: no quote, backslash, control, line-breaking or non-character code point.
_DUTY_CHAR = _complement(((0, 31), (34, 34), (92, 92), (127, 159), (0x2028, 0x2029), (0xFEFF, 0xFEFF),
                          (0xFFFE, 0xFFFF)))


# ---- stop rules: each criterion's values as its own validation accepts them -------------------------------

#: Integers a criterion whose value type states no bounds is probed over (a `logprob` gate: -1000..-1).
_PROBE = 10_000


def _accepts(criterion: StopCriterion, value: object) -> bool:
    try:
        checked = criterion.adapter.validate_python(value)
    except ValueError:  # pydantic's ValidationError is one
        return False
    return checked is not None and criterion.problem(checked, None) is None


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted integers as maximal runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for v in values:
        if out and out[-1][1] == v - 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _candidates(criterion: StopCriterion, schema: dict[str, Any]) -> list[object]:
    """The finite values to try for a criterion of a number, boolean or string type (a string: the packaged
    stop policies' names, the only strings a criterion has taken so far)."""
    types = {schema.get("type"), *(s.get("type") for s in schema.get("anyOf", []))}
    if "number" in types:
        low, high = schema.get("minimum", 0.0), schema.get("maximum", 1.0)
        return [i / 100 for i in range(round(low * 100), round(high * 100) + 1)]
    if "boolean" in types:
        return [True]
    if "string" in types:
        from lemon.spec.stops.policy import policy_names

        return list(policy_names())
    return []


@cache
def criterion_values(criterion: StopCriterion) -> Node | None:
    """`key: value` for every value the criterion accepts, as `render` writes it; None when there is none the
    grammar can list (the policy then cannot write that criterion under the grammar)."""
    schema = criterion.adapter.json_schema()
    if schema.get("type") == "integer":
        low, high = schema.get("minimum", -_PROBE), schema.get("maximum", _PROBE)
        valid = [v for v in range(low, high + 1) if _accepts(criterion, v)]
        if valid and all(criterion.render(v) == f"{criterion.key}: {v}" for v in (valid[0], valid[-1])):
            return seq(f"{criterion.key}: ", alt(int_range(a, b) for a, b in _runs(valid)))
        values: list[object] = list(valid)
    else:
        values = [v for v in _candidates(criterion, schema) if _accepts(criterion, v)]
    if not values:
        log.info("stop criterion %s: no value the grammar can list; left out of it", criterion.key)
        return None
    return alt(dict.fromkeys(criterion.render(v) for v in values))


def stop_node() -> Node:
    """`{...}` as `render_stop` writes it: a gate, then a criterion (one of each at most, one at least), or a
    controller alone; then `max: n` and `wave: n` (not 1, the default)."""
    by_kind = {kind: [v for c in criteria() if c.kind == kind and (v := criterion_values(c)) is not None]
               for kind in ("gate", "criterion", "controller")}
    gate, crit, control = (alt(by_kind[k]) if by_kind[k] else None
                           for k in ("gate", "criterion", "controller"))
    heads: list[Node] = []
    if gate is not None:
        heads.append(seq(gate, opt(seq(", ", crit))) if crit is not None else gate)
    heads += [n for n in (crit, control) if n is not None]
    return seq("{", alt(heads), opt(seq(", max: ", int_range(1, MAX_AGENTS - 1))),
               opt(seq(", wave: ", int_range(2, MAX_AGENTS - 1))), "}")


# ---- the spec ---------------------------------------------------------------------------------------------


def _bands() -> list[tuple[int, int, int | None]]:
    """(shortest, longest, most copies) of the name lengths that allow the same `copies` (None: none): the
    copies' names `x_1 .. x_n` must stay within `MAX_NAME_LEN` (with 11 copies, a name of at most 21)."""
    bands: list[tuple[int, int, int | None]] = []
    for length in range(1, MAX_NAME_LEN + 1):
        most = max((n for n in range(2, MAX_AGENTS) if length + 1 + len(str(n)) <= MAX_NAME_LEN), default=None)
        if bands and bands[-1][2] == most:
            bands[-1] = (bands[-1][0], length, most)
        else:
            bands.append((length, length, most))
    return bands


def _head(rules: dict[str, Node], terminals: set[str]) -> Node:
    """`  - name: x` and, where the copies' names stay within the bound, `    copies: n`."""
    options: list[Node] = []
    for low, high, most in _bands():
        rule = f"name_{low}_{high}"
        rules[rule] = name_node(low, high)
        terminals.add(rule)
        copies = [] if most is None else [opt(seq("    copies: ", int_range(2, most), "\n"))]
        options.append(seq(Ref(rule), "\n", *copies))
    return seq("  - name: ", alt(options))


def _agent_rest(levels: Sequence[str], max_duty_len: int, max_agents: int, voter: bool) -> Node:
    """After the role: the duty (when not empty), the capacity, the parents (when any; a voter's always) and a
    voter's stop rule."""
    more = [Rep(seq(", ", Ref("name")), 0, max_agents - 2)] if max_agents > 2 else []
    parents = seq("    depends_on: [", Ref("name"), *more, "]\n")
    items: list[Node | str] = [opt(seq('\n    duty: "', Ref("duty"), '"')), "\n    capacity: ",
                         alt(dict.fromkeys(levels)), "\n"]
    if voter:  # a voter votes over its parents: it always has some (`validate_spec`)
        return seq(*items, parents, opt(seq("    stop: ", Ref("stop"), "\n")))
    return seq(*items, opt(parents))


def spec_grammar(roles: RoleLibrary, levels: Sequence[str], *, max_agents: int = MAX_AGENTS,
                 max_duty_len: int = MAX_DUTY_LEN) -> Grammar:
    """The canonical text of every spec over `roles` (all of the library's) and the pool's `levels`."""
    if not levels or not roles.names:
        raise ValueError("a spec grammar needs at least one role and one level")
    rules: dict[str, Node] = {"spec": Lit("")}  # the start rule first; filled in below
    terminals = {"name", "duty"}
    head = _head(rules, terminals)
    voters = [n for n in roles.names if roles[n].votes]
    others = [n for n in roles.names if not roles[n].votes]
    bodies = [seq(alt(names), _agent_rest(levels, max_duty_len, max_agents, voter))
              for names, voter in ((others, False), (voters, True)) if names]
    rules["agent"] = seq(head, "    role: ", alt(bodies))
    rules["stop"] = stop_node()
    rules["name"] = name_node()
    rules["duty"] = Rep(_DUTY_CHAR, 1, max_duty_len)
    rules["spec"] = seq("agents:\n", Rep(Ref("agent"), 1, max_agents), opt(seq("output: ", Ref("name"), "\n")))
    return Grammar(rules, frozenset(terminals))


@cache
def policy_grammar(roles: RoleLibrary, levels: tuple[str, ...]) -> Grammar:
    """`spec_grammar` once per (role library, levels) in a process."""
    return spec_grammar(roles, levels)


def grammar_identity() -> str:
    """`grammar=<hash>` of the grammar over the packaged roles (the levels written as a placeholder): what a
    policy's evaluation runs carry, so a change of the grammar (a role, a criterion, a bound) starts new runs."""
    import hashlib

    text = spec_grammar(RoleLibrary.load(), ("LEVEL",)).lark()
    return "grammar=" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
