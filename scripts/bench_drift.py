#!/usr/bin/env python
"""Does drift become gain? The same sweep three times: quiet, then with a busy loop on one core during its first half,
then during its last half; the gain of each, with its interval and whether the report decides it, and the drift and
busy lines the report prints (issue 55's target: the gain under load within 10 points of the quiet gain, or nothing
decided and the drift named).

The busy half is timed from the quiet sweep's own wall time. Each sweep is a fresh `gguf-bench sweep` process on the
default pair (gemma F32 + Q4_K_M), one K, two prompts; nothing else may run meanwhile.

    python scripts/bench_drift.py --engine server [-K 4] [-r 4] [-n 64]
    python scripts/bench_drift.py --engine python --tree /tmp/old-checkout   # an older gguf_bench (before/after)
    python scripts/bench_drift.py --engine python --target t.gguf --draft d.gguf -n 8 -r 2   # any pair
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def busy() -> None:
    while True:
        pass


def sweep(tree: Path, results: Path, name: str, args, load: str | None, quiet_s: float | None) -> float:
    """One sweep in its own process; `load` 'first' or 'last': a busy loop during that half of quiet_s. Its wall time."""
    cmd = [sys.executable, "-m", "gguf_bench.cli", "sweep", "--name", name, "-K", str(args.k), "-r", str(args.reps),
           "-n", str(args.n), "--prompt-ids", args.prompts, "--no-draft-alone", "--engine", args.engine]
    if args.target:
        cmd += ["--target", str(args.target), "--draft", str(args.draft)]
    env = os.environ | {"GGUF_BENCH_RESULTS": str(results), "COLUMNS": "100"}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hog = None
    if load == "first":
        hog = multiprocessing.Process(target=busy)
        hog.start()
        _wait(proc, quiet_s / 2)
        hog.terminate()
    elif load == "last":
        _wait(proc, quiet_s / 2)
        if proc.poll() is None:
            hog = multiprocessing.Process(target=busy)
            hog.start()
    out = proc.communicate()[0]
    if hog is not None and hog.is_alive():
        hog.terminate()
    if proc.returncode not in (0, 3):
        sys.exit(f"{name} failed ({proc.returncode}):\n{out[-3000:]}")
    return time.monotonic() - start


def _wait(proc: subprocess.Popen, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        time.sleep(0.2)


def verdict(tree: Path, results: Path, name: str) -> tuple[dict, list[str]]:
    """The speculative row of the sweep's report (json) and the report's drift/busy/deploy lines."""
    env = os.environ | {"GGUF_BENCH_RESULTS": str(results), "COLUMNS": "200"}
    base = [sys.executable, "-m", "gguf_bench.cli", "report", str(results / f"{name}.jsonl")]
    rows = json.loads(subprocess.run([*base, "--format", "json"], cwd=tree, env=env, capture_output=True, text=True,
                                     check=True).stdout)
    text = subprocess.run(base, cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(("drift", "! unreliable", "deploy"))]
    return next(r for r in rows if r["mode"] == "speculative"), lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="server", choices=["python", "server"])
    ap.add_argument("-K", dest="k", type=int, default=4)
    ap.add_argument("-r", dest="reps", type=int, default=4)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--prompts", default="code-short,chat-short")
    ap.add_argument("--target", type=Path, help="a target file instead of the default pair (with --draft)")
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the checkout whose gguf_bench runs (default: this one)")
    args = ap.parse_args()
    results = Path(tempfile.mkdtemp(prefix="drift-"))
    print(f"engine {args.engine}, K={args.k}, -r {args.reps}, -n {args.n}, prompts {args.prompts}; tree {args.tree}; "
          f"{os.cpu_count()} cores; results {results}")
    quiet_s = sweep(args.tree, results, "quiet", args, None, None)
    walls = {"quiet": quiet_s}
    for load in ("first", "last"):
        walls[f"busy-{load}"] = sweep(args.tree, results, f"busy-{load}", args, load, quiet_s)
    print(f"{'sweep':<12}{'wall s':>8}{'tokens/s':>10}{'gain %':>9}{'interval':>16}  decided")
    for name, wall in walls.items():
        row, lines = verdict(args.tree, results, name)
        lo, hi = row.get("gain_lo"), row.get("gain_hi")
        interval = f"[{lo:+.1f}, {hi:+.1f}]" if lo is not None else f"p={row.get('gain_p')}"
        decided = row.get("decided", "-")
        print(f"{name:<12}{wall:8.0f}{row['tokens_per_s']:10.2f}{row['gain_pct']:+9.1f}{interval:>16}  {decided}")
        for line in lines:
            print(f"{'':12}{line}")


if __name__ == "__main__":
    main()
