#!/usr/bin/env python
"""`tune` from twins against `tune` on the real files, interleaved in one run: predicted tokens/s for K = 1..8.

For each registry pair: tune the real files (this stores their calibration, acceptance included), then tune twins of
the pair (`tune --twin`: twins written from the headers; the acceptance is the real calibration's just stored, so
only the timings differ), and again, alternating, `--rounds` times. Every file is dropped from the page cache before
each tune loads it (models/files.drop_page_cache), so real files and twins are read back the same way. Prints per K
the mean predicted tokens/s of both and their ratio; the target alone's too. Figures are predictions, each from
its own calibration's timings.

    python scripts/bench_twin_tune.py [PAIR ...] [-K 1-8] [-n 64] [--reps 6] [--rounds 2] [--threads 2] [--prompt-ids IDS]
        [--markdown]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench import options
from gguf_bench.measure.flows.tune import TuneJob, tune, twin_job
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.models.files import drop_page_cache
from gguf_bench.models.pairs import header_sources, resolve
from gguf_bench.results.presentation.tuning import tune_strategies
from gguf_bench.results.schema.store import use_results_dir
from gguf_bench.runtimes.llama_cpp import llama_versions, quantize

DEFAULT_PAIRS = ["gemma-270m-f32+q4km", "qwen-coder-1.5b-f16+q2k"]


def predictions(job: TuneJob, ks: list[int]) -> dict[int, float]:
    """K -> predicted tokens/s (0: the target alone) of one tune, its files dropped from the page cache first."""
    for path in (job.files.target, job.files.draft):
        drop_page_cache(path)
    tuned = tune(job, [0], [0], tune_strategies("draft", "fixed", 1, 4, None, ks), check=False)
    cal = tuned.calibrations[0]
    out = {p.k: p.tokens_per_s for p in cal.predictions()}
    out[0] = cal.predict(min(cal.ks)).baseline_tokens_per_s
    return out


def bench_pair(pair: str, args, ks: list[int], folder: Path) -> list[tuple[int, float, float]]:
    files = resolve(pair, None, None, None, progress=_quiet, quantize=quantize)
    out = folder / "results" / f"{pair}.jsonl"  # where tune --twin looks for the real pair's acceptance
    out.parent.mkdir(exist_ok=True)
    chosen = builtin(args.prompt_ids.split(",") if args.prompt_ids else None)
    real = TuneJob(files, chosen, ks, args.n, 2048, args.threads, f"bench-{pair}", out, args.reps)
    *sources, _ = header_sources(pair, None, None, None)
    (folder / "twins" / pair).mkdir(parents=True)  # a folder per pair: each pair's twins apart
    twin = twin_job(real, tuple(sources), folder / "twins" / pair)
    got: dict[str, list[dict[int, float]]] = {"real": [], "twin": []}
    for i in range(args.rounds):
        for side, job in (("real", real), ("twin", twin)):  # the real one first: the twin's acceptance is its
            got[side].append(predictions(job, ks))
            print(f"  {pair} round {i + 1} {side}: " + " ".join(f"K={k} {v:.2f}" for k, v in sorted(got[side][-1].items())),
                  flush=True)
    mean = {side: {k: statistics.fmean(r[k] for r in rows) for k in rows[0]} for side, rows in got.items()}
    return [(k, mean["real"][k], mean["twin"][k]) for k in sorted(mean["real"])]


class _quiet:
    def __enter__(self):
        return lambda *a: None

    def __exit__(self, *exc):
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="*", default=DEFAULT_PAIRS)
    ap.add_argument("-K", default="1-8")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt-ids", default=None, help="built-in prompts to calibrate on (default: the four of tune)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    ks = options.draft_lengths(args.K)
    with tempfile.TemporaryDirectory(prefix="bench-twin-tune-") as tmp:
        use_results_dir(Path(tmp) / "results")
        rows = {pair: bench_pair(pair, args, ks, Path(tmp)) for pair in args.pairs}
    print(f"\n{platform.processor() or platform.machine()}, {args.threads or 'default'} threads, llama-cpp-python "
          f"{llama_versions()['llama_cpp_python']}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; predicted tokens/s "
          f"(mean of {args.rounds} tunes each, interleaved; -n {args.n}, --reps {args.reps}, prompts "
          f"{args.prompt_ids or 'the four of tune'})")
    sep = " | " if args.markdown else "  "
    print(sep.join(["pair", "K", "real", "twin", "twin/real"]))
    if args.markdown:
        print("|".join(["---"] * 5))
    for pair, table in rows.items():
        for k, real, twin in table:
            print(sep.join([pair, "target alone" if k == 0 else str(k), f"{real:.2f}", f"{twin:.2f}", f"{twin / real:.3f}"]))


if __name__ == "__main__":
    main()
