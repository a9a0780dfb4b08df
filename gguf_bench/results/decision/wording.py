"""The words a decision is given in: a row's short name, a setting's flags, a gain and its interval, an advantage
over another setting's target alone. The choice's reasons (decision/choice.py) and every printer use them."""

from __future__ import annotations

import pandas as pd

from gguf_bench.results.decision.terms import FLAGS
from gguf_bench.results.schema.kinds import run_label


def row_label(row: pd.Series) -> str:
    """Short: 'target alone', 'draft alone', 'K=4', 'ngram(1-4) K=16', 'draft p-min 0.8 K=16' (the files are in the
    table's caption; the draft model with fixed K is the plain 'K=4')."""
    return run_label(row["mode"], row.get("strategy") or "", row["k"])


def setting_label(row: pd.Series, varying: list[str]) -> str:
    """'-ngl 99 K=4': a row named by the settings that differ between the rows it is chosen from, then its drafting."""
    return " ".join([f"{FLAGS.get(c, c)} {row[c]}" for c in varying] + [row_label(row)])


def gain_text(row: pd.Series) -> str:
    """'+40.2% [+31,+49]': a row's gain and its interval, where it has one (as the table shows them)."""
    gain = f"{row['gain_pct']:+.1f}%"
    lo, hi = row.get("gain_lo"), row.get("gain_hi")
    return gain if lo is None or pd.isna(lo) else f"{gain} [{lo:+.0f},{hi:+.0f}]"


def over_text(row: pd.Series) -> str:
    """'+23% [+12,+35] over -ngl 99 alone': a speculative row's advantage over the other setting's fastest target alone
    (summary.over_fastest_alone), '(unpaired: measured apart)' after it where the runs were not interleaved; '' where
    it has none."""
    pct = row.get("over_pct")
    if pct is None or pd.isna(pct):
        return ""
    parts = (p.partition("=") for p in str(row.get("over_setting") or "").split("; ") if p)
    where = " ".join(f"{FLAGS.get(c, c)} {v}" for c, _, v in parts) or "another setting"
    lo, hi = row.get("over_lo"), row.get("over_hi")
    interval = "" if lo is None or pd.isna(lo) else f" [{lo:+.0f},{hi:+.0f}]"
    apart = " (unpaired: measured apart)" if row.get("over_test") == "unpaired" else ""
    decided = row.get("over_decided") == True  # noqa: E712
    return f"{'' if decided else '~'}{pct:+.0f}%{interval} over {where} alone{apart}"
