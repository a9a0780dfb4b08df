"""Estimates of a gain with their intervals: paired run by run within a block (over repetitions where runs came in
chunks of one load), Welch's test where runs were not interleaved, corrected (Bonferroni) for the rows of a workload
and -r auto's looks; the drift and the pairs' gaps in time."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from gguf_bench.results.decision.terms import (
    ACROSS,
    ALTERNATIVES,
    BLOCK,
    CHUNK,
    DRIFT,
    DRIFT_RUNS,
    FAMILY,
    GAIN_LEVEL,
    MARGIN,
    SPECULATION,
)
from gguf_bench.results.decision.units import in_chunks, matching
from gguf_bench.results.decision.verdicts import interval_verdict


def gain_tests(ok: pd.DataFrame, setting: list[str], keys: list[str], value: str = "tokens_per_s") -> pd.DataFrame:
    """Per speculative row (keys): its gain over the target alone in `value` and a 95% interval, corrected (Bonferroni)
    for the comparisons of its FAMILY that compete for the same verdict: its speculative rows against their targets
    alone, and those of another setting than the family's fastest target alone against that one too
    (over_fastest_alone).

    Paired where the runs were interleaved (parts.order.Order: both sides have a `design`): each run against the target
    alone of its own block (same setting, sweep, prompt and repetition, measured next to it: BLOCK), the gain the
    geometric mean of those ratios, the interval a t-interval on their logarithms (`gain_test` 'paired'; over the
    repetitions' means where the runs were measured in chunks of a repetition: in_chunks). Several
    sweeps of one grid add their pairs (never a cross product). A pair with a busy run (busy) is left out. Files
    written before runs were interleaved: Welch's t-test of the two rows' runs (busy ones left out), each over its
    prompt's target-alone mean ('unpaired'). Columns: gain_pct (paired only; summarize takes the ratio of means for the
    rest), gain_lo, gain_hi, gain_p (uncorrected), gain_pairs, gain_busy (pairs, or unpaired runs, left out: busy),
    gain_test, gain_family (the comparisons corrected for: rows x looks), gain_looks (-r auto's looks)."""
    baseline = [c for c in setting if c not in SPECULATION]
    alone = ok[ok["mode"] == "target"]
    out = []
    for _, rows in ok[ok["mode"] == "speculative"].groupby(keys, dropna=False):
        first = rows.iloc[0]
        base = alone[matching(alone, first, baseline) & alone["prompt_id"].isin(rows["prompt_id"])]
        looks = pd.to_numeric(rows.get("looks", pd.Series(dtype=float)), errors="coerce").max()
        out.append({**{k: first[k] for k in keys}, **_estimate(rows, base, value),
                    "_looks": 1 if pd.isna(looks) else int(looks)})
    columns = [*keys, "gain_pct", "gain_lo", "gain_hi", "gain_p", "gain_pairs", "gain_busy", "gain_test", "gain_family",
               "gain_looks"]
    frame = pd.DataFrame(out, columns=[*columns, "_est", "_se", "_dof", "_looks"])
    frame["gain_looks"] = frame["_looks"]
    if frame.empty:
        return frame[columns]
    testable = frame["_se"].notna()
    family = [k for k in FAMILY if k in frame]
    compared = testable.astype(int) + (testable & _crossed(frame, ok, baseline)).astype(int)  # + one against another
    # setting's fastest target alone
    frame["gain_family"] = (compared.groupby([frame[k] for k in family], dropna=False).transform("sum") if family else int(
        compared.sum())) * frame["_looks"]  # -r auto: every look is one more chance of a false decision
    for i, r in frame[testable].iterrows():
        half = stats.t.ppf(1 - GAIN_LEVEL / 2 / max(1, int(r["gain_family"])), r["_dof"]) * r["_se"]
        lo, hi = r["_est"] - half, r["_est"] + half
        frame.loc[i, ["gain_lo", "gain_hi"]] = ([100 * np.expm1(lo), 100 * np.expm1(hi)] if r["gain_test"] == "paired"
                                                else [100 * lo, 100 * hi])
    return frame[columns]


def fastest_alone(ok: pd.DataFrame, baseline: list[str]) -> pd.DataFrame:
    """Per family (FAMILY), the fastest target alone that busy runs left reliable (at least 2 good runs, or none busy):
    its baseline keys and `_speed` (the mean of its good runs, as the summary row's)."""
    alone = ok[ok["mode"] == "target"]
    rows = []
    for key, runs in alone.groupby(baseline, dropna=False):
        good = runs[~runs["_busy"]] if "_busy" in runs else runs
        speed = pd.to_numeric((good if len(good) else runs)["tokens_per_s"], errors="coerce").mean()
        if len(good) == len(runs) or len(good) >= 2:
            rows.append(dict(zip(baseline, key)) | {"_speed": speed})
    frame = pd.DataFrame(rows, columns=[*baseline, "_speed"])
    frame = frame[frame["_speed"].notna()].sort_values("_speed", ascending=False, kind="stable")
    family = [k for k in ALTERNATIVES if k in baseline]
    return frame.groupby(family, dropna=False, sort=False).head(1) if family else frame.head(1)


def _crossed(rows: pd.DataFrame, ok: pd.DataFrame, baseline: list[str]) -> pd.Series:
    """Per speculative row, whether its family's fastest target alone (fastest_alone) is another setting's: the deploy
    line then compares the row with that one too (over_fastest_alone), one more comparison of the family."""
    fastest = fastest_alone(ok, baseline)
    family = [k for k in ALTERNATIVES if k in baseline]
    out = pd.Series(False, index=rows.index)
    for i, row in rows.iterrows():
        theirs = fastest[matching(fastest, row, family)]
        out[i] = not theirs.empty and not bool(matching(theirs.iloc[:1], row, baseline).iloc[0])
    return out


def over_fastest_alone(summary: pd.DataFrame, ok: pd.DataFrame, baseline: list[str], keys: list[str],
                       margin: float = MARGIN) -> pd.DataFrame:
    """The summary with each speculative row's advantage in tokens/s over its family's fastest target alone where that
    one is another setting's (another -ngl, engine, context; fastest_alone): `over_pct` and its interval `over_lo`,
    `over_hi` (corrected as the row's gain is: gain_family counts these comparisons), `over_test` ('paired': both
    rows' runs were interleaved in one sweep, each run over the other setting's of the same block; 'unpaired':
    measured apart, Welch's test), `over_pairs`, `over_decided` (its interval above the margin, and unpaired only on targets
    alone that did not drift), `over_alone` (that target alone's tokens/s) and `over_setting` ('ngl=99': where it
    differs). Columns only where some row has such a comparison."""
    columns = ["over_pct", "over_lo", "over_hi", "over_test", "over_pairs", "over_decided", "over_alone", "over_setting"]
    fastest = fastest_alone(ok, baseline)
    family = [k for k in ALTERNATIVES if k in baseline]
    good = ok[~ok["_busy"]] if "_busy" in ok else ok
    found = {}
    for i, row in summary[summary["mode"] == "speculative"].iterrows():
        theirs = fastest[matching(fastest, row, family)]
        if theirs.empty or bool(matching(theirs.iloc[:1], row, baseline).iloc[0]):
            continue
        alt = theirs.iloc[0]
        mine = good[matching(good, row, keys)]
        alone = good[(good["mode"] == "target") & matching(good, alt, baseline)]
        est = advantage(mine, alone)
        level = GAIN_LEVEL / 2 / max(1, int(row["gain_family"]) if pd.notna(row.get("gain_family")) else 1)
        lo = hi = float("nan")
        if pd.notna(est["_se"]):
            half = stats.t.ppf(1 - level, est["_dof"]) * est["_se"]
            lo, hi = est["_est"] - half, est["_est"] + half
            lo, hi = (100 * np.expm1(lo), 100 * np.expm1(hi)) if est["gain_test"] == "paired" else (100 * lo, 100 * hi)
        pct = est["gain_pct"] if est["gain_test"] == "paired" else 100 * (row["tokens_per_s"] / alt["_speed"] - 1)
        drifted = summary[(summary["mode"] == "target") & (matching(summary, row, baseline)
                                                           | matching(summary, alt, baseline))]["drift_pct"].abs()
        steady = est["gain_test"] == "paired" or not (drifted > 100 * DRIFT).any()
        found[i] = {"over_pct": pct, "over_lo": lo, "over_hi": hi, "over_test": est["gain_test"],
                    "over_pairs": est["gain_pairs"], "over_decided": bool(pd.notna(lo) and steady
                                                      and interval_verdict(lo, hi, margin) == "faster"),
                    "over_alone": alt["_speed"],
                    "over_setting": "; ".join(f"{c}={alt[c]}" for c in baseline if not matching(
                        pd.DataFrame([alt]), row, [c]).iloc[0])}
    if not found:
        return summary
    return summary.join(pd.DataFrame.from_dict(found, orient="index", columns=columns))


def advantage(mine: pd.DataFrame, theirs: pd.DataFrame, value: str = "tokens_per_s") -> dict:
    """A row's good runs against another setting's target alone (over_fastest_alone): paired run by run where both were
    interleaved in one sweep (every run has parts.order.Order's `design`, and `settings_design`: the sweep's settings took
    turns) on BLOCK and ACROSS, else Welch's test (measured apart); _estimate's keys."""
    def interleaved(side: pd.DataFrame) -> bool:
        return all(c in side and side[c].notna().all() for c in ("design", "settings_design"))
    shared = "_sweep" not in mine or bool(set(mine["_sweep"]) & set(theirs["_sweep"]))
    if not mine.empty and not theirs.empty and interleaved(mine) and interleaved(theirs) and shared:
        return _paired(mine, theirs, value, BLOCK + ACROSS, across=True)
    p, est, se, dof = _welch(mine, theirs, value)
    return {"gain_pct": float("nan"), "gain_p": p, "gain_pairs": 0, "gain_busy": 0, "gain_test": "unpaired",
            "_est": est, "_se": se, "_dof": dof}


def _estimate(spec: pd.DataFrame, alone: pd.DataFrame, value: str, across: bool = False) -> dict:
    """The gain's estimate: paired where both rows' runs were interleaved, else unpaired (gain_tests); busy runs left
    out (with their pairs). across: the two rows are of two settings (_paired)."""
    if "design" in spec and spec["design"].notna().all() and alone["design"].notna().all():
        return _paired(spec, alone, value, across=across)
    lost = 0
    if "_busy" in spec:
        lost = int(spec["_busy"].sum() + alone["_busy"].sum())
        spec, alone = spec[~spec["_busy"]], alone[~alone["_busy"]]
    p, est, se, dof = _welch(spec, alone, value)
    return {"gain_pct": float("nan"), "gain_p": p, "gain_pairs": 0, "gain_busy": lost, "gain_test": "unpaired",
            "_est": est, "_se": se, "_dof": dof}


def _paired(spec: pd.DataFrame, alone: pd.DataFrame, value: str, on: Sequence[str] = BLOCK,
            across: bool = False) -> dict:
    """Each speculative run over the target alone of its block (`on`: same sweep, prompt and repetition): the geometric
    mean of the ratios, and the t statistics of their logarithms (none with fewer than 2 pairs). A pair with a busy run
    on either side is left out (counted: gain_busy). Where the two sides ran in chunks of one repetition each (in_chunks:
    one llama-server process at a time, or, `across` settings, one load at a time), a repetition's pairs share the
    chunk's two loads and are one observation: the t statistics are over the repetitions' mean logarithms."""
    on = [c for c in on if c in spec and c in alone]
    flag = ["_busy"] if "_busy" in spec and "_busy" in alone else []
    both = spec[[*on, value, *flag]].merge(alone[[*on, value, *flag]], on=on, suffixes=("", "_alone"))
    lost = both["_busy"] | both["_busy_alone"] if flag else pd.Series(False, index=both.index)
    both = both[~lost.astype(bool)]
    ratio = pd.to_numeric(both[value], errors="coerce") / pd.to_numeric(both[f"{value}_alone"], errors="coerce")
    good = (ratio > 0) & np.isfinite(ratio)
    logs = np.log(ratio[good].to_numpy(dtype=float))
    n = len(logs)
    chunks = [c for c in CHUNK if c in both]
    obs = logs  # the observations: a pair each, or a repetition each where the pairs came in chunks
    if n and chunks and in_chunks(spec, alone, across):
        obs = pd.Series(logs).groupby([both.loc[good, c].astype(str).to_numpy() for c in chunks]).mean().to_numpy()
    out = {"gain_pct": 100 * np.expm1(obs.mean()) if n else float("nan"), "gain_pairs": n, "gain_test": "paired",
           "gain_busy": int(lost.sum()), "gain_p": float("nan"), "_est": float("nan"), "_se": float("nan"),
           "_dof": float("nan")}  # the gain the centre of its interval
    if len(obs) >= 2:
        se = float(obs.std(ddof=1) / np.sqrt(len(obs)))  # 0: every ratio the same, an interval of zero width (it
        # decides nothing: interval_verdict)
        p = float(2 * stats.t.sf(abs(obs.mean() / se), len(obs) - 1)) if se > 0 else 1.0
        out |= {"gain_p": p, "_est": obs.mean(), "_se": se, "_dof": len(obs) - 1}
    return out


def _welch(spec: pd.DataFrame, alone: pd.DataFrame, value: str = "tokens_per_s") -> tuple[float, float, float, float]:
    """Welch's t-test of the two rows' runs, each over its prompt's target-alone mean: (p, difference of the means, its
    standard error, Welch's degrees of freedom); NaN where a prompt has fewer than 2 runs in either row; p 1 where
    both rows' runs are all equal (nothing to tell apart)."""
    nan = (float("nan"),) * 4
    counts = [group.groupby("prompt_id").size() for group in (spec, alone)]
    if any(c.empty or c.min() < 2 for c in counts) or set(counts[0].index) != set(counts[1].index):
        return nan
    means = alone.groupby("prompt_id")[value].mean()
    a, b = (pd.to_numeric(group[value] / group["prompt_id"].map(means), errors="coerce").dropna()
            for group in (spec, alone))
    if len(a) < 2 or len(b) < 2:
        return nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = float(np.sqrt(va + vb))
    if se == 0:  # an interval of zero width: decides nothing (interval_verdict)
        return 1.0, float(a.mean() - b.mean()), 0.0, 1.0
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    p = stats.ttest_ind(a, b, equal_var=False).pvalue
    return (1.0 if pd.isna(p) else float(p)), float(a.mean() - b.mean()), se, float(dof)


def pair_gaps(ok: pd.DataFrame, setting: list[str], keys: list[str]) -> pd.DataFrame:
    """Per speculative row (keys), how far apart in time its runs and their target alone's (same setting, prompt and
    repetition: gain_tests' pairs) began (parts.order.Order.started), in seconds: `pair_gap_median_s`, `pair_gap_max_s`
    (NaN where the runs were not timed: older files)."""
    columns = [*keys, "pair_gap_median_s", "pair_gap_max_s"]
    if "started" not in ok:
        return pd.DataFrame(columns=columns)
    on = list(dict.fromkeys([*setting, *[c for c in BLOCK if c in ok]]))  # within one sweep, as gain_tests pairs
    spec = ok[ok["mode"] == "speculative"][list(dict.fromkeys([*keys, *on, "started"]))]
    alone = ok[ok["mode"] == "target"][[*on, "started"]]
    both = spec.merge(alone, on=on, suffixes=("", "_alone"))
    both["_gap"] = (pd.to_numeric(both["started"], errors="coerce") -
                    pd.to_numeric(both["started_alone"], errors="coerce")).abs()
    gaps = both.groupby(keys, dropna=False)["_gap"].agg(pair_gap_median_s="median", pair_gap_max_s="max")
    return gaps.reset_index()[columns]


def drift(ok: pd.DataFrame, setting: list[str]) -> pd.DataFrame:
    """Per setting, how its target alone moved during the sweep: its runs in the order they began (parts.order.Order), each
    over its prompt's mean, the last quarter's mean over the first quarter's, as % (`drift_pct`), with the runs and
    minutes it spans; NaN with fewer than DRIFT_RUNS timed runs (a quarter of fewer is one or two runs: noise)."""
    alone = ok[(ok["mode"] == "target")]
    out = []
    for key, rows in alone.groupby(setting, dropna=False):
        timed = rows[pd.to_numeric(rows.get("started"), errors="coerce").notna()] if "started" in rows else rows[:0]
        row = dict(zip(setting, key if isinstance(key, tuple) else (key,)))
        if len(timed) < DRIFT_RUNS:
            out.append(row | {"drift_pct": float("nan"), "drift_runs": len(timed), "drift_min": float("nan")})
            continue
        timed = timed.assign(_t=pd.to_numeric(timed["started"])).sort_values("_t")
        speed = timed["tokens_per_s"] / timed.groupby("prompt_id")["tokens_per_s"].transform("mean")
        q = max(1, len(timed) // 4)
        out.append(row | {"drift_pct": 100 * (speed.iloc[-q:].mean() / speed.iloc[:q].mean() - 1),
                          "drift_runs": len(timed), "drift_min": (timed["_t"].iloc[-1] - timed["_t"].iloc[0]) / 60})
    return pd.DataFrame(out, columns=[*setting, "drift_pct", "drift_runs", "drift_min"])

