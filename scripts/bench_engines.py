#!/usr/bin/env python
"""Benchmark gguf-bench's Python loop against llama-server on the same files, K by K, interleaved.

For each pair: the Python engine loads the pair once; one llama-server per K (and one for the target alone) is started
up front and kept running (the weights are mmapped, so the processes share them); then, for each repetition, for each
K, one greedy generation in the Python loop and one in the server, alternately, so that a drifting machine hits both
engines alike. Both engines run on the same ggml libraries (`gguf-bench build-server` links llama-server against the
ggml llama-cpp-python installed) with the same weight layout (repacking off in both: llama-server cannot mirror the
loop's AMX-free repack, see runtimes/repack.py), threads, batch sizes, context and prompt tokens.

Printed per K: tokens/s of each engine (mean ± std over repetitions), their ratio, acceptance and tokens per round of
each, gain over each engine's own target alone, and each engine's best K; for the Python loop, where its decode time
went (inside llama_decode for target and draft, and outside it), so that a K where it is slower says why.

    python scripts/bench_engines.py [--pair NAME ...] [-K 1-8] [-n 128] [--threads 2] [--reps 3] [--prompt-ids ID]
    python scripts/bench_engines.py --target T.gguf --draft D.gguf [--temp 0,0.7] [-ngl all -ngld all] [--no-server]

--target/--draft measure two files instead of registry pairs (twins too: the server is then asked to ignore
end-of-generation, as the loop does for a twin); --temp runs the whole comparison at each temperature (> 0: both
engines sample, seeded, so acceptance and text differ between them, and the tokens/s compare only as a whole);
-ngl/-ngld offload both engines alike; --no-server measures the Python loop alone (no llama-server at hand).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("GGUF_BENCH_REPACK", "0")  # before any model loads: the plain layout, as the server's

from gguf_bench import options  # noqa: E402
from gguf_bench.decoding.sampling import SamplingConfig  # noqa: E402
from gguf_bench.measure.inputs.prompts import choose  # noqa: E402
from gguf_bench.measure.pair import LoadConfig, LoadedPair  # noqa: E402
from gguf_bench.models.pairs import PairFiles, resolve  # noqa: E402
from gguf_bench.models.twin import is_twin_file  # noqa: E402
from gguf_bench.options import layers_label  # noqa: E402
from gguf_bench.runtimes.llama_cpp import quantize, use_extra_buffers  # noqa: E402
from gguf_bench.runtimes.llama_server import Launch, Sampling, Server, Speculation  # noqa: E402
from gguf_bench.runtimes.server_build import find_server  # noqa: E402

NAN = float("nan")


def bench_pair(files: PairFiles, ks: list[int], n: int, threads: int, reps: int, prompt_id: str, temp: float = 0.0,
               ngl: int = 0, ngld: int = 0, server: bool = True) -> None:
    prompt = choose(prompt_id, None)[0]
    binary, env = find_server(None) if server else (None, {})
    cfg = SamplingConfig(temperature=temp)
    sampling = Sampling(temperature=temp, ignore_eos=is_twin_file(files.target))
    py = {k: [] for k in [0, *ks]}
    srv = {k: [] for k in [0, *ks]}
    with LoadedPair(files, LoadConfig(ngl=ngl, ngld=ngld, n_ctx=2048, threads=threads)) as pair, contextlib.ExitStack() as stack:
        tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
        servers = {}
        for k in [0, *ks] if server else []:
            spec = Speculation("draft-simple", k) if k else Speculation()
            launch = Launch(binary, files.target, files.draft if k else None, spec, str(layers_label(ngl)),
                            str(layers_label(ngld)), 2048, threads,
                            repack=use_extra_buffers() and os.environ.get("GGUF_BENCH_REPACK") != "0")
            servers[k] = stack.enter_context(Server(launch, env))
        where = f"server: {' '.join(servers[max(ks)].argv[1:])}" if server else "no server (--no-server)"
        print(f"{files.name}: {files.target.name} + {files.draft.name}, prompt {prompt.id} ({len(tokens)} tokens), n={n}, "
              f"T={temp:g}, {LoadConfig(ngl=ngl, ngld=ngld).label}, {threads} threads, {reps} reps; {where}", flush=True)
        for k in [0, *ks]:  # warm-up: each drafter and each server once
            pair.generate("speculative" if k else "target", tokens, 16, max(k, 1), cfg)
            if server:
                servers[k].complete(tokens, 16, sampling)
        for rep in range(reps):
            for k in [0, *ks]:
                before = (pair.target.llama_decode_s, pair.draft.llama_decode_s)
                res = pair.generate("speculative" if k else "target", tokens, n, max(k, 1), cfg)
                py[k].append((res.tokens_per_s, res.acceptance if k else None, res.tokens_per_round if k else None,
                              pair.target.llama_decode_s - before[0], pair.draft.llama_decode_s - before[1],
                              res.decode_s + res.prompt_s, res.n_tokens, res.tokens))
                if not server:
                    srv[k].append((NAN, None, None, None))
                    continue
                comp = servers[k].complete(tokens, n, sampling)
                srv[k].append((comp.tokens_per_s, comp.accepted / comp.drafted if comp.drafted else None,
                               (comp.accepted + comp.rounds) / comp.rounds if comp.rounds else None, comp.tokens))
            print(f"  repetition {rep + 1}/{reps} done", flush=True)
    report(f"{files.name} T={temp:g}", ks, py, srv)


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else float("nan")


def _std(xs) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def _num(x: float, spec: str) -> str:
    """A figure, or '–' where it was not measured (no server, no draft counted): never 'nan' in a table."""
    return "–" if math.isnan(x) else format(x, spec)


def _speed(xs: list[float]) -> str:
    return f"{'–':>14}" if math.isnan(_mean(xs)) else f"{_mean(xs):>7.2f} ± {_std(xs):>4.2f}"


def _gain(xs: list[float], base: float, best: bool) -> str:
    gain = 100 * (_mean(xs) / base - 1)
    return "–" if math.isnan(gain) else f"{gain:+.1f}%" + (" ★" if best else "")


def _best(ks: list[int], runs: dict) -> int | None:
    measured = [k for k in ks if not math.isnan(_mean(r[0] for r in runs[k]))]
    return max(measured, key=lambda k: _mean(r[0] for r in runs[k])) if measured else None


def report(name: str, ks: list[int], py: dict, srv: dict) -> None:
    base_py, base_srv = _mean(r[0] for r in py[0]), _mean(r[0] for r in srv[0])
    best_py, best_srv = _best(ks, py), _best(ks, srv)
    print(f"\n{name}: tokens/s, mean ± std; gain over the same engine's target alone; ★ the engine's best K")
    print(f"{'K':>5} {'python':>14} {'server':>14} {'py/srv':>7} {'acc py':>7} {'acc srv':>7} {'tok/rnd py':>10} "
          f"{'tok/rnd srv':>11} {'gain py':>9} {'gain srv':>9}   python decode split per token (ms): target, draft, outside")
    for k in [0, *ks]:
        p, s = [r[0] for r in py[k]], [r[0] for r in srv[k]]
        n_tok = sum(r[6] for r in py[k])
        split = [1000 * sum(r[i] for r in py[k]) / n_tok for i in (3, 4)]
        outside = 1000 * sum(r[5] for r in py[k]) / n_tok - sum(split)
        gain_py = "" if not k else _gain(p, base_py, k == best_py)
        gain_srv = "" if not k else _gain(s, base_srv, k == best_srv)
        acc = [_num(_mean(r[1] for r in d[k]), ".1%") if k else "–" for d in (py, srv)]
        rnd = [_num(_mean(r[2] for r in d[k]), ".2f") if k else "–" for d in (py, srv)]
        print(f"{'alone' if not k else k:>5} {_speed(p)} {_speed(s)} "
              f"{_num(_mean(p) / _mean(s), '>7.2f'):>7} {acc[0]:>7} {acc[1]:>7} {rnd[0]:>10} {rnd[1]:>11} "
              f"{gain_py:>9} {gain_srv:>9}   {split[0]:.1f}, {split[1]:.1f}, {outside:.1f}")
    if srv[0][0][3] is None:
        print(f"best K: python {best_py}; no server measured")
        return
    same = py[0][0][7] == srv[0][0][3]
    print(f"best K: python {best_py}, server {best_srv} ({'the same' if best_py == best_srv else 'they differ'}); "
          f"text of the target alone: {'identical in both engines' if same else 'differs between the engines'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", action="append", help="registry pair (repeatable; default: gemma-270m-f32+q4km and "
                    "qwen-coder-1.5b-f16+q2k)")
    ap.add_argument("-K", default="1-8", help="draft lengths (default 1-8)")
    ap.add_argument("-n", type=int, default=128, help="tokens to generate (default 128)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt-ids", default="code-short", help="one built-in prompt (default code-short)")
    ap.add_argument("--target", type=Path, help="target GGUF file (with --draft; instead of --pair)")
    ap.add_argument("--draft", type=Path, help="draft GGUF file")
    ap.add_argument("--temp", default="0", help="temperatures, each a whole comparison (default 0)")
    ap.add_argument("-ngl", default="0", help="target GPU layers, both engines (a number or all)")
    ap.add_argument("-ngld", default="0", help="draft GPU layers, both engines")
    ap.add_argument("--no-server", action="store_true", help="the Python loop alone")
    args = ap.parse_args()
    ks = options.draft_lengths(args.K)
    ngl, ngld = options.layer_list(args.ngl)[0], options.layer_list(args.ngld, "-ngld")[0]
    if args.target or args.draft:
        pairs = [resolve(None, args.target, args.draft, None)]
    else:
        pairs = [resolve(name, None, None, None, quantize=quantize)
                 for name in args.pair or ["gemma-270m-f32+q4km", "qwen-coder-1.5b-f16+q2k"]]
    for files in pairs:
        for temp in (float(t) for t in args.temp.split(",")):
            bench_pair(files, ks, args.n, args.threads, args.reps, args.prompt_ids, temp, ngl, ngld, not args.no_server)


if __name__ == "__main__":
    sys.exit(main())
