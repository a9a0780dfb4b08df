"""Records -> the summary table: loading results files, folding repetitions, testing gains, the verdict of each row.

The decision layer's table (one row per setting, its gain, interval and verdict): reads and writes no model, prints
nothing (presentation/ renders it; presentation/summary.py adds predictions). Gain % compares a row's mean tokens/s with the
target-alone baseline measured under the same pair, offload, temperature, length and machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import pandas as pd

from gguf_bench.errors import BenchError
from gguf_bench.results.decision.comparisons import (  # noqa: F401 (the names callers import from here)
    Comparison,
    compare,
    simplest_same,
    workload_family,
)
from gguf_bench.results.decision.estimates import (  # noqa: F401 (the names callers import from here)
    _crossed,
    _estimate,
    _paired,
    _welch,
    advantage,
    drift,
    fastest_alone,
    gain_tests,
    over_fastest_alone,
    pair_gaps,
)
from gguf_bench.results.decision.terms import (  # noqa: F401 (the names callers import from here)
    ACROSS,
    ALTERNATIVES,
    BASELINE,
    BLOCK,
    BY,
    CHUNK,
    CONCURRENCY,
    CONTEXT,
    DRIFT,
    DRIFT_RUNS,
    FAMILY,
    GAIN_LEVEL,
    MAIN_SHARE,
    MARGIN,
    OBJECTIVE_NAMES,
    OBJECTIVES,
    OTHERS_CORES,
    RUN_KEYS,
    SESSION_GAP_S,
    SETTING,
    SPECULATION,
    STEAL_CORES,
    VERDICTS,
)
from gguf_bench.results.decision.units import (  # noqa: F401 (the names callers import from here)
    balanced,
    busy,
    in_chunks,
    loads_of,
    matching,
    sessions,
    sweep_of,
)
from gguf_bench.results.decision.verdicts import (  # noqa: F401 (the names callers import from here)
    SIMPLER_WHY,
    Question,
    _blocked,
    _decided,
    _undecided_why,
    _verdict,
    gain_decided,
    interval_verdict,
    margin_of,
    question,
    simplicity,
    verdict_of,
)
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.fields import folds
from gguf_bench.results.schema.kinds import gain_pct
from gguf_bench.results.schema.records import OtherRecord, RunRecord, parse, read_file
from gguf_bench.results.schema.run_fields import RUN_FIELDS, run_row

SPREAD = 0.25  # std/mean of a row's runs of one prompt above which they disagree too much to rank the row
LOAD_FOLDS = {"load1": "max", "main_cpu_share": "min", "cpu_count": "max", "others_cores": "max", "steal_cores": "max"}
NO_REASON = "its drafter proposed no token"  # a row that drafted nothing, of records without a reason
TTFT_PROMPT_TOKENS = 128  # prompts of at least this many tokens (a row's mean) time their processing well enough for
# the table to show a speculative row's TTFT cost over its target alone (csv and json carry it for every row)
# --objective: what the gain, the star, -r auto's verdicts, the per-slot map and the deploy line read, each a tokens/s
# figure where higher is better (run_fields.RUN_FIELDS), so that one column serves every comparison: decode tokens/s;
# request: -n tokens over the request's latency (TTFT + -n tokens at the row's speed), whose ratio is the latencies'
# inverse (+20% = the request takes 1/1.2 of the time); throughput: every token over the wall time, prompts included


@dataclass
class Loaded:
    runs: list[RunRecord] = field(default_factory=list)
    evals: list[EvalRecord] = field(default_factory=list)
    calibrations: list[CalibrationRecord] = field(default_factory=list)
    others: list[OtherRecord] = field(default_factory=list)  # kinds of later versions
    unreadable: list[str] = field(default_factory=list)  # 'FILE line N' of each line that is not a record
    sources: list[str] = field(default_factory=list)  # the file each of `runs` came from (to_frame's `source`)


def load(paths: list[Path], default_dir: Path) -> Loaded:
    """Every record of the .jsonl files and folders given, split by kind. A run found twice (the same sweep, cell and
    start: a file copied beside itself, a folder given with one of its files) is kept once, from the first file."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            files.append(p)
        else:
            raise BenchError(f"results file {p} not found; `ls {default_dir}` shows stored sweeps")
    if not files:
        raise BenchError(f"no .jsonl results in {', '.join(map(str, paths))}; run `gguf-bench sweep` first")
    out = Loaded()
    seen: set = set()
    for f in files:
        records, bad = read_file(f)
        out.unreadable += bad
        for rec in records:
            if isinstance(rec, RunRecord):
                key = _run_key(rec)
                if key in seen:
                    continue
                seen.add(key)
                out.sources.append(str(f))
            {RunRecord: out.runs, EvalRecord: out.evals, CalibrationRecord: out.calibrations,
             OtherRecord: out.others}[type(rec)].append(rec)
    return out


def _run_key(rec: RunRecord) -> tuple:
    """What makes a run the same run wherever it is found: its sweep, cell and start (records without a start time or a
    cell: every stored field)."""
    started = rec.order.started if rec.order else None
    if rec.cell and started is not None:
        return rec.sweep, rec.cell, str(rec.mode), started
    return (repr(rec),)


def to_frame(records: list, sources: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run (records as RunRecord or stored dicts; other kinds are left out), with the file each came from
    (`source`: Loaded.sources; None where not given)."""
    runs = [r if isinstance(r, RunRecord) else parse(r) for r in records]
    where = list(sources) if sources is not None else [None] * len(runs)
    return pd.DataFrame([run_row(r) | {"source": w} for r, w in zip(runs, where) if isinstance(r, RunRecord)])


def for_objective(df: pd.DataFrame, objective: str = "decode") -> pd.DataFrame:
    """to_frame's runs with `tokens_per_s` holding the objective's figure (OBJECTIVES), so that summarize, compare and
    the verdicts read it; the decode speed kept as `decode_tokens_per_s`, the objective's name as `objective`. The
    frame unchanged for decode (and for a frame already set to an objective)."""
    if objective not in OBJECTIVES:
        raise BenchError(f"unknown objective '{objective}'; choose from {', '.join(OBJECTIVES)}")
    if objective == "decode" or "objective" in df or df.empty:
        return df
    value = pd.to_numeric(df[OBJECTIVES[objective]], errors="coerce") if OBJECTIVES[objective] in df else float("nan")
    return df.assign(decode_tokens_per_s=df["tokens_per_s"], tokens_per_s=value, objective=objective)


def objective_of(frame: pd.DataFrame | pd.Series) -> str:
    """The objective a frame or a summary row was read under (for_objective; 'decode' where it does not say)."""
    o = frame.get("objective")
    if isinstance(o, pd.Series):
        o = o.dropna().iloc[0] if o.notna().any() else None
    return o if isinstance(o, str) and o in OBJECTIVES else "decode"


def summarize(df: pd.DataFrame, by_prompt: bool = False, margin: float | None = None,
              objective: str = "decode") -> pd.DataFrame:
    """Fold repetitions (and prompts, unless by_prompt) into mean and std; add gain % and its `verdict` (faster,
    slower, the same within `margin` %, default MARGIN, or undecided) and best K (the best speculative row of each
    workload, FAMILY). `df` is to_frame's: every record upgraded to today's fields."""
    margin = MARGIN if margin is None else float(margin)
    if df.empty:
        raise BenchError("no runs in these results")
    df = for_objective(df, objective)  # callers that compare runs themselves (compare, deploy) pass it such a frame
    objective = objective_of(df)
    setting = SETTING + (["prompt_id"] if by_prompt else [])
    keys = setting + ["mode", "strategy", "k"]
    for f in RUN_FIELDS:  # None where a record has no such figure: NaN, so they aggregate as numbers
        if f.numeric:
            df = df.assign(**{f.name: pd.to_numeric(df[f.name], errors="coerce")})
    baseline = [c for c in setting if c not in SPECULATION]  # what a row shares with its target alone
    ok = df[df["error"].isna()]
    ok = ok.assign(_sweep=sweep_of(ok), _busy=busy(ok))
    # a busy run's figures are left out of its row (and its pairs, gain_tests), unless every run of the row was busy
    counted = ok[~ok["_busy"] | ok.groupby(keys, dropna=False)["_busy"].transform("all").astype(bool)]
    agg = _rows(df, ok, counted, keys, objective)
    gained = [f.name for f in RUN_FIELDS if f.gain and f.name in agg]  # other figures with a gain (tokens per joule)
    agg = _gains(agg, ok, counted, setting, keys, gained)
    agg["unreliable"] = agg.apply(_unreliable, axis=1)
    # a flag that withholds the star: busy always; spread only where the gains are unpaired (an older file): a paired
    # gain's interval is of its block-by-block ratios, which a drift that spreads the runs leaves alone
    paired = agg.groupby(baseline, dropna=False)["gain_test"].transform(lambda s: bool((s == "paired").any()))
    blocking = agg["unreliable"].str.contains("busy") | (agg["unreliable"].str.contains("spread") & ~paired)
    flagged = blocking.groupby([agg[c] for c in baseline], dropna=False).transform("any")
    agg["baseline_busy"] = agg.groupby(baseline, dropna=False)["unreliable"].transform(
        lambda s: bool(s[agg.loc[s.index, "mode"] == "target"].str.contains("busy").any()))
    agg = over_fastest_alone(agg, ok, baseline, keys, margin)  # the deploy line's advantage over another setting
    agg["decided"] = agg.apply(lambda r: _decided(r, margin=margin), axis=1)
    agg["undecided_why"] = agg.apply(lambda r: _undecided_why(r, margin), axis=1)
    agg["verdict"] = agg.apply(lambda r: _verdict(r, margin), axis=1)
    agg["margin_pct"] = margin  # the margin the verdicts were read with (csv, json; the captions name it)
    for name in gained:  # the speed gain's rule for the other gains (energy)
        agg[f"{name}_decided"] = agg.apply(lambda r, n=name: _decided(r, f"{n}_", margin), axis=1)
    agg = _starred(agg, ok, flagged, margin)
    agg["_order"] = agg["mode"].map({"target": 0, "draft": 1, "speculative": 2})
    agg["_default"] = agg["strategy"] != "draft"  # the draft model with fixed K first, then the other strategies
    agg = agg.sort_values(setting + ["_order", "_default", "strategy", "k"])
    return without_twin_quality(agg.drop(columns=["_order", "_default"]).reset_index(drop=True))


def _rows(df: pd.DataFrame, ok: pd.DataFrame, counted: pd.DataFrame, keys: list[str], objective: str) -> pd.DataFrame:
    """summarize's rows before any gain: each row's folded figures (its balanced speed), its runs, busy runs, sweeps,
    loads and failures, the machine over its runs, its draft lengths, spread and why it drafted nothing."""
    failed = df[df["error"].notna()].groupby(keys, dropna=False).size().rename("failed")
    decode = {"decode_tokens_per_s": ("decode_tokens_per_s", "mean")} if objective != "decode" else {}  # the decode
    # speed beside the objective's figure (tokens_per_s)
    agg = counted.groupby(keys, dropna=False).agg(runs=("tokens_per_s", "size"), **folds(RUN_FIELDS), **decode)
    agg["tokens_per_s"] = balanced(counted, keys, "tokens_per_s", agg["tokens_per_s"].to_numpy())
    every = ok.groupby(keys, dropna=False)  # the same groups, in the same order: every run, busy or not
    agg = agg.assign(runs=every.size().to_numpy(), busy_runs=every["_busy"].sum().to_numpy().astype(int),
                     sweeps=every["_sweep"].nunique().to_numpy(),  # how many sweeps (name and file) the row pools
                     load_count=counted.assign(_load=loads_of(counted)).groupby(keys, dropna=False)["_load"]
                     .nunique().to_numpy(),  # the loads (processes) its counted runs came from: the verdicts' units
                     **{n: every[n].agg(f).to_numpy() for n, f in LOAD_FOLDS.items() if n in agg})  # the machine over
    # every run of the row, the busy ones included (what the caption says of them)
    agg = agg.drop(columns=[f.name for f in RUN_FIELDS if f.optional and f.fold and agg[f.name].isna().all()])
    if df["twin"].any():  # a column only where a twin ran: files without one report as before
        agg = agg.join(df.groupby(keys, dropna=False)["twin"].any())
        agg = agg.join(df.groupby(keys, dropna=False)["twin_agrees"].all())
    agg = agg.join(failed, how="outer").join(_draft_lengths(ok, keys)).join(_spread(counted, keys))
    agg = agg.join(_no_drafts(ok, keys)).reset_index()
    for count in ("runs", "failed", "busy_runs", "sweeps"):
        agg[count] = agg[count].fillna(0).astype(int)
    if objective != "decode":
        agg["objective"] = objective
    return agg


def _gains(agg: pd.DataFrame, ok: pd.DataFrame, counted: pd.DataFrame, setting: list[str], keys: list[str],
           gained: list[str]) -> pd.DataFrame:
    """The rows with each one's target alone (baseline_tokens_per_s), its gain and interval (gain_tests: paired where
    interleaved, else the ratio of the means), the pairs' gaps in time, the target alone's drift, the other declared
    gains (`gained`: tokens per joule) by the same rule, and the time-to-first-token cost."""
    baseline = [c for c in setting if c not in SPECULATION]
    base = agg[agg["mode"] == "target"][baseline + ["tokens_per_s", "tokens_per_s_std", "ttft_s", *gained]].rename(
        columns={"tokens_per_s": "baseline_tokens_per_s", "tokens_per_s_std": "baseline_std",
                 "ttft_s": "_baseline_ttft_s", **{name: f"_baseline_{name}" for name in gained}})
    tests = gain_tests(ok, setting, keys)
    agg = agg.merge(base, on=baseline, how="left").merge(tests.astype({k: agg[k].dtype for k in keys}), on=keys, how="left")
    gaps = pair_gaps(ok, baseline, keys)  # the pairs gain_tests makes
    agg = agg.merge(gaps.astype({k: agg[k].dtype for k in keys}), on=keys, how="left")
    moved = drift(counted, baseline)
    agg = agg.merge(moved.astype({k: agg[k].dtype for k in baseline}), on=baseline, how="left")
    unpaired = gain_pct(agg["tokens_per_s"], agg["baseline_tokens_per_s"])  # also where no pair was left (busy)
    agg["gain_pct"] = agg["gain_pct"].where((agg["gain_test"] == "paired") & agg["gain_pct"].notna(), unpaired).where(
        agg["no_drafts"].isna())
    for name in gained:
        theirs = gain_tests(ok, setting, keys, name)
        agg = agg.merge(theirs.rename(columns={c: f"{name}_{c}" for c in theirs.columns if c not in keys})
                        .astype({k: agg[k].dtype for k in keys}), on=keys, how="left")
        agg[f"{name}_gain_pct"] = agg[f"{name}_gain_pct"].where(
            (agg[f"{name}_gain_test"] == "paired") & agg[f"{name}_gain_pct"].notna(),
            gain_pct(agg[name], agg.pop(f"_baseline_{name}"))).where(
            agg["no_drafts"].isna())
    return ttft_cost(agg, ok, setting, keys)


def _starred(agg: pd.DataFrame, ok: pd.DataFrame, flagged: pd.Series, margin: float) -> pd.DataFrame:
    """The rows with `best_k`: per workload with a choice to make, the fastest speculative row decided faster (or a
    simpler row the same as it), never among unreliable rows, twins' or rows that drafted nothing."""
    agg["best_k"] = False
    spec = agg[(agg["mode"] == "speculative") & agg["tokens_per_s"].notna() & ~flagged]  # no best among unreliable rows
    workload = [c for c in FAMILY if c in agg]  # one star per workload, as one deploy line
    spec = spec[spec.groupby(workload, dropna=False)["k"].transform("size") > 1]  # a choice to make
    spec = spec[(spec["decided"] == True) & (spec["gain_pct"] > 0)]  # noqa: E712 (None: no test); a star only on a decided gain
    if "twin" in agg:  # nor among twins': their K is fast or slow by the acceptance of synthetic weights
        spec = spec[spec["twin"] != True]  # noqa: E712
    spec = spec[spec["no_drafts"].isna()]  # never a row that drafted nothing
    if agg["no_drafts"].isna().all():  # a column only where some row drafted nothing: other files report as before
        agg = agg.drop(columns="no_drafts")
    if not spec.empty:
        for _, rows in spec.groupby(workload, dropna=False):  # the fastest, or a simpler row the same as it
            agg.loc[simplest_same(rows, rows["tokens_per_s"].idxmax(), ok, margin)[0], "best_k"] = True
    return agg

def ttft_cost(agg: pd.DataFrame, ok: pd.DataFrame, setting: list[str], keys: list[str]) -> pd.DataFrame:
    """The summary with each speculative row's time to first token over its target alone's, in % (+41: the first token
    comes 1.41x as late; the drafter's prompt processing): `ttft_cost_pct` and its interval `ttft_cost_lo`,
    `ttft_cost_hi`, paired and corrected exactly as the gain is (gain_tests on ttft_s); where no pair is left, the
    ratio of the means and no interval."""
    cost = gain_tests(ok, setting, keys, "ttft_s")[[*keys, "gain_pct", "gain_lo", "gain_hi", "gain_test"]].rename(
        columns={"gain_pct": "ttft_cost_pct", "gain_lo": "ttft_cost_lo", "gain_hi": "ttft_cost_hi",
                 "gain_test": "_ttft_test"})
    agg = agg.merge(cost.astype({k: agg[k].dtype for k in keys}), on=keys, how="left")
    ratio = gain_pct(agg["ttft_s"], agg.pop("_baseline_ttft_s"))
    paired = (agg.pop("_ttft_test") == "paired") & agg["ttft_cost_pct"].notna()
    return agg.assign(ttft_cost_pct=agg["ttft_cost_pct"].where(paired, ratio).where(agg["mode"] == "speculative"))


def _no_drafts(ok: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per speculative setting whose runs drafted no token at all: why (the runs' own reason, measure/proof.py); None
    for the others. Such a row measured the target alone under another name."""
    drafted = pd.to_numeric(ok.get("drafted", pd.Series(None, index=ok.index)), errors="coerce")
    why = ok.get("no_drafts", pd.Series(None, index=ok.index, dtype=object))
    rows = ok.assign(_drafted=drafted, _why=why).groupby(keys, dropna=False)
    total = rows["_drafted"].sum(min_count=1)
    none = (total.index.get_level_values("mode") == "speculative") & (total == 0)
    reason = rows["_why"].first().fillna(NO_REASON)
    return reason.where(none).rename("no_drafts")


def _draft_lengths(ok: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per setting, the rounds per draft length summed over its runs (a list: index = tokens drafted); None where
    no run counted them (the target or draft alone, files written before the counts, the server engine)."""
    def summed(histograms: pd.Series):
        lists = [h for h in histograms if isinstance(h, list)]
        return [sum(c) for c in zip_longest(*lists, fillvalue=0)] if lists else None
    column = ok["draft_lengths"] if "draft_lengths" in ok else pd.Series(None, index=ok.index, dtype=object)
    return ok.assign(draft_lengths=column).groupby(keys, dropna=False)["draft_lengths"].agg(summed)


def _spread(ok: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per setting, how far its runs of the same prompt disagree: the pooled coefficient of variation of each run's
    tokens/s about its own prompt's mean (NaN where no prompt ran twice). Different prompts run at different speeds by
    nature (a code edit drafts better than an open question), so runs pooled across prompts say nothing of noise."""
    by_prompt = ok.groupby(keys + ([] if "prompt_id" in keys else ["prompt_id"]), dropna=False)["tokens_per_s"]
    n = by_prompt.transform("size")
    runs = pd.DataFrame({"sq": (ok["tokens_per_s"] / by_prompt.transform("mean") - 1) ** 2,
                         "dof": (n - 1) / n}, index=ok.index)  # a prompt's n runs carry n - 1 degrees of freedom
    sums = runs.join(ok[keys]).groupby(keys, dropna=False)[["sq", "dof"]].sum()
    return ((sums["sq"] / sums["dof"].where(sums["dof"] > 0)) ** 0.5).rename("spread")


def _unreliable(row: pd.Series) -> str:
    """Why a row cannot be trusted: 'spread' (its runs of one prompt disagree: see _spread), 'busy' (runs measured while
    the machine had other work, busy, left it too few good ones: a speculative row no interval once the pairs with a
    busy run are left out, fewer than 2 good pairs; another row fewer than 2 good runs), both comma-joined, or ''. A
    row whose busy runs leave enough good ones is judged by those (`busy_runs` says how many were left out)."""
    why = []
    if pd.notna(row["spread"]) and row["spread"] > SPREAD:
        why.append("spread")
    if _too_busy(row):
        why.append("busy")
    return ",".join(why)


def _too_busy(row: pd.Series) -> bool:
    """Whether busy runs left the row too few good ones to judge it (_unreliable)."""
    def count(name: str) -> int:
        v = row.get(name)
        return 0 if v is None or pd.isna(v) else int(v)
    if row.get("mode") == "speculative":
        return count("busy_runs") + count("gain_busy") > 0 and pd.isna(row.get("gain_lo"))
    return count("busy_runs") > 0 and count("runs") - count("busy_runs") < 2


def without_twin_quality(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with the speculative rows of twins stripped of acceptance, tokens per round and gain: a twin's
    draft accepts by chance, and no figure of a twin is shown as the real model's. Agreeing twins' rows keep theirs:
    their acceptance is 1 by construction, and their gain is the loop's at acceptance 1 (the row is marked a twin)."""
    if "twin" not in summary:
        return summary
    agreeing = summary["twin_agrees"] == True if "twin_agrees" in summary else False  # noqa: E712
    spec = (summary["twin"] == True) & (summary["mode"] == "speculative") & ~agreeing  # noqa: E712 (NaN: no twin ran)
    return summary.assign(**{c: summary[c].where(~spec) for c in ("acceptance", "tokens_per_round", "gain_pct", "gain_lo",
                                                                  "gain_hi", "decided", "verdict") if c in summary})
