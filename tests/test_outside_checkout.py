"""The CLI of an editable install, run from another folder (issue #36): the registry shipped in the checkout is found
(models/registry.py's fallback: the checkout's models.yaml, two folders above models/), a sweep on --target/--draft
with --prompts FILE.jsonl needs no registry at all, and a missing registry is one `Error:` line, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cli_helpers import assert_user_error, invoke, pair_args, run_cli

from conftest import REPO_ROOT


def gguf_bench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`gguf-bench ARGS` as the console script of an editable install runs it: this checkout's package, imported from
    the checkout (not from a wheel that ships models.yaml inside), with no GGUF_BENCH_REGISTRY, from `cwd`."""
    env = {k: v for k, v in os.environ.items() if k != "GGUF_BENCH_REGISTRY"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return run_cli(*args, cwd=cwd, env=env, timeout=300)


def test_models_from_another_folder_lists_the_checkouts_registry(tmp_path, monkeypatch):
    from gguf_bench.models.registry import default_registry_path, load_registry

    assert not (tmp_path / "models.yaml").exists()
    proc = gguf_bench(tmp_path, "models")
    assert proc.returncode == 0, proc.stderr
    assert f"{load_registry(REPO_ROOT / 'models.yaml').default} (default)" in proc.stdout
    monkeypatch.chdir(tmp_path)  # the fallback itself, in this process
    monkeypatch.delenv("GGUF_BENCH_REGISTRY")
    assert default_registry_path() == REPO_ROOT / "models.yaml"


def test_sweep_with_a_prompt_file_from_another_folder(tmp_path, tiny_pairs):
    prompts = tmp_path / "my.jsonl"
    prompts.write_text('{"id": "p1", "prompt": "def add(a, b):"}\n')
    proc = gguf_bench(tmp_path, "sweep", *pair_args(tiny_pairs["high"]), "--prompts", "my.jsonl", "-K", "2", "-n", "4",
                      "-t", "1", "--no-draft-alone", "--name", "s", "--results-dir", str(tmp_path / "results"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and (tmp_path / "results" / "s.jsonl").is_file()


def test_a_prompt_file_needs_no_registry_and_a_missing_one_is_one_error_line(tmp_path, tiny_pairs, monkeypatch):
    """With the registry gone: --prompts FILE.jsonl (and FILE.jsonl:category) run; what needs the registry (a pair
    name, a prompt set, `models`) says so in one line."""
    monkeypatch.setenv("GGUF_BENCH_REGISTRY", str(tmp_path / "gone.yaml"))
    prompts = tmp_path / "my.jsonl"
    prompts.write_text('{"id": "p1", "prompt": "def add(a, b):", "category": "code"}\n')
    for i, spec in enumerate([str(prompts), f"{prompts}:code"]):
        result = invoke("sweep", *pair_args(tiny_pairs["high"]), "--prompts", spec, "-K", "2", "-n", "4", "-t", "1",
                        "--no-draft-alone", "--name", f"s{i}")
        assert result.exit_code == 0, result.output
    assert_user_error(invoke("models"), "gone.yaml", "not found")
    assert_user_error(invoke("sweep", *pair_args(tiny_pairs["high"]), "--prompts", "spec-bench", "-n", "4"),
                      "gone.yaml", "not found")
    assert_user_error(invoke("sweep", "--prompt-ids", "code-short", "-n", "4"), "gone.yaml", "not found")
