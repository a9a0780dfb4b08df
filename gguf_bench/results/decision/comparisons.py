"""Two summary rows compared directly (compare), and the simplest of the rows that are the same as the fastest."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from gguf_bench.results.decision.estimates import _estimate
from gguf_bench.results.decision.terms import (
    BASELINE,
    GAIN_LEVEL,
    MARGIN,
    RUN_KEYS,
)
from gguf_bench.results.decision.units import busy, matching, sweep_of
from gguf_bench.results.decision.verdicts import (
    SIMPLER_WHY,
    _blocked,
    interval_verdict,
    simplicity,
)


@dataclass(frozen=True)
class Comparison:
    """Row a against row b in tokens/s: a's advantage in % with its corrected interval, and the verdict it reads."""

    verdict: str
    pct: float
    lo: float
    hi: float


def compare(a: pd.Series, b: pd.Series, runs: pd.DataFrame, margin: float = MARGIN,
            family: int | None = None) -> Comparison:
    """Two summary rows' runs (runs: to_frame's, without errors) against each other: paired where both were
    interleaved (each run of a over b's of the same prompt and repetition), else Welch's test over b's prompt means
    (_estimate), the interval corrected as a's gain is (its family of rows and looks), or for `family` comparisons
    where given (two targets alone have no gain of their own: workload_family). Busy runs are left out, as from a
    gain's pairs, where at least 2 good runs remain on each side."""
    if "_sweep" not in runs:  # a pair never crosses sweeps or invocations (sweep_of), judged over every run at once
        runs = runs.assign(_sweep=sweep_of(runs))
    mine, theirs = (runs[matching(runs, r, RUN_KEYS) & runs["error"].isna()] if "error" in runs else
                    runs[matching(runs, r, RUN_KEYS)] for r in (a, b))
    nan = float("nan")
    if mine.empty or theirs.empty:
        return Comparison("undecided", nan, nan, nan)
    mine, theirs = (side[~busy(side)] if (~busy(side)).sum() >= 2 else side for side in (mine, theirs))
    across = not bool(matching(pd.DataFrame([a]), b, BASELINE).iloc[0])  # two settings: in_chunks may apply
    e = _estimate(mine, theirs, "tokens_per_s", across)
    if pd.isna(e["_se"]):
        return Comparison("undecided", nan, nan, nan)
    if family is None:
        family = max(1, int(a.get("gain_family") or 1)) if pd.notna(a.get("gain_family")) else 1
    half = stats.t.ppf(1 - GAIN_LEVEL / 2 / max(1, family), e["_dof"]) * e["_se"]
    lo, hi, est = e["_est"] - half, e["_est"] + half, e["_est"]
    if e["gain_test"] == "paired":
        lo, hi, est = 100 * np.expm1(lo), 100 * np.expm1(hi), 100 * np.expm1(est)
    else:
        lo, hi, est = 100 * lo, 100 * hi, 100 * est
    blocked = any(_blocked(r) for r in (a, b) if r.get("mode") == "speculative")
    return Comparison("undecided" if blocked else interval_verdict(lo, hi, margin), float(est), float(lo), float(hi))


def workload_family(rows: pd.DataFrame, runs: pd.DataFrame) -> int:
    """The comparisons a workload's verdicts are corrected for (gain_family: its rows x -r auto's looks), for a
    comparison between two of its targets alone; where it has no gain, -r auto's looks alone (1 for a fixed -r)."""
    counted = pd.to_numeric(rows.get("gain_family", pd.Series(dtype=float)), errors="coerce").max()
    if pd.notna(counted):
        return max(1, int(counted))
    looks = pd.to_numeric(runs.get("looks", pd.Series(dtype=float)), errors="coerce").max()
    return 1 if pd.isna(looks) else max(1, int(looks))


def simplest_same(rows: pd.DataFrame, top, runs: pd.DataFrame, margin: float = MARGIN) -> tuple:
    """Among `rows` (each one that may be chosen), the simplest (simplicity) of those that are the same as row `top`
    within `margin` (compare), and why: (its index, the index it replaced or None, what makes it simpler)."""
    best = rows.loc[top]
    chosen, why = top, ""
    for i, r in rows.iterrows():
        if i == top or simplicity(r) >= simplicity(rows.loc[chosen]):
            continue
        if compare(best, r, runs, margin).verdict == "same":
            chosen = i
    if chosen == top:
        return top, None, ""
    mine, theirs = simplicity(rows.loc[chosen]), simplicity(best)
    why = next(w for w, x, y in zip(SIMPLER_WHY, mine, theirs) if x != y)
    return chosen, top, why

