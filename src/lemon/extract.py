r"""Answer extraction from model text: pure functions, one per answer kind, strict where guessing would lie.

Why strict: a parser that falls back to "0", drops a minus sign or grabs a stray letter turns wrong answers
into right ones (and back) and makes accuracy numbers meaningless. Every extractor returns `None` when it
finds no answer; callers count that as wrong.

A closed `<think>...</think>` block (reasoning models) is ignored when text follows it.

Numbers (`extract_number`), in order:
1. The LAST explicit final-answer marker wins: `\boxed{...}`, `#### X`, or an answer phrase
   ("the answer is X", "Answer: X", "final answer = X", "**Answer:** X"). The number read is the first one
   after the marker on its line (after the last `=` on that line, if any: "The answer is 3 * 6 = 18.").
   A retraction after that marker ("Wait, ...", "Actually, ...", "I made a mistake", at the start of a
   clause) overrides it: the last number after the retraction is the answer the reply ends with.
2. Otherwise the last number in the text.
Numbers keep their sign (`-`, `−`) and decimals; thousands separators (`1,234,567`, `1 234 567` with a
space, thin or no-break space, `1_000`, `1'000`, `1.234.567` with two or more dot groups, LaTeX `1{,}000`),
`$`, `%` and simple fractions (`3/4`, `\frac{3}{4}`) are understood. A minus glued to a preceding word,
digit or `)` is an operator, not a sign ("16-3" is 16 and 3). The result is normalized text: "18", "-3",
"0.75", "1234.5". `numbers_equal` compares tolerantly (exactly when both are integers).

Multiple choice (`extract_choice`), letters limited to the item's options (A-D for MMLU, A-E for AQuA):
1. The LAST explicit answer wins: an answer phrase followed by a letter ("The answer is (C)", "Answer: C",
   "answer: **C**", "correct option is C", and the bare forms AQuA's own rationales end with: "Answer D",
   "ANS:A", "Answer - D", "answer.A"), "C is correct" / "option C is the right answer" / "Thus, C is the
   correct answer" / "D is the answer", or `\boxed{C}`. An answer phrase with a verb or colon followed by
   an option's TEXT (or, for numeric options, its number) selects that option. "each answer choice: (A)
   ..." lists options and picks none. A retraction after the last explicit answer (as for numbers) defers
   to the last marked letter after it.
2. Otherwise the LAST marked letter mention: "(C)", "C)", "**C**", "[C]", "option C", "Option: C", "C." or
   "C:" at the start of a line, a line that is only the letter, or a letter that ends the reply after a
   non-word, a number or a connective ("= 250=D", "12-5=7 C", "Thus A"). A bare capital in prose ("A train
   leaves...", "vitamin C", "Part A is correct") never counts; lower-case letters count only in brackets.
3. Otherwise the text of exactly one option: the whole reply equals it, or it is the only option whose
   text (3+ characters, not a bare number) appears in the reply's last line.
4. Otherwise `None`.

Code (`extract_code`): from fenced blocks, the LAST block that defines the entry point (else the last
python/untagged block, else the last block; an unclosed final fence counts, for truncated replies); from a
bare reply, the span from the first code line through the end of the code around `def <entry point>`,
trimmed to what parses. Text is never stripped with a character set (`lstrip("```python")` eats code).
A reply that is only a function body is joined to the HumanEval prompt; `humaneval_program` builds the
program the sandbox runs.
"""

from __future__ import annotations

import ast
import math
import re
import textwrap
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from fractions import Fraction

# ---- shared ---------------------------------------------------------------------------------------------


def strip_reasoning(text: str) -> str:
    """The text after a closed `</think>` block, when anything follows it; else the text unchanged."""
    _, sep, tail = text.rpartition("</think>")
    return tail if sep and tail.strip() else text


# ---- numbers --------------------------------------------------------------------------------------------

# Thousands separators: one kind per number, groups of exactly three digits. A comma, underscore, apostrophe
# or (thin, narrow, no-break) space may be followed by a decimal point; a plain space only separates groups
# when the number does not run on into a word or hyphen ("2 100-metre races" is 2 and 100); dots separate
# thousands only with two or more groups ("1.234.567"), since "1.234" is a decimal.
_GROUP_SEPS = ",_'’\u00a0\u2009\u202f"
_UNSIGNED = (
    r"\d{1,3}(?:\.\d{3}){2,}(?!\d|\.\d)"
    rf"|(?:\d{{1,3}}(?P<sep>[{_GROUP_SEPS}])\d{{3}}(?:(?P=sep)\d{{3}})*(?!\d|(?P=sep)\d)"
    r"|\d{1,3}(?: \d{3})+(?![\w-]| \d)"
    r"|\d+)(?:\.\d+)?"
    r"|\.\d+"
)
_SEPARATOR_CHARS = re.compile(rf"[{_GROUP_SEPS} ]")
_NUMBER = re.compile(
    r"(?:(?<![\w)\].])(?P<sign>[-−]))?\$?\s?"  # a sign only when not glued to a preceding operand
    rf"(?<![\w.])(?P<num>{_UNSIGNED})"
    r"(?:\s*/\s*(?P<den>\d+(?:\.\d+)?)(?![\d/]|\.\d))?"
)
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_ANSWER_PHRASE = re.compile(
    r"\banswer\**\s*(?:is|was|would\s+be|will\s+be|:|=)|####", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{")
# A retraction at the start of a sentence or clause; "actually" or "wait" inside a sentence is not one.
_CORRECTION = re.compile(
    r"(?:^|(?<=[.!?;,:)\n]))[ \t*_]*(?:wait|actually|oops|correction|hold\s+on|on\s+second\s+thought"
    r"|(?:I|we)\s+made\s+an?\s+(?:mistake|error)|my\s+mistake|let\s+me\s+(?:re-?(?:check|calculate|compute|do)"
    r"|correct\s+(?:that|this|myself))|(?:that|this)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+right))\b",
    re.IGNORECASE | re.MULTILINE)


def _delatex(text: str) -> str:
    text = _FRAC.sub(lambda m: f"{m.group(1)}/{m.group(2)}", text)
    for old, new in (("{,}", ","), ("\\!", ""), ("\\,", ""), ("\\$", "$"), ("\\%", "%"), ("\\left", ""),
                     ("\\right", ""), ("−", "-")):
        text = text.replace(old, new)
    return text


def _to_fraction(num: str, den: str | None, negative: bool) -> Fraction | None:
    try:
        digits = _SEPARATOR_CHARS.sub("", num)
        if digits.count(".") > 1:  # "1.234.567": dots as thousands separators
            digits = digits.replace(".", "")
        value = Fraction(Decimal(digits))
        if den is not None:
            d = Fraction(Decimal(den))
            if d != 0:
                value /= d
    except (InvalidOperation, ValueError, ZeroDivisionError):
        return None
    return -value if negative else value


def format_number(value: Fraction) -> str:
    """Canonical text of a number: '18', '-3', '0.75'; non-terminating fractions as a float repr."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den == 1:  # terminating decimal: exact digits
        text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return repr(float(value))


def _numbers(text: str) -> list[tuple[int, Fraction]]:
    out = []
    for m in _NUMBER.finditer(text):
        value = _to_fraction(m.group("num"), m.group("den"), m.group("sign") is not None)
        if value is not None:
            out.append((m.start(), value))
    return out


def _balanced(text: str, open_at: int) -> str:
    """The content of the brace group whose `{` is at `open_at` (to the end if it never closes)."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1: i]
    return text[open_at + 1:]


def _after_marker(text: str) -> str:
    """The answer window after a marker: the rest of the line, or the next non-empty line."""
    lines = text.split("\n")
    window = lines[0]
    if not window.strip(" *:_`"):
        window = next((ln for ln in lines[1:] if ln.strip()), "")
    if "=" in window:
        window = window[window.rindex("=") + 1:]
    return window


def _explicit_numbers(text: str) -> list[tuple[int, Fraction]]:
    found = []
    for m in _BOXED.finditer(text):
        nums = _numbers(_balanced(text, m.end() - 1))
        if nums:
            found.append((m.start(), nums[0][1]))
    for m in _ANSWER_PHRASE.finditer(text):
        nums = _numbers(_after_marker(text[m.end():]))
        if nums:
            found.append((m.start(), nums[0][1]))
    return found


def parse_number(text: str | None) -> Fraction | None:
    """The single number `text` spells ("1,234", "-2.5", "3/4", "$18", "\\frac{1}{2}"), or None."""
    if text is None:
        return None
    nums = _numbers(_delatex(text.strip()))
    return nums[0][1] if len(nums) == 1 else None


def _correction_after(text: str, pos: int) -> int | None:
    """Where the last self-correction ("Wait, ...", "Actually, ...", "I made a mistake") after `pos` ends,
    or None: a reply that retracts its stated answer is scored on what it ends with, not on the retraction."""
    found = None
    for m in _CORRECTION.finditer(text, pos):
        found = m.end()
    return found


def extract_number(text: str) -> str | None:
    """The final numeric answer in `text`, normalized ("18", "-0.5"); None when there is no number."""
    text = _delatex(strip_reasoning(text))
    explicit = _explicit_numbers(text)
    nums = _numbers(text)
    if explicit:
        at, value = max(explicit, key=lambda p: p[0])
        fix = _correction_after(text, at)
        later = [v for start, v in nums if fix is not None and start >= fix]
        return format_number(later[-1] if later else value)
    return format_number(nums[-1][1]) if nums else None


def numbers_equal(a: str | None, b: str | None, rel_tol: float = 1e-6, abs_tol: float = 1e-6) -> bool:
    """Whether two number texts are the same number: exact for integers, else within the tolerances."""
    x, y = parse_number(a), parse_number(b)
    if x is None or y is None:
        return False
    if x.denominator == 1 and y.denominator == 1:
        return x == y
    return math.isclose(float(x), float(y), rel_tol=rel_tol, abs_tol=abs_tol)


# ---- multiple choice ------------------------------------------------------------------------------------

# `verb` present: a strong marker ("answer is", "Answer:", "correct option is"): a letter, an option's text or
# its number may follow. Bare "Answer D" / "ANS - C" / "answer.A" (how AQuA's own rationales end) is weak:
# only a capital (or bracketed) letter right after it counts, so "to answer this, 65 ..." selects nothing.
_CHOICE_PHRASE = re.compile(
    r"\b(?:answer|ans)(?:\s+(?:choice|option))?\**\s*(?P<verb>is|was|would\s+be|will\s+be|:|=)?"
    r"|\b(?P<judged>correct|right|best)\s+(?:answer|option|choice)\**\s*(?:is|would\s+be|:|=)?"
    r"|\bI\s+(?P<pick>choose|pick|select)\b",
    re.IGNORECASE)
_LETTER_AFTER_PHRASE = re.compile(
    r"(?:[\s*_:`'\",=-]|\.(?!\s))*(?:\$?\\boxed\s*\{\s*(?:\\text(?:bf)?\s*\{)?)?\s*"
    r"(?:(?:option|choice|letter)\s*)?"
    r"(?P<open>[(\[])?(?P<l>[A-Za-z])(?P<close>[)\]])?(?![A-Za-z0-9])", re.IGNORECASE)
_LETTER_AFTER_WEAK = re.compile(r"[ \t]*(?:[-–—][ \t]*|\.(?=\S))?(?P<open>[(\[])?(?P<l>[A-Za-z])(?P<close>[)\]])?"
                                r"(?![A-Za-z0-9])")
_ENUMERATING = frozenset({"each", "every", "all", "these", "those", "following", "other", "remaining"})
_LETTER_IS_CORRECT = re.compile(
    r"(?:\b(?i:option|choice)\s+\(?(?P<a>[A-E])\)?|\((?P<b>[A-E])\)|^[ \t*]*(?P<c>[A-E])\)?)\**"
    r"\s+is\s+(?:the\s+)?(?:correct|right|best)\b", re.MULTILINE)
# "Thus, C is the correct answer", "D is the answer", "Therefore A is correct" (not "best": "Vitamin C is the
# best source"; and only where the letter starts a clause, see `_starts_clause`).
_BARE_LETTER_IS_ANSWER = re.compile(
    r"(?<![A-Za-z0-9'’])(?P<l>[A-E])\**\s+is\s+(?:the\s+)?(?:(?:correct|right)\b(?:\s+(?:answer|option|choice))?"
    r"|answer\b)")
_BOXED_LETTER = re.compile(r"\\boxed\s*\{\s*(?:\\text(?:bf)?\s*\{)?\s*\(?(?P<l>[A-Ea-e])\)?\s*\}")
_MARKED_LETTER = re.compile(
    r"\((?P<a>[A-Ea-e])\)"
    r"|(?<![A-Za-z0-9(])(?P<b>[A-E])\)"
    r"|\*\*\(?(?P<c>[A-E])\)?[.:)]?\*\*"
    r"|\[(?P<d>[A-E])\]"
    r"|\b(?i:option|choice)\s*[:=-]?\s*(?P<e>[A-E])\b"
    r"|^[ \t>*-]*(?P<f>[A-E])[.:](?=\s|$)"
    r"|^[ \t*]*(?P<g>[A-E])[ \t*.]*$",
    re.MULTILINE)
# A letter that ends the reply ("... = 250=D", "12-5=7 C", "Thus A", ">>B"), see `_starts_clause`.
_TRAILING_LETTER = re.compile(r"(?<![A-Za-z0-9'’])[(\[]?(?P<l>[A-E])[)\]]?[ \t.!*]*\Z")
_CONNECTIVES = frozenset({"thus", "hence", "so", "therefore", "then", "clearly", "option", "choice", "answer",
                          "ans"})


def _starts_clause(text: str, at: int) -> bool:
    """Whether a bare capital at `at` stands alone rather than ending a phrase ("Vitamin C", "Part A"): the
    line holds nothing before it, or a non-word character, a number or a connective ("Thus", "so") does."""
    before = text[text.rfind("\n", 0, at) + 1: at].rstrip(" \t(*[")
    if not before or not before[-1].isalpha():
        return True
    word = re.findall(r"[A-Za-z]+$", before)
    return bool(word) and word[0].lower() in _CONNECTIVES


def _norm_text(s: str) -> str:
    s = re.sub(r"[*_`$]", "", s).strip().lower()
    s = re.sub(r"\s+", " ", s)
    return s.strip(" .;:!")


def _letters(choices: Sequence[str], letters: str | None) -> str:
    if letters:
        return letters
    return "ABCDE"[: len(choices)] if choices else "ABCDE"


def _option_from_window(window: str, choices: Sequence[str], letters: str) -> str | None:
    """The option whose text (the longest that fits) starts the answer window, else the unique option
    equal to the window's first number."""
    w = _norm_text(window)
    fits = []
    for letter, opt in zip(letters, choices, strict=False):
        o = _norm_text(opt)
        if o and (w == o or (w.startswith(o) and not w[len(o)].isalnum())):
            fits.append((len(o), letter))
    if fits:
        return max(fits)[1]
    nums = _numbers(_delatex(window))
    if not nums:
        return None
    hits = [letter for letter, opt in zip(letters, choices, strict=False) if parse_number(opt) == nums[0][1]]
    return hits[0] if len(hits) == 1 else None


def _enumerating(text: str, m: re.Match[str]) -> bool:
    """'Let's go through each answer choice: (A) ...' lists the options; it does not pick one."""
    words = re.findall(r"[A-Za-z]+", text[max(0, m.start() - 24): m.start()])
    return m.group("verb") == ":" and bool(words) and words[-1].lower() in _ENUMERATING


def _phrase_choice(text: str, m: re.Match[str], choices: Sequence[str], valid: str) -> str | None:
    """The letter (or option) an answer phrase names, or None."""
    rest = text[m.end():]
    strong = bool(m.group("verb") or m.group("judged") or m.group("pick"))
    lm = (_LETTER_AFTER_PHRASE if strong else _LETTER_AFTER_WEAK).match(rest)
    if lm:
        letter = lm.group("l")
        bracketed = lm.group("open") or lm.group("close")
        if letter.upper() in valid and (letter.isupper() or bracketed):
            return letter.upper()
    if strong and choices:
        return _option_from_window(_after_marker(rest), choices, valid)
    return None


def _explicit_choices(text: str, choices: Sequence[str], valid: str) -> list[tuple[int, str]]:
    """(position, letter) of every explicit answer: answer phrases, "X is correct", `\\boxed{X}`."""
    explicit: list[tuple[int, str]] = []
    for m in _CHOICE_PHRASE.finditer(text):
        if not _enumerating(text, m) and (letter := _phrase_choice(text, m, choices, valid)):
            explicit.append((m.start(), letter))
    for pattern in (_LETTER_IS_CORRECT, _BOXED_LETTER):
        for m in pattern.finditer(text):
            letter = next(g for g in m.groups() if g).upper()
            if letter in valid:
                explicit.append((m.start(), letter))
    for m in _BARE_LETTER_IS_ANSWER.finditer(text):
        if m.group("l") in valid and _starts_clause(text, m.start()):
            explicit.append((m.start(), m.group("l")))
    return explicit


def _marked_choices(text: str, valid: str) -> list[tuple[int, str]]:
    """(position, letter) of every marked mention: "(C)", "C)", "**C**", "option C", a closing letter."""
    marked = []
    for m in _MARKED_LETTER.finditer(text):
        letter = next(g for g in m.groups() if g)
        if letter.upper() in valid:
            marked.append((m.start(), letter.upper()))
    tail = _TRAILING_LETTER.search(text.rstrip())
    if tail and tail.group("l") in valid and _starts_clause(text, tail.start("l")):
        marked.append((tail.start("l"), tail.group("l")))
    return marked


def _option_text_choice(text: str, choices: Sequence[str], valid: str) -> str | None:
    """The option whose whole text is the reply, or the only option whose text is in the last line."""
    whole = _norm_text(text)
    for letter, opt in zip(valid, choices, strict=False):
        if whole and whole == _norm_text(opt):
            return letter
    last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
    last_norm = f" {_norm_text(last)} "
    hits = [letter for letter, opt in zip(valid, choices, strict=False)
            if len(_norm_text(opt)) >= 3 and parse_number(opt) is None
            and re.search(rf"(?<![a-z0-9]){re.escape(_norm_text(opt))}(?![a-z0-9])", last_norm)]
    return hits[0] if len(hits) == 1 else None


def extract_choice(text: str, choices: Sequence[str] = (), letters: str | None = None) -> str | None:
    """The chosen option letter (upper case) per the rules in the module docstring, or None."""
    text = strip_reasoning(text)
    valid = _letters(choices, letters)
    explicit = _explicit_choices(text, choices, valid)
    marked = _marked_choices(text, valid)
    if explicit:
        at, letter = max(explicit)
        fix = _correction_after(text, at)
        later = [p for p in marked if fix is not None and p[0] >= fix]
        return max(later)[1] if later else letter
    if marked:
        return max(marked)[1]
    return _option_text_choice(text, choices, valid) if choices else None


# ---- code -----------------------------------------------------------------------------------------------

# An opening fence is ``` and a language tag ending its line: "a single ```python code block```:", the instruction
# echoed in prose, opens nothing (it once swallowed the real block and graded a right program wrong).
_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_+.-]*)[ \t]*\n(?P<body>.*?)(?:```|\Z)", re.DOTALL)
_PY_LANGS = {"", "python", "py", "python3", "py3"}
_CODE_START = re.compile(r"^(?:from\s+[\w.]+\s+import\b|import\s+\w|def\s+\w|class\s+\w|async\s+def\s|@\w)")
_CODE_LINE = re.compile(r"^(?:[ \t]|#|$|from\s+[\w.]+\s+import\b|import\s|def\s|class\s|async\s|@"
                        r"|if\s+__name__|[A-Za-z_][\w.]*\s*(?:\[[^\]]*\])?\s*[-+*/%]?=[^=]|assert\s|print\(|return\b|"
                        r"[\])}])")


def _defines(code: str, entry_point: str | None) -> bool:
    if not entry_point:
        return bool(re.search(r"^\s*def\s+\w+\s*\(", code, re.MULTILINE))
    return bool(re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE))


def _clean_block(code: str) -> str:
    """Drop leading/trailing blank lines and common indentation; never touch the code's own characters."""
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return textwrap.dedent("\n".join(line.rstrip() for line in lines))


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _bare_code(text: str, entry_point: str | None) -> str | None:
    """Code in an unfenced reply: the span around the entry point's def, trimmed to what parses."""
    pattern = (rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(" if entry_point
               else r"^\s*(?:async\s+)?def\s+\w+\s*\(")
    raw = text.split("\n")
    def_at = next((i for i, ln in enumerate(raw) if re.match(pattern, ln)), None)
    if def_at is None:
        return None
    base = len(raw[def_at]) - len(raw[def_at].lstrip())
    lines = [ln[base:] if not ln[:base].strip() else ln for ln in raw]
    start = def_at
    while start > 0 and _CODE_LINE.match(lines[start - 1]):
        start -= 1
    while start < def_at and not _CODE_START.match(lines[start]):
        start += 1
    end = def_at + 1
    while end < len(lines) and _CODE_LINE.match(lines[end]):
        end += 1
    for stop in range(end, def_at, -1):
        candidate = _clean_block("\n".join(lines[start:stop]))
        if _parses(candidate):
            return candidate
    return _clean_block("\n".join(lines[start:end]))


def _is_body(code: str) -> bool:
    return _parses("def _f():\n" + _fix_body_indent(code))


def _fix_body_indent(body: str) -> str:
    """Indent a function body under a def; restore a first line that lost its indentation to `.strip()`."""
    lines = body.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""

    def indent(s: str) -> int:
        return len(s) - len(s.lstrip())

    rest = [indent(ln) for ln in lines[1:] if ln.strip()]
    if indent(lines[0]) == 0 and rest and min(rest) > 0:
        target = min(rest) - 4 if lines[0].rstrip().endswith(":") else min(rest)
        lines[0] = " " * max(target, 0) + lines[0]
    if min(indent(ln) for ln in lines if ln.strip()) == 0:
        lines = [("    " + ln) if ln.strip() else ln for ln in lines]
    return "\n".join(lines).rstrip() + "\n"


def extract_code(text: str, entry_point: str | None = None, prompt: str | None = None) -> str | None:
    """The program text in a model reply (see the module docstring); a bare body is joined to `prompt`."""
    text = strip_reasoning(text)
    blocks = [(m.group("lang").lower(), m.group("body")) for m in _FENCE.finditer(text)]
    code: str | None = None
    if blocks:
        defining = [b for lang, b in blocks if lang in _PY_LANGS and _defines(b, entry_point)]
        python = [b for lang, b in blocks if lang in _PY_LANGS]
        code = (defining or python or [b for _, b in blocks])[-1]
        # a body-only block keeps its indentation relative to the def it belongs under
        code = _clean_block(code) if _defines(code, entry_point) else code.strip("\n").rstrip()
    else:
        code = _bare_code(text, entry_point)
        stripped = text.strip("\n").rstrip()
        if code is None and stripped and (_parses(textwrap.dedent(stripped)) or _is_body(stripped)):
            code = stripped
    if not code or not code.strip():
        return None
    if entry_point and prompt and not _defines(code, entry_point):
        return prompt + _fix_body_indent(code)
    return code.rstrip() + "\n"


def humaneval_program(code: str, prompt: str, entry_point: str) -> str:
    """The module to test: a full function gets the prompt's header (imports, helpers) before it; a
    body-only completion is appended to the prompt (the upstream `prompt + completion`)."""
    if re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        at = re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", prompt, re.MULTILINE)
        header = prompt[: at.start()] if at else ""
        return header + code
    return prompt + _fix_body_indent(code)
