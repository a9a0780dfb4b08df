"""scripts/gpu_proof.sh dry-run: the GPU kit end to end on the CPU build at the smallest shapes (docs/gpu.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # pip downloads a few wheels, packs the sdist, measures twins: about 30 s
def test_dry_run_writes_tables_of_numbers_within_the_limits(tmp_path, cpu_tree):
    """Offline (PIP_NO_INDEX, HF_HUB_OFFLINE, its own HOME), on the tests' CPU build-tree (GPU_PROOF_TREE: reused, not
    built again), with test_offload's fixtures run."""
    env = {**os.environ, "PYTHON": sys.executable, "GPU_PROOF_KIT": str(tmp_path / "kit"),
           "GPU_PROOF_STATE": str(tmp_path / "state"), "GGUF_BENCH_CACHE": os.environ.get("GGUF_BENCH_CACHE", ""),
           "GPU_PROOF_TREE": str(cpu_tree.parent), "OUT": str(tmp_path / "callers-out")}  # as a device call sets it
    if not env["GGUF_BENCH_CACHE"]:
        del env["GGUF_BENCH_CACHE"]  # the sdist comes from the usual cache (build.sources: pip download once)
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_proof.sh"), "dry-run"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not (tmp_path / "callers-out").exists() and (tmp_path / "state" / "out" / "gpu-proof-summary.txt").is_file()
    out = run.stdout
    size = int(re.search(r"prepared .*?: (\d+) KiB", out).group(1))
    assert size < 64 * 1024
    call = re.search(r"the device call \(the same kit; (\d+) characters\):\n(.*?)\ngpu-proof: ", out, re.S)
    assert call and int(call.group(1)) < 2000 and "gpu_proof.sh run" in call.group(2)
    tables = tmp_path / "state" / "tables"
    names = {p.stem for p in tables.glob("*.txt")}
    assert {"machine", "build", "twins", "offload", "plan-cli-llama", "tune-llama", "engines-llama", "tune-qwen",
            "engines-qwen", "accept-llama", "verify-moe"} <= names
    accept = (tables / "accept-llama.txt").read_text()  # agreeing twins: every draft accepted
    assert re.search(r"^\s+8\s+[\d.]+\s+1\.000 ", accept, re.M) and "within 10%: " in accept, accept
    assert "tiny-qwen3moe: 2 tokens cost " in (tables / "verify-moe.txt").read_text()
    assert "build-tree --cpu" in (tables / "build.txt").read_text()
    offload = (tables / "offload.txt").read_text()  # every test's fixtures ran, then it skipped: declared
    assert re.search(r"\b\d+ skipped\b", offload) and "GGUF_BENCH_GPU_DRY_RUN" in offload
    assert "offload:" in (tables / "skipped.txt").read_text()
    tune = (tables / "tune-llama.txt").read_text()
    assert re.search(r"target t_verify\(1\) [\d.]+ ms", tune) and "a=0.8" in tune
    engines = (tables / "engines-qwen.txt").read_text()
    assert "T=0.7" in engines and re.search(r"^alone\s+[\d.]+ ±", engines, re.M)
    assert (tmp_path / "state" / "out" / "gpu-proof-summary.txt").stat().st_size > 1000
    plan = re.search(r"gpu-proof: sum (\d+) s of (\d+) s", out)  # the lent machine's plan came first, and fits
    assert plan and int(plan.group(1)) <= int(plan.group(2)) == 840 and out.index("sum") < out.index("prepared")


def _kit(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_proof.sh"), *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env}, timeout=60)


def test_the_plan_sums_every_steps_seconds_and_fails_beyond_the_device_time():
    fits = _kit("plan")
    assert fits.returncode == 0, fits.stdout + fits.stderr
    steps = {m[0]: int(m[1]) for m in re.findall(r"^([\w-]+)\s+(\d+) s$", fits.stdout, re.M)}
    assert list(steps)[:2] == ["build", "offload"] and "tune-llama" in steps
    total = int(re.search(r"sum (\d+) s of 840 s", fits.stdout).group(1))
    assert total == sum(steps.values()) + 150
    over = _kit("plan", GPU_PROOF_BUILD_S=str(steps["build"] + 840 - total + 1))
    assert over.returncode == 1 and "the plan does not fit" in over.stdout


PLAN_CLI = """\
┏━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━┓
┃ -ngld ┃     -ngl ┃ weights ┃       KV ┃  compute ┃  total ┃
┡━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━┩
│   0/2 │  33/33   │    4437 │      512 │      258 │   5207 │
└───────┴──────────┴─────────┴──────────┴──────────┴────────┘
"""
PLAN = (f"{'model':<34} {'ctx':>5} {'-ngl':>6} {'weights p/m':>15} {'KV p/m':>13} {'compute p/m':>13} {'total p/m':>15} "
        f"{'error':>7}\n{'llama3-8b.gguf':<34} {512:>5} {'33/33':>6} {4437.0:>7.1f}/{4437.0:<7.1f} {64.0:>6.1f}/{64.0:<6.1f} "
        f"{258.5:>6.1f}/{250.1:<6.1f} {4759.5:>7.1f}/{4751.1:<7.1f} {'+0.2%':>7}\n"
        "totals within 5% of llama.cpp's: 1 of 1 rows\n")
TUNE = """\
   K     verify ×     a=0.6        a=0.8
─────────────────────────────────────────
   1         1.05   120 (+20%)   131 (+31%)
measured: target t_verify(1) 9.92 ms, draft 1.50 ms (c = 0.151; 2-token catch-up 2.1 ms), round overhead 0.05 ms
"""

ACCEPT = """\
tune: target t_verify(1) 4.83 ms, draft 1.34 ms; seconds: twins 1.2, tune 8.1, sweep 9.0
           K  measured t/s  acceptance    gain %  predicted t/s  pred. gain %   error %  runs
target alone        245.70           -         -         207.04             -     -15.7     3
           1        330.10       1.000     +34.4         316.20         +52.7      -4.2     3
           4        512.00       1.000    +108.4         498.00        +140.5      -2.7     3
within 10%: 2 of 2 K
"""
VERIFY = """\
| k | ms | × one token | decode ms | decode × |
| --- | --- | --- | --- | --- |
| 1 | 5.120 | 1.00 | 4.900 | 1.00 |
| 2 | 6.400 | 1.25 | 6.100 | 1.24 |

qwen3-30b-a3b: 2 tokens cost 1.25× one token (1.24× inside llama_decode)
"""
BANDWIDTH = "device: NVIDIA H200\ncopy of 4 GiB, best of 10: 2.02 ms; bandwidth 4263 GB/s (read + written); median 4260 GB/s\n"
SWEEP = """\
deploy llama3-8b.gguf+llama3.2-1b.gguf: no speculation (245.67 tokens/s; no speculative setting gained;
  +129% [+120,+139] over -ngl 30 alone) (measured in the Python loop: check it with --engine server)
card bandwidth: 4263 GB/s
     prompt         -ngl            K     tokens/s       TTFT s  TTFT cost %      J/token    GPU J/tok     MB/token       card %
 code-short           30       target        108.0        0.079            -            -        1.210         4887           12
  long-1500          all            4         89.8        0.210        +20.6            -        1.870        10098           21
"""


def _engines(capsys, server: bool) -> str:
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_engines import report

    run = (100.0, 0.7, 2.4, 0.01, 0.002, 0.013, 8, [1])
    srv = (110.0, 0.7, 2.4, [1]) if server else (float("nan"), None, None, None)
    report("llama T=0", [4], {0: [run], 4: [run]}, {0: [srv], 4: [srv]})
    return ("llama: ..., 1 reps; " + ("server: llama-server -m t.gguf" if server else "no server (--no-server)") + "\n"
            + capsys.readouterr().out)


def _complete_run(folder: Path, engines: str, cuda: bool = True) -> list[str]:
    """A complete run's tables in the formats the steps print (gpu_proof.sh; a CPU build's devices without `cuda`)."""
    tables = {"machine": "date: 2026-11-28 10:00 UTC\n" + ("gpu: NVIDIA H100 80GB HBM3, 570.86, 81559 MiB, 9.0\n" if cuda
                                                            else "gpu: none (nvidia-smi not found): CPU build\n"),
              "build": "build-tree --cuda (one CMake build: libraries, llama-server): 301 s\n"
                       + ("device: CUDA0 (GPU) NVIDIA H100 80GB HBM3, 79.1 GiB\n" if cuda else "")
                       + "device: CPU (CPU) AMD EPYC 9654, 125.8 GiB\n",
              "twins": "twin of h/llama3-8b.gguf: 291 tensors, 8.03 GB logical, 1.20 MB on disk, 0.3 s -> t.gguf\n",
              "offload": "27 passed in 31.2s\n(offload: 40 s)\n", "plan-cli-llama": PLAN_CLI, "plan": PLAN,
              "tune-llama": TUNE, "engines-llama": engines, "bandwidth": BANDWIDTH, "sweep-ngl-llama": SWEEP,
              "accept-llama": ACCEPT, "verify-moe": VERIFY}
    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / "logs").mkdir(exist_ok=True)
    for name, text in tables.items():
        (folder / f"{name}.txt").write_text(text)
    return list(tables)


def test_check_accepts_a_complete_run_and_rejects_each_table_that_holds_no_measurement(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_proof import check

    tables = tmp_path / "run" / "tables"
    names = _complete_run(tables, _engines(capsys, server=True))
    assert check(tables, names) == 0
    assert check(tables, [*names, "engines-qwen"]) == 1  # a table the run must write is missing
    assert "engines-qwen: missing" in capsys.readouterr().err
    faults = [("engines-llama.txt", "llama-server failed to start: CUDA error: out of memory\n", "CUDA error"),
              ("plan.txt", PLAN.replace("4759.5", "nan"), "plan: an error in plan.txt"),
              ("plan.txt", PLAN.replace("totals within", "totals"), "no totals within 5% (rows)"),
              ("tune-llama.txt", TUNE.replace("9.92 ms", "– ms"), "target t_verify(1) (ms) is '–'"),
              ("offload.txt", "27 skipped in 0.4s\n", "its tests were all skipped"),
              ("plan-cli-llama.txt", PLAN_CLI.replace("4437", "   –"), "weights (MiB) is '–', not a finite number"),
              ("../logs/tune-llama.err", "RuntimeError: llama_decode returned -1\n", "tune-llama.err: RuntimeError"),
              ("bandwidth.txt", "no GPU bandwidth: torch sees no CUDA device (dry-run)\n", "no card bandwidth (GB/s)"),
              ("sweep-ngl-llama.txt", SWEEP.replace("0.210", "    -"), "TTFT (s) is '-', not a finite number"),
              ("sweep-ngl-llama.txt", SWEEP.replace("1.870", "    -"), "GPU J/tok (J) is '-', not a finite number"),
              ("accept-llama.txt", ACCEPT.replace("330.10", "     -"), "measured (tokens/s) is '-'"),
              ("verify-moe.txt", VERIFY.replace("2 tokens cost", "two cost"), "no 2 tokens (× one token)")]
    for name, text, why in faults:
        good = (tables / name).read_text() if (tables / name).is_file() else None
        (tables / name).write_text(text)
        assert check(tables, names) == 1 and why in capsys.readouterr().err, (name, text)
        (tables / name).unlink() if good is None else (tables / name).write_text(good)
        assert check(tables, names) == 0
    engines = _engines(capsys, server=True)
    assert "100.00 ± 0.00" in engines
    (tables / "engines-llama.txt").write_text(engines.replace("100.00 ± 0.00", "   nan ± nan"))
    assert check(tables, names) == 1 and "nan ± nan" in capsys.readouterr().err


def test_check_rejects_a_folder_of_machine_txt_and_a_run_without_cuda_unless_declared_a_cpu_build(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_proof import check

    only = tmp_path / "only" / "tables"
    only.mkdir(parents=True)
    (only / "machine.txt").write_text("date: 2026-11-28 10:00 UTC\ngpu: NVIDIA H100 80GB HBM3, 81559 MiB\n")
    assert check(only, ["machine", "build", "tune-llama"]) == 1
    assert "build: missing; tune-llama: missing" in capsys.readouterr().err
    cpu = tmp_path / "cpu" / "tables"
    names = _complete_run(cpu, _engines(capsys, server=False), cuda=False)
    assert "–" in (cpu / "engines-llama.txt").read_text() and "nan" not in (cpu / "engines-llama.txt").read_text()
    (cpu / "offload.txt").write_text("27 skipped in 0.4s\n")
    (cpu / "skipped.txt").write_text("offload: a CPU build sees no GPU device\n")  # declared by the run
    assert check(cpu, names, cpu=True) == 0
    capsys.readouterr()
    assert check(cpu, names) == 1 and "no CUDA device" in capsys.readouterr().err
