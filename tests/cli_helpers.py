"""Calling the CLI in-process from tests, and what a user error must look like."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gguf_bench.cli.app import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def at_width(monkeypatch, columns: int) -> None:
    """The CLI's consoles at `columns`, as a terminal of that width makes them: rich fixes a console's width from
    COLUMNS when the CLI is imported, so setting the variable later moves nothing."""
    from gguf_bench.cli.app import console, err

    monkeypatch.setenv("COLUMNS", str(columns))
    for c in (console, err):
        monkeypatch.setattr(c, "_width", columns)


def stored(path: Path) -> list[dict]:
    """The JSON objects a results file holds, as written (records.parse reads them back typed)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def processes_running(binary: Path, model: Path | None = None, parent: int | None = None,
                      without: Path | None = None) -> list[int]:
    """Pids of live processes running `binary` (from /proc), only those given `model`, not given `without` (a draft: a
    speculative llama-server is given the target too) and only children of `parent`, each where given."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            if (cmdline and cmdline[0] == str(binary).encode() and state != "Z"
                    and (model is None or str(model).encode() in cmdline) and (parent is None or int(ppid) == parent)
                    and (without is None or str(without).encode() not in cmdline)):
                pids.append(int(proc.name))
    return pids


def pair_args(files) -> list[str]:
    return ["--target", str(files[0]), "--draft", str(files[1])]


def one_error_line(stderr: str, *needles: str) -> str:
    """The one `Error:` line of a command's stderr (a `Note:` is no error), holding every needle; no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("Note: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def assert_user_error(result, *needles: str) -> str:
    """Exit 1 and exactly one `Error:` line on stderr holding every needle, no traceback: of the CLI run in this
    process (`invoke`) or in a child process (`run_cli`, subprocess.run); the line."""
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 1, (result.stdout or "") + (result.stderr or "")
    return one_error_line(result.stderr, *needles)


GGUF_BENCH = [sys.executable, "-m", "gguf_bench.cli"]  # the CLI in a child process, as its console script runs it


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """`gguf-bench ARGS` in a child process (this interpreter, this package), its output captured as text."""
    return subprocess.run([*GGUF_BENCH, *args], capture_output=True, text=True, env=os.environ if env is None else env,
                          timeout=timeout, **kwargs)
