"""Numbers as tables show them."""

from __future__ import annotations

import math
import numbers


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
