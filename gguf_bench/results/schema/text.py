"""Numbers as tables show them."""

from __future__ import annotations

import math
import numbers
import re

from rich import box
from rich.table import Table


def _unknown(x) -> bool:
    return x is None or (isinstance(x, numbers.Real) and math.isnan(x))


def number_text(x, fmt: str = "{:.2f}") -> str:
    """A number as tables show it, in `fmt`; '–' when unknown (None or NaN)."""
    return "–" if _unknown(x) else fmt.format(x)


def speed_text(x: float | None) -> str:
    """A speed as tables show it: 2 decimals below 100, 1 below 1000, none above; '–' when unknown."""
    if _unknown(x):
        return "–"
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.1f}" if abs(x) >= 100 else f"{x:.2f}"


def size_text(n: int | None) -> str:
    """Bytes as '253.10 MB' (decimal units); '?' when unknown."""
    if not n:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


# --- titles and captions within the terminal ---------------------------------------------------------------------

_BREAK = re.compile(r"(?<= ·) |(?<=;) |(?<=,) |(?<=:) ")  # a line breaks after ' ·', ';', ',' or ':' (they stay)


def fold(text: str, width: int) -> str:
    """Every line of `text` that is wider than `width` broken after a separator (' · ', '; ', ', ', ': '), the
    continuation indented by two spaces; a phrase with no separator in it is never cut (a line may stay too wide)."""
    return "\n".join(part for line in text.splitlines() for part in _fold_line(line, width))


def _fold_line(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    pieces = _BREAK.split(line)
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append("  " + piece)
    return lines


def fit_title(table, width: int):
    """A rich Table whose title and caption fit `width` columns, folded at separators (fold), and a table at least as
    wide as their longest line, so rich never wraps them again at the narrower table's edge. A rich Group: its tables."""
    if hasattr(table, "renderables"):
        for part in table.renderables:
            if hasattr(part, "min_width"):
                fit_title(part, width)
        return table
    longest = 0
    for attr in ("title", "caption"):
        text = getattr(table, attr)
        if isinstance(text, str) and text:
            setattr(table, attr, fold(text, width))
            longest = max([longest, *map(len, getattr(table, attr).splitlines())])
    table.min_width = min(width, max(longest, table.min_width or 0))
    return table


def columns_width(columns: dict[str, list[str]], gap: int) -> int:
    """Rendered width of a table given as {header: cells}: each column's widest cell or header, `gap` characters
    between columns."""
    return sum(max(len(name), *map(len, cells)) for name, cells in columns.items()) + gap * (len(columns) - 1)


def spaced_layout(columns: dict[str, list[str]], width: int) -> dict:
    """Table options: a rule under the header and no other lines; three spaces between columns, or two, or one where
    more would not fit in `width` (the divider is one of them)."""
    gap = next((g for g in (3, 2) if columns_width(columns, g) <= width), 1)
    return dict(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left", caption_justify="left",
                padding={3: (0, 1), 2: (0, 1, 0, 0), 1: (0, 0)}[gap])


def right_table(columns: dict[str, list[str]], title: str, width: int, styles: list | None = None) -> Table:
    """A table of {header: cells}, every column right-aligned and never wrapped, laid out by spaced_layout; `styles`:
    one row style each (None: plain)."""
    table = Table(title=title, **spaced_layout(columns, width))
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    for cells, style in zip(zip(*columns.values()), styles or [None] * len(next(iter(columns.values()), []))):
        table.add_row(*cells, style=style)
    return table
