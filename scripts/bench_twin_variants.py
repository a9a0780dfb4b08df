#!/usr/bin/env python
"""Is a twin's speed gap its holes or its output matrix? A real file against three twins, interleaved in one process.

    python scripts/bench_twin_variants.py MODEL [--rounds 8] [-n 32] [-K 4] [--threads 2]

The twins: as `gguf-bench twin` writes it (holes, random rows only in the first TOKEN_BAND rows of the embedding and
output matrices); the same twin copied with `cp --sparse=never` (every hole a block of real zeros on disk); and a twin
whose embedding (so a tied output matrix) and output matrix are random in every row. All four are dropped from the
page cache, loaded side by side, warmed, then timed in rotation (each round starts with the next one): the one-token
decode step t(1) and a K+1-token verify batch t(K+1), medians over rounds, each as a ratio to the real file's.
MODEL: a GGUF path or a registry model in the cache. The twins go to a temporary folder under the cache (not tmpfs).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from bench_twins import TEXT, decode_s, resolve, verify_s

from gguf_bench.models import twin as twins
from gguf_bench.models.files import drop_page_cache
from gguf_bench.models.parts import local_header
from gguf_bench.runtimes.llama_cpp import Model


def variants(real: Path, folder: Path) -> dict[str, Path]:
    header = local_header(real)
    out = {"real": real, "twin": twins.write_twin(header, folder / "twin.gguf", real.name).path}
    subprocess.run(["cp", "--sparse=never", str(out["twin"]), str(folder / "twin-dense.gguf")], check=True)
    out["twin, no holes"] = folder / "twin-dense.gguf"
    band, twins.TOKEN_BAND = twins.TOKEN_BAND, sys.maxsize  # every row of the embedding and output matrices random
    try:
        out["twin, full output"] = twins.write_twin(header, folder / "twin-full-output.gguf", real.name).path
    finally:
        twins.TOKEN_BAND = band
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("-n", type=int, default=32, help="one-token steps per round (verify batches: n/4)")
    ap.add_argument("-K", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    real = resolve(args.model, False)
    if real is None:
        sys.exit(f"{args.model} is not cached: gguf-bench download it first")
    with twins.twin_folder("twin-variants-") as tmp:
        paths = variants(real, Path(tmp))
        for p in paths.values():
            drop_page_cache(p)
        models = {k: Model(p, 0, n_ctx=512, n_threads=args.threads) for k, p in paths.items()}
        try:
            tokens = models["real"].tokenize(TEXT * 3)
            for m in models.values():  # warm-up: every page faulted in, both batch sizes once
                decode_s(m, tokens, 4)
                verify_s(m, tokens, args.K, 2)
            one, batch, names = {k: [] for k in models}, {k: [] for k in models}, list(models)
            for i in range(args.rounds):
                for k in names[i % len(names):] + names[:i % len(names)]:
                    one[k].append(decode_s(models[k], tokens, args.n))
                    batch[k].append(verify_s(models[k], tokens, args.K, max(4, args.n // 4)))
        finally:
            for m in models.values():
                m.close()
    print(f"{real.name}: {args.rounds} rounds in rotation, {platform.processor() or platform.machine()}, "
          f"threads {args.threads or 'default'}")
    r1, rk = statistics.median(one["real"]), statistics.median(batch["real"])
    for k in names:
        t1, tk = statistics.median(one[k]), statistics.median(batch[k])
        print(f"| {k} | t(1) {t1 * 1e3:.2f} ms | x{t1 / r1:.3f} | {min(one[k]) * 1e3:.1f}-{max(one[k]) * 1e3:.1f} ms | "
              f"t({args.K + 1}) {tk * 1e3:.2f} ms | x{tk / rk:.3f} |")


if __name__ == "__main__":
    main()
