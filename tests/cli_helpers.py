"""Calling the CLI in-process from tests, and what a user error must look like."""

from __future__ import annotations

import json
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


def assert_user_error(result, *needles: str) -> None:
    """Exit 1 and exactly one `Error:` line on stderr holding every needle: no traceback."""
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
