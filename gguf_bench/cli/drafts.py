"""The `drafts` command: every draft that can serve a target, judged from headers, ranked before any download."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gguf_bench import options
from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.options import (
    MARGIN,
    MarginOpt,
    NgldOpt,
    NglOpt,
    NPredictOpt,
    PromptIdsOpt,
    PromptsFileOpt,
    RegistryOpt,
    ResultsDirOpt,
    ThreadsOpt,
)
from gguf_bench.cli.progress import DownloadProgress, QuietStatus, warn_offload
from gguf_bench.errors import BenchError
from gguf_bench.measure.flows import drafts as measuring
from gguf_bench.measure.flows.draft_twins import TwinCosts, TwinSetting, twin_costs
from gguf_bench.measure.inputs import workloads
from gguf_bench.models import candidates as cands
from gguf_bench.models.registry import Named
from gguf_bench.results.predictions import draft_ranking as ranking
from gguf_bench.results.predictions.costmodel import DEFAULT_REPS
from gguf_bench.results.schema.naming import results_path
from gguf_bench.results.schema.store import exclusive, use_results_dir
from gguf_bench.results.schema.text import size_text


@command
def drafts(target: Annotated[str, typer.Argument(help="the target: a GGUF file, a registry model, or a hub file "
                                                 "REPO:QUANT or REPO/FILE.gguf (llama.cpp's -hf spelling)")],
           search: Annotated[list[Path] | None, typer.Option("--search", help="a folder to search for GGUF drafts "
                                                            "(repeat for more)")] = None,
           quants: Annotated[str, typer.Option("--quants", help="the quants to take from each hub repository")
                             ] = ",".join(cands.DEFAULT_QUANTS),
           vram: Annotated[str | None, typer.Option("--vram", help="device memory: show whether each draft fits "
                                                    "beside the target (all layers of both, at --ctx), --margin "
                                                    "kept free")] = None,
           margin: MarginOpt = MARGIN,
           ctx_size: Annotated[int, typer.Option("--ctx-size", "--ctx", "-c", help="context size of each model, "
                                                 "for --vram")] = 4096,
           offline: Annotated[bool, typer.Option("--offline", help="search no hub: the registry and local files "
                                                 "only")] = False,
           no_caches: Annotated[bool, typer.Option("--no-caches", help="search neither the HF cache, llama.cpp's "
                                                   "cache nor LM Studio's folder (only --search and the registry)")
                                ] = False,
           as_json: Annotated[bool, typer.Option("--json", help="print the ranking and every verdict as JSON")] = False,
           verbose: Annotated[bool, typer.Option("--verbose", "-v", help="also print what was read: headers, bytes, "
                                                 "requests, seconds")] = False,
           measure: Annotated[int | None, typer.Option("--measure", help="download the N best compatible drafts that "
                              "fit (and the target), calibrate each beside the target on the prompts as `tune` does, "
                              "and rank them by the tokens/s predicted from what was measured")] = None,
           prompt_ids: PromptIdsOpt = None, prompts_file: PromptsFileOpt = None,
           ks: Annotated[str, typer.Option("--draft-max", "-K", help="with --measure: draft lengths to predict")] = "1-8",
           n_predict: NPredictOpt = 64, threads: ThreadsOpt = None, ngl: NglOpt = "0", ngld: NgldOpt = "0",
           reps: Annotated[int, typer.Option("--reps", help="with --measure: repetitions of each decode timing, as "
                                             "tune's")] = DEFAULT_REPS,
           name: Annotated[str | None, typer.Option("--name", help="with --measure: store the calibrations in "
                                                    "results/NAME.jsonl (default drafts-TIMESTAMP)")] = None,
           resume: Annotated[bool, typer.Option("--resume", help="with --measure: continue NAME, skipping the drafts "
                                                "calibrated there on the same prompts and settings")] = False,
           twins: Annotated[bool, typer.Option("--twins", help="measure c and the target's verify curve on this "
                            "machine, on twins of the target and of each compatible draft (headers with synthetic "
                            "weights: nothing is downloaded)")] = False,
           results_dir_opt: ResultsDirOpt = None,
           registry: RegistryOpt = None) -> None:
    """Find every draft that can serve TARGET: the registry's drafts, local GGUF files, the hub's smaller models of
    its family and lower quants of its own repository, sidecars, its MTP heads and the n-gram types. Each is judged
    from its header alone by llama.cpp's own rule (nothing is downloaded) and ranked by the gain the cost model
    predicts. With --measure N, the N best are downloaded and calibrated on your prompts."""
    job = _measure_job(MeasureOptions(
        n=measure, prompt_ids=prompt_ids, prompts_file=prompts_file, ks=ks, n_predict=n_predict, reps=reps,
        threads=threads, ctx_size=ctx_size, ngl=ngl, ngld=ngld, name=name, resume=resume, results_dir=results_dir_opt,
        registry=registry)) if measure is not None else None
    qs = tuple(q.strip().upper() for q in quants.split(",") if q.strip())
    if not qs:
        raise BenchError("--quants needs at least one quant, e.g. Q8_0,Q4_K_M")
    budget = max(0, options.byte_size(vram, "--vram") - options.byte_size(margin, "--margin")) if vram else None
    vram_label = f"{vram}, {margin} kept free" if vram else None  # as the tables say it
    for folder in search or []:
        if not folder.is_dir():
            raise BenchError(f"--search {folder}: no such folder")
    start = time.perf_counter()
    named = cands.resolve_target(target, registry)  # once: the search, its twin and its download all take this value
    reader = cands.HeaderReader()
    opts = cands.Options(tuple(search or ()), qs, hub=not offline, local_caches=not no_caches, registry=registry)
    found = cands.find(named, opts, reader)
    _check_found(found)
    costs = _twin_costs(found, TwinSetting(threads, budget, ctx_size)) if twins else None
    rows = ranking.rank(found.target.header, found.candidates, budget, ctx_size, costs and costs.ratios,
                        costs and costs.verify)
    if job is not None:
        return _measure(named, job, found, rows, as_json, vram_label)
    seconds = time.perf_counter() - start
    if as_json:
        console.print_json(json.dumps({"target": named.name, "target_model": cands.header_json(found.target.header),
                                       "ranking": ranking.to_json(rows),
                                       "candidates": cands.to_json(found), "searched": found.searched,
                                       "hub_error": found.hub_error} | ({"twins": _twins_json(costs)} if costs else {})))
    else:
        _print(found, rows, vram_label, costs)
    if found.hub_error:
        err.print(f"Note: {found.hub_error}; searched locally: {', '.join(found.searched) or 'nothing'}", markup=False)
    if verbose:
        s = reader.stats
        err.print(f"read {s.headers_read} headers ({s.cached} more from the cache), {s.bytes / 2**20:.2f} MB from the "
                  f"hub in {s.requests} ranged requests, {found.hub_repos} hub repositories, {seconds:.1f} s",
                  markup=False)


def _check_found(found: cands.Search) -> None:
    """One line when nothing was found that a draft file could be (heads need no file)."""
    read = [c for c in found.candidates if c.needs_file and c.status in ("compatible", "incompatible")]
    if read or any(c.kind == "draft-mtp" for c in found.candidates):
        return
    where = ", ".join(found.searched) or "nowhere"
    hub = f"; {found.hub_error}" if found.hub_error else ""
    bad = [c.name for c in found.candidates if c.status == "unreadable"]
    why = next((c.reason for c in found.candidates if c.status == "unreadable"), "")
    unread = f"; unreadable: {', '.join(bad)} (first: {why})" if bad else ""
    raise BenchError(f"no draft candidate found for {found.target.name} (searched: {where}){hub}{unread}")


def _twin_costs(found: cands.Search, setting: TwinSetting) -> TwinCosts:
    drafts = [c for c in found.candidates  # a sidecar (eagle3, dflash) loads only beside its target: its c from sizes
              if c.status == "compatible" and c.kind == "draft-simple" and c.header is not None]
    with QuietStatus(f"measuring twins of the target and {len(drafts)} drafts ...") as status:
        events = measuring.MeasureEvents(step=status.update)  # each one not measured: a line under the table
        return twin_costs(found.target, drafts, setting, events=events)


def _twins_json(costs: TwinCosts) -> dict:
    return {"verify": list(costs.verify), "placements": costs.placements,
            "not_measured": [{"name": c.name, "reason": why} for c, why in costs.failed]}


def _target_line(target: cands.Candidate) -> str:
    h = target.header
    parts = f" in {h.n_parts} files" if h.n_parts > 1 else ""
    return f"target: {target.name} ({h.architecture}, {size_text(h.file_size)}{parts})"


def _print(found: cands.Search, rows: list[ranking.Ranked], vram: str | None, costs: TwinCosts | None = None) -> None:
    console.print(_target_line(found.target), markup=False, soft_wrap=True)
    mid = ranking.ALPHAS[len(ranking.ALPHAS) // 2]
    if not rows:
        console.print("no compatible draft file found", markup=False)
    else:  # each draft's name on a line of its own (never folded), its figures under it
        console.print(f"compatible drafts, best first (by gain at {mid:.0%} acceptance):", markup=False)
        heads = ["from", "size", "c", *(["fits"] if vram else []), "b/e", *[f"+%@{a * 100:.0f}" for a in ranking.ALPHAS]]
        widths = [9, 10, 5, *([4] if vram else []), 4, *[7] * len(ranking.ALPHAS)]
        line = lambda cells: "    " + "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}"  # noqa: E731
                                               for i, (c, w) in enumerate(zip(cells, widths)))
        console.print(line(heads).rstrip(), style="bold", markup=False)
        for i, r in enumerate(rows, 1):
            c = r.candidate
            origin = c.origin if c.kind == "draft-simple" else c.kind.removeprefix("draft-")  # a sidecar says which
            fit = [] if not vram else ["?" if r.fits is None else "yes" if r.fits else "no"]
            gains = [f"{g:+.0f} K{k}" if g > -100 else "–" for g, k in (r.gains.get(a, (-999, 0)) for a in ranking.ALPHAS)]
            console.print(f"{i:>2}  {c.name}", markup=False, soft_wrap=True)
            console.print(line([origin, size_text(c.header.file_size), "?" if r.cost_ratio is None else
                                f"{r.cost_ratio:.2f}", *fit, "–" if r.break_even is None else f"{r.break_even:.0%}",
                                *gains]).rstrip(), markup=False)
        how = ("measured on twins on this machine, with the target's verify curve t(K+1)/t(1) " +
               " ".join(f"{v:.2f}" for v in costs.verify[1:]) + _placed_text(costs, vram) if costs else
               "from the bytes each reads per token (a batch verified in the time of one token)")
        console.print(f"c: the draft's time per token / the target's, {how}; b/e: the acceptance below which no K "
                      "gains; +%@A: the gain predicted at acceptance A, at its best K", style="dim", markup=False)
    for c, why in costs.failed if costs else ():
        console.print(f"not measured on twins (c from sizes): {c.name}: {why}", markup=False, soft_wrap=True)
    _verdicts(found)


def _placed_text(costs: TwinCosts, vram: str | None) -> str:
    """Where the twins ran: ', each pair at -ngl 7 -ngld 3 (as the planner places it in --vram 1GB)'."""
    labels = ", ".join(dict.fromkeys(costs.placements.values()))
    return f", each pair at {labels} ({f'as the planner places it in --vram {vram}' if vram else 'every layer'})"


def _verdicts(found: cands.Search) -> None:
    """A line per candidate that cannot serve (with its reason), not checked, or needing no draft file."""
    others = [c for c in found.candidates if c.status in ("incompatible", "unreadable")]
    for c in others:
        console.print(f"{c.status}: {c.name} ({c.origin}): {c.reason}", markup=False, soft_wrap=True)
    unfetched = [c.name for c in found.candidates if c.status == "unfetched"]
    if unfetched:
        console.print(f"not checked: {', '.join(unfetched)} (registry drafts not fetched yet: `gguf-bench download` "
                      "fetches them)", markup=False, soft_wrap=True)
    for c in (c for c in found.candidates if c.kind == "draft-mtp"):
        console.print(f"{c.kind}: {c.name}: {c.reason}", markup=False, soft_wrap=True)
    ngrams = [c.kind for c in found.candidates if c.kind in cands.NGRAM_TYPES]
    if ngrams:
        console.print(f"no draft file: {', '.join(ngrams)} (llama-server; acceptance depends on the text: "
                      "measure with tune or sweep --engine server)", markup=False, soft_wrap=True)


# --- --measure ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureOptions:
    """--measure's options as typed (the target is not one: it travels resolved, beside the job)."""

    n: int
    prompt_ids: str | None
    prompts_file: str | None
    ks: str
    n_predict: int
    reps: int
    threads: int | None
    ctx_size: int
    ngl: str
    ngld: str
    name: str | None
    resume: bool
    results_dir: Path | None
    registry: Path | None


def _measure_job(o: MeasureOptions) -> measuring.MeasureJob:
    """--measure's options checked before anything is read or downloaded (one line for each bad one)."""
    measuring.check_count(o.n)
    if o.n_predict < 2 or o.reps < 1:
        raise BenchError(f"--n-predict must be >= 2 and --reps >= 1 to calibrate (got {o.n_predict} and {o.reps})")
    use_results_dir(o.results_dir)
    chosen = workloads.choose(o.prompt_ids, o.prompts_file, None, registry=o.registry)
    name, out = results_path(o.name, o.resume, "drafts")
    job = measuring.MeasureJob(None, chosen, options.draft_lengths(o.ks), o.n_predict, o.ctx_size, o.threads, name, out,
                               o.reps, n=o.n, resume=o.resume, ngl=options.layers(o.ngl), ngld=options.layers(o.ngld))
    warn_offload(job.ngl, job.ngld)
    return job


def _measure(named: Named, job: measuring.MeasureJob, found: cands.Search, rows: list[ranking.Ranked],
             as_json: bool, vram: str | None) -> None:
    if found.hub_error:
        err.print(f"Note: {found.hub_error}; searched locally: {', '.join(found.searched) or 'nothing'}", markup=False)
    with exclusive(job.out), QuietStatus(f"measuring drafts for {named.name} ...") as status:
        events = measuring.MeasureEvents(step=status.update, note=lambda line: err.print(line, markup=False))
        try:
            result = measuring.measure_drafts(named, job, rows, events, lambda: _paused(status))
        except BenchError as exc:
            if not job.out.is_file():
                raise
            raise type(exc)(f"{exc}; the calibrations done are in {job.out}: continue with `gguf-bench drafts "
                            f"{named.name} --measure {job.n} --name {job.name} --resume`") from None
    if as_json:
        console.print_json(json.dumps({"target": named.name, "results": str(job.out)} | measuring.to_json(result)
                                      | {"candidates": cands.to_json(found)}))
        return
    _print_measured(found, result, job, vram)


@contextmanager
def _paused(status: QuietStatus):
    """A download's progress bar, with the status line out of its way while it draws."""
    status.live.stop()
    try:
        with DownloadProgress() as bar:
            yield bar
    finally:
        status.live.start(refresh=True)


def _print_measured(found: cands.Search, result: measuring.MeasuredDrafts, job: measuring.MeasureJob,
                    vram: str | None) -> None:
    console.print(_target_line(found.target), markup=False, soft_wrap=True)
    prompts = ", ".join(p.id for p in job.prompts)
    console.print(f"measured {len(result.measured)} drafts on {prompts} (n={job.n_predict}, -K "
                  f"{_ks_label(job.ks)}), best first by the tokens/s predicted from the calibration:", markup=False)
    mid = ranking.ALPHAS[len(ranking.ALPHAS) // 2]
    widths = [9, 10, 5, 7, 6, 6, 2, 7, 7]
    line = lambda cells: "    " + "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}"  # noqa: E731
                                           for i, (c, w) in enumerate(zip(cells, widths)))
    console.print(line(["", "", "sizes", "", "measured", "", "", "", ""]).rstrip(), style="bold", markup=False)
    console.print(line(["from", "size", "c", f"+%@{mid * 100:.0f}", "c", "accept", "K", "tok/s", "gain"]).rstrip(),
                  style="bold", markup=False)
    for i, m in enumerate(result.measured, 1):
        c, r, top = m.row.candidate, m.row, m.rec.fastest
        g, k = r.gains.get(mid, (float("-inf"), 0))
        console.print(f"{i:>2}  {c.name}" + ("  (calibrated before)" if m.resumed else ""), markup=False, soft_wrap=True)
        console.print(line([c.origin, size_text(c.header.file_size), "?" if r.cost_ratio is None else
                            f"{r.cost_ratio:.2f}", f"{g:+.0f} K{k}" if g > -100 else "–", f"{m.cost_ratio:.2f}",
                            f"{top.acceptance:.0%}", str(top.k), f"{top.tokens_per_s:.2f}", f"{result.gain_pct(m):+.0f}%"]
                           ).rstrip(), markup=False)
    base = result.baseline_tokens_per_s
    console.print(f"sizes: predicted from the headers before any download (c: the draft's time per token / the "
                  f"target's; +%@{mid * 100:.0f}: the gain at {mid:.0%} acceptance); measured: c, the acceptance at "
                  f"the best K on these prompts, that K, and the tokens/s and gain the cost model predicts from the "
                  f"calibration (gains over the target alone: {base:.2f} tokens/s, the median of the "
                  f"{len(result.measured)} calibrations' own)", style="dim", markup=False)
    for r, why in result.failed + result.skipped:
        console.print(f"not measured: {r.candidate.name}: {why}", markup=False, soft_wrap=True)
    _verdicts(found)
    _winner_lines(result, job)


def _ks_label(ks) -> str:
    ks = list(ks)
    return f"{ks[0]}-{ks[-1]}" if len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1)) else ",".join(map(str, ks))


def _winner_lines(result: measuring.MeasuredDrafts, job: measuring.MeasureJob) -> None:
    w = result.winner
    if result.recommends(w):
        console.print(f"winner: {w.row.candidate.name}, -K {w.rec.fastest.k}: predicted {w.rec.fastest.tokens_per_s:.2f}"
                      f" tokens/s ({result.gain_pct(w):+.1f}% over the target alone)", markup=False, soft_wrap=True)
    elif result.beats_target_alone(w):
        console.print(f"no draft is predicted to beat the target alone by more than its own timings scatter (the best, "
                      f"{w.row.candidate.name}, {result.gain_pct(w):+.1f}%): run the target alone, or measure it with "
                      "`gguf-bench sweep`", markup=False, soft_wrap=True)
    else:
        console.print(f"no draft is predicted to beat the target alone (the best, {w.row.candidate.name}, "
                      f"{result.gain_pct(w):+.1f}%): run the target alone", markup=False, soft_wrap=True)
    console.print(result.guard.line(), style="dim", markup=False, soft_wrap=True)
    console.print("deploy (a prediction: check it with `gguf-bench sweep --engine server`):", markup=False)
    console.print(result.deploy, markup=False, soft_wrap=True)
    console.print(f"calibrations stored in {job.out} (`gguf-bench report` shows them)", markup=False, soft_wrap=True)
