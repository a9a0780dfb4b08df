#!/usr/bin/env python
"""A/A from stored records: how often does the verdict rule call a difference between two settings that are the same?

Real target-alone runs are taken from results files, each prompt's runs in the order they began, and cut into
disjoint neighbours (1st and 2nd, 3rd and 4th, ...): two runs of the same setting measured next to each other, as an
interleaved sweep pairs a speculative run with its target alone. Each simulated sweep draws, for each of --rows
settings, --pairs such neighbour pairs (with replacement) and labels one run of each pair "target alone" and the other
"speculative": the same thing measured twice. The records go through `summarize` and `gain_decided`, the code every
verdict reads; a sweep in which any row is decided is a false decision.

    python scripts/bench_aa.py results/r8.jsonl results/quickstart.jsonl [--sweeps 20] [--rows 4] [--pairs 8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from gguf_bench.results.presentation.summary import gain_decided, summarize, to_frame
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.results.schema.store import read_records


def neighbour_pairs(paths: list[Path]) -> list[tuple[float, float]]:
    """(earlier, later) tokens/s of disjoint neighbouring target-alone runs of one prompt, over every file."""
    out = []
    for path in paths:
        runs = [r for r in read_records(path) if isinstance(r, RunRecord) and r.mode == Mode.TARGET and r.tokens_per_s
                and r.order is not None and r.order.started is not None]
        by_prompt: dict[str, list[RunRecord]] = {}
        for r in runs:
            by_prompt.setdefault(f"{path}:{r.config.prompt_id}:{r.config.ngl}", []).append(r)
        for rs in by_prompt.values():
            rs.sort(key=lambda r: r.order.started)
            out += [(a.tokens_per_s, b.tokens_per_s) for a, b in zip(rs[::2], rs[1::2])]
    return out


def record(mode: str, tps: float, k: int, rep: int, t: float) -> dict:
    return {"pair": "AA", "mode": mode, "config": {"k": k, "n_predict": 64, "prompt_id": "p", "repetition": rep},
            "metrics": {"tokens_per_s": tps, "n_tokens": 64, "drafted": 8 if mode == "speculative" else 0},
            "order": {"design": "shuffled", "started": t}}


def sweep(pool: list[tuple[float, float]], rows: int, pairs: int, rng: np.random.Generator) -> bool:
    """One simulated sweep; True where some row was decided (a false decision). Each row has its own target alone, as
    rows of several settings (the family of rows is corrected for, as in a real grid)."""
    records = []
    for k in range(1, rows + 1):
        for rep in range(pairs):
            a, b = pool[rng.integers(len(pool))]
            if rng.random() < 0.5:  # which of the two neighbours is "speculative": no side always first
                a, b = b, a
            records += [record("target", a, k, rep, rep), record("speculative", b, k, rep, rep + 0.5)]
    frames = []
    for k in range(1, rows + 1):  # one setting per row: its own baseline (-ngl k, say), one family
        f = to_frame([r for r in records if r["config"]["k"] == k])
        frames.append(f.assign(ngl=str(k)))
    summary = summarize(pd.concat(frames, ignore_index=True))
    spec = summary[summary["mode"] == "speculative"]
    return any(gain_decided(r) is True for _, r in spec.iterrows())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pool = neighbour_pairs(args.files)
    if len(pool) < 4:
        raise SystemExit(f"only {len(pool)} neighbour pairs of target-alone runs in {len(args.files)} files")
    ratios = np.array([b / a for a, b in pool])
    print(f"{len(pool)} neighbour pairs of real target-alone runs; their ratio: median {np.median(ratios):.3f}, "
          f"spread (std of log) {np.log(ratios).std():.3f}")
    rng = np.random.default_rng(args.seed)
    false = sum(sweep(pool, args.rows, args.pairs, rng) for _ in range(args.sweeps))
    print(f"{args.sweeps} A/A sweeps of {args.rows} rows x {args.pairs} pairs: {args.sweeps - false} called 'no "
          f"difference', {false} decided a difference")


if __name__ == "__main__":
    main()
