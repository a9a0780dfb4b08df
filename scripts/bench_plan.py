#!/usr/bin/env python
"""The offload planner (gguf_bench/models/offload_plan.py) against llama.cpp's own allocations.

For each model file, -ngl and context size: predict the device's bytes from the GGUF header alone (weights, KV
cache, compute buffer), then load the model with that offload on this machine's first GPU device and read what
llama.cpp reported allocating there (runtimes/placement.py). Needs a build that sees a GPU device: here, the
Vulkan build on Mesa's lavapipe (`gguf-bench build-gpu --vulkan`, GGML_VK_VISIBLE_DEVICES=0).

    GGML_VK_VISIBLE_DEVICES=0 python scripts/bench_plan.py [FILE ...] [--ctx 512,4096] [--max-tensor-mib 128]

Each row's error is the predicted total's against the measured one (p/m - 1); the last line counts the rows within 5%.

lavapipe's storage buffers stop at 128 MiB: a weight larger than that stays on the CPU (llama.cpp says
"cannot be used with preferred buffer type Vulkan0, using CPU instead"); --max-tensor-mib tells the planner so.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gguf_bench.models.offload_plan import MIB, Shape, device_bytes
from gguf_bench.models.parts import tensor_table
from gguf_bench.runtimes.llama_cpp import Model, gpu_devices

CACHE = Path(os.environ.get("GGUF_BENCH_CACHE", Path.home() / ".cache" / "gguf-bench"))
DEFAULT_FILES = [CACHE / "pypi" / "gemma-3-270m-q4_k_m.gguf", CACHE / "derived" / "gemma-3-270m-q4_k_m.Q2_K.gguf",
                 CACHE / "derived" / "gemma-3-270m-q4_k_m.F32.gguf"]


def measured(path: Path, ngl: int, n_ctx: int, device: str) -> tuple[float, float, float]:
    with Model(path, ngl, n_ctx, 2) as model:
        where = model.placement
        return where.model_mib.get(device, 0.0), where.kv_mib.get(device, 0.0), where.compute_mib.get(device, 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--ctx", default="512,4096")
    ap.add_argument("--max-tensor-mib", type=float, default=128.0)
    args = ap.parse_args()
    gpus = gpu_devices()
    if not gpus:
        raise SystemExit("no GPU device: build with `gguf-bench build-gpu --vulkan` and set GGML_VK_VISIBLE_DEVICES=0")
    device, limit = gpus[0].name, int(args.max_tensor_mib * MIB)
    print(f"device {gpus[0].label}; weights above {args.max_tensor_mib:g} MiB predicted to stay on the CPU\n")
    print(f"{'model':<34} {'ctx':>5} {'-ngl':>6} {'weights p/m':>15} {'KV p/m':>13} {'compute p/m':>13} "
          f"{'total p/m':>15} {'error':>7}")
    within, rows = 0, 0
    for path in args.files or DEFAULT_FILES:
        shape = Shape.from_header(*tensor_table(path))
        for n_ctx in map(int, args.ctx.split(",")):
            for ngl in (0, 1, shape.total_layers // 2, shape.total_layers):
                p = device_bytes(shape, ngl, n_ctx, limit)
                mw, mk, mc = measured(path, ngl, n_ctx, device)
                pt, mt = p.total / MIB, mw + mk + mc
                err = f"{100 * (pt / mt - 1):+.1f}%" if mt else ("exact" if pt == 0 else "–")
                rows += 1
                within += abs(pt - mt) <= 0.05 * mt if mt else pt == 0
                print(f"{path.name:<34} {n_ctx:>5} {f'{p.layers}/{p.total_layers}':>6} {p.weights / MIB:>7.1f}/{mw:<7.1f}"
                      f" {p.kv / MIB:>6.1f}/{mk:<6.1f} {p.compute / MIB:>6.1f}/{mc:<6.1f} {pt:>7.1f}/{mt:<7.1f} {err:>7}", flush=True)
    print(f"\ntotals within 5% of llama.cpp's: {within} of {rows} rows")


if __name__ == "__main__":
    main()
