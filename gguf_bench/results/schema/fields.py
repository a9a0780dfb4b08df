"""A measured quantity, declared once (llama-bench's `test::get_fields()`): its name, unit, how a setting's repetitions
fold into one figure, and how the run table shows it.

The declarations themselves sit beside the records they read (run_fields.RUN_FIELDS); `run_fields.run_row` flattens a run by
walking them, `report.summarize` folds by them, and the run table takes its plain columns from them. A new measurement
(a tracker, measure/trackers/) adds its record and its declarations, and no printer or aggregation changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gguf_bench.results.schema.text import number_text, speed_text

FOLDS = ("mean", "max", "min", "first", "sum")  # pandas' names for how a setting's runs fold
SPEED = "speed"  # Field.fmt: speed_text's precision (2 decimals below 100, 1 below 1000, none above)


@dataclass(frozen=True)
class Field:
    """One flat column of a run (run_fields.run_row), and how the summary and the run table read it.

    get: the record -> the value (None where the run has no such figure, never a made-up zero).
    fold: how a setting's runs fold into its summary row (FOLDS); None: the column is not folded (a key of the
    setting, or a figure only per run). spread: the summary also keeps its standard deviation as NAME_std.
    numeric: coerced to a number before folding (None -> NaN), for columns a whole file may lack.
    optional: the summary keeps the column only where some run measured it (so that files without it print as before).
    header: the run table's heading (None: not a column of its own); md: the markdown table's (None: not there);
    place: where the run table puts the column among the others (report.RUN_COLUMNS' places); shown_with: a column
    that must hold a value in some row for the table to show this one (None: whenever the summary has it); fmt: a
    format, or SPEED. gain: the heading of a column of its gain over the target alone (higher is better; the summary
    keeps it as NAME_gain_pct). legend: the run table's caption line where the column shows; legend_from: a column
    whose values (each once, joined) fill the legend's '{}' (what the energy was read from).
    """

    name: str
    get: Callable[[Any], Any]
    unit: str = ""
    fold: str | None = None
    spread: bool = False
    numeric: bool = False
    optional: bool = False
    header: str | None = None
    md: str | None = None
    place: int = 0
    gain: str | None = None
    legend: str | None = None
    legend_from: str | None = None
    shown_with: str | None = None
    fmt: str = "{:.2f}"

    def __post_init__(self) -> None:
        if self.fold is not None and self.fold not in FOLDS:
            raise ValueError(f"field {self.name}: fold '{self.fold}' is not one of {', '.join(FOLDS)}")

    def caption(self, summary) -> str:
        """The legend line of a summary (a DataFrame), `legend_from`'s values in it."""
        if self.legend_from is None:
            return self.legend
        values = summary[self.legend_from].dropna().unique() if self.legend_from in summary else []
        return self.legend.format("; ".join(sorted(str(v) for v in values)) or "–")

    def text(self, value) -> str:
        """The value as a table cell ('–' where unknown)."""
        return speed_text(value) if self.fmt == SPEED else number_text(value, self.fmt)


def flat(record, declared: Iterable[Field]) -> dict:
    """The record's flat row: each declared field's value, in declaration order."""
    return {f.name: f.get(record) for f in declared}


def folds(declared: Iterable[Field]) -> dict[str, tuple[str, str]]:
    """pandas named aggregations of the folded fields, in declaration order (NAME, then NAME_std where it spreads)."""
    out = {}
    for f in declared:
        if f.fold is not None:
            out[f.name] = (f.name, f.fold)
            if f.spread:
                out[f"{f.name}_std"] = (f.name, "std")
    return out


def by_name(declared: Iterable[Field]) -> dict[str, Field]:
    return {f.name: f for f in declared}
