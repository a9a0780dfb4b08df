"""The choice: which rows of a workload may be deployed (best first), which verdicts are still open and what to measure
again for them (`-r auto`), the row that busy runs hide. Reads the summary table (decision/table.py); prints nothing.
"""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from gguf_bench.results.decision.comparisons import compare, workload_family
from gguf_bench.results.decision.terms import BASELINE, CONCURRENCY, FAMILY, GAIN_LEVEL, SETTING
from gguf_bench.results.decision.units import matching
from gguf_bench.results.decision.verdicts import gain_decided, margin_of, verdict_of
from gguf_bench.results.decision.wording import row_label, setting_label

WORKLOAD = [c for c in FAMILY if c not in CONCURRENCY]  # what a crossover map keeps the same: a workload but its slots
OTHER = [c for c in SETTING if c not in FAMILY]  # what a workload's rows differ in beside the drafting (-ngl, engine)
ROW = SETTING + ["mode", "strategy", "k"]  # what tells a summary row apart
SPEC = [*OTHER, "strategy", "k"]  # one speculative setting of a workload


TWINS_NEVER_DEPLOYED = "ran on twins: their gain is shown, never deployed"  # why a twin's faster row is not the answer


def candidates(rows: pd.DataFrame) -> list:
    """Indexes of the rows that may be deployed, best first: the speculative rows that are decidedly faster than the
    fastest target alone (beats_fastest_alone), fastest first, then the target alone rows, fastest first. A row that
    drafted nothing is never a candidate (its gain is NaN), nor a row that busy runs left too few good ones
    (table._unreliable); a spread does not disqualify (prompts of different kinds differ by design). Nothing is
    decided across such a row: only rows faster than the fastest of them are candidates (busy_above names it)."""
    reliable = ~rows.get("unreliable", pd.Series("", index=rows.index)).fillna("").str.contains("busy")
    ok = rows[reliable & rows["tokens_per_s"].notna()]
    alone = ok[ok["mode"] == "target"].sort_values("tokens_per_s", ascending=False, kind="stable")
    if alone.empty:
        return []
    spec = ok[(ok["mode"] == "speculative") & ok["gain_pct"].notna()]
    if "twin" in spec:  # TWINS_NEVER_DEPLOYED: an agreeing twin's gain is shown (acceptance 1 by construction)
        spec = spec[spec["twin"] != True]  # noqa: E712
    spec = spec[spec.apply(lambda r: beats_fastest_alone(r, alone.iloc[0]), axis=1)] if not spec.empty else spec
    order = list(spec.sort_values("tokens_per_s", ascending=False, kind="stable").index) + list(alone.index)
    top = busy_above(rows)
    return order if top is None else [i for i in order if rows.loc[i, "tokens_per_s"] > top["tokens_per_s"]]


def busy_above(rows: pd.DataFrame) -> pd.Series | None:
    """The fastest row (target alone or speculative, any setting) that busy runs left too few good ones to judge
    (table._unreliable 'busy'), None where there is none: no row slower than it can be deployed in its place. A row
    that drafted nothing is none of them: it measured the target alone under another name, and is never deployed."""
    flagged = rows.get("unreliable", pd.Series("", index=rows.index)).fillna("").str.contains("busy")
    drafted = rows.get("no_drafts", pd.Series(None, index=rows.index, dtype=object)).isna()  # else the target alone
    busy = rows[flagged & drafted & rows["tokens_per_s"].notna() & rows["mode"].isin(["target", "speculative"])]
    return None if busy.empty else busy.loc[busy["tokens_per_s"].idxmax()]


def beats_fastest_alone(row: pd.Series, fastest: pd.Series) -> bool:
    """Whether a speculative row is decidedly faster than the fastest target alone of its slot count: its own gain is
    decided and positive, and where that target alone is another setting's (another -ngl, type of cache, engine), its
    speed is also told above that one's: by the summary's comparison of the two (summary.over_fastest_alone: paired
    where their runs were interleaved in one sweep, else Welch's, its interval corrected with the family's), else
    (a summary without it) by Welch's test on the two rows' figures, at the level the family is corrected to."""
    if gain_decided(row) is not True or row["gain_pct"] <= 0 or row["tokens_per_s"] <= fastest["tokens_per_s"]:
        return False
    if pd.isna(fastest.get("baseline_tokens_per_s")) or abs(row["baseline_tokens_per_s"] - fastest["tokens_per_s"]) < 1e-9:
        return True  # its own target alone is the fastest one
    if over_fastest(row, fastest):
        return row["over_decided"] == True  # noqa: E712 (NaN, a bool or numpy's)
    return faster_p(row, fastest) < GAIN_LEVEL / max(1, int(row.get("gain_family") or 1))


def over_fastest(row: pd.Series, alone: pd.Series) -> bool:
    """Whether the row's comparison with another setting's target alone (summary.over_fastest_alone) is with `alone`."""
    theirs = row.get("over_alone")
    return theirs is not None and pd.notna(theirs) and abs(theirs - alone["tokens_per_s"]) < 1e-9 * max(1.0, theirs)


def faster_p(row: pd.Series, other: pd.Series) -> float:
    """One-sided Welch p-value that `row`'s tokens/s is above `other`'s, from their means, spreads and run counts; 1
    where either has fewer than 2 runs."""
    n1, n2 = int(row.get("runs") or 0), int(other.get("runs") or 0)
    if n1 < 2 or n2 < 2:
        return 1.0
    res = stats.ttest_ind_from_stats(row["tokens_per_s"], row["tokens_per_s_std"] or 0.0, n1, other["tokens_per_s"],
                                     other["tokens_per_s_std"] or 0.0, n2, equal_var=False, alternative="greater")
    return 1.0 if pd.isna(res.pvalue) else float(res.pvalue)


def open_verdicts(summary: pd.DataFrame, runs: pd.DataFrame | None = None) -> list[tuple[list[dict], str]]:
    """Per workload (summary.FAMILY: the rows that compete for one deploy line) whose verdict is still open: the rows
    to measure again (their ROW keys: the two fastest speculative rows, their targets alone and the fastest target
    alone) and why. A verdict is closed either way (summary.VERDICTS): the fastest speculative row faster, slower or
    the same as its target alone within the summary's margin (the same and slower: the target alone is the answer);
    where it is faster, told above the fastest target alone and above a runner-up that may gain too, or the same as
    them (the simpler one is the answer; `runs`, to_frame's, makes that comparison: without them only "told above"
    closes it)."""
    margin = margin_of(summary)
    out = []
    for _, family in summary.groupby([c for c in FAMILY if c in summary], dropna=False, sort=False):
        if again := _busy_rows(family):  # rows that busy runs left too few good pairs: measured again, whatever else
            out.append(again)
        alone = family[(family["mode"] == "target") & family["tokens_per_s"].notna()]
        spec = family[(family["mode"] == "speculative") & family["gain_pct"].notna()]
        if alone.empty:
            continue
        if spec.empty or verdict_of(spec.loc[spec["tokens_per_s"].idxmax()]) in ("slower", "same"):
            if again := _open_between_alone(family, alone, runs, margin):  # the answer is a target alone: which one
                out.append(again)
            continue
        spec = spec.sort_values("tokens_per_s", ascending=False, kind="stable")
        fastest, best = alone.loc[alone["tokens_per_s"].idxmax()], spec.iloc[0]
        runner_up = spec.iloc[1] if len(spec) > 1 else None
        level = GAIN_LEVEL / max(1, int(best.get("gain_family") or 1))

        def told(a: pd.Series, b: pd.Series) -> bool:  # a above b, or the same within the margin: closed
            return runs is not None and compare(a, b, runs, margin).verdict in ("faster", "same")

        why = []
        if verdict_of(best) in (None, "undecided"):
            why.append(f"{row_label(best)} against its target alone")
        elif verdict_of(best) == "faster":
            if (best["tokens_per_s"] > fastest["tokens_per_s"] and not beats_fastest_alone(best, fastest)
                    and not told(best, fastest)):
                why.append(f"{row_label(best)} against the fastest target alone")
            if (runner_up is not None and runner_up["gain_hi"] > 0 and faster_p(best, runner_up) >= level
                    and not told(best, runner_up)):
                why.append(f"{row_label(best)} against {row_label(runner_up)}")
        if why:
            rows = [best, fastest, *([runner_up] if runner_up is not None else [])]
            rows += [alone.loc[alone["tokens_per_s"] == r["baseline_tokens_per_s"]].iloc[0] for r in list(rows)
                     if r["mode"] == "speculative" and (alone["tokens_per_s"] == r["baseline_tokens_per_s"]).any()]
            out.append(([{k: r.get(k) for k in ROW} for r in rows], "; ".join(why)))
    return out


def _open_between_alone(family: pd.DataFrame, alone: pd.DataFrame, runs: pd.DataFrame | None,
                        margin: float) -> tuple[list[dict], str] | None:
    """Where a workload's answer is a target alone and several settings measured one (-ngl, context, engine): the
    fastest against the runner-up, open while their paired comparison (summary.compare) is undecided; the two rows to
    measure again and why, else None."""
    if len(alone) < 2 or runs is None:
        return None
    ranked = alone.sort_values("tokens_per_s", ascending=False, kind="stable")
    fastest, second = ranked.iloc[0], ranked.iloc[1]
    if compare(fastest, second, runs, margin, workload_family(family, runs)).verdict != "undecided":
        return None
    varying = _varying(family)
    return ([{k: r.get(k) for k in ROW} for r in (fastest, second)],
            f"{setting_label(fastest, varying)} against {setting_label(second, varying)}")


def _busy_rows(family: pd.DataFrame) -> tuple[list[dict], str] | None:
    """The rows of a workload that busy runs left too few good runs or pairs (table._unreliable 'busy') and the
    targets alone their pairs need (their ROW keys), and why; None where there is none."""
    flagged = family.get("unreliable", pd.Series("", index=family.index)).fillna("").str.contains("busy")
    rows = family[flagged & family["mode"].isin(["target", "speculative"])]
    if rows.empty:
        return None
    alone = family[family["mode"] == "target"]
    need = {i: family.loc[i] for i in rows.index}
    for _, r in rows[rows["mode"] == "speculative"].iterrows():
        need |= {i: alone.loc[i] for i in alone[matching(alone, r, BASELINE)].index}
    labels = ", ".join(row_label(r) for _, r in rows.iterrows())
    return ([{k: r.get(k) for k in ROW} for r in need.values()],
            f"{labels}: too few good runs (the machine was busy during the others)")


def is_one_of(row: dict, rows: list[dict]) -> bool:
    """Whether a run's row (run_fields.run_row) is one of these summary rows (ROW keys; None and NaN alike, 1 and 1.0
    alike)."""
    mine = tuple(_canon(row.get(k)) for k in ROW)
    return any(tuple(_canon(r.get(k)) for k in ROW) == mine for r in rows)


def _canon(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _varying(rows: pd.DataFrame) -> list[str]:
    """The settings beside the drafting (OTHER: -ngl, engine, ...) that differ between these rows."""
    return [c for c in OTHER if c in rows and rows[c].nunique(dropna=False) > 1]
