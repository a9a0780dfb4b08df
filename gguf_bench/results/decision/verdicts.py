"""The rule: an interval -> one of the four verdicts, the margin deciding (a less simple setting is chosen only where
its advantage's lower bound clears the margin), and what is simpler. The question a sweep answered (its margin and
objective) is read back from its records."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gguf_bench import engine_registry as capabilities
from gguf_bench.results.decision.terms import (
    DRIFT,
    GAIN_LEVEL,
    MARGIN,
    OBJECTIVES,
)
from gguf_bench.results.schema.records import RunRecord


@dataclass(frozen=True)
class Question:
    """What a sweep's verdicts answer: the margin (%) a less simple setting must clear, and the objective's figure."""

    margin: float = MARGIN
    objective: str = "decode"


def question(runs: list[RunRecord]) -> Question:
    """The question the runs' sweeps stored (parts.order.Order.margin, .objective), where they all stored the same one;
    else the defaults (files written before it was stored, or sweeps that asked different questions)."""
    def one(values: set):
        return next(iter(values)) if len(values) == 1 else None
    orders = [r.order for r in runs if r.order is not None]
    margin = one({o.margin for o in orders if o.margin is not None})
    objective = one({o.objective for o in orders if o.objective is not None})
    return Question(MARGIN if margin is None else float(margin), objective if objective in OBJECTIVES else "decode")


def _decided(row: pd.Series, prefix: str = "", margin: float = MARGIN) -> bool | None:
    """Whether the row's gain (prefix: another declared field's, NAME_) is decided: faster by more than the margin or
    slower (interval_verdict at `margin` %); an unpaired gain also needs a target alone that did not
    drift; never on a busy baseline. None where no interval could be computed."""
    if row.get("mode") != "speculative":
        return None
    lo, hi = row.get(f"{prefix}gain_lo"), row.get(f"{prefix}gain_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return None
    if _blocked(row, prefix):
        return False
    return interval_verdict(lo, hi, margin) in ("faster", "slower")


def _blocked(row: pd.Series, prefix: str = "") -> bool:
    """Whether the row's runs can decide nothing whatever their interval: a busy machine, or an unpaired gain on a
    target alone that drifted."""
    if row.get("baseline_busy") is True or "busy" in str(row.get("unreliable") or ""):
        return True
    return row.get(f"{prefix}gain_test") == "unpaired" and abs(row.get("drift_pct") or 0) > 100 * DRIFT


def _verdict(row: pd.Series, margin: float, prefix: str = "") -> str | None:
    """One of VERDICTS for a speculative row's gain over its target alone (None for the other rows): 'faster' or
    'slower' where it is decided (_decided), 'the same' where its whole corrected interval lies within ±margin %, else
    'undecided' (no interval, an interval too wide, a busy or drifting machine)."""
    if row.get("mode") != "speculative":
        return None
    lo, hi = row.get(f"{prefix}gain_lo"), row.get(f"{prefix}gain_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi) or _blocked(row, prefix):
        return "undecided"
    return interval_verdict(lo, hi, margin)


def interval_verdict(lo: float, hi: float, margin: float) -> str:
    """A corrected interval of a difference in % -> one of VERDICTS. The margin decides (docs/verdicts.md): 'faster'
    only where the whole interval lies above +margin (a gain that pays for what the less simple setting costs);
    'same' where it lies within ±margin (two one-sided tests at the interval's level: the simpler setting is chosen);
    'slower' where it lies below zero; else 'undecided' (above zero but not told above the margin, or holding zero).
    An interval of zero width (every ratio the same: copies, not measurements) decides nothing."""
    if not hi > lo:
        return "undecided"
    if lo > margin:
        return "faster"
    if -margin <= lo and hi <= margin:
        return "same"
    return "slower" if hi < 0 else "undecided"


def verdict_of(row: pd.Series) -> str | None:
    """A summary row's verdict (VERDICTS; None for a row that is not speculative or has no test)."""
    v = row.get("verdict")
    if isinstance(v, str):
        return v
    d = gain_decided(row)  # a frame without the column (tune's): faster or slower, else nothing to say
    return None if d is None else ("faster" if row.get("gain_pct", 0) > 0 else "slower") if d else "undecided"


def margin_of(frame: pd.DataFrame | pd.Series) -> float:
    """The equivalence margin (%) a summary's verdicts were read with (MARGIN where it does not say)."""
    m = frame.get("margin_pct")
    if isinstance(m, pd.Series):
        m = m.dropna().iloc[0] if m.notna().any() else None
    return MARGIN if m is None or pd.isna(m) else float(m)


def simplicity(row: pd.Series) -> tuple:
    """What a deployment costs, smaller first: no draft over a draft (the target alone, then drafting without a
    model, then with one), fewer GPU layers (target, then draft), then the smaller K."""
    def layers(v) -> float:
        try:
            return float(v)
        except (TypeError, ValueError):
            return float("inf")  # 'all'
    spec = row.get("mode") == "speculative"
    model = spec and "draft" in str(row.get("strategy") or "draft")
    return (spec, model, layers(row.get("ngl")), layers(row.get("ngld")) if spec else 0.0, float(row.get("k") or 0))

SIMPLER_WHY = ("no speculation", "no draft model", "fewer GPU layers", "fewer draft GPU layers", "the smaller K")


def _undecided_why(row: pd.Series, margin: float = MARGIN) -> str:
    """Why a row's interval, which excludes zero, still decides nothing ('' where it decides or has none): 'busy',
    'drift' (its unpaired runs), 'margin' (above zero, not told above the margin), 'zero width'."""
    lo, hi = row.get("gain_lo"), row.get("gain_hi")
    if row.get("decided") is not False or pd.isna(lo) or not (lo > 0 or hi < 0):
        return ""
    if row.get("baseline_busy") is True or "busy" in str(row.get("unreliable") or ""):
        return "busy"
    if _blocked(row):
        return "drift"
    if not hi > lo:
        return "zero width"
    return "margin" if interval_verdict(lo, hi, margin) == "undecided" else ""


def gain_decided(row: pd.Series) -> bool | None:
    """Whether a row's gain is told apart from zero (its interval, corrected for the rows that compete, excludes zero:
    gain_tests, _decided); None where no interval was possible."""
    if "decided" in row.index:
        d = row["decided"]
        return None if d is None or (not isinstance(d, bool) and pd.isna(d)) else bool(d)
    p = row.get("gain_p")  # a frame of another shape (tune's): the uncorrected test
    return None if p is None or pd.isna(p) else bool(p < GAIN_LEVEL)


def own_engine(rows: pd.DataFrame) -> pd.DataFrame:
    """A workload's rows that a deploy line may rest on: where llama-server itself was measured (an engine that runs a
    server process), only its rows, so that the line's figure is its command's own; else every row (the Python loop's
    figure, which the line says to check with --engine server)."""
    if "engine" not in rows:
        return rows
    served = rows["engine"].map(lambda e: isinstance(e, str) and capabilities.of(e).server_process)
    return rows[served] if served.any() and not served.all() else rows
