#!/usr/bin/env python
"""The memory-bandwidth ceiling's share of one target alone: gguf-bench's Python loop against llama.cpp's own
llama-bench on the same file, each round measured in turn with the bandwidth.

Each round, one right after the other: the bandwidth (`gguf-bench machine`'s kernel, best of --passes, BLAS at one
thread a call), one greedy generation of -n tokens through gguf-bench's loop (the model loaded once; its decode
tokens/s, as a sweep's target-alone run measures it), and `llama-bench -p 0 -n N -r 1` on the same file and threads
(its own warm-up first). Each engine's share of the ceiling is its tokens/s x the file's bytes per token (the GGUF
header: models/reads.py, at the mean position) over that round's bandwidth. The machine's bandwidth moves within the
minute on a shared VM; the two shares of one round share its bandwidth, so their difference is the loop's against
llama.cpp's, paired.

Printed: a line per round, then the shares' difference over rounds (median, range) and the loop's tokens/s over
llama-bench's (mean of the rounds' log-ratios with its 95% t interval).

    python scripts/bench_ceiling.py [--target FILE] [-n 64] [--threads 2] [--rounds 8] [--passes 3]

--target defaults to the default pair's target (the README's first command fetches it). llama-bench comes from the CPU
build tree (`gguf-bench build-tree --cpu`, then `cmake --build <tree> --target llama-bench`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

from scipy import stats

from gguf_bench.decoding.loop import generate_regular
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.measure.flows import bandwidth
from gguf_bench.measure.inputs.prompts import choose
from gguf_bench.models import reads
from gguf_bench.models.pairs import resolve
from gguf_bench.runtimes.llama_cpp import Model
from gguf_bench.runtimes.tree_build import complete, lib_dir, tree_dir


def llama_bench(tree: Path) -> Path:
    binary = tree / "bin" / "llama-bench"
    if not (complete(tree) and binary.is_file()):
        sys.exit(f"no llama-bench in {tree}: run gguf-bench build-tree --cpu, then cmake --build {tree} --target llama-bench")
    return binary


def bench_tg(binary: Path, tree: Path, target: Path, n: int, threads: int) -> float:
    """llama-bench's tg tokens/s of one repetition."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir(tree))}
    out = subprocess.run([str(binary), "-m", str(target), "-p", "0", "-n", str(n), "-t", str(threads), "-r", "1",
                          "-o", "json"], capture_output=True, text=True, env=env, check=True).stdout
    return float(json.loads(out)[-1]["avg_ts"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    target = a.target or resolve(None, None, None, None).target
    tree = tree_dir("cpu")
    binary = llama_bench(tree)
    step = reads.file_bytes(str(target))
    model = Model(target, n_ctx=2048, n_threads=a.threads)
    prompt = model.tokenize(choose("code-short", None)[0].text)
    per_token = step.step(len(prompt) + a.n / 2)
    generate_regular(model, prompt, 16, SamplingConfig())  # warm-up
    print(f"{target.name}: {per_token / 1e9:.3f} GB read per token (header, at position {len(prompt) + a.n // 2}), "
          f"-n {a.n}, {a.threads} threads, {a.rounds} rounds")
    apart, logs = [], []
    for r in range(a.rounds):
        gbs = bandwidth.measure(a.threads, reps=a.passes, likwid=False).bandwidth_gbs
        ours = generate_regular(model, prompt, a.n, SamplingConfig()).tokens_per_s
        theirs = bench_tg(binary, tree, target, a.n, a.threads)
        share = [100 * tps * per_token / (gbs * 1e9) for tps in (ours, theirs)]
        apart.append(share[0] - share[1])
        logs.append(math.log(ours / theirs))
        print(f"round {r + 1}: {gbs:.1f} GB/s; gguf-bench {ours:.2f} tokens/s = {share[0]:.1f}%; llama-bench "
              f"{theirs:.2f} = {share[1]:.1f}%; apart {apart[-1]:+.1f} points", flush=True)
    mean = statistics.mean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
    print(f"shares apart (gguf-bench - llama-bench): median {statistics.median(apart):+.1f} points, range "
          f"{min(apart):+.1f} to {max(apart):+.1f}; within 5 points in {sum(abs(x) <= 5 for x in apart)}/{len(apart)}")
    print(f"gguf-bench's tokens/s over llama-bench's: {math.exp(mean):.3f} [{math.exp(mean - half):.3f}, "
          f"{math.exp(mean + half):.3f}] (95%, {len(logs)} rounds)")


if __name__ == "__main__":
    main()
