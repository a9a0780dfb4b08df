#!/usr/bin/env python
"""Check `gguf-bench drafts TARGET --measure N` against a full sweep of the same candidates (issue 39, item 5).

For a target and a list of candidate drafts (registry models, derived copies made by llama.cpp's quantizer, or
files), through the library:
  1. fetch every model, and judge each candidate from its header (models/candidates.py, only these candidates);
  2. `drafts --measure N`: calibrate the N best compatible ones (measure/flows/drafts.py) and rank them by predicted
     tokens/s;
  3. a full sweep (measure/sweep.iter_records: every K of -K, the target alone, greedy, the same prompts and -n) of
     every compatible candidate;
then print the refused candidates with their reasons, the measured ranking, each candidate's best K, tokens/s and gain
in the sweep, whether the two winners agree (the sweep's best draft: the most tokens/s at its best K), and the
winner's predicted gain over its measured one (target: within 10%). Both sides pool the target alone: the predicted
gains are over the median of the calibrations' target alone, the sweep's over the median of every target-alone run of
the sweep, all pairs together: the target is the same for every pair, and one pair's few
target-alone runs drift with the machine's load.

    python scripts/bench_drafts.py [--target qwen2.5-coder-1.5b-instruct-f16] [--draft NAME_OR_FILE ...]
                                   [--measure 3] [-K 1-8] [-n 64] [--threads 2] [--prompt-ids ...] [--results DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gguf_bench import options
from gguf_bench.measure.flows import drafts as measuring
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models import candidates as cands
from gguf_bench.models.download import fetch_named
from gguf_bench.results.predictions.draft_ranking import rank
from gguf_bench.results.schema.records import Mode
from gguf_bench.results.schema.store import append_record
from gguf_bench.runtimes.llama_cpp import quantize

TARGET = "qwen2.5-coder-1.5b-instruct-f16"
DRAFTS = ["qwen2.5-coder-1.5b-instruct-q8_0", "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q2_k",
          "gemma-3-270m-q4_k_m"]


def progress(desc: str, done: int, total: int | None) -> None:
    if total and done >= total or total is None and not done:
        print(f"  {desc} ...", file=sys.stderr, flush=True)


def fetch_all(target: str, drafts: list[str], folder: Path) -> tuple[Path, Path]:
    """The target's path, and a folder holding a link to each draft (the only candidates `find` sees)."""
    target_path = fetch_named(target, None, progress, quantize)
    folder.mkdir(parents=True, exist_ok=True)
    for name in drafts:
        path = fetch_named(name, None, progress, quantize)
        (folder / path.name).symlink_to(path.resolve())
    return target_path, folder


def candidates(target: Path, folder: Path) -> tuple[cands.Search, list]:
    opts = cands.Options(search=(folder,), hub=False, local_caches=False, registry_drafts=False)
    found = cands.find(cands.resolve_target(str(target)), opts, cands.HeaderReader())
    return found, rank(found.target.header, found.candidates)


def sweep(name: str, files: PairFiles, grid: Grid, out: Path) -> dict:
    """The pair's sweep: the tokens/s of each target-alone run, the mean tokens/s of each K over the prompts, and
    its best K (gains() adds the gain)."""
    by_k: dict[int, list[float]] = {}
    for record in iter_records(name, files, grid):
        append_record(out, record)
        if not record.error and record.metrics and record.metrics.tokens_per_s:
            by_k.setdefault(0 if record.mode == Mode.TARGET else record.config.k, []).append(record.metrics.tokens_per_s)
    alone = by_k.pop(0)
    speed = {k: statistics.fmean(v) for k, v in by_k.items()}
    best_k = max(speed, key=speed.get)
    return {"alone": alone, "speed": speed, "best_k": best_k, "tokens_per_s": speed[best_k]}


def gains(swept: dict[str, dict]) -> float:
    """Give each pair its gain at its best K over the median of every target-alone run (all pairs); return that
    median."""
    base = statistics.median(v for s in swept.values() for v in s["alone"])
    for s in swept.values():
        s["gain"] = 100 * (s["tokens_per_s"] / base - 1)
    return base


def report(found: cands.Search, measured: measuring.MeasuredDrafts, swept: dict[str, dict], seconds: dict) -> None:
    for c in found.candidates:
        if c.status in ("incompatible", "unreadable"):
            print(f"refused: {Path(c.name).name}: {c.reason}")
    base = gains(swept)
    print("\n| rank | draft | measured: best K | acceptance | predicted tok/s | predicted gain | sweep: best K | "
          "tok/s | gain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, m in enumerate(measured.measured, 1):
        top, s = m.rec.fastest, swept[m.row.candidate.name]
        print(f"| {i} | {m.files.draft.name} | {top.k} | {top.acceptance:.0%} | {top.tokens_per_s:.2f} | "
              f"{measured.gain_pct(m):+.1f}% | {s['best_k']} | {s['tokens_per_s']:.2f} | {s['gain']:+.1f}% |")
    for name, s in swept.items():
        if name not in {m.row.candidate.name for m in measured.measured}:
            print(f"| – | {Path(name).name} (not measured) | | | | | {s['best_k']} | {s['tokens_per_s']:.2f} | "
                  f"{s['gain']:+.1f}% |")
    runs = sum(len(s["alone"]) for s in swept.values())
    print(f"\nsweep gains over the target alone's median over all {runs} of its runs: {base:.2f} tok/s")
    winner = measured.winner
    sweep_best = max(swept, key=lambda n: swept[n]["tokens_per_s"])
    print(f"\nmeasured winner: {winner.files.draft.name} (-K {winner.rec.fastest.k}); sweep's best draft: "
          f"{Path(sweep_best).name} (-K {swept[sweep_best]['best_k']}): "
          f"{'they agree' if winner.row.candidate.name == sweep_best else 'they DIFFER'}")
    print(f"predicted gains over the target alone's median over the {len(measured.measured)} calibrations: "
          f"{measured.baseline_tokens_per_s:.2f} tok/s")
    pred, meas = measured.gain_pct(winner), swept[winner.row.candidate.name]["gain"]
    ratio = f"{pred / meas:.2f}" if meas else "–"
    print(f"winner's gain: predicted {pred:+.1f}%, measured by the sweep {meas:+.1f}% (ratio {ratio}; speed-up ratio "
          f"{(1 + pred / 100) / (1 + meas / 100):.3f})")
    print(f"time: drafts --measure {seconds['measure']:.0f} s, sweep {seconds['sweep']:.0f} s")
    print(f"deploy: {measured.deploy}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("--draft", action="append", default=None, help=f"a candidate (repeat; default {' '.join(DRAFTS)})")
    ap.add_argument("--measure", type=int, default=3)
    ap.add_argument("-K", default="1-8")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--prompt-ids", default=None, help="built-in prompts (default: all four)")
    ap.add_argument("--results", type=Path, default=None, help="keep the records here (default: a temporary folder)")
    args = ap.parse_args()
    results = args.results or Path(tempfile.mkdtemp(prefix="bench-drafts-"))
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    prompts = builtin(args.prompt_ids.split(",") if args.prompt_ids else None)
    ks = options.draft_lengths(args.K)
    target, folder = fetch_all(args.target, args.draft or DRAFTS, results / f"candidates-{stamp}")
    found, rows = candidates(target, folder)
    job = measuring.MeasureJob(None, prompts, ks, args.n, 2048, args.threads, f"drafts-{stamp}",
                               results / f"drafts-{stamp}.jsonl", reps=args.reps, n=args.measure)
    t = time.perf_counter()
    measured = measuring.measure_drafts(found.target.named, job, rows,
                                        measuring.MeasureEvents(note=lambda line: print(line, flush=True)))
    seconds = {"measure": time.perf_counter() - t}
    grid = Grid(ks=ks, ngls=[0], nglds=[0], temperatures=[0.0], prompts=prompts, n_predict=args.n, n_ctx=2048,
                threads=args.threads, with_draft_alone=False)
    t, swept = time.perf_counter(), {}
    for r in (r for r in rows if r.candidate.kind == "draft-simple"):
        draft = Path(r.candidate.name)
        files = PairFiles(target, draft, measuring.pair_name(target, draft))
        print(f"sweeping {files.name} ...", flush=True)
        swept[r.candidate.name] = sweep(f"sweep-{stamp}", files, grid, results / f"sweep-{stamp}.jsonl")
    seconds["sweep"] = time.perf_counter() - t
    report(found, measured, swept, seconds)
    print(f"records in {results}")


if __name__ == "__main__":
    main()
