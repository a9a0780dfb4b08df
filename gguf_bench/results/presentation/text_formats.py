"""The text printers: markdown, csv, json and jsonl of the same summary rows."""


from __future__ import annotations

import json

import pandas as pd

from gguf_bench.errors import BenchError
from gguf_bench.results.predictions import ceiling
from gguf_bench.results.presentation import evals as evals_view
from gguf_bench.results.presentation.columns import (
    FLAGS,
    FORMATS,
    MD_ORDER,
    MD_SHOWN,
    _cells,
    _varying_cells,
)
from gguf_bench.results.schema.evaluation import EvalRecord


def to_markdown(summary: pd.DataFrame) -> str:
    """The published llama.cpp notebook's table: model, GPU layers offload, tokens/s, gain %; led by the settings that
    tell rows apart and that those columns do not show (-np, clients, prompt, engine, host, ...), as the table is."""
    predicted = "predicted_tokens_per_s" in summary
    varying = [c for c in FLAGS if c in summary.columns and c not in MD_SHOWN
               and summary[c].nunique(dropna=False) > 1]
    columns = _varying_cells(summary, varying)
    columns |= _cells(summary, [c for c in MD_ORDER if c != "predicted" or predicted], md=True)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cells) + " |" for cells in zip(*columns.values())]
    return "\n".join(lines) + "\n"


def render_results(summary: pd.DataFrame | None, evals: list[EvalRecord], fmt: str) -> str:
    """What --format writes: the run summary; evaluations too in md (a second table), and alone when there are no runs."""
    if summary is None:
        return evals_view.markdown(evals) if fmt == "md" else render(evals_view.frame(evals), fmt)
    return render(summary, fmt) + ("\n" + evals_view.markdown(evals) if fmt == "md" and evals else "")


def render(summary: pd.DataFrame, fmt: str) -> str:
    if "placement" in summary.columns and not summary["placement"].astype(bool).any():
        summary = summary.drop(columns="placement")  # a column only where a placement was asked for
    if fmt == "md":
        return to_markdown(summary)
    summary = ceiling.with_ceiling(summary)  # bandwidth_gbs, ceiling_pct: where this host's bandwidth is stored
    if fmt == "csv":
        return summary.to_csv(index=False)
    if fmt == "json":
        return summary.to_json(orient="records", indent=1)
    if fmt == "jsonl":
        return "".join(json.dumps(rec, default=str) + "\n" for rec in json.loads(summary.to_json(orient="records")))
    raise BenchError(f"unknown format '{fmt}'; choose from {', '.join(FORMATS)}")

