"""What to deploy at each slot count: the crossover map of a sweep over llama-server's --parallel (and --clients).

The best speculative setting depends on how many requests share the server: a draft that pays at one client can cost
at four. For each slot count of a setting (everything but the concurrency the same), the map gives the best
speculative row whose gain a test tells from zero (report.gain_decided), its gain over the target alone measured at
that same slot count, and where speculation stops paying. A slot count without its target alone, or without some
speculative row that other counts have, is named, so that a gap never reads as a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gguf_bench.results.report import _VARYING as FLAGS
from gguf_bench.results.report import row_label
from gguf_bench.results.summary import CONCURRENCY, SETTING, gain_decided, matching

REST = [c for c in SETTING if c not in CONCURRENCY]  # what a crossover map keeps the same
SPEC = ["strategy", "k"]  # one speculative setting


def candidates(rows: pd.DataFrame) -> list:
    """Indexes of the rows that may be deployed, best first: the speculative rows with a positive gain that the test
    tells from zero (never one that drafted nothing: its gain is NaN), by gain, then the target alone. A busy
    machine's rows are never candidates; a spread does not disqualify (prompts of different kinds differ by design)."""
    reliable = ~rows.get("unreliable", pd.Series("", index=rows.index)).fillna("").str.contains("busy")
    decided = rows.apply(gain_decided, axis=1) == True  # noqa: E712 (None: no test possible)
    spec = rows[(rows["mode"] == "speculative") & (rows["gain_pct"] > 0) & reliable & decided]
    alone = rows[(rows["mode"] == "target") & reliable]
    return list(spec.sort_values("gain_pct", ascending=False).index) + list(alone.index[:1])


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


def maps(summary: pd.DataFrame) -> list[tuple[pd.Series, list[SlotCount], list[str]]]:
    """Per setting measured at more than one slot count: (its first row, each slot count in order, what is missing)."""
    if "parallel" not in summary or summary["parallel"].isna().all():
        return []
    rows = summary[summary["parallel"].notna() & (summary["mode"] != "draft")]
    out = []
    for _, group in rows.groupby(REST, dropna=False, sort=False):
        counts = group.sort_values(CONCURRENCY).groupby(CONCURRENCY, dropna=False, sort=False)
        if counts.ngroups < 2:
            continue
        out.append((group.iloc[0], [slot_count(c) for _, c in counts], missing(group)))
    return out


def slot_count(rows: pd.DataFrame) -> SlotCount:
    """The best deployable speculative row of one slot count, and why none is where none is."""
    first = rows.iloc[0]
    label = slots_label(first["parallel"], first["clients"])
    spec = rows[rows["mode"] == "speculative"]
    if not (rows["mode"] == "target").any():
        return SlotCount(label, None, "no target alone at this slot count: no gain to compute", known=False)
    if spec.empty:
        return SlotCount(label, None, "no speculative row", known=False)
    best = next((rows.loc[i] for i in candidates(rows) if rows.loc[i, "mode"] == "speculative"), None)
    if best is not None:
        return SlotCount(label, best, f"{row_label(best)} {best['gain_pct']:+.1f}% (p={best['gain_p']:.2g})")
    gained = spec[spec["gain_pct"].notna()]
    if gained.empty:
        return SlotCount(label, None, "no speculative row drafted")
    top = gained.loc[gained["gain_pct"].idxmax()]
    if top["gain_pct"] <= 0:
        return SlotCount(label, None, f"none gains (best {row_label(top)} {top['gain_pct']:+.1f}%)")
    if "busy" in str(top.get("unreliable") or ""):
        return SlotCount(label, None, f"{row_label(top)} {top['gain_pct']:+.1f}% on a busy machine: not counted")
    why = "one run per prompt" if pd.isna(top["gain_p"]) else f"p={top['gain_p']:.2g}"
    return SlotCount(label, None, f"~{row_label(top)} {top['gain_pct']:+.1f}%, not told from zero ({why})",
                     undecided=True)


def missing(group: pd.DataFrame) -> list[str]:
    """'K=8 at 4 slots': each speculative setting measured at some slot counts of the map and not at others (a failed
    cell or a sweep cut short), and each slot count without its target alone."""
    out = []
    counts = group.groupby(CONCURRENCY, dropna=False, sort=True)
    labels = {key: slots_label(*key) for key, _ in counts}
    spec = group[group["mode"] == "speculative"]
    settings = spec.drop_duplicates(SPEC)
    for _, setting in settings.iterrows():
        have = spec[(spec["strategy"] == setting["strategy"]) & (spec["k"] == setting["k"])]
        lack = [labels[key] for key, _ in counts if not _has(have, key)]
        if lack:
            out.append(f"{row_label(setting)} at {', '.join(lack)}")
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


def lines(summary: pd.DataFrame) -> list[str]:
    """The map as text, per setting measured at more than one slot count (named by what differs between settings)."""
    out = []
    varying = [c for c in REST if c != "pair" and c in summary and summary[c].nunique(dropna=False) > 1]
    for first, counts, lacking in maps(summary):
        where = " · ".join(f"{FLAGS.get(c, c)} {first[c]}" for c in varying)
        out.append(f"{first['pair']}{f' ({where})' if where else ''} per slot count: the best speculative setting, "
                   "its gain over the target alone there")
        out += [f"  {c.label}: {c.verdict}" for c in counts]
        out.append(f"  {crossover(counts)}")
        if lacking:
            out.append(f"  not measured: {'; '.join(lacking)}")
    return out


def markdown(summary: pd.DataFrame) -> str:
    """The map for `report --format md`: a list under a heading, empty where no setting ran at several slot counts."""
    text = lines(summary)
    if not text:
        return ""
    return "\n### Per slot count\n\n" + "".join(f"- {ln}\n" if not ln.startswith("  ") else f"  - {ln.strip()}\n"
                                                  for ln in text)
