#!/usr/bin/env python
"""Where the weights go (placing.py), measured: the planner against llama.cpp's buffers per placement, the verify
curve with a MoE target's experts on the device against in system memory, and tokens/s and gain per placement and K.

Three parts, one run (each says what it contains):
1. planner: for each model and placement at half and full offload, the device's weights + KV cache predicted from the
   header (models/offload_plan.py) against what llama.cpp reported allocating there (runtimes/placement.py); needs a build
   that sees a GPU device (the Vulkan build on lavapipe here: GGML_VK_VISIBLE_DEVICES=0);
2. verify curve: the MoE target's one-token step t(1) and t(K+1)/t(1) for batches of K+1 tokens (as a verify step
   asks), experts where -ngl puts them against all in system memory (-cmoe) and a third (-ot ffn_down_exps=CPU),
   interleaved rounds,
   medians; a batch routes to more experts than one token does, which is what makes verification dearer;
3. sweep: target alone and speculative K per placement through gguf-bench's own sweep (sweep.iter_records):
   the MoE pair with its experts on the device or the CPU, gemma with its draft on the device or the CPU (-devd none).

    GGML_VK_VISIBLE_DEVICES=0 python scripts/bench_placement.py [-K 1,2,4,8] [-n 32] [--rounds 3] [--markdown]

The MoE pair is generated (random weights: 8 blocks of --experts experts (16), 2 used, 256 wide, F32, a step takes
milliseconds);
gemma-3-270m F32 + Q4_K_M come from the registry (fetched when missing). On lavapipe the speeds say nothing about a
real GPU's: a software device computes on this machine's own cores. Placement and sizes are real. Parts 2 and 3 run
in child processes: lavapipe (Mesa 22, Debian 12) crashes in its own worker thread on some MoE graphs, and such a
part then says so in one line instead of ending the run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models.download import fetch
from gguf_bench.models.offload_plan import MIB, Shape, device_bytes
from gguf_bench.models.parts import tensor_table
from gguf_bench.models.registry import load_registry
from gguf_bench.models.tiny import TinySpec, make_pair
from gguf_bench.options import ALL_LAYERS
from gguf_bench.placing import parse_label
from gguf_bench.results.presentation.summary import summarize, to_frame
from gguf_bench.runtimes.llama_cpp import Model, gpu_devices, llama_versions, quantize

sys.path.insert(0, str(Path(__file__).parent))
from bench_twins import TEXT, decode_s, verify_s  # noqa: E402  (the same timers as the twins' table)


def moe_spec(experts: int) -> TinySpec:
    return TinySpec(n_layers=8, width=256, n_heads=4, ff=512, n_experts=experts, n_experts_used=2)
# experts with their layers, one of each layer's three expert weights in system memory, all of them; some layers'
# experts in system memory and the rest on the device (-ncmoe 4) crash Mesa's lavapipe at the first decode
MOE_PLACEMENTS = ["", "-ot ffn_down_exps=CPU", "-cmoe"]


def table(head: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |\n|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        for r in [head, *rows]:
            print("  ".join(x.rjust(w) for x, w in zip(r, widths)))
    print()


def planner_rows(models: dict[str, Path], max_alloc: int | None) -> list[list[str]]:
    """Weights + KV on the first GPU device: predicted / read back, per model, placement and -ngl (half, all)."""
    device, rows = gpu_devices()[0].name, []
    for name, path in models.items():
        shape = Shape.from_header(*tensor_table(path))
        for label in (MOE_PLACEMENTS if shape.has_experts else ["", "-dev none"]):
            placing = parse_label(label)
            for ngl in (shape.total_layers // 2, shape.total_layers):
                p = device_bytes(shape, ngl, 512, max_alloc, placing=placing)
                with Model(path, ngl, 512, 2, None, placing) as m:
                    got = m.placement.model_mib.get(device, 0.0) + m.placement.kv_mib.get(device, 0.0)
                want = (p.weights + p.kv) / MIB
                err = f"{100 * (want / got - 1):+.1f}%" if got else ("exact" if want == 0 else "–")
                rows.append([name, label or "default", f"{ngl}/{shape.total_layers}", f"{want:.2f}", f"{got:.2f}", err])
    return rows


def verify_rows(target: Path, ks: list[int], n: int, rounds: int, threads: int | None) -> list[list[str]]:
    """t(1) ms and t(K+1)/t(1) per placement of the experts, the placements interleaved round by round."""
    times: dict[tuple[str, str], list[float]] = {}
    models = {label: Model(target, ALL_LAYERS, 512, threads, None, parse_label(label)) for label in MOE_PLACEMENTS}
    try:
        tokens = next(iter(models.values())).tokenize(TEXT * 3)
        for m in models.values():  # warm-up: a long batch routes to every expert, so none is first read while timed
            m.rewind(0)
            m.eval(tokens[:64], 1)
            decode_s(m, tokens, 4)
            verify_s(m, tokens, max(ks), 2)
        for i in range(rounds):
            for label, m in list(models.items())[::1 if i % 2 == 0 else -1]:
                times.setdefault((label, "1"), []).append(decode_s(m, tokens, n))
                for k in ks:
                    times.setdefault((label, f"v{k}"), []).append(verify_s(m, tokens, k, max(4, n // 4)))
    finally:
        for m in models.values():
            m.close()
    med = {key: statistics.median(v) for key, v in times.items()}
    return [[label or "default (experts with their layers)", f"{1000 * med[label, '1']:.2f}",
             *(f"{med[label, f'v{k}'] / med[label, '1']:.2f}" for k in ks)] for label in MOE_PLACEMENTS]


def sweep_rows(files: PairFiles, placements: list[tuple[str, str]], ks: list[int], n: int, threads: int | None,
               ngl: int) -> list[list[str]]:
    """Target alone tokens/s and gain per K for each (target, draft) placement, through the sweep."""
    rows = []
    for target_label, draft_label in placements:
        grid = Grid(ks=ks, ngls=[ngl], nglds=[ngl], temperatures=[0.0], prompts=builtin(["code-short", "chat-short"]),
                    n_predict=n, threads=threads, with_draft_alone=False, placings=[parse_label(target_label)],
                    placings_draft=[parse_label(draft_label, draft=True)])
        summary = summarize(to_frame(list(iter_records("bench-placement", files, grid))))
        base = summary[summary["mode"] == "target"]["tokens_per_s"].iloc[0]
        spec = summary[summary["mode"] == "speculative"].set_index("k")
        rows.append([files.name, " ".join(x for x in (target_label, draft_label) if x) or "default", f"{base:.1f}",
                     *(f"{spec.loc[k, 'gain_pct']:+.1f}% ({100 * spec.loc[k, 'acceptance']:.0f}%)" for k in ks)])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-K", default="1,2,4,8")
    ap.add_argument("-n", type=int, default=32, help="tokens per run; decode steps per verify-curve round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--no-gemma", action="store_true", help="the generated MoE pair only")
    ap.add_argument("--max-tensor-mib", type=float, default=128.0, help="the device's largest weight (lavapipe: 128 "
                    "MiB; a larger one stays on the CPU); 0: no limit")
    ap.add_argument("--experts", type=int, default=16, help="experts per layer of the generated MoE pair (2 used)")
    ap.add_argument("--part", type=int, choices=(2, 3, 4), help=argparse.SUPPRESS)  # one part, in a child process
    ap.add_argument("--moe", type=Path, help=argparse.SUPPRESS)  # the MoE pair's folder (child processes)
    args = ap.parse_args()
    if args.part:
        return run_part(args)
    gpus = gpu_devices()
    where = gpus[0].label if gpus else "CPU only (no GPU device: the placement flags change only buffer types)"
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {where}, llama-cpp-python "
          f"{llama_versions()['llama_cpp_python']}, {args.threads} threads, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n")
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp:
        target, _ = make_pair(Path(tmp), noise=0.02, spec=moe_spec(args.experts))
        if gpus:
            gemma = None if args.no_gemma else gemma_pair()
            models = {"moe target": target} | ({"gemma F32": gemma.target, "gemma Q4_K_M": gemma.draft} if gemma else {})
            print("1. planner against llama.cpp: weights + KV on the device, MiB (ctx 512)\n")
            limit = int(args.max_tensor_mib * MIB) or None
            table(["model", "placement", "-ngl", "predicted", "llama.cpp", "error"], planner_rows(models, limit),
                  args.markdown)
        # each part in its own process: a backend that crashes (lavapipe on MoE graphs) ends only that part
        for part in (2, 3) if args.no_gemma else (2, 3, 4):
            sys.stdout.flush()
            child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--part", str(part), "--moe", tmp])
            if child.returncode:
                print(f"{part}. ended by the backend (exit {child.returncode}{', a crash' if child.returncode < 0 else ''});"
                      " nothing measured in this part\n", flush=True)


def gemma_pair() -> PairFiles:
    reg = load_registry()
    paths = [fetch(reg.models[m], reg, quantize=quantize).path for m in ("gemma-3-270m-f32", "gemma-3-270m-q4_k_m")]
    return PairFiles(paths[0], paths[1], "gemma-f32+q4km")


def run_part(args: argparse.Namespace) -> None:
    ks = [int(k) for k in args.K.split(",")]
    target, draft = args.moe / "tiny-target.gguf", args.moe / "tiny-draft.gguf"
    if args.part == 2:
        print(f"2. verify curve of the MoE target at -ngl all (medians of {args.rounds} interleaved rounds)\n", flush=True)
        table(["placement", "t(1) ms", *(f"t({k + 1})/t(1)" for k in ks)],
              verify_rows(target, ks, args.n, args.rounds, args.threads), args.markdown)
        return
    what = {3: "the MoE pair, its experts with their layers or in system memory",
            4: "gemma F32 + Q4_K_M, its draft on the device or the CPU"}[args.part]
    print(f"{args.part}. sweep at -ngl all -ngld all, n={args.n}, prompts code-short and chat-short, {what}: target "
          "alone tokens/s, gain % (acceptance) per K\n", flush=True)
    if args.part == 3:
        rows = sweep_rows(PairFiles(target, draft, f"moe {args.experts}x"), [("", ""), ("-cmoe", "-cmoed")], ks, args.n,
                          args.threads, ALL_LAYERS)
    else:
        rows = sweep_rows(gemma_pair(), [("", ""), ("", "-devd none")], ks, args.n, args.threads, ALL_LAYERS)
    table(["pair", "placement", "target t/s", *(f"K={k}" for k in ks)], rows, args.markdown)


if __name__ == "__main__":
    main()
