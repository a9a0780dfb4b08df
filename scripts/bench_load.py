#!/usr/bin/env python
"""What one load of a setting costs: the Python engine opening a pair (load, fit check, warm-up through both models),
the cost each `-r auto` pass paid again before its passes shared one load (sweep.Measuring).

    python scripts/bench_load.py [--pair NAME | --target T --draft D] [-K 8] [-n 64] [--rounds 5] [-ngl 0 -ngld 0]

Each round opens the setting and closes it, timed from the open's start to its return (nothing is measured inside);
the median and the rounds are printed. The page cache is left as it is: a second load of a file just read is the warm
case, the one -r auto's passes met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from gguf_bench.engine_registry import PYTHON_ENGINE
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.plan import Grid, expand
from gguf_bench.measure.sweep import Measuring, SweepEvents
from gguf_bench.models.pairs import resolve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default=None, help="a registry pair (its default when none is given)")
    ap.add_argument("--target", type=Path, default=None)
    ap.add_argument("--draft", type=Path, default=None)
    ap.add_argument("-K", type=int, default=8, help="the draft length the warm-up drafts at")
    ap.add_argument("-n", type=int, default=64, help="tokens a cell generates (the context is sized for it)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-ngl", type=int, default=0)
    ap.add_argument("-ngld", type=int, default=0)
    args = ap.parse_args()
    files = resolve(args.pair, args.target, args.draft, None)
    grid = Grid(ks=[args.K], ngls=[args.ngl], nglds=[args.ngld], temperatures=[0.0],
                prompts=builtin(["code-short", "chat-short"]), n_predict=args.n)
    prepared = Measuring("bench-load", files, grid, SweepEvents())
    setting = expand(files, prepared.grid, prepared.static).units[0].setting
    engine = prepared.measured.engine(PYTHON_ENGINE, prepared.grid)
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        session = engine.open(setting, prepared.prompts)
        times.append(time.perf_counter() - start)
        session.close()
    print(f"pair {files.name}  -ngl {args.ngl} -ngld {args.ngld}  K={args.K}  threads {os.cpu_count()} cores  "
          f"load1 {os.getloadavg()[0]:.2f}")
    print(f"open (load + fit check + warm-up): median {statistics.median(times):.2f} s  "
          f"rounds {' '.join(f'{t:.2f}' for t in times)}")


if __name__ == "__main__":
    main()
