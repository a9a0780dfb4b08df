#!/usr/bin/env python
"""Speculation across a link: the target split over two RPC servers on loopback, the draft local, at several one-way
delays (--rpc-delay: gguf-bench's delaying proxy, runtimes/rpc_link.py): the target alone's tokens/s and the best
speculative gain at each delay, through gguf-bench's own sweep (server engine, `build-server --rpc`).

    python scripts/bench_rpc.py [--pair gemma-270m-f32+q4km] [-K 1,2,4,8] [--delays 0,1,3] [-n 64] [--markdown]

Each target step pays a round trip to each server per graph split; a verify batch of K+1 tokens pays it once, so the
gain should grow with the delay. The two rpc-servers and the client share this machine's cores: --threads each
(default 1 per server, 1 for the client's draft).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models.download import fetch
from gguf_bench.models.registry import load_registry
from gguf_bench.options import ALL_LAYERS, draft_lengths
from gguf_bench.placing import Split, placing_axes
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.runtimes.llama_cpp import quantize
from gguf_bench.runtimes.llama_server import free_port
from gguf_bench.runtimes.rpc import RpcServer
from gguf_bench.runtimes.server_build import BINARY, RPC_SERVER, rpc_binary


def pair_files(args) -> PairFiles:
    if args.target:
        return PairFiles(Path(args.target), Path(args.draft), "given")
    reg = load_registry(None)
    pair = reg.pairs[args.pair]
    target, draft = (fetch(ref, reg, quantize=quantize).path for ref in (pair.target, pair.draft))
    return PairFiles(target, draft, args.pair)


def rows(records: list[RunRecord]) -> list[list[str]]:
    """Per delay: the target alone's tokens/s, the best K's, its gain and acceptance (means over prompts and runs)."""
    out = []
    for delay in sorted({r.config.rpc_delay_ms for r in records}):
        ok = [r for r in records if r.config.rpc_delay_ms == delay and r.error is None]
        base = statistics.fmean(r.metrics.tokens_per_s for r in ok if r.mode == Mode.TARGET)
        by_k = {k: [r for r in ok if r.mode == Mode.SPECULATIVE and r.k == k] for k in sorted({r.k for r in ok if r.k})}
        speed = {k: statistics.fmean(r.metrics.tokens_per_s for r in rs) for k, rs in by_k.items() if rs}
        k = max(speed, key=speed.get)
        acc = statistics.fmean(r.metrics.acceptance or 0 for r in by_k[k])
        curve = " ".join(f"K={k}:{v / base:.2f}x" for k, v in speed.items())
        failed = sum(r.error is not None for r in records if r.config.rpc_delay_ms == delay)
        out.append([f"{delay} ms", f"{base:.2f}", str(k), f"{speed[k]:.2f}", f"{100 * (speed[k] / base - 1):+.1f}%",
                    f"{acc:.0%}", curve + (f" ({failed} failed)" if failed else "")])
    return out


def table(head: list[str], body: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |\n|" + "|".join("---" for _ in head) + "|")
        for r in body:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    for r in [head, *body]:
        print("  ".join(x.rjust(w) for x, w in zip(r, widths)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="gemma-270m-f32+q4km", help="a registry pair (fetched when missing)")
    ap.add_argument("--target", help="a target file instead of --pair (with --draft)")
    ap.add_argument("--draft")
    ap.add_argument("-K", default="1,2,4,8")
    ap.add_argument("--delays", default="0,1,3", help="one-way delays in ms (--rpc-delay)")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", "--repetitions", type=int, default=1)
    ap.add_argument("--prompt-ids", default="code-short,chat-short")
    ap.add_argument("--threads", type=int, default=1, help="threads of each rpc-server and of the client")
    ap.add_argument("--server-bin", type=Path, help="an RPC-capable llama-server (default: `build-server --rpc`'s)")
    ap.add_argument("--rpc-server-bin", type=Path, help="ggml-rpc-server (default: `build-server --rpc`'s)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    files = pair_files(args)
    server_bin = args.server_bin or rpc_binary(BINARY)
    with RpcServer(free_port(), args.threads, args.rpc_server_bin or rpc_binary(RPC_SERVER)) as a, \
            RpcServer(free_port(), args.threads, args.rpc_server_bin or rpc_binary(RPC_SERVER)) as b:
        split = Split(["1,1"], rpc=[f"{a.endpoint},{b.endpoint}"], rpc_delay=args.delays)
        grid = Grid(ks=draft_lengths(args.K), ngls=[ALL_LAYERS], nglds=[0], temperatures=[0.0],
                    prompts=builtin(args.prompt_ids.split(",")), repetitions=args.repetitions, n_predict=args.n,
                    threads=args.threads, with_draft_alone=False, engines=("server",),
                    engine_options=(ServerOptions(server_bin=server_bin),),
                    **placing_axes(split=split))
        started = datetime.now(UTC)
        records = list(iter_records("bench-rpc", files, grid))
    print(f"{files.target.name} over two loopback rpc-servers (-ngl all -ts 1,1), {files.draft.name} local; "
          f"{platform.node()}, {started:%Y-%m-%d %H:%M} UTC, {(datetime.now(UTC) - started).total_seconds():.0f} s, "
          f"`{' '.join(['python', *sys.argv])}`\n")
    table(["one-way delay", "target alone tok/s", "best K", "tok/s", "gain", "acceptance", "speed-up per K"],
          rows(records), args.markdown)


if __name__ == "__main__":
    main()
