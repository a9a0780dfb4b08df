"""What to deploy at each slot count: the crossover map of a sweep over llama-server's --parallel (and --clients).

The best speculative setting depends on how many requests share the server: a draft that pays at one client can cost
at four. For each slot count of a setting (everything but the concurrency the same), the map gives the best
speculative row whose gain is decided (summary.gain_decided: its corrected interval excludes zero), its gain over the
target alone measured at that same slot count, and where speculation stops paying. A slot count without its target
alone, or without some speculative row that other counts have, is named, so that a gap never reads as a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gguf_bench.results.decision.choice import (  # noqa: F401 (the names callers import from here)
    OTHER,
    ROW,
    SPEC,
    WORKLOAD,
    _varying,
    beats_fastest_alone,
    busy_above,
    candidates,
    faster_p,
    is_one_of,
    open_verdicts,
    over_fastest,
)
from gguf_bench.results.decision.comparisons import simplest_same
from gguf_bench.results.decision.terms import CONCURRENCY, FLAGS
from gguf_bench.results.decision.units import matching
from gguf_bench.results.decision.verdicts import gain_decided, margin_of, verdict_of
from gguf_bench.results.decision.wording import gain_text, over_text, row_label, setting_label  # noqa: F401


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
