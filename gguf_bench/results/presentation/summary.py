"""Records -> pandas summaries: loading results files, folding repetitions, testing gains, joining predictions.

Reads and writes no model; prints nothing (report.py renders). Gain % compares a row's mean tokens/s with the
target-alone baseline measured under the same pair, offload, temperature, length and machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from gguf_bench.errors import BenchError
from gguf_bench.options import CONTEXT_DEFAULTS
from gguf_bench.results.presentation.tuning import predicted_frame
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.fields import folds
from gguf_bench.results.schema.kinds import gain_pct
from gguf_bench.results.schema.parts.order import BLOCKS, LOADS_EACH, SETTINGS_CHUNKS
from gguf_bench.results.schema.records import OtherRecord, RunRecord, parse, read_file
from gguf_bench.results.schema.run_fields import RUN_FIELDS, run_row

CONTEXT = ["flash_attn", "cache_type_k", "cache_type_v", "batch_size", "ubatch_size", "threads_draft"]  # llama.cpp's
CONCURRENCY = ["parallel", "clients"]  # server engine: slots and clients of a round (None: one request at a time)
SPECULATION = ["verify"]  # settings of speculative runs only (a target alone has none): a row's, not its baseline's
SETTING = ["pair", "engine", "host", *CONCURRENCY, "ngl", "ngld", "placement", *CONTEXT, "threads", "n_ctx", "depth",
           "prompt_length", "temperature", "top_k", "top_p", "n_predict", *SPECULATION]
# a baseline shares these but SPECULATION (depth: tokens of context before the prompt; prompt_length:
# --prompt-tokens); files that differ in any of them never fold into one row
BASELINE = [c for c in SETTING if c not in SPECULATION]  # what a row shares with its target alone
BY = ("prompt", "host")  # what --by can keep apart (host is always kept apart)
SPREAD = 0.25  # std/mean of a row's runs of one prompt above which they disagree too much to rank the row
MAIN_SHARE = 0.75  # a CPU-only run whose generating thread got less of the wall time than this shared the CPU
OTHERS_CORES = 0.25  # a run beside other processes that kept more than this many cores busy (on average) was disturbed
STEAL_CORES = 0.05  # a VM's run whose cores the hypervisor gave to other guests for more than this many cores (on
# average) was disturbed: steal accrues only on a core that had work, so on a quiet machine it is time taken from the
# run's own threads (unlike another process on an idle core); 0.05 of a core is 5% of the generating thread's time,
# the change DRIFT names. It is inside others_cores too, which judges it by OTHERS_CORES where it is larger
LOAD_FOLDS = {"load1": "max", "main_cpu_share": "min", "cpu_count": "max", "others_cores": "max", "steal_cores": "max"}
BLOCK = ["_sweep", "prompt_id", "repetition"]  # a pair's runs share these (and the setting): measured in one block of
# one sweep (_sweep: the sweep's name and the file it came from, sweep_of)
# two settings' runs paired across (over_fastest_alone) share these too
ACROSS = ["temperature", "depth", "prompt_length", *CONCURRENCY]
CHUNK = ["_sweep", "repetition"]  # the runs one chunk of a repetition measured (in_chunks): one observation
NO_REASON = "its drafter proposed no token"  # a row that drafted nothing, of records without a reason
GAIN_LEVEL = 0.05  # a gain is decided where its 95% interval, corrected for the rows that compete, excludes zero
FAMILY = ["pair", "host", *CONCURRENCY, "depth", "prompt_length", "temperature", "top_k", "top_p", "n_predict",
          "prompt_id"]
# one workload: the rows that compete for one verdict (its deploy line, its ★, its -r auto verdicts; across offloads,
# top_k and top_p are part of it, as the temperature is: what the user asks of the model, never a setting to rank;
# context settings, engines, types and K's): a Bonferroni family. prompt_id only where the summary keeps prompts apart
# (--by prompt)
ALTERNATIVES = [*FAMILY, "engine"]  # the targets alone a speculative row is weighed against: its workload's, measured by
# its own engine (a llama-server command is never chosen over the Python loop's target alone, nor the other way)
MARGIN = 5.0  # % : two settings whose whole corrected interval lies within ±MARGIN are "the same" (docs/verdicts.md)
VERDICTS = ("faster", "slower", "same", "undecided")  # every comparison ends in one of these
DRIFT_RUNS = 8  # the fewest target-alone runs whose quarters say how the machine moved
DRIFT = 0.05  # the target alone moving more than this from the first quarter of its runs to the last is named
TTFT_PROMPT_TOKENS = 128  # prompts of at least this many tokens (a row's mean) time their processing well enough for
# the table to show a speculative row's TTFT cost over its target alone (csv and json carry it for every row)
# --objective: what the gain, the star, -r auto's verdicts, the per-slot map and the deploy line read, each a tokens/s
# figure where higher is better (run_fields.RUN_FIELDS), so that one column serves every comparison: decode tokens/s;
# request: -n tokens over the request's latency (TTFT + -n tokens at the row's speed), whose ratio is the latencies'
# inverse (+20% = the request takes 1/1.2 of the time); throughput: every token over the wall time, prompts included
OBJECTIVES = {"decode": "tokens_per_s", "request": "request_tokens_per_s", "throughput": "served_tokens_per_s"}
OBJECTIVE_NAMES = {"decode": "decode tokens/s", "request": "request latency", "throughput": "served throughput"}


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
    failed = df[df["error"].notna()].groupby(keys, dropna=False).size().rename("failed")
    # a busy run's figures are left out of its row (and its pairs, gain_tests), unless every run of the row was busy
    counted = ok[~ok["_busy"] | ok.groupby(keys, dropna=False)["_busy"].transform("all").astype(bool)]
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
    agg = agg.join(failed, how="outer").join(_draft_lengths(ok, keys)).join(_spread(counted, keys))
    agg = agg.join(_no_drafts(ok, keys)).reset_index()
    agg["runs"] = agg["runs"].fillna(0).astype(int)
    agg["failed"] = agg["failed"].fillna(0).astype(int)
    agg["busy_runs"] = agg["busy_runs"].fillna(0).astype(int)
    agg["sweeps"] = agg["sweeps"].fillna(0).astype(int)
    gained = [f.name for f in RUN_FIELDS if f.gain and f.name in agg]  # other figures with a gain (tokens per joule)
    if objective != "decode":
        agg["objective"] = objective
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
    agg = ttft_cost(agg, ok, setting, keys)
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
    agg["_order"] = agg["mode"].map({"target": 0, "draft": 1, "speculative": 2})
    agg["_default"] = agg["strategy"] != "draft"  # the draft model with fixed K first, then the other strategies
    agg = agg.sort_values(setting + ["_order", "_default", "strategy", "k"])
    return without_twin_quality(agg.drop(columns=["_order", "_default"]).reset_index(drop=True))


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


def matching(frame: pd.DataFrame, row: pd.Series, keys: Sequence[str]) -> pd.Series:
    """Which rows of `frame` equal `row` on every key both have (two missing values are equal)."""
    match = pd.Series(True, index=frame.index)
    for k in keys:
        if k in frame and k in row.index:
            match &= (frame[k] == row[k]) | (frame[k].isna() & pd.isna(row[k]))
    return match


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


SESSION_GAP_S = 600.0  # runs of one sweep stored without an invocation: a pause of more than this between one run's end
# and the next run's start begins another session (a --resume, a re-run of failed cells), whose runs pair apart


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


RUN_KEYS = [*SETTING, "prompt_id", "mode", "strategy", "k"]  # what finds a summary row's runs (prompt_id where kept)


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


def with_predictions(summary: pd.DataFrame, df: pd.DataFrame, calibrations: list[CalibrationRecord]) -> pd.DataFrame:
    """Add `predicted_tokens_per_s` (and `predicted_gain_pct`) from stored `tune` calibrations to the rows
    they predict: the target alone and the draft model with a fixed K, under the same pair, host, offload,
    temperature and length, and only where the runs used the calibration's prompts (a prediction for other
    prompts predicts other text). Rows without a prediction get NaN; no calibration, or a summary kept
    apart by prompt (a calibration predicts the mean over its prompts): `summary` unchanged."""
    pred = predicted_frame(calibrations) if calibrations else None
    if pred is None or pred.empty or "prompt_id" in summary.columns:
        return summary
    setting = [c for c in SETTING if c in pred.columns]  # a calibration runs with llama.cpp's default context settings
    default = pd.Series(True, index=df.index)
    for col, value in CONTEXT_DEFAULTS.items():
        if col in df.columns:
            default &= df[col] == value
    prompts = df[default].groupby(setting, dropna=False)["prompt_id"].agg(lambda ids: ",".join(sorted(set(map(str, ids)))))
    pred = pred.assign(prompts=pred["prompts"].map(lambda p: ",".join(sorted(p.split(",")))))
    pred = pred.merge(prompts.rename("measured_prompts").reset_index(), on=setting, how="inner")
    pred = pred[pred["prompts"] == pred["measured_prompts"]]
    spec = pred.assign(mode="speculative", strategy="draft")[setting + ["mode", "strategy", "k", "predicted_tokens_per_s",
                                                                        "predicted_gain_pct"]]
    base = (pred.drop_duplicates(setting)[setting + ["predicted_baseline_tokens_per_s"]]
            .rename(columns={"predicted_baseline_tokens_per_s": "predicted_tokens_per_s"})
            .assign(mode="target", strategy="", k=0, predicted_gain_pct=float("nan"))[spec.columns])
    keys = setting + ["mode", "strategy", "k"]
    both = pd.concat([spec, base], ignore_index=True).assign(**CONTEXT_DEFAULTS)  # predicted for the default settings only
    keys += [c for c in CONTEXT_DEFAULTS if c in summary]
    out = summary.merge(both.astype({c: summary[c].dtype for c in keys if c in summary})[keys + ["predicted_tokens_per_s",
                                                                                          "predicted_gain_pct"]],
                        on=keys, how="left")
    return out if out["predicted_tokens_per_s"].notna().any() else summary


def without_twin_quality(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with the speculative rows of twins stripped of acceptance, tokens per round and gain: a twin's
    draft accepts by chance, and no figure of a twin is shown as the real model's."""
    if "twin" not in summary:
        return summary
    spec = (summary["twin"] == True) & (summary["mode"] == "speculative")  # noqa: E712 (NaN where no twin ran)
    return summary.assign(**{c: summary[c].where(~spec) for c in ("acceptance", "tokens_per_round", "gain_pct", "gain_lo",
                                                                  "gain_hi", "decided", "verdict") if c in summary})


def offload_label(row: pd.Series) -> str:
    if row["mode"] == "target":
        return str(row["target_offload"])
    if row["mode"] == "draft":
        return str(row["draft_offload"])
    return f"{row['target_offload']} + {row['draft_offload']}"


# both engines' rows
SIDE = ["pair", "host", "ngl", "ngld", "placement", *CONTEXT, "depth", "prompt_length", "temperature", "n_predict"]
# must share these


def engines_frame(summary: pd.DataFrame) -> pd.DataFrame | None:
    """Per setting and run (target alone, each strategy and K): two engines' tokens/s, acceptance and gain over their
    own target alone, and which K is each engine's best; None unless the summary holds two engines. The first two
    engine names in sorted order are compared (python and server: the python loop first); `attrs["engines"]` names
    them, and each figure's column ends in its engine's name."""
    names = sorted(summary.get("engine", pd.Series(dtype=str)).dropna().unique())
    if len(names) < 2:
        return None
    first, second = names[:2]
    rows = summary[summary["mode"] != "draft"]
    keys = SIDE + ["mode", "strategy", "k"]
    cols = ["tokens_per_s", "acceptance", "gain_pct", "best_k", "decided", *(["verdict"] if "verdict" in summary else [])]
    a = rows[rows["engine"] == first][keys + cols]
    b = rows[rows["engine"] == second][keys + cols]
    both = a.merge(b, on=keys, how="outer", suffixes=(f"_{first}", f"_{second}"))
    both["ratio"] = both[f"tokens_per_s_{first}"] / both[f"tokens_per_s_{second}"]
    both = both.sort_values(keys, key=lambda c: c.map({"target": 0, "speculative": 1}) if c.name == "mode" else c)
    both.attrs["engines"] = (first, second)
    return both
