#!/usr/bin/env python
"""The server engine against an independent client, at 1, 2 and 4 clients, interleaved in one run.

Engine: `gguf-bench sweep --engine server --spec-type draft-simple --parallel N --clients N` run as a user runs it, in
a terminal (a pseudo-terminal from `script`, so its progress display draws as it does for a user), one round per
sweep; its record's aggregate tokens/s (every client's tokens over the round's wall time). Independent: a llama-server
started with the very command line the engine's record stores (another port), and N plain urllib clients, streaming,
released together; the same prompt tokens and -n; the same aggregate. They alternate, engine then independent, for
each N, `--rounds` times. With --pythonpath DIR the engine runs from another checkout (an old revision, for A/B).

    python scripts/bench_server_client.py --target T.gguf --draft D.gguf [-K 4] [-n 64] [--clients 1,2,4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import read_records
from gguf_bench.runtimes.llama_server import completion_body, free_port, wait_healthy
from gguf_bench.runtimes.server_build import find_server

PROMPT = "code-short"


def engine_round(args, n: int, folder: Path, tag: str) -> tuple[float, list[str]]:
    """One sweep of the engine at N clients, in a pseudo-terminal: (aggregate tokens/s of its speculative round, the
    llama-server command line it stored)."""
    cli = [sys.executable, "-m", "gguf_bench.cli", "sweep", "--target", str(args.target), "--draft", str(args.draft),
           "--engine", "server", "--spec-type", "draft-simple", "-K", str(args.k), "--parallel", str(n), "--clients",
           str(n), "-n", str(args.n), "--prompt-ids", PROMPT, "-t", str(args.threads), "--name", tag,
           "--results-dir", str(folder)]
    env = {**os.environ, **({"PYTHONPATH": args.pythonpath} if args.pythonpath else {}), "COLUMNS": "100"}
    subprocess.run(["script", "-qec", shlex.join(cli), "/dev/null"], env=env, check=True, stdout=subprocess.DEVNULL)
    spec = next(r for r in read_records(folder / f"{tag}.jsonl")
                if isinstance(r, RunRecord) and r.mode.value == "speculative" and not r.error)
    return spec.metrics.tokens_per_s, spec.server.command


def independent_round(argv: list[str], tokens: list[int], n: int, n_predict: int) -> float:
    """The engine's own command line (another port), N urllib clients released together: tokens over wall time."""
    argv = list(argv)
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    _, env = find_server(Path(argv[0]))
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base, 120):
            raise RuntimeError("llama-server did not become healthy")
        _post(base, completion_body(tokens, 16))  # warm-up, as the engine does
        body = completion_body(tokens, n_predict, stream=True)
        counts = [0] * n
        barrier = threading.Barrier(n + 1)

        def client(i: int) -> None:
            req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
            barrier.wait()
            with urllib.request.urlopen(req, timeout=600) as r:
                for line in r:
                    if line.startswith(b"data: "):
                        counts[i] += len(json.loads(line[6:]).get("tokens") or [])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        start = time.perf_counter()
        barrier.wait()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - start)
    finally:
        proc.terminate()
        proc.wait()


def _post(base: str, body: dict) -> None:
    req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        r.read()



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("-K", dest="k", type=int, default=4)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--clients", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--pythonpath", help="run the engine from this checkout (A/B against an old revision)")
    args = ap.parse_args()
    tokens = PreparedPrompts.for_target(args.target, builtin([PROMPT])).tokens[PROMPT]
    got: dict[int, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-server-client-") as tmp:
        for r in range(args.rounds):
            for n in map(int, args.clients.split(",")):
                engine, argv = engine_round(args, n, Path(tmp), f"e{n}-{r}")
                independent = independent_round(argv, tokens, n, args.n)
                got.setdefault(n, {"engine": [], "independent": []})
                got[n]["engine"].append(engine)
                got[n]["independent"].append(independent)
                print(f"round {r + 1} clients {n}: engine {engine:.2f}, independent {independent:.2f} tokens/s "
                      f"({engine / independent:.3f})", flush=True)
    print(f"\n{args.target.name} + {args.draft.name}, draft-simple K={args.k}, -n {args.n}, -t {args.threads}, "
          f"{args.rounds} rounds each, interleaved" + (f"; engine from {args.pythonpath}" if args.pythonpath else ""))
    print("| clients | engine tokens/s | independent tokens/s | engine / independent |\n|---:|---:|---:|---:|")
    for n, sides in got.items():
        e, i = statistics.fmean(sides["engine"]), statistics.fmean(sides["independent"])
        print(f"| {n} | {e:.2f} | {i:.2f} | {e / i:.3f} |")


if __name__ == "__main__":
    main()
