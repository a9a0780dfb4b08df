"""The units of a comparison: which runs belong together (a sweep, an invocation, a session, a load), which ran on a
busy machine, and a row's balanced speed. A pair never crosses a sweep or an invocation; a repetition measured in its own
loads is one observation (docs/verdicts.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gguf_bench.results.decision.terms import (
    MAIN_SHARE,
    OTHERS_CORES,
    SESSION_GAP_S,
    STEAL_CORES,
)
from gguf_bench.results.schema.parts.order import BLOCKS, LOADS_EACH, SETTINGS_CHUNKS


def matching(frame: pd.DataFrame, row: pd.Series, keys: Sequence[str]) -> pd.Series:
    """Which rows of `frame` equal `row` on every key both have (two missing values are equal)."""
    match = pd.Series(True, index=frame.index)
    for k in keys:
        if k in frame and k in row.index:
            match &= (frame[k] == row[k]) | (frame[k].isna() & pd.isna(row[k]))
    return match


def sweep_of(runs: pd.DataFrame) -> pd.Series:
    """Per run, the sweep it belongs to: its sweep's name, the file it was read from (to_frame's `source`) and the
    invocation that measured it (parts.order.Order.invocation), so that two files of one name, one file's runs under
    two names, and the runs a --resume or a re-run of failed cells added to a file are apart: a pair never crosses
    them. Runs stored before invocations were named pair only within a session (sessions)."""
    def column(name: str) -> pd.Series:
        return runs[name].astype(object).where(runs[name].notna(), "") if name in runs else pd.Series("", index=runs.index)
    where = column("sweep").astype(str) + "\x1f" + column("source").astype(str)
    named = column("invocation").astype(str)
    return where + "\x1f" + named.where(named != "", sessions(runs, where))


def sessions(runs: pd.DataFrame, where: pd.Series) -> pd.Series:
    """Per run, its session within `where` (its sweep and file), for records without an invocation: its runs in the
    order they began, cut where SESSION_GAP_S passed between one's end and the next's start ('~0', '~1', ...; '~'
    where the runs were not timed: one session)."""
    out = pd.Series("~", index=runs.index, dtype=object)
    if "started" not in runs:
        return out
    start = pd.to_numeric(runs["started"], errors="coerce")
    end = pd.to_numeric(runs["ended"], errors="coerce").fillna(start) if "ended" in runs else start
    for _, idx in where[start.notna()].groupby(where[start.notna()]).groups.items():
        order = start[idx].sort_values(kind="stable").index
        gap = start[order].to_numpy()[1:] - end[order].cummax().to_numpy()[:-1]
        number = np.concatenate([[0], np.cumsum(gap > SESSION_GAP_S)])
        out[order] = [f"~{n}" for n in number]
    return out


def busy(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether the machine had other work during it: other processes (a VM's neighbours among them) kept more
    than OTHERS_CORES cores busy, the hypervisor stole more than STEAL_CORES cores, or on a CPU-only run the generating
    thread got less than MAIN_SHARE of the wall time. Records written before the others' CPU time was measured are
    judged by their load average against the cores, as they were then."""
    def number(name: str) -> pd.Series:
        return pd.to_numeric(runs[name], errors="coerce") if name in runs else pd.Series(np.nan, index=runs.index)
    others, load1, cores = number("others_cores"), number("load1"), number("cpu_count")
    on_cpu = {side: runs[f"{side}_offload"].astype(str).str.strip().str.startswith("0/") if f"{side}_offload" in runs
              else pd.Series(False, index=runs.index) for side in ("target", "draft")}
    mode = runs["mode"] if "mode" in runs else pd.Series("", index=runs.index)
    cpu_only = (on_cpu["target"].where(mode != "draft", on_cpu["draft"])
                & on_cpu["draft"].where(mode == "speculative", True)).astype(bool)
    out = (others > OTHERS_CORES) | (others.isna() & (load1 > cores)) | (number("steal_cores") > STEAL_CORES)
    return (out | (cpu_only & (number("main_cpu_share") < MAIN_SHARE))).astype(bool)


def loads_of(runs: pd.DataFrame) -> pd.Series:
    """Per run, the load (model load, llama-server process) it ran in, as one text: its sweep and invocation, and its
    repetition where each repetition had a load of its own (parts.order.Order.loads 'each'); else one load a sweep."""
    fresh = runs["loads"] == LOADS_EACH if "loads" in runs else pd.Series(False, index=runs.index)
    return runs["_sweep"] + ("\x1f" + runs["repetition"].astype(str)).where(fresh, "")


def balanced(runs: pd.DataFrame, keys: list[str], value: str, plain) -> np.ndarray:
    """Per row (runs grouped by `keys`, in groupby's order), the mean of its prompts' means of `value`: every prompt
    weighs the same however many of its runs were left out (busy), so leaving out a slow prompt's runs does not lift
    the row. `plain` (the runs' mean, in the same order) where every prompt of the row has as many runs."""
    if "prompt_id" in keys or runs.empty:
        return np.asarray(plain)
    x = pd.to_numeric(runs[value], errors="coerce")
    group = [runs[k] for k in keys]
    per = x.groupby([*group, runs["prompt_id"]], dropna=False).transform("count")
    prompts = runs.assign(_p=runs["prompt_id"].where(x.notna())).groupby(keys, dropna=False)["_p"].transform("nunique")
    weighted = (x / (per * prompts)).groupby(group, dropna=False).sum(min_count=1)
    uneven = per.groupby(group, dropna=False).agg(lambda c: c.nunique() > 1)
    return np.where(uneven.to_numpy(), weighted.to_numpy(), np.asarray(plain))


def in_chunks(mine: pd.DataFrame, theirs: pd.DataFrame, across: bool) -> bool:
    """Whether two rows' runs were measured in chunks of one repetition each, so that the pairs of a repetition share its
    two chunks (a load, a process, the machine's state then): llama-server's one process at a time (design 'blocks'),
    a fresh load or process per repetition (--loads each: Order.loads), and, between two settings (`across`), one
    setting loaded at a time ('settings-chunks'). Measured so, the two
    prompts' pairs of an A/A's repetition decided a difference between identical llama-servers at the first look in 4
    of 100 sweeps (docs/verdicts.md)."""
    def values(column: str) -> set:
        return {v for side in (mine, theirs) if column in side for v in side[column].dropna()}
    return (BLOCKS in values("design") or LOADS_EACH in values("loads")
            or (across and SETTINGS_CHUNKS in values("settings_design")))

