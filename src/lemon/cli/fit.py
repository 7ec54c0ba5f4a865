"""Output that fits the terminal: tables wrap at word boundaries and are never cropped, and no word is split.

Why: rich shrinks a table that is wider than the terminal column by column, ignoring how long the words in a
column are, so `lemon explain` printed "predict" / "ion" on two lines and a report's run ids were cut; a line
wider than the console is cropped. A `FitTable` decides at render time, for the width it is given: every column
at least as wide as its longest word (so text wraps between words only), the spare width shared out by what
each column would still like; and when even the longest words do not fit side by side, one block per row
("column: value" lines) instead of a table. `markdown_blocks` renders a Markdown document (`lemon report`) the
same way: its tables as `FitTable`s, the rest through rich's Markdown, which wraps paragraphs between words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

Justify = Literal["left", "right", "center"]
Cell = str | Text


def _text(cell: Cell) -> Text:
    """A cell as Text: a str is plain text (never markup: it may quote model output or a file name)."""
    return cell.copy() if isinstance(cell, Text) else Text(str(cell))


def _widths(text: Text) -> tuple[int, int]:
    """(longest word, longest line) of `text` in terminal cells."""
    plain = text.plain
    words = [Text(w).cell_len for w in plain.split()] or [0]
    lines = [Text(ln).cell_len for ln in plain.splitlines()] or [0]
    return max(1, max(words)), max(1, max(lines))


def share_widths(mins: Sequence[int], maxes: Sequence[int], room: int) -> list[int] | None:
    """Column widths for `room` cells of content: each column its natural width if all fit; else each at least
    its minimum (its longest word), the rest shared in proportion to what each still wants; None when even
    the minimums do not fit side by side."""
    if sum(maxes) <= room:
        return list(maxes)
    if sum(mins) > room:
        return None
    wants = [mx - mn for mn, mx in zip(mins, maxes, strict=True)]
    spare, total = room - sum(mins), sum(wants)
    widths = [mn + spare * w // total for mn, w in zip(mins, wants, strict=True)]
    for i in sorted(range(len(widths)), key=lambda k: widths[k] - maxes[k]):  # the most short-changed first
        if sum(widths) >= room:
            break
        if widths[i] < maxes[i]:
            widths[i] += 1
    return widths


class FitTable:
    """A table that fits the width it is rendered at (see the module docstring): boxed if it fits so, else with
    the columns only spaced apart, else one block per row; `title` and `caption` are printed above and below
    it, wrapped between words."""

    def __init__(self, headers: Sequence[str], rows: Iterable[Sequence[Cell]], *, title: Cell | None = None,
                 caption: Cell | None = None, justify: Sequence[Justify] | None = None) -> None:
        self.headers = [str(h) for h in headers]
        self.rows = [[_text(c) for c in row] for row in rows]
        self.title, self.caption = title, caption
        self.justify: list[Justify] = list(justify) if justify else ["left"] * len(self.headers)

    def _sizes(self) -> tuple[list[int], list[int]]:
        mins, maxes = [], []
        for i, head in enumerate(self.headers):
            sizes = [_widths(Text(head))] + [_widths(row[i]) for row in self.rows if i < len(row)]
            mins.append(max(s[0] for s in sizes))
            maxes.append(max(s[1] for s in sizes))
        return mins, maxes

    def _table(self, widths: Sequence[int], boxed: bool) -> Table:
        table = Table(box=box.HEAVY_HEAD, show_edge=True) if boxed else \
            Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for head, width, just in zip(self.headers, widths, self.justify, strict=True):
            table.add_column(Text(head), width=width, justify=just, overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        return table

    def fitted(self, console: Console, width: int) -> Table | None:
        """The table at `width` cells (boxed if it fits so), or None when its longest words do not fit."""
        mins, maxes = self._sizes()
        wide = console.options.update_width(10_000)
        for boxed in (True, False):
            frame = Measurement.get(console, wide, self._table([1] * len(mins), boxed)).maximum - len(mins)
            widths = share_widths(mins, maxes, width - frame)
            if widths is not None:
                return self._table(widths, boxed)
        return None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self.fitted(console, options.max_width) if self.headers else None
        parts: list[RenderableType] = [] if self.title is None else [_text(self.title)]
        parts += [table] if table is not None else list(self._records())
        parts += [] if self.caption is None else [_text(self.caption)]
        yield Trimmed(Group(*parts))

    def _records(self) -> Iterator[RenderableType]:
        """One block per row: its first cell, then "column: value" lines, indented; words wrap, none is cut."""
        for k, row in enumerate(self.rows):
            if k:
                yield Text("")
            yield Text.assemble((f"{self.headers[0]}: ", "dim"), row[0]) if row else Text("")
            for name, cell in zip(self.headers[1:], row[1:], strict=False):
                yield Padding(Text.assemble((f"{name}: ", "dim"), cell), (0, 0, 0, 2))


class Trimmed:
    """`renderable` without the spaces that pad its lines to the full width (piped output stays clean)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in console.render_lines(self.renderable, options, pad=False):
            while line and not line[-1].control and not line[-1].text.strip():
                line.pop()
            if line and not line[-1].control:
                last = line.pop()
                line.append(Segment(last.text.rstrip(), last.style))
            yield from line
            yield Segment.line()


# ---- Markdown documents ---------------------------------------------------------------------------------

_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|(?<![\w])_(.+?)_(?![\w])")
_SPLIT = re.compile(r"(?<!\\)\|")


def inline(text: str) -> Text:
    """A Markdown table cell as Text: `code`, **bold** and _italic_ styled, the marks removed."""
    out = Text()
    at = 0
    for m in _INLINE.finditer(text):
        out.append(text[at:m.start()])
        code, bold, italic = m.groups()
        out.append(*((code, "bold cyan") if code is not None else (bold, "bold") if bold is not None
                     else (italic, "italic")))
        at = m.end()
    out.append(text[at:])
    return out


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in _SPLIT.split(body)]


def _justify(rule: str) -> Justify:
    rule = rule.strip()
    return "center" if rule.startswith(":") and rule.endswith(":") else "right" if rule.endswith(":") else "left"


def markdown_table(lines: Sequence[str]) -> FitTable:
    """A Markdown table (header, rule, rows) as a FitTable."""
    headers = [inline(c).plain for c in _cells(lines[0])]
    rule = _cells(lines[1]) if len(lines) > 1 else []
    justify = [_justify(rule[i]) if i < len(rule) else "left" for i in range(len(headers))]
    rows = []
    for line in lines[2:]:
        cells = [inline(c) for c in _cells(line)][:len(headers)]
        rows.append(cells + [Text("")] * (len(headers) - len(cells)))
    return FitTable(headers, rows, justify=justify)


def markdown_blocks(document: str) -> list[RenderableType]:
    """A Markdown document as renderables that fit the terminal: each table a FitTable, the text between the
    tables rich's Markdown (paragraphs wrap between words)."""
    blocks: list[RenderableType] = []
    text: list[str] = []
    table: list[str] = []
    for line in [*document.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            if text and "".join(text).strip():
                blocks.append(Trimmed(Markdown("\n".join(text))))
            text = []
            table.append(line)
            continue
        if table:
            blocks += [markdown_table(table), Text("")]
            table = []
        text.append(line)
    if "".join(text).strip():
        blocks.append(Trimmed(Markdown("\n".join(text))))
    return blocks
