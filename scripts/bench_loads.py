#!/usr/bin/env python
"""How much two loads of the same file differ: the target alone's decode speed in several fresh loads, mmapped (the
default of llama.cpp, llama-cpp-python and llama-server) and read into memory (use_mmap=False, llama-server's
--no-mmap, llama-bench's -lm none), the two kinds in turn (A B | B A ...), each load measured --runs times.

    python scripts/bench_loads.py [--model PATH] [--loads 6] [--runs 3] [-n 64] [--threads 2]

Per kind it prints each load's mean tokens/s, the spread between loads (sd of the load means, and their range) and
within them (the pooled sd of a load's runs about its own mean): where the between-load sd is well above
within-load sd / sqrt(runs), each load has its own speed, and a sweep whose arms are one load each compares loads.
Without --model it uses the default pair's target (gguf-bench's cache: the quick start builds it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import llama_cpp

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


def default_model() -> Path:
    from gguf_bench.models.files import cache_dir

    return cache_dir() / "derived" / "gemma-3-270m-q4_k_m.F32.gguf"


def one_load(model: Path, mmap: bool, runs: int, n: int, threads: int) -> list[float]:
    """A fresh load: one warm-up generation, then `runs` greedy generations of n tokens, each timed from its first
    token to its last (n - 1 decode steps), as tokens/s."""
    llm = llama_cpp.Llama(str(model), n_ctx=512, n_threads=threads, n_threads_batch=threads, use_mmap=mmap,
                          verbose=False)
    try:
        prompt = llm.tokenize(PROMPT.encode())
        speeds = []
        for i in range(runs + 1):
            llm.reset()
            stamps = []
            for _ in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
                stamps.append(time.perf_counter())
                if len(stamps) == n:
                    break
            if i:  # the first is the warm-up
                speeds.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
        return speeds
    finally:
        llm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--loads", type=int, default=6, help="fresh loads of each kind")
    ap.add_argument("--runs", type=int, default=3, help="measured generations per load")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    model = args.model or default_model()
    if not model.is_file():
        raise SystemExit(f"{model} not found: run the quick start first, or give --model")
    kinds = {True: "mmapped", False: "read into memory (use_mmap=False)"}
    got: dict[bool, list[list[float]]] = {True: [], False: []}
    started = time.time()
    for i in range(args.loads):
        for mmap in ((True, False) if i % 2 == 0 else (False, True)):  # A B | B A
            got[mmap].append(one_load(model, mmap, args.runs, args.n, args.threads))
    print(f"{model.name}: {args.loads} loads of each kind in turn, {args.runs} runs of {args.n} tokens each, "
          f"{args.threads} threads, {time.time() - started:.0f} s")
    for mmap, label in kinds.items():
        means = [statistics.mean(s) for s in got[mmap]]
        within = statistics.mean(statistics.variance(s) for s in got[mmap]) ** 0.5 if args.runs > 1 else float("nan")
        print(f"  {label}: loads {', '.join(f'{m:.2f}' for m in means)} tokens/s; between loads sd "
              f"{statistics.stdev(means):.2f} ({100 * statistics.stdev(means) / statistics.mean(means):.1f}%), range "
              f"{min(means):.2f}-{max(means):.2f}; within a load sd {within:.2f} "
              f"({100 * within / statistics.mean(means):.1f}%)")


if __name__ == "__main__":
    main()
