"""What to deploy at each slot count: the crossover map of a sweep over llama-server's --parallel (and --clients).

The best speculative setting depends on how many requests share the server: a draft that pays at one client can cost
at four. For each slot count of a setting (everything but the concurrency the same), the map gives the best
speculative row whose gain is decided (summary.gain_decided: its corrected interval excludes zero), its gain over the
target alone measured at that same slot count, and where speculation stops paying. A slot count without its target
alone, or without some speculative row that other counts have, is named, so that a gap never reads as a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from scipy import stats

from gguf_bench.results.presentation.report import _VARYING as FLAGS
from gguf_bench.results.presentation.report import row_label
from gguf_bench.results.presentation.summary import (
    BASELINE,
    CONCURRENCY,
    FAMILY,
    GAIN_LEVEL,
    SETTING,
    compare,
    gain_decided,
    margin_of,
    matching,
    simplest_same,
    verdict_of,
    workload_family,
)

WORKLOAD = [c for c in FAMILY if c not in CONCURRENCY]  # what a crossover map keeps the same: a workload but its slots
OTHER = [c for c in SETTING if c not in FAMILY]  # what a workload's rows differ in beside the drafting (-ngl, engine)
ROW = SETTING + ["mode", "strategy", "k"]  # what tells a summary row apart
SPEC = [*OTHER, "strategy", "k"]  # one speculative setting of a workload


def candidates(rows: pd.DataFrame) -> list:
    """Indexes of the rows that may be deployed, best first: the speculative rows that are decidedly faster than the
    fastest target alone (beats_fastest_alone), fastest first, then the target alone rows, fastest first. A row that
    drafted nothing is never a candidate (its gain is NaN), nor a row that busy runs left too few good ones
    (summary._unreliable); a spread does not disqualify (prompts of different kinds differ by design). Nothing is
    decided across such a row: only rows faster than the fastest of them are candidates (busy_above names it)."""
    reliable = ~rows.get("unreliable", pd.Series("", index=rows.index)).fillna("").str.contains("busy")
    ok = rows[reliable & rows["tokens_per_s"].notna()]
    alone = ok[ok["mode"] == "target"].sort_values("tokens_per_s", ascending=False, kind="stable")
    if alone.empty:
        return []
    spec = ok[(ok["mode"] == "speculative") & ok["gain_pct"].notna()]
    spec = spec[spec.apply(lambda r: beats_fastest_alone(r, alone.iloc[0]), axis=1)] if not spec.empty else spec
    order = list(spec.sort_values("tokens_per_s", ascending=False, kind="stable").index) + list(alone.index)
    top = busy_above(rows)
    return order if top is None else [i for i in order if rows.loc[i, "tokens_per_s"] > top["tokens_per_s"]]


def busy_above(rows: pd.DataFrame) -> pd.Series | None:
    """The fastest row (target alone or speculative, any setting) that busy runs left too few good ones to judge
    (summary._unreliable 'busy'), None where there is none: no row slower than it can be deployed in its place. A row
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


def faster_p(row: pd.Series, other: pd.Series) -> float:
    """One-sided Welch p-value that `row`'s tokens/s is above `other`'s, from their means, spreads and run counts; 1
    where either has fewer than 2 runs."""
    n1, n2 = int(row.get("runs") or 0), int(other.get("runs") or 0)
    if n1 < 2 or n2 < 2:
        return 1.0
    res = stats.ttest_ind_from_stats(row["tokens_per_s"], row["tokens_per_s_std"] or 0.0, n1, other["tokens_per_s"],
                                     other["tokens_per_s_std"] or 0.0, n2, equal_var=False, alternative="greater")
    return 1.0 if pd.isna(res.pvalue) else float(res.pvalue)


def gain_text(row: pd.Series) -> str:
    """'+40.2% [+31,+49]': a row's gain and its interval, where it has one (as the table shows them)."""
    gain = f"{row['gain_pct']:+.1f}%"
    lo, hi = row.get("gain_lo"), row.get("gain_hi")
    return gain if lo is None or pd.isna(lo) else f"{gain} [{lo:+.0f},{hi:+.0f}]"


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
    """The rows of a workload that busy runs left too few good runs or pairs (summary._unreliable 'busy') and the
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


@dataclass
class SlotCount:
    """One slot count of a map: its label, the best deployable speculative row (None: none gains), what was there."""

    label: str
    best: pd.Series | None
    verdict: str
    known: bool = True  # False: a row is missing that the verdict needs (the target alone, any speculative row)
    undecided: bool = False  # a positive gain that the test could not tell from zero

    @property
    def pays(self) -> bool:
        return self.best is not None


def slots_label(parallel, clients) -> str:
    """'2 slots', '4 clients on 2 slots'."""
    n, c = int(parallel), int(clients) if pd.notna(clients) else int(parallel)
    slots = f"{n} slot{'s' if n > 1 else ''}"
    return slots if c == n else f"{c} client{'s' if c > 1 else ''} on {slots}"


def maps(summary: pd.DataFrame, runs: pd.DataFrame | None = None) -> list[tuple[pd.Series, list[SlotCount], list[str]]]:
    """Per workload (summary.FAMILY but its slots and clients) measured at more than one slot count: (its first row,
    each slot count in order, what is missing). Each slot count's best is chosen among all the workload's rows there
    (every -ngl, engine, context setting, type and K), as its deploy line is; `runs` (to_frame's) let a simpler
    setting that is the same within the margin take its place."""
    if "parallel" not in summary or summary["parallel"].isna().all():
        return []
    rows = summary[summary["parallel"].notna() & (summary["mode"] != "draft")]
    out = []
    for _, group in rows.groupby([c for c in WORKLOAD if c in rows], dropna=False, sort=False):
        counts = group.sort_values(CONCURRENCY).groupby(CONCURRENCY, dropna=False, sort=False)
        if counts.ngroups < 2:
            continue
        varying = _varying(group)
        out.append((group.iloc[0], [slot_count(c, runs, varying) for _, c in counts], missing(group)))
    return out


def _varying(rows: pd.DataFrame) -> list[str]:
    """The settings beside the drafting (OTHER: -ngl, engine, ...) that differ between these rows."""
    return [c for c in OTHER if c in rows and rows[c].nunique(dropna=False) > 1]


def setting_label(row: pd.Series, varying: list[str]) -> str:
    """'-ngl 99 K=4': a row named by the settings that differ between the rows it is chosen from, then its drafting."""
    return " ".join([f"{FLAGS.get(c, c)} {row[c]}" for c in varying] + [row_label(row)])


def slot_count(rows: pd.DataFrame, runs: pd.DataFrame | None = None, varying: list[str] | None = None) -> SlotCount:
    """The best deployable speculative row of one slot count, and why none is where none is."""
    first = rows.iloc[0]
    label = slots_label(first["parallel"], first["clients"])
    varying = _varying(rows) if varying is None else varying
    margin = margin_of(rows)
    spec = rows[rows["mode"] == "speculative"]
    if not (rows["mode"] == "target").any():
        return SlotCount(label, None, "no target alone at this slot count: no gain to compute", known=False)
    if spec.empty:
        return SlotCount(label, None, "no speculative row", known=False)
    order = candidates(rows)
    top = next((i for i in order if rows.loc[i, "mode"] == "speculative"), None)
    if top is not None:
        chosen, replaced, why = simplest_same(rows.loc[order], top, runs, margin) if runs is not None else (top, None, "")
        best = rows.loc[chosen]
        if best["mode"] == "speculative":
            same = (f" (the same as {setting_label(rows.loc[replaced], varying)} within {margin:g}%: {why})"
                    if replaced is not None else "")
            return SlotCount(label, best, f"{setting_label(best, varying)} {gain_text(best)}{same}")
    gained = spec[spec["gain_pct"].notna()]
    if gained.empty:
        return SlotCount(label, None, "no speculative row drafted")
    top = gained.loc[gained["gain_pct"].idxmax()]
    name = setting_label(top, varying)
    if verdict_of(top) == "same":
        return SlotCount(label, None, f"≈{name} {gain_text(top)}: the same as the target alone within {margin:g}%")
    if top["gain_pct"] <= 0:
        return SlotCount(label, None, f"none gains (best {name} {top['gain_pct']:+.1f}%)")
    if "busy" in str(top.get("unreliable") or "") or top.get("baseline_busy") is True:
        return SlotCount(label, None, f"{name} {top['gain_pct']:+.1f}% on a busy machine: not counted")
    why = "fewer than 2 pairs: no interval" if pd.isna(top.get("gain_lo")) else "its interval holds zero" if (
        gain_decided(top) is False and top["gain_lo"] <= 0) else (top.get("undecided_why") or "not faster than the "
                                                                 "fastest target alone")
    return SlotCount(label, None, f"~{name} {gain_text(top)}, not told from zero ({why})", undecided=True)


def missing(group: pd.DataFrame) -> list[str]:
    """'K=8 at 4 slots': each speculative setting measured at some slot counts of the map and not at others (a failed
    cell or a sweep cut short), and each slot count without its target alone."""
    out = []
    counts = group.groupby(CONCURRENCY, dropna=False, sort=True)
    labels = {key: slots_label(*key) for key, _ in counts}
    spec = group[group["mode"] == "speculative"]
    keys = [c for c in SPEC if c in spec]
    varying = _varying(group)
    for _, setting in spec.drop_duplicates(keys).iterrows():
        have = spec[matching(spec, setting, keys)]
        lack = [labels[key] for key, _ in counts if not _has(have, key)]
        if lack:
            out.append(f"{setting_label(setting, varying)} at {', '.join(lack)}")
    alone = group[group["mode"] == "target"]
    lack = [labels[key] for key, _ in counts if not _has(alone, key)]
    return out + ([f"target alone at {', '.join(lack)}"] if lack else [])


def _has(rows: pd.DataFrame, key: tuple) -> bool:
    return bool(matching(rows, pd.Series(dict(zip(CONCURRENCY, key))), CONCURRENCY).any())


def crossover(counts: list[SlotCount]) -> str:
    """Where speculation stops paying: 'speculation pays up to 2 slots; at 4 slots and beyond, the target alone'. Slot
    counts with a row missing are left out of the verdict and named."""
    known = [c for c in counts if c.known]
    unknown = [c.label for c in counts if not c.known]
    tail = f"; unknown at {', '.join(unknown)}" if unknown else ""
    pays = [c.pays for c in known]
    if not known:
        return "no slot count has both the target alone and a speculative row: nothing to compare"
    if all(pays):
        return f"speculation pays at every slot count measured (up to {known[-1].label}){tail}"
    if not any(pays):
        open_ = [c.label for c in known if c.undecided]
        if open_:
            return (f"no gain told from zero at any slot count (undecided at {', '.join(open_)}: more -r decides): "
                    f"deploy the target alone{tail}")
        return f"speculation pays at none of them: deploy the target alone{tail}"
    last = max(i for i, p in enumerate(pays) if p)
    if all(pays[: last + 1]):
        return f"speculation pays up to {known[last].label}; at {known[last + 1].label} and beyond, the target alone{tail}"
    return ("speculation pays at " + ", ".join(c.label for c in known if c.pays) + "; not at "
            + ", ".join(c.label for c in known if not c.pays) + tail)


def lines(summary: pd.DataFrame, runs: pd.DataFrame | None = None) -> list[str]:
    """The map as text, per workload measured at more than one slot count (named by what differs between workloads)."""
    out = []
    varying = [c for c in WORKLOAD if c != "pair" and c in summary and summary[c].nunique(dropna=False) > 1]
    for first, counts, lacking in maps(summary, runs):
        where = " ".join(workload_part(c, first[c]) for c in varying)
        out.append(f"{first['pair']}{f' ({where})' if where else ''} per slot count: the best speculative setting, "
                   "its gain over the target alone there")
        out += [f"  {c.label}: {c.verdict}" for c in counts]
        out.append(f"  {crossover(counts)}")
        if lacking:
            out.append(f"  not measured: {'; '.join(lacking)}")
    return out


def workload_part(column: str, value) -> str:
    """'T=0.7', '-d 4096', '2048-token prompts', '-n 128', 'prompt code-short': one setting of a workload, as a
    deploy line names it."""
    if column == "temperature":
        return f"T={float(value):g}"
    if column == "depth":
        return f"-d {int(value)}" if pd.notna(value) else "-d 0"
    if column == "n_predict":
        return f"-n {value}"
    if column in ("top_k", "top_p"):
        return f"{column}={value:g}" if isinstance(value, float) else f"{column}={value}"
    if column == "prompt_length":
        return f"{int(value)}-token prompts" if value else "prompts as written"
    return f"{FLAGS.get(column, column)} {value}"


def markdown(summary: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """The map for `report --format md`: a list under a heading, empty where no workload ran at several slot counts."""
    text = lines(summary, runs)
    if not text:
        return ""
    return "\n### Per slot count\n\n" + "".join(f"- {ln}\n" if not ln.startswith("  ") else f"  - {ln.strip()}\n"
                                                  for ln in text)
