"""Stored evaluations (`gguf-bench eval`) as a table, markdown and a frame, all three walking one column list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from rich import box
from rich.table import Table

from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.text import number_text


@dataclass(frozen=True)
class Column:
    name: str  # in the frame (csv, json)
    value: Callable[[EvalRecord], object]  # the number (None: not measured, e.g. the greedy checks of a sampled run)
    heading: str | None = None  # in the terminal table (None: the frame only)
    md: str | None = None  # in markdown (None: heading)
    text: Callable[[EvalRecord], str] | None = None  # how the tables show it (None: str of the value)

    def shown(self, ev: EvalRecord) -> str:
        return self.text(ev) if self.text else str(self.value(ev))


def _greedy(value: Callable[[EvalRecord], object]) -> Callable[[EvalRecord], object]:
    """A greedy check: None when the evaluation sampled."""
    return lambda ev: value(ev) if ev.greedy else None


def _greedy_text(text: Callable[[EvalRecord], str]) -> Callable[[EvalRecord], str]:
    return lambda ev: text(ev) if ev.greedy else "–"


COLUMNS = (
    Column("pair", lambda ev: ev.pair, "pair"),
    Column("temperature", lambda ev: ev.config.temperature, "T", text=lambda ev: number_text(ev.config.temperature, "{:g}")),
    Column("k", lambda ev: ev.config.k, "K"),
    Column("n", lambda ev: ev.metrics.n),
    Column("regular_ok", lambda ev: ev.metrics.regular_ok, "regular", text=lambda ev: f"{ev.metrics.regular_ok}/{ev.metrics.n}"),
    Column("speculative_ok", lambda ev: ev.metrics.speculative_ok, "spec.", "speculative",
           text=lambda ev: f"{ev.metrics.speculative_ok}/{ev.metrics.n}"),
    Column("p_value", lambda ev: ev.metrics.p_value, "p", text=lambda ev: number_text(ev.metrics.p_value, "{:.3g}")),
    Column("identical", _greedy(lambda ev: ev.metrics.identical), "identical",
           text=_greedy_text(lambda ev: f"{ev.metrics.identical}/{ev.metrics.n}")),
    Column("batch_numerics", _greedy(lambda ev: ev.metrics.batch_numerics), "numerics",
           text=_greedy_text(lambda ev: str(ev.metrics.batch_numerics))),
    Column("loop_errors", _greedy(lambda ev: ev.metrics.loop_errors), "loop err.", "loop errors",
           text=_greedy_text(lambda ev: str(ev.metrics.loop_errors))),
    Column("acceptance", lambda ev: ev.metrics.acceptance),
    Column("time", lambda ev: ev.time),
)
SHOWN = [c for c in COLUMNS if c.heading]


def table(evals: list[EvalRecord]) -> Table:
    """One row per stored evaluation: success rates, the z-test, greedy identity."""
    out = Table(title="evaluations (multiplication benchmark)", box=box.SIMPLE_HEAD, collapse_padding=True,
                pad_edge=False, title_justify="left")
    for col in SHOWN:
        out.add_column(col.heading, justify="left" if col.name == "pair" else "right")
    for ev in evals:
        out.add_row(*(c.shown(ev) for c in SHOWN),
                    style="bold red" if ev.greedy and ev.metrics.loop_errors else None)
    return out


def markdown(evals: list[EvalRecord]) -> str:
    lines = ["| " + " | ".join(c.md or c.heading for c in SHOWN) + " |", "|" + "---|" * len(SHOWN)]
    lines += ["| " + " | ".join(c.shown(ev) for c in SHOWN) + " |" for ev in evals]
    return "\n".join(lines) + "\n"


def frame(evals: list[EvalRecord]) -> pd.DataFrame:
    """The columns as numbers (the greedy checks: None when sampled)."""
    return pd.DataFrame([{c.name: c.value(ev) for c in COLUMNS} for ev in evals])
