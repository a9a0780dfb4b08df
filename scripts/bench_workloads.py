#!/usr/bin/env python
"""Speculation on standard workloads and at depth, through gguf-bench's Python loop. Greedy, nothing else running.

1. A short scan of -K on a few HumanEval tasks picks the best K.
2. HumanEval (--tasks of the 164, a seeded sample) and the Spec-Bench categories the machine can load (from the hub;
   where it cannot, the one line saying so, then a checkout's question.jsonl if --spec-bench-file names one, else the
   built-in prompts of Spec-Bench's categories, labelled so):
   the target alone and the best K, laid out as Spec-Bench lays its table out (speed-up per category, τ, overall).
3. The best K against the target alone at each --depths (tokens of prose before the prompt), on one category.

Every run is stored in results/bench-workloads-<pair>.jsonl (`gguf-bench report --spec-bench` reads it back).

    python scripts/bench_workloads.py [--pair NAME ... | --target T.gguf --draft D.gguf] [-K 2,4,8] [-n 64]
        [--tasks 20] [--depths 0,4096,16384] [--spec-bench-file Spec-Bench/data/spec_bench/question.jsonl]
        [--per-category 3] [--results-dir results]
"""

from __future__ import annotations

import argparse
import hashlib
from contextlib import nullcontext
from pathlib import Path

from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import BenchError
from gguf_bench.measure.inputs import workloads
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import SweepEvents, iter_records
from gguf_bench.models.files import no_progress
from gguf_bench.models.pairs import resolve
from gguf_bench.results.presentation import specbench
from gguf_bench.results.presentation import summary as summ
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import append_record
from gguf_bench.runtimes.llama_cpp import quantize

STAND_INS = "qa,translation,summarization,math,rag,chat"  # built-in prompts of Spec-Bench's categories


def measure(name: str, files, out: Path, **grid) -> list[RunRecord]:
    events = SweepEvents(note=lambda line: print(f"  note: {line}", flush=True))
    records = []
    for r in iter_records(name, files, Grid(ngls=[0], nglds=[0], temperatures=[0.0], with_draft_alone=False, **grid),
                          events=events):
        append_record(out, r)
        records.append(r)
        what = f"{r.metrics.tokens_per_s:7.2f} tokens/s" if r.metrics and not r.error else f"error: {r.error}"
        print(f"  {r.label:<10} {r.config.prompt_id:<22} d={r.config.depth or 0:<6} {what}", flush=True)
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", action="append", default=None, help="a registry pair (fetched if missing); repeatable")
    ap.add_argument("--target", type=Path, help="a target GGUF file (with --draft, instead of --pair)")
    ap.add_argument("--draft", type=Path, help="a draft GGUF file (with --target)")
    ap.add_argument("-K", default="2,4,8")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--depths", default="0,4096,16384")
    ap.add_argument("--depth-category", default="qa")
    ap.add_argument("--spec-bench-file", help="Spec-Bench's data/spec_bench/question.jsonl, when the hub is out of reach")
    ap.add_argument("--per-category", type=int, default=3, help="Spec-Bench prompts per category (seeded sample)")
    ap.add_argument("--results-dir", type=Path, default=Path("results"))
    args = ap.parse_args()
    humaneval = workloads.choose(None, "humaneval", per_category=args.tasks, seed=0)
    spec, spec_label = spec_bench(args.spec_bench_file, args.per_category)
    if args.target or args.draft:
        pairs = [resolve(None, args.target, args.draft, None)]
    else:
        pairs = [resolve(name, None, None, None, progress=lambda: nullcontext(no_progress), quantize=quantize)
                 for name in args.pair or ["gemma-270m-f32+q4km"]]  # fetched if missing
    for files in pairs:
        bench_pair(files, args, humaneval, spec, spec_label)


def bench_pair(files, args, humaneval: list, spec: list, spec_label: str) -> None:
    pair = files.name
    out = args.results_dir / f"bench-workloads-{pair}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    common = {"n_predict": args.n, "threads": args.threads, "strategies": [Strategy()]}
    print(f"## {pair}: {files.target.name} + {files.draft.name}, greedy, n={args.n}, {args.threads} threads\n", flush=True)
    scan = measure(pair, files, out, ks=[int(k) for k in args.K.split(",")], prompts=humaneval[:3], **common)
    summary = summ.summarize(summ.to_frame(scan))
    spec_rows = summary[summary["mode"] == "speculative"]
    k = int(spec_rows.loc[spec_rows["tokens_per_s"].idxmax(), "k"])
    print(f"\nbest K on {len(humaneval[:3])} HumanEval tasks: {k}\n", flush=True)
    runs = measure(pair, files, out, ks=[k], prompts=humaneval + spec, **common)
    sb = specbench.frame(summ.to_frame(runs))
    print(f"\n{len(humaneval)} HumanEval tasks and {spec_label}, K={k}:\n\n{specbench.markdown(sb)}", flush=True)
    depths = [int(d) for d in args.depths.split(",")]
    prompt = [p for p in spec if p.category == args.depth_category][:1] or spec[:1]
    deep = measure(pair, files, out, ks=[k], prompts=prompt, depths=depths, repetitions=2, **common)
    print(f"\nK={k} against the target alone by depth, prompt {prompt[0].id}:\n\n{depth_table(deep)}\n", flush=True)


def spec_bench(question_file: str | None, per_category: int) -> tuple[list, str]:
    """Spec-Bench's prompts: from the hub; else from a checkout's question.jsonl; else the built-in stand-ins."""
    try:
        return workloads.choose(None, "spec-bench", per_category=per_category, seed=0), "Spec-Bench (hub)"
    except BenchError as exc:
        print(f"Spec-Bench: {exc}", flush=True)
    if question_file:
        digest = hashlib.sha256(Path(question_file).read_bytes()).hexdigest()[:12]
        print(f"  using {question_file} (sha256 {digest}...) instead\n", flush=True)
        return (workloads.choose(None, question_file, per_category=per_category, seed=0),
                f"Spec-Bench's question.jsonl (sha256 {digest}...), {per_category} per category")
    print(f"  using the built-in prompts of its categories instead ({STAND_INS})\n", flush=True)
    return builtin(STAND_INS.split(",")), "built-in prompts by Spec-Bench category (stand-ins)"


def depth_table(records: list[RunRecord]) -> str:
    summary = summ.summarize(summ.to_frame(records))
    lines = ["| depth | target alone tokens/s | speculative tokens/s | acceptance | τ | gain |", "|---:|---:|---:|---:|---:|---:|"]
    for depth, rows in summary.groupby("depth"):
        target = rows[rows["mode"] == "target"].iloc[0]
        spec = rows[rows["mode"] == "speculative"].iloc[0]
        lines.append(f"| {depth} | {target['tokens_per_s']:.2f} | {spec['tokens_per_s']:.2f} | {spec['acceptance']:.1%} | "
                     f"{spec['tokens_per_round']:.2f} | {spec['gain_pct']:+.1f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
