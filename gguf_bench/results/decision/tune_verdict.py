"""tune --check's verdict: the rule `report` decides by (results/decision/table.py) on the check's own runs, and what they say
to run by the deploy rule (choice.candidates)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from gguf_bench.errors import BenchError
from gguf_bench.results.decision.choice import TWINS_NEVER_DEPLOYED, candidates
from gguf_bench.results.decision.table import for_objective, summarize, to_frame
from gguf_bench.results.decision.verdicts import gain_decided
from gguf_bench.results.decision.wording import gain_text, row_label
from gguf_bench.results.schema.records import RunRecord


def check_summary(records: Sequence[RunRecord], per_request: bool = False, objective: str = "decode") -> pd.DataFrame:
    """--check's runs summarized as `report` summarizes them: each row's gain over the target alone measured beside
    it, its 95% interval corrected for the rows that compete, and whether it is decided. per_request: with several
    slots, each request's own tokens/s (what tune --engine server predicts) instead of the round's."""
    df = to_frame(list(records))
    if per_request and "per_request_tokens_per_s" in df:
        own = pd.to_numeric(df["per_request_tokens_per_s"], errors="coerce")
        df = df.assign(tokens_per_s=own.fillna(df["tokens_per_s"]))
    return summarize(for_objective(df, objective))


def gain_fields(summary: pd.DataFrame, k: int, strategy: str | None = None) -> dict:
    """A check row's measured gain by the verdict rule (None for the target alone's row): the summary's gain, its
    interval, `decided` (None: no interval, fewer than 2 pairs of runs), and `no_drafts`: why a row that drafted
    nothing has no gain (it measured the target alone under another name, as `report` says)."""
    rows = summary[(summary["mode"] == "speculative") & (summary["k"] == k)]
    rows = rows if strategy is None else rows[rows["strategy"] == strategy]
    if not k or rows.empty:
        return {"measured_gain_pct": None, "measured_gain_lo": None, "measured_gain_hi": None, "decided": None,
                "no_drafts": None}
    r = rows.iloc[0]
    drafted_none = r.get("no_drafts") if isinstance(r.get("no_drafts"), str) else None  # no gain: the target alone
    return {"measured_gain_pct": _number(r["gain_pct"]), "measured_gain_lo": _number(r.get("gain_lo")),
            "measured_gain_hi": _number(r.get("gain_hi")), "decided": gain_decided(r), "no_drafts": drafted_none}


def measured_verdict(summary: pd.DataFrame) -> dict:
    """What --check's runs say to run, by the deploy rule (choice.candidates): the fastest measured speculative row
    whose gain is decided and that is faster than the fastest target alone, else the fastest target alone (with why)."""
    order = candidates(summary)
    if order and summary.loc[order[0], "mode"] == "speculative":
        r = summary.loc[order[0]]
        return _verdict(r) | {"k": int(r["k"]), "strategy": r["strategy"], "gain_pct": _number(r["gain_pct"]),
                              "gain_lo": _number(r.get("gain_lo")), "gain_hi": _number(r.get("gain_hi")), "decided": True,
                              "why": f"{gain_text(r)} over the target alone measured beside it, decided"}
    alone = summary[(summary["mode"] == "target") & summary["tokens_per_s"].notna()]
    if alone.empty:
        raise BenchError("--check measured no target alone to compare with")
    if order:
        return _verdict(summary.loc[order[0]]) | {"why": _why_alone(summary, summary.loc[order[0]])}
    return _verdict(alone.loc[alone["tokens_per_s"].idxmax()]) | {
        "why": "the machine was busy during the check's runs (other processes used its cores), so nothing it measured "
               "decides: check again on a quiet machine"}


def _verdict(r: pd.Series) -> dict:
    """A summary row as --check's verdict (the target alone's, until a decided gain says otherwise)."""
    return {"k": 0, "strategy": None, "label": row_label(r), "ngl": r["ngl"], "ngld": r["ngld"],
            "tokens_per_s": float(r["tokens_per_s"]), "gain_pct": None, "gain_lo": None, "gain_hi": None, "decided": None}


def _why_alone(summary: pd.DataFrame, alone: pd.Series) -> str:
    """Why --check's verdict is the target alone: what the fastest measured speculative row lacked."""
    spec = summary[(summary["mode"] == "speculative") & summary["gain_pct"].notna()]
    if spec.empty:
        return "no speculative run drafted a token"
    r = spec.loc[spec["tokens_per_s"].idxmax()]
    what = f"the fastest measured, {row_label(r)} at {r['tokens_per_s']:.2f} tokens/s ({gain_text(r)})"
    if r.get("twin") == True:  # noqa: E712 (NaN: no twin ran)
        return f"{what}, {TWINS_NEVER_DEPLOYED}"
    if r["tokens_per_s"] <= alone["tokens_per_s"]:
        return f"{what}, is not faster"
    if gain_decided(r) is None:
        return f"{what}, has fewer than 2 pairs of runs: no interval can tell its gain from zero"
    if gain_decided(r) is False:
        return f"{what}, is not decided: its interval holds zero, or the machine was busy or drifted"
    return f"{what}, is not told above the fastest target alone"


def _number(x) -> float | None:
    return None if x is None or pd.isna(x) else float(x)
