#!/usr/bin/env python
"""Benchmark the Python speculative loop against llama.cpp's own C++ `llama-speculative-simple`.

Prints, for a pair (default: the registry's default) and for a tiny generated pair:
  - regular (target alone) and speculative tokens/s of our loop, mean over repetitions after a warm-up;
  - Python overhead per generated token: wall time outside llama_decode, divided by tokens;
  - llama-speculative-simple's tokens/s on the same files, K, threads, prompt and length, and the ratio.

The C++ example is built from the llama.cpp sources vendored in the llama-cpp-python sdist of the
installed version (the same llama.cpp the Python package runs), once, into the gguf-bench cache.

    python scripts/bench_loop.py [--pair NAME] [-K 4] [-n 96] [--threads 2] [--reps 3] [--cpp-bin PATH]
                                 [--cpp-arg=-nr ...]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.measure.inputs.prompts import DEFAULT_PROMPT
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.models.download import cache_dir, fetch
from gguf_bench.models.registry import load_registry
from gguf_bench.models.tiny import make_pair
from gguf_bench.runtimes.llama_cpp import quantize


def measure(files: PairFiles, k: int, n: int, threads: int, reps: int) -> dict:
    """Our loop: tokens/s of both modes and wall time outside llama_decode per token."""
    greedy = SamplingConfig()
    with LoadedPair(files, LoadConfig(n_ctx=2048, threads=threads)) as pair:
        prompt = pair.prompt_tokens(DEFAULT_PROMPT.text)
        pair.generate("speculative", prompt, 16, k, greedy)  # warm-up
        out = {}
        for mode in ("target", "speculative"):
            speeds, overhead, acc = [], [], []
            for _ in range(reps):
                before = pair.target.llama_decode_s + pair.draft.llama_decode_s
                res = pair.generate(mode, prompt, n, k, greedy)
                in_llama = pair.target.llama_decode_s + pair.draft.llama_decode_s - before
                speeds.append(res.tokens_per_s)
                overhead.append((res.prompt_s + res.decode_s - in_llama) / res.n_tokens)
                acc.append(res.acceptance)
            out[mode] = {"tokens_per_s": statistics.mean(speeds), "std": statistics.stdev(speeds) if reps > 1 else 0.0,
                         "overhead_us": 1e6 * statistics.mean(overhead), "acceptance": statistics.mean(acc)}
        out["n_prompt"] = len(prompt)
        return out


def build_cpp(dest: Path) -> Path:
    """Build llama-speculative-simple from the installed llama-cpp-python's sdist sources."""
    import llama_cpp

    binary = dest / "build" / "bin" / "llama-speculative-simple"
    if binary.is_file():
        return binary
    version = llama_cpp.__version__
    with tempfile.TemporaryDirectory() as tmp:
        print(f"building llama-speculative-simple from the llama-cpp-python {version} sdist (about 5 minutes) ...",
              flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", tmp], check=True)
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        src = next(Path(tmp).glob("llama_cpp_python-*/vendor/llama.cpp"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)
    flags = ["-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DCMAKE_BUILD_TYPE=Release"]
    subprocess.run(["cmake", "-S", str(dest), "-B", str(dest / "build"), *flags], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(dest / "build"), f"-j{os.cpu_count()}", "--target",
                    "llama-speculative-simple"], check=True, capture_output=True)
    return binary


def run_cpp(binary: Path, files: PairFiles, k: int, n: int, threads: int, reps: int, extra: list[str]) -> dict:
    """llama-speculative-simple's own 'decoded N tokens ... speed' and acceptance, mean over reps."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(DEFAULT_PROMPT.text)
    cmd = [str(binary), "-m", str(files.target), "-md", str(files.draft), "--spec-type", "draft-simple",
           "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "-f", fh.name, "-n", str(n), "-t", str(threads),
           "-td", str(threads), "--temp", "0", "--top-k", "1", "-c", "2048", "--seed", "0", *extra]
    speeds, acc = [], []
    for _ in range(reps + 1):  # the first run is a warm-up (file cache, first-decode costs)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == -signal.SIGILL:
            raise SystemExit("llama-speculative-simple died of SIGILL: on a CPU with AMX that the VM does not grant "
                             "(llama.cpp#20824), run it without extra buffer types: --cpp-arg=-nr (and "
                             "GGUF_BENCH_REPACK=0 for the same weight layout on both sides)")
        log = proc.stderr
        m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
        a = re.search(r"accept\s+=\s+([\d.]+)%", log)
        if not m:
            raise SystemExit(f"could not read llama-speculative-simple's output:\n{log[-2000:]}")
        speeds.append(float(m[3]))
        acc.append(float(a[1]) / 100 if a else float("nan"))
    speeds, acc = speeds[1:], acc[1:]
    return {"tokens_per_s": statistics.mean(speeds), "std": statistics.stdev(speeds) if reps > 1 else 0.0,
            "acceptance": statistics.mean(acc)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", help="registry pair (default: the registry's default)")
    ap.add_argument("-K", type=int, default=4)
    ap.add_argument("-n", type=int, default=96)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpp-bin", type=Path, help="llama-speculative-simple binary (default: build it once)")
    ap.add_argument("--no-cpp", action="store_true", help="skip the C++ comparison")
    ap.add_argument("--cpp-arg", action="append", default=[], help="extra argument for the C++ example (repeatable)")
    args = ap.parse_args()

    reg = load_registry()
    pair = reg.pair(args.pair or reg.default)
    files = PairFiles(fetch(pair.target, reg, quantize=quantize).path, fetch(pair.draft, reg, quantize=quantize).path, pair.name)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = PairFiles(*make_pair(Path(tmp), noise=0.0), "tiny (identical draft)")
        rows = [(files, measure(files, args.K, args.n, args.threads, args.reps)),
                (tiny, measure(tiny, args.K, args.n, args.threads, args.reps))]
    repack = "off (GGUF_BENCH_REPACK=0)" if os.environ.get("GGUF_BENCH_REPACK") == "0" else "as the tool runs"
    print(f"\nK={args.K}, n={args.n}, threads={args.threads}, greedy, {args.reps} repetitions after a warm-up, "
          f"prompt '{DEFAULT_PROMPT.id}' ({rows[0][1]['n_prompt']} tokens); our weight repacking: {repack}\n")
    print(f"{'pair':<28} {'mode':<12} {'tokens/s':>16} {'acceptance':>10} {'Python overhead/token':>22}")
    for f, r in rows:
        for mode in ("target", "speculative"):
            m = r[mode]
            acc = f"{m['acceptance']:.1%}" if mode == "speculative" else ""
            print(f"{f.name:<28} {mode:<12} {m['tokens_per_s']:>9.2f} ± {m['std']:<5.2f}"
                  f"{acc:>10} {m['overhead_us']:>18.0f} us")
        gain = 100 * (r["speculative"]["tokens_per_s"] / r["target"]["tokens_per_s"] - 1)
        print(f"{f.name:<28} {'gain':<12} {gain:>+8.1f}%")
    if args.no_cpp:
        return
    binary = args.cpp_bin or build_cpp(cache_dir() / "llama.cpp-src")
    cpp = run_cpp(binary, files, args.K, args.n, args.threads, args.reps, args.cpp_arg)
    ours = rows[0][1]["speculative"]["tokens_per_s"]
    print(f"\nllama-speculative-simple (C++{' ' + ' '.join(args.cpp_arg) if args.cpp_arg else ''}), "
          f"{files.name}: {cpp['tokens_per_s']:.2f} ± {cpp['std']:.2f} tokens/s, "
          f"acceptance {cpp['acceptance']:.1%}")
    print(f"our loop / C++ example: {ours / cpp['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
