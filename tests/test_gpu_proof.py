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
            "engines-qwen"} <= names
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


def test_check_accepts_only_tables_of_measurements(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_proof import check

    (tmp_path / "tune.txt").write_text("K=4 target t_verify(1) 12.5 ms\n(tune: 40 s)\n")
    (tmp_path / "offload.txt").write_text("27 passed in 31.2s\n")
    assert check(tmp_path) == 0
    for name, text in (("offload.txt", "sss\n27 skipped in 0.4s\n"), ("offload.txt", "1 failed, 26 passed in 30 s\n"),
                       ("plan.txt", "Error: no GPU device\n"), ("engines.txt", "(engines: 3 s)\n")):
        (tmp_path / name).write_text(text)
        assert check(tmp_path) == 1, (name, text)
        (tmp_path / name).write_text("27 passed in 31.2s\n")
    (tmp_path / "offload.txt").write_text("27 skipped in 0.4s\n")
    (tmp_path / "skipped.txt").write_text("offload: a CPU build sees no GPU device\n")  # declared by the run
    assert check(tmp_path) == 0
