#!/usr/bin/env python
"""Does `--engine endpoint` read what a server someone else started does? Two llama-servers started here as their
owner would (the project's build; one with --spec-type draft-simple -md DRAFT, one without; --metrics, -np SLOTS),
then `gguf-bench sweep --engine endpoint --url --baseline-url --clients 1,2`, then `--engine server` with the same
flags on the same files, in turn.

Prints, per client count: the endpoint's acceptance next to the speculative server's own /metrics counters over the
whole endpoint sweep (drafted and accepted tokens, read before and after it), and the gain with its interval from both
engines. Issue 57's target: the same acceptance as the server's counters, and a gain within the interval of
--engine server's. Nothing else may run meanwhile (the gains are timings).

    python scripts/bench_endpoint.py [-K 4] [-r 3|auto] [-n 64] [--slots 2] [--target t.gguf --draft d.gguf]
                                     [--server-bin PATH] [--prompt-ids code-short,chat-short]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gguf_bench.cli.progress import pair_files
from gguf_bench.results.presentation.crossover import gain_text
from gguf_bench.results.schema.records import Mode
from gguf_bench.results.schema.store import read_records
from gguf_bench.runtimes.llama_cpp import use_extra_buffers
from gguf_bench.runtimes.llama_server import Launch, Server, Speculation
from gguf_bench.runtimes.server_build import find_server
from gguf_bench.runtimes.server_metrics import spec_counters


def gb(results: Path, *args: str) -> str:
    """One gguf-bench command in its own process (results under `results`); its stdout."""
    env = os.environ | {"GGUF_BENCH_RESULTS": str(results), "COLUMNS": "160"}
    proc = subprocess.run([sys.executable, "-m", "gguf_bench.cli", *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gguf-bench {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def rows(results: Path, name: str) -> list[dict]:
    return json.loads(gb(results, "report", str(results / f"{name}.jsonl"), "--format", "json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-K", dest="k", type=int, default=4)
    ap.add_argument("-r", dest="reps", default="3", help="a count, or auto (both sweeps: -r auto --max-reps 10)")
    ap.add_argument("-n", dest="n", type=int, default=64)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--server-bin", type=Path, help="the llama-server to run (default: gguf-bench's own choice)")
    ap.add_argument("--prompt-ids", default="code-short,chat-short")
    args = ap.parse_args()
    files = pair_files(None, args.target, args.draft, None)
    binary, env = find_server(args.server_bin)
    results = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    clients = ",".join(str(c) for c in range(1, args.slots + 1))
    common = ["--prompt-ids", args.prompt_ids, "-n", str(args.n), "--clients", clients, "-r", str(args.reps)]
    n_ctx = 1024 * args.slots

    def launch(draft: Path | None, spec: Speculation) -> Launch:
        # --no-repack where the build's AMX matmul would crash on K-quants, as the server engine does (llama_cpp.py)
        return Launch(binary, files.target, draft, spec, "0", "0", n_ctx, args.threads, repack=use_extra_buffers(),
                      parallel=args.slots)

    start = time.monotonic()
    with (Server(launch(files.draft, Speculation("draft-simple", args.k)), env) as spec,
          Server(launch(None, Speculation()), env) as base):
        before = spec.metrics()
        ep_out = gb(results, "sweep", "--engine", "endpoint", "--url", spec.base, "--baseline-url", base.base, *common,
           "--name", "ep")
        after = spec.metrics()
    ep_s = time.monotonic() - start
    start = time.monotonic()
    srv_out = gb(results, "sweep", "--engine", "server", "--target", str(files.target), "--draft", str(files.draft),
       "--spec-type", "draft-simple", "-K", str(args.k), "--parallel", str(args.slots), "--no-draft-alone",
       "-t", str(args.threads), *common, "--name", "srv",
       *(["--server-bin", str(args.server_bin)] if args.server_bin else []))
    srv_s = time.monotonic() - start

    ran = [r for r in read_records(results / "ep.jsonl") if r.mode == Mode.SPECULATIVE and r.metrics]
    drafted = sum(r.metrics.drafted for r in ran)
    accepted = sum(r.metrics.accepted for r in ran)
    _, own_d, own_a = spec_counters(before, after)
    own_cells = sum(r.metrics.rounds is not None for r in ran)  # /metrics over the cell == its own timings
    print(f"pair {files.name}: draft-simple K={args.k}, -np {args.slots}, -t {args.threads}, -n {args.n}, "
          f"-r {args.reps}, prompts {args.prompt_ids}")
    print(f"endpoint sweep {ep_s:.0f} s, server sweep {srv_s:.0f} s")
    for engine, out in (("endpoint", ep_out), ("server", srv_out)):  # -r auto: why each stopped
        for line in (ln for ln in out.splitlines() if ln.startswith("-r auto:")):
            print(f"{engine}: {line}")
    print(f"acceptance over the endpoint sweep: records {accepted}/{drafted} = {accepted / drafted:.3f}; the server's "
          f"own /metrics {own_a}/{own_d} = {own_a / own_d:.3f} (its warm-up and check requests included); cells "
          f"whose /metrics counters equal their own timings: {own_cells} of {len(ran)}")
    ep = {r["clients"]: r for r in rows(results, "ep") if r["mode"] == "speculative"}
    srv = {r["clients"]: r for r in rows(results, "srv") if r["mode"] == "speculative"}
    print(f"{'clients':>7}  {'endpoint acc.':>13}  {'server acc.':>11}  {'endpoint gain':>22}  {'server gain':>22}")
    for c in sorted(ep):
        e, s = ep[c], srv.get(c, {})
        print(f"{c:>7}  {e.get('acceptance') or float('nan'):>13.3f}  {s.get('acceptance') or float('nan'):>11.3f}  "
              f"{gain_text(e):>22}  {gain_text(s) if s else '-':>22}")
    print(f"(results in {results})")


if __name__ == "__main__":
    main()
