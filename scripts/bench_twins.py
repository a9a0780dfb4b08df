#!/usr/bin/env python
"""Twins against the real files: decode tokens/s and the verify curve t(K+1)/t(1), interleaved, one run.

For each model (registry names, or GGUF paths): write its twin (models/twin.py, from the header alone) into a
temporary folder, load the real file and the twin side by side (same settings), and measure both in alternation,
round after round: the time of one-token decode steps (decode tokens/s), and of batches of K+1 tokens that ask for
K+1 logits, as a verify step does, then rewound. Both are fed the same token ids (the tokens of a fixed text), so only
the weights differ. Prints one table (markdown with --markdown) for docs/twins.md, with the machine and the date.

    python scripts/bench_twins.py [MODEL ...] [-K 1,4,8] [-n 64] [--rounds 5] [-ngl N|all] [--fetch] [--markdown]

Both files are dropped from the page cache before they load (models/files.drop_page_cache): how a file's pages came
into the cache (written by the derivation that made it, read piecemeal, or read back whole) changed a decode by 8% on
these VMs, the same bytes in another cache state, so each side is read back the same way.

MODEL: a registry model (fetched with --fetch, else skipped when not cached) or a GGUF path. The default set is the
issue's: gemma-3-270m Q4_K_M, F32 and Q2_K, Qwen2.5-Coder-1.5B Q4_K_M, F16 and Q2_K.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench import options
from gguf_bench.models.download import fetch, locate
from gguf_bench.models.files import drop_page_cache
from gguf_bench.models.parts import local_header
from gguf_bench.models.registry import load_registry
from gguf_bench.models.twin import write_twin
from gguf_bench.runtimes.llama_cpp import Model, llama_versions, quantize

DEFAULT_MODELS = ["gemma-3-270m-q4_k_m", "gemma-3-270m-f32", "gemma-3-270m-q2_k", "qwen2.5-coder-1.5b-instruct-q4_k_m",
                  "qwen2.5-coder-1.5b-instruct-f16", "qwen2.5-coder-1.5b-instruct-q2_k"]
TEXT = ("def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n    pivot = xs[0]\n    left = [x for x in xs[1:] "
        "if x < pivot]\n    right = [x for x in xs[1:] if x >= pivot]\n    return quicksort(left) + [pivot] + quicksort(right)\n")


def resolve(name: str, do_fetch: bool) -> Path | None:
    if Path(name).is_file():
        return Path(name)
    reg = load_registry()
    ref = reg.models[name]
    return fetch(ref, reg, quantize=quantize).path if do_fetch else locate(ref, reg)


def decode_s(model: Model, tokens: list[int], n: int) -> float:
    """Seconds per one-token decode step, over n steps after a prompt of 16 tokens."""
    model.rewind(0)
    model.eval(tokens[:16], 1)
    t = time.perf_counter()
    for i in range(n):
        model.eval([tokens[16 + i % (len(tokens) - 16)]], 1)
    return (time.perf_counter() - t) / n


def verify_s(model: Model, tokens: list[int], k: int, n: int) -> float:
    """Seconds per batch of k+1 tokens asking for k+1 logits, each rewound, after a prompt of 16 tokens."""
    model.rewind(0)
    model.eval(tokens[:16], 1)
    t = time.perf_counter()
    for i in range(n):
        start = 16 + (i * (k + 1)) % (len(tokens) - 16 - k - 1)
        model.eval(tokens[start:start + k + 1], k + 1)
        model.rewind(16)
    return (time.perf_counter() - t) / n


def measure(real: Path, twin: Path, ks: list[int], n: int, rounds: int, threads: int | None, ngl: int) -> dict:
    """Interleaved: each round measures both files on every quantity, the real file first in even rounds and the twin
    first in odd ones (ABBA: a drift of the machine's speed favours neither). Medians over rounds."""
    times: dict[tuple[str, str], list[float]] = {}
    for path in (real, twin):
        drop_page_cache(path)
    with Model(real, ngl, n_ctx=512, n_threads=threads) as r, Model(twin, ngl, n_ctx=512, n_threads=threads) as t:
        tokens = r.tokenize(TEXT * 3)
        assert t.twin and not r.twin
        for model in (r, t):  # warm-up: the first pass over a twin's holes faults its zero pages in (and the real
            decode_s(model, tokens, 4)  # file's pages come back into the page cache); every batch size once, as a
            for k in ks:  # GPU backend may compile a kernel per size at first use
                verify_s(model, tokens, k, 2)
        for i in range(rounds):
            for label, model in (("real", r), ("twin", t))[::1 if i % 2 == 0 else -1]:
                times.setdefault((label, "1"), []).append(decode_s(model, tokens, n))
                for k in ks:
                    times.setdefault((label, f"v{k}"), []).append(verify_s(model, tokens, k, max(4, n // 4)))
    return {key: statistics.median(v) for key, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("-K", default="1,4,8", help="draft lengths: batches of K+1 tokens")
    ap.add_argument("-n", type=int, default=64, help="decode steps per round (verify batches: n/4)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("-ngl", default="0", help="layers on the GPU for both files (a number or all; a GPU build)")
    ap.add_argument("--fetch", action="store_true", help="fetch registry models that are not cached")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    ks = [int(k) for k in args.K.split(",")]
    sep = " | " if args.markdown else "  "
    head = ["model", "twin written", "twin on disk", "real tok/s", "twin tok/s", "twin/real"]
    head += [h for k in ks for h in (f"real t({k + 1})/t(1)", f"twin t({k + 1})/t(1)")]
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, llama-cpp-python "
          f"{llama_versions()['llama_cpp_python']}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; medians of {args.rounds} "
          f"interleaved rounds, {args.n} decode steps each, -ngl {args.ngl}, threads {args.threads or 'default'}; "
          "both files dropped from the page cache before loading\n")
    print(("| " if args.markdown else "") + sep.join(head) + (" |" if args.markdown else ""))
    if args.markdown:
        print("|" + "|".join("---" for _ in head) + "|")
    with tempfile.TemporaryDirectory(prefix="twins-", dir=".") as tmp:
        for name in args.models:
            real = resolve(name, args.fetch)
            if real is None:
                print(f"{name}: not cached (run with --fetch), skipped")
                continue
            w = write_twin(local_header(real), Path(tmp) / f"twin-{real.name}", real.name)
            m = measure(real, w.path, ks, args.n, args.rounds, args.threads, options.layers(args.ngl))
            row = [real.name, f"{w.seconds:.1f} s", f"{w.on_disk / 2**20:.1f} MiB ({100 * w.on_disk / real.stat().st_size:.1f}%)",
                   f"{1 / m['real', '1']:.1f}", f"{1 / m['twin', '1']:.1f}", f"{m['real', '1'] / m['twin', '1']:.3f}"]
            row += [f"{m[who, f'v{k}'] / m[who, '1']:.2f}" for k in ks for who in ("real", "twin")]
            print(("| " if args.markdown else "") + sep.join(row) + (" |" if args.markdown else ""), flush=True)
            Path(w.path).unlink()


if __name__ == "__main__":
    main()
