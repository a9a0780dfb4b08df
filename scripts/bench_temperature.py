#!/usr/bin/env python
"""What sampling at temperature > 0 costs end to end: the same pair at T=0 and at --temp (with --top-p,
--top-k), target alone and speculative, measured interleaved in one process.

Every repetition runs T=0 then T>0 back to back for each mode, so a drift in the machine's speed touches
both alike; the ratio T>0 / T=0 is taken within each repetition and its median reported. The speculative
ratio compares like with like only where acceptance is the same at both temperatures: `--self` drafts
with the target's own file (the draft then proposes what the target would sample, and acceptance stays
at about 100% at any temperature), so the ratio shows the sampler's cost alone.

Per row: tokens/s median [range], acceptance, tokens per round, the time inside llama_decode per token
(where a change between temperatures is the machine's, or the sampler's rows evicting the model from
cache), and the time outside it: sampling and acceptance (`sample`) and the loop's other work (`other`),
each as % of the time inside llama_decode.

    python scripts/bench_temperature.py [--pair NAME | --target F.gguf --draft F.gguf | --self F.gguf]
                                        [--temp 0.7] [--top-p 0.95] [--top-k 0] [-K 4] [-n 128] [--repeat 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

from gguf_bench.decoding.loop import GenerationResult
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.errors import BenchError
from gguf_bench.measure.inputs.prompts import DEFAULT_PROMPT
from gguf_bench.measure.pair import LoadConfig, LoadedPair
from gguf_bench.models.pairs import resolve

MODES = ("target", "speculative")


def measure(pair: LoadedPair, prompt: list[int], configs: dict[str, SamplingConfig], k: int, n: int,
            repeat: int) -> dict[tuple[str, str], list[GenerationResult]]:
    runs: dict[tuple[str, str], list[GenerationResult]] = {(t, m): [] for t in configs for m in MODES}
    pair.generate("target", prompt, 8, k, SamplingConfig())  # warm-up: the first decodes are slow
    for rep in range(repeat):
        for mode in MODES:
            for label, cfg in configs.items():
                res = pair.generate(mode, prompt, n, k, dataclasses.replace(cfg, seed=rep))
                runs[label, mode].append(res)
                print(f"  rep {rep + 1} {mode:11s} {label:22s} {res.tokens_per_s:7.2f} tok/s", file=sys.stderr, flush=True)
    return runs


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def share(results: list[GenerationResult], part: str) -> float:
    """Sum of one part of decode time over the runs, as % of their time inside llama_decode."""
    inside = sum(r.target_decode_s + r.draft_decode_s for r in results)
    return 100 * sum(getattr(r, part) for r in results) / inside


def table(runs: dict[tuple[str, str], list[GenerationResult]], base: str, hot: str) -> str:
    lines = ["| mode | sampling | tokens/s median [range] | T>0 / T=0 median [range] | acceptance | tokens/round | "
             "in llama_decode, ms/token | sample % | other % |", "|---|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for label in (base, hot):
            res = runs[label, mode]
            ratio = "–" if label == base else spread([h.tokens_per_s / b.tokens_per_s
                                                     for h, b in zip(res, runs[base, mode])], "{:.3f}")
            acc = f"{sum(r.accepted for r in res) / sum(r.drafted for r in res):.1%}" if mode != "target" else "–"
            tpr = f"{statistics.median(r.tokens_per_round for r in res):.2f}" if mode != "target" else "1"
            inside = spread([1000 * (r.target_decode_s + r.draft_decode_s) / r.n_tokens for r in res])
            lines.append(f"| {mode} | {label} | {spread([r.tokens_per_s for r in res])} | {ratio} | {acc} | {tpr} | "
                         f"{inside} | {share(res, 'sample_s'):.2f} | {share(res, 'other_s'):.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--pair", help="pair name from the registry (default: its default pair)")
    which.add_argument("--target", type=Path, help="target GGUF file (with --draft)")
    which.add_argument("--self", type=Path, dest="self_file", help="one GGUF file as target and draft")
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--temp", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("-K", dest="k", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    try:
        files = resolve(args.pair, args.self_file or args.target, args.self_file or args.draft, None)
    except BenchError as exc:
        ap.error(str(exc))
    hot = SamplingConfig(args.temp, args.top_k, args.top_p)
    hot_label = (f"T={args.temp:g}" + (f" top-k {args.top_k}" if args.top_k else "")
                 + (f" top-p {args.top_p:g}" if args.top_p < 1 else ""))
    configs = {"T=0": SamplingConfig(), hot_label: hot}
    load = os.getloadavg()[0]
    with LoadedPair(files, LoadConfig(threads=args.threads)) as pair:
        prompt = pair.prompt_tokens(DEFAULT_PROMPT.text)
        runs = measure(pair, prompt, configs, args.k, args.n, args.repeat)
    print(f"**{files.name}**, prompt {DEFAULT_PROMPT.id} ({len(prompt)} tokens), K={args.k}, -n {args.n}, {args.threads} threads, "
          f"{args.repeat} interleaved repetitions; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print(table(runs, "T=0", hot_label))


if __name__ == "__main__":
    main()
