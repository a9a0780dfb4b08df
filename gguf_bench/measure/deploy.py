"""The llama-server command line that reproduces a measured cell: what to deploy.

For a server-engine record it is the very command the benchmark ran (parts.server_process.Server.command) less what only a
benchmark needs (llama_server.deploy_argv); for a Python-loop record it is the command llama-server would need for the
same files, offload, context settings and drafting (the loop's draft and ngram are llama-server's draft-simple and
ngram-simple), to be measured with --engine server before it is trusted. -ngl/-ngld 'all' become the layer counts
llama.cpp placed, and a binary built by `gguf-bench build-server` gets the library path it runs with.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pandas as pd

from gguf_bench import engine_registry as capabilities
from gguf_bench.axes import launch_fields
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.measure.engines.server import speculation
from gguf_bench.measure.pair import PairFiles
from gguf_bench.placing import parse_label, split_label
from gguf_bench.results.decision.choice import OTHER as BESIDE
from gguf_bench.results.decision.choice import busy_above, candidates
from gguf_bench.results.decision.comparisons import compare, simplest_same, workload_family
from gguf_bench.results.decision.terms import FAMILY, FLAGS, SETTING
from gguf_bench.results.decision.units import matching
from gguf_bench.results.decision.verdicts import margin_of, own_engine, simplicity
from gguf_bench.results.decision.wording import setting_label
from gguf_bench.results.predictions.costmodel import Calibration
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.runtimes.llama_cpp import read_info
from gguf_bench.runtimes.llama_server import Launch, deploy_argv
from gguf_bench.runtimes.server_build import MARKER, find_server, library_env

KEYS = SETTING + ["mode", "strategy", "k"]
GROUP = FAMILY  # a deploy line per workload: pair, slots and clients, depth, temperature, length (and prompt, where the
# summary keeps prompts apart); the rows -r auto decides between (choice.open_verdicts) are one line's


def with_deploy(summary: pd.DataFrame, df: pd.DataFrame, runs: list[RunRecord]) -> pd.DataFrame:
    """The summary with a `deploy` column: on the best row of each workload (GROUP) the command line that reproduces
    it, empty elsewhere, and a `deploy_note` where a simpler row took the best one's place. The best row is the fastest
    measured one (every -ngl, placement, context setting, engine, type and K), speculation only where it is decidedly
    faster than the fastest target alone there (choice.candidates), among rows not flagged busy that llama-server
    can run (a fixed K, no n-gram-then-model chain); else the fastest target alone; rows of a busy machine, nothing.
    Where a simpler deployable row is the same as it within the summary's margin (summary.simplest_same: no draft
    over a draft, fewer GPU layers, the smaller K), that one."""
    out = summary.assign(deploy=None, deploy_note=None, deploy_over=None, deploy_builds=None)
    margin = margin_of(summary)
    known: dict = {}  # row index -> its command line, None where llama-server cannot run it

    def line(index) -> str | None:
        if index not in known:
            record = _record_of(summary.loc[index], df, runs)
            try:
                known[index] = (command_line(record) if record and not capabilities.of(record.config.engine).remote
                                else None)
            except ConfigError:  # the loop's adaptive schedules and its chain have no llama-server command
                known[index] = None
        return known[index]
    for _, every in summary.groupby([c for c in GROUP if c in summary], sort=False, dropna=False):
        rows = own_engine(every)  # the command's engine's own measurements, where a server engine was swept
        order = candidates(rows)
        top = next((i for i in order if line(i)), None)
        if top is None:
            if (blocker := busy_above(rows)) is not None:  # nothing is decided across a row of a busy machine
                out.loc[blocker.name, "deploy_busy"] = _busy_note(rows, blocker)
            continue
        simpler = [i for i in order if simplicity(summary.loc[i]) < simplicity(summary.loc[top]) and line(i)]
        chosen, replaced, why = simplest_same(summary.loc[[top, *simpler]], top, df, margin)
        out.at[chosen, "deploy"] = line(chosen)
        out.at[chosen, "deploy_over"] = _over_other_alone(summary.loc[chosen], rows, df, margin)
        out.at[chosen, "deploy_builds"] = _over_other_builds(summary.loc[chosen], rows, df, margin)
        if replaced is not None:
            varying = [c for c in BESIDE if c in rows and rows[c].nunique(dropna=False) > 1]
            out.at[chosen, "deploy_note"] = (f"{setting_label(summary.loc[chosen], varying)} and "
                                             f"{setting_label(summary.loc[replaced], varying)} are the same within "
                                             f"{margin:g}%: {why}")
    return out if out["deploy_builds"].notna().any() else out.drop(columns="deploy_builds")  # one build: as before


def _over_other_alone(chosen: pd.Series, rows: pd.DataFrame, runs: pd.DataFrame, margin: float) -> str | None:
    """Where the deployed row is a target alone and another setting's target alone was measured in the workload (another
    -ngl, context setting, engine): its advantage over the fastest of those, paired run by run where the settings took
    turns (summary.compare), with its verdict: '+3% [-2,+9] over -ngl 0 alone, not told apart'. None elsewhere."""
    if chosen["mode"] != "target":
        return None
    others = rows[(rows["mode"] == "target") & rows["tokens_per_s"].notna() & (rows.index != chosen.name)]
    if others.empty:
        return None
    other = others.loc[others["tokens_per_s"].idxmax()]
    varying = [c for c in BESIDE if c in rows and rows[c].nunique(dropna=False) > 1]
    name = " ".join(f"{FLAGS.get(c, c)} {other[c]}" for c in varying) or "another setting"
    ok = runs[runs["error"].isna()] if "error" in runs else runs
    return _advantage_text(compare(chosen, other, ok, margin, workload_family(rows, ok)), f"{name} alone", margin)


def _advantage_text(told, over: str, margin: float) -> str | None:
    """'+3% [-2,+9] over -ngl 0 alone, not told apart': a paired comparison (summary.compare) with its verdict at the
    margin; 'no interval' where it has none; None where it has no figure."""
    if pd.isna(told.pct):
        return None
    if pd.isna(told.lo):
        return f"{told.pct:+.0f}% over {over}, no interval"
    verdict = {"faster": "", "slower": ", slower", "same": f", the same within {margin:g}%",
               "undecided": ", not told apart"}[told.verdict]
    return f"{told.pct:+.0f}% [{told.lo:+.0f},{told.hi:+.0f}] over {over}{verdict}"


def _over_other_builds(chosen: pd.Series, rows: pd.DataFrame, runs: pd.DataFrame, margin: float) -> str | None:
    """Where the workload's rows ran on several builds (--server-bin A,B): the deployed row's advantage over the same
    setting on each other build, paired run by run (summary.compare), with its verdict: '+29% [+20,+38] over K=8 on
    build B'. None with one build."""
    if "server_bin" not in rows or rows["server_bin"].nunique(dropna=False) < 2:
        return None
    ok = runs[runs["error"].isna()] if "error" in runs else runs
    same = [c for c in KEYS if c != "server_bin" and c in rows]
    others = rows[matching(rows, chosen, same) & (rows["server_bin"] != chosen["server_bin"])]
    texts = [_advantage_text(compare(chosen, other, ok, margin, workload_family(rows, ok)),
                             f"{setting_label(other, [])} on build {other['server_bin']}", margin)
             for _, other in others.iterrows()]
    return "; ".join(t for t in texts if t) or None


def _busy_note(rows: pd.DataFrame, busy: pd.Series) -> str:
    """Why a workload has no deploy line: its fastest row (choice.busy_above) was measured on a busy machine."""
    varying = [c for c in BESIDE if c in rows and rows[c].nunique(dropna=False) > 1]
    measured = rows[rows["mode"].isin(["target", "speculative"])]["tokens_per_s"]
    which = "the fastest measured setting" if busy["tokens_per_s"] >= measured.max() else "a faster setting"
    good = "pairs of runs" if busy["mode"] == "speculative" else "runs"
    return (f"{which}, {setting_label(busy, varying)} at {busy['tokens_per_s']:.1f} tokens/s, was measured on a busy "
            f"machine (fewer than 2 good {good}): measure it again (-r auto)")


def _record_of(row: pd.Series, df: pd.DataFrame, runs: list[RunRecord]) -> RunRecord | None:
    """A measured record of the summary row (df is report.to_frame(runs): the same order)."""
    hits = df.index[df["error"].isna() & matching(df, row, KEYS)]
    return runs[hits[0]] if len(hits) else None


def command_line(record: RunRecord) -> str:
    """The shell line to paste: environment first when the binary needs one, then the arguments, quoted."""
    return _shell(command(record))


def _shell(argv: list[str]) -> str:
    """The line to paste: the environment a binary made by `build-server` needs, then the arguments, quoted."""
    env = library_env() if (Path(argv[0]).parent / MARKER).is_file() else {}
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.join(argv)])


def command(record: RunRecord) -> list[str]:
    argv = record.server.command if record.server and record.server.command else _launch(record).argv()
    offload = record.offload
    return deploy_argv(argv, _placed(offload.target if offload else None), _placed(offload.draft if offload else None))


def _placed(label: str | None) -> int | None:
    """'19/19' -> 19: the layers llama.cpp put on the GPU."""
    try:
        return int(str(label).split("/")[0])
    except ValueError:
        return None


def _launch(record: RunRecord) -> Launch:
    """The command a Python-loop record would need in llama-server (the one beside its --lib library, where that build
    has one: a `build-tree` build's bin/)."""
    cfg = record.config
    models = record.models
    beside = Path(cfg.lib) / "llama-server" if cfg.lib else None
    return Launch(beside if beside and beside.is_file() else Path("llama-server"), Path(models.target.path or models.target.file),
                  Path(models.draft.path or models.draft.file) if models.draft else None,
                  speculation(record.mode, record.strategy, record.k), str(cfg.ngl), str(cfg.ngld), cfg.n_ctx,
                  cfg.threads or record.env.cpu_count or 1, parallel=cfg.parallel or 1,
                  **launch_fields(cfg.get),
                  placing=tuple(parse_label(cfg.placement).flags()),
                  placing_draft=tuple(parse_label(cfg.placement_draft, draft=True).flags(draft=True)),
                  rpc=parse_label(cfg.placement).rpc)


def setting_line(files: PairFiles, strategy: Strategy | None, k: int, cal: Calibration, n_ctx: int,
                 threads: int | None) -> str:
    """The llama-server line for a setting that `tune` predicted (not measured): the server this machine would run
    (else plain `llama-server`), 'all' layers as the model's count."""
    placing, placing_draft = split_label(cal.placement)
    try:
        binary, _ = find_server(None, rpc=bool(placing.rpc))
    except BenchError:
        binary = Path("llama-server")
    mode = Mode.SPECULATIVE if strategy is not None else Mode.TARGET
    spec = speculation(mode, strategy, k)
    launch = Launch(binary, files.target, files.draft if spec.needs_draft_file else None, spec, str(cal.ngl),
                    str(cal.ngld), n_ctx, threads or os.cpu_count() or 1, placing=tuple(placing.flags()),
                    placing_draft=tuple(placing_draft.flags(draft=True)), rpc=placing.rpc)
    layers = (read_info(files.target).n_layers + 1, read_info(files.draft).n_layers + 1 if files.draft else None)
    return _shell(deploy_argv(launch.argv(), *layers))


def tuned_line(files, strategies: list, rec, cost_top, ctx_size: int, threads: int | None) -> tuple[str | None, str]:
    """The llama-server command for `tune`'s recommendation (costmodel.recommend), or None, and what to say of it (a
    prediction)."""
    if cost_top is not None:
        return None, ("llama-server has no cost schedule; measure its n-gram types with `gguf-bench sweep --engine "
                      "server --spec-type ngram-simple,ngram-mod` before deploying")
    top, cal = (rec.fastest, rec.fastest_cal) if rec.speculative else (None, rec.baseline_cal)
    strategy = next((s for s in strategies if top is not None and s.label(top.k) == top.strategy), None)
    if top is not None and (strategy is None or strategy.k_schedule != "fixed"):
        return None, f"llama-server drafts a fixed K and cannot run {top.strategy}"
    line = setting_line(files, strategy, top.k if top else 0, cal, ctx_size, threads)
    return line, "predicted, not measured: check it with `gguf-bench sweep --engine server`"


def tuned_server_line(tuned) -> str:
    """The llama-server line for `tune --engine server`'s recommendation (measure/flows/server_tune.ServerTuned): the command
    a calibration run of the recommended type ran (same build, files and slots) at the recommended K; the target
    alone's where no K is predicted to gain."""
    if tuned.top is None:
        return command_line(next(r for r in tuned.records if r.mode == Mode.TARGET))
    cal, top = tuned.top
    runs = [r for r in tuned.records if r.mode == Mode.SPECULATIVE and r.strategy.spec_type == cal.spec_type]
    run = next((r for r in runs if r.k == top.k), runs[-1])
    argv = command(run)
    old, new = (speculation(Mode.SPECULATIVE, run.strategy, k).flags() for k in (run.k, top.k))
    at = next(i for i in range(len(argv)) if argv[i:i + len(old)] == old)  # its size flags, as the type spells them
    return _shell(argv[:at] + new + argv[at + len(old):])
