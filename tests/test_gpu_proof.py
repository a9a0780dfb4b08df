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
def test_dry_run_writes_tables_of_numbers_within_the_limits(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "GPU_PROOF_KIT": str(tmp_path / "kit"),
           "GPU_PROOF_STATE": str(tmp_path / "state"), "GGUF_BENCH_CACHE": os.environ.get("GGUF_BENCH_CACHE", "")}
    if not env["GGUF_BENCH_CACHE"]:
        del env["GGUF_BENCH_CACHE"]  # the sdist comes from the usual cache (build.sources: pip download once)
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_proof.sh"), "dry-run"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    size = int(re.search(r"prepared .*?: (\d+) KiB", out).group(1))
    assert size < 64 * 1024
    call = re.search(r"the device call \(the same kit; (\d+) characters\):\n(.*?)\ngpu-proof: ", out, re.S)
    assert call and int(call.group(1)) < 2000 and "gpu_proof.sh run" in call.group(2)
    tables = tmp_path / "state" / "tables"
    names = {p.stem for p in tables.glob("*.txt")}
    assert {"machine", "build", "twins", "offload", "plan-cli-llama", "tune-llama", "engines-llama", "tune-qwen",
            "engines-qwen"} <= names
    tune = (tables / "tune-llama.txt").read_text()
    assert re.search(r"target t_verify\(1\) [\d.]+ ms", tune) and "a=0.8" in tune
    engines = (tables / "engines-qwen.txt").read_text()
    assert "T=0.7" in engines and re.search(r"^alone\s+[\d.]+ ±", engines, re.M)
    assert (tmp_path / "state" / "out" / "gpu-proof-summary.txt").stat().st_size > 1000
