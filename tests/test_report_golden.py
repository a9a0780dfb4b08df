"""Golden outputs of `report` (issue #36): records written by this version read, resume and report exactly as before.

tests/data/golden/ holds small record files made by the real CLI on a tiny pair (tests/data/golden/make_records.sh
has the commands: a Python-engine sweep over several axes, a server-engine sweep with concurrency, a sweep in both
engines, an eval, a tune calibration with its --check runs), and tests/data/legacy/ the files of earlier versions. For
each (files, arguments, width) of CASES, the stdout of `gguf-bench report` is compared byte for byte with
tests/data/golden/NAME.out (and its stderr with NAME.err, where it prints one); a mismatch shows a unified diff. Reports
run in-process from tests/data with relative paths and fixed console widths, so nothing in the bytes depends on the
machine, the folder or the day.

The resume keys of the sweep files are checked too: the `cell` of every record equals the key today's code computes for
the grid that made the file (measure/plan.py: cells_for, Cell.config, cell_key), one record per cell, so a
change of keys (which would make `sweep --resume` run every cell again) fails here.

Only when a change is meant to change what `report` prints, regenerate the outputs and review the diff:

    PYTHONPATH=. python tests/test_report_golden.py --regenerate && git diff tests/data/golden/
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import replace
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden"
PROMPTS = GOLDEN / "prompts" / "prompts.jsonl"  # the sweeps' --prompts (a folder apart: not a results file)

# what each report reads, relative to DATA (the cwd of every report)
SWEEP = "golden/sweep-python.jsonl"  # -K 2,4 x draft,ngram x --temp 0,0.7 x 2 prompts (categories) x -r 2
SERVER = "golden/sweep-server.jsonl"  # --engine server, --parallel 1,2 --clients 2
BOTH = "golden/sweep-both.jsonl"  # --engine both: the Python loop and llama-server side by side
EVAL = "golden/eval.jsonl"
TUNE = "golden/tune.jsonl"  # tune --check: calibration records and the runs that check them
LEGACY_FIRST = "legacy/runs-first-version.jsonl"  # runs of the first version (no engine, no kind, no strategy)
LEGACY = "legacy"  # every file of tests/data/legacy together (runs, an eval, a calibration)

TABLE = [("w120", [], 120), ("w80", [], 80)]  # the rich table, at two terminal widths
FORMATS = [(fmt, ["--format", fmt], 120) for fmt in ("md", "csv", "json", "jsonl")]


def _cases() -> list[tuple[str, list[str], int]]:
    cases = []
    for stem, paths in [("sweep-python", [SWEEP]), ("sweep-server", [SERVER]), ("sweep-both", [BOTH]), ("eval", [EVAL]),
                        ("tune", [TUNE]), ("legacy-first", [LEGACY_FIRST]), ("legacy-all", [LEGACY]),
                        ("sweep-and-tune", [SWEEP, TUNE])]:  # tune's calibrations predict the sweep's rows (pred.)
        cases += [(f"{stem}.{form}", [*paths, *args], width) for form, args, width in TABLE + FORMATS]
    cases += [(f"sweep-python.by-prompt.{form}", [SWEEP, "--by", "prompt", *args], width) for form, args, width in TABLE]
    cases += [("sweep-python.by-prompt.md", [SWEEP, "--by-prompt", "--format", "md"], 120),
              ("sweep-python.by-host.w120", [SWEEP, "--by", "host"], 120),
              ("sweep-server.by-prompt-host.w120", [SERVER, "--by", "prompt,host"], 120),
              ("sweep-server.steps.w80", [SERVER, "--steps"], 80),  # steps/s and tok/step kept at 80 columns
              ("sweep-python.steps.w120", [SWEEP, "--steps"], 120)]
    cases += [(f"sweep-python.spec-bench.{form}", [SWEEP, "--spec-bench", *args], width) for form, args, width in
              TABLE + FORMATS[:3]]
    cases += [("all.w120", ["golden"], 120),  # the folder: every golden file at once
              ("all.w80", ["golden"], 80),
              ("all.md", ["golden", "--format", "md"], 120)]
    return cases


CASES = _cases()


def report(args: list[str], width: int) -> tuple[int, str, str]:
    """`gguf-bench report ARGS` in-process, from DATA, with the consoles `width` columns wide: exit code, stdout, stderr."""
    from typer.testing import CliRunner

    from gguf_bench.cli.app import app, console, err

    mp = pytest.MonkeyPatch()
    try:
        mp.chdir(DATA)
        for name, value in {"COLUMNS": str(width), "GGUF_BENCH_RESULTS": "results", "GGUF_BENCH_REGISTRY": "models.yaml"}.items():
            mp.setenv(name, value)
        for c in (console, err):
            mp.setattr(c, "_width", width)  # the width property sets _width: undo then leaves it None (from COLUMNS)
        result = CliRunner().invoke(app, ["report", *args], catch_exceptions=False)
    finally:
        mp.undo()
    return result.exit_code, result.stdout, result.stderr


def _diff(want: str, got: str, name: str) -> str:
    return "".join(difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True),
                                        f"{name} (stored)", f"{name} (now)"))


@pytest.mark.parametrize(("name", "args", "width"), CASES, ids=[c[0] for c in CASES])
def test_report_prints_the_stored_bytes(name, args, width):
    code, out, err_text = report(args, width)
    assert code == 0, err_text
    want = (GOLDEN / f"{name}.out").read_text(encoding="utf-8")
    assert out == want, f"`gguf-bench report {' '.join(args)}` at {width} columns changed:\n{_diff(want, out, name)}"
    err_file = GOLDEN / f"{name}.err"
    want_err = err_file.read_text(encoding="utf-8") if err_file.is_file() else ""
    assert err_text == want_err, f"stderr of `gguf-bench report {' '.join(args)}` changed:\n{_diff(want_err, err_text, name)}"


def test_every_stored_output_has_a_case():
    """No .out or .err is left over from a case that no longer runs (a rename would otherwise pin nothing)."""
    names = {c[0] for c in CASES}
    stored = {p.name.rsplit(".", 1)[0] for p in GOLDEN.iterdir() if p.suffix in (".out", ".err")}
    assert stored - names == set()
    assert {n for n in names if not (GOLDEN / f"{n}.out").is_file()} == set()


def test_outputs_hold_nothing_of_this_machine():
    """The stored bytes name no absolute folder of the machine that made them (only the records' own contents)."""
    for p in GOLDEN.iterdir():
        if p.suffix in (".out", ".err"):
            text = p.read_text(encoding="utf-8")
            for needle in ("/tmp/", "/work/", "/root/", "/home/", str(DATA)):
                assert needle not in text, (p.name, needle)


# the grids that made the sweep files (tests/data/golden/README.md has their command lines)
def _python_grid():
    from gguf_bench.decoding.strategy import strategies
    from gguf_bench.measure.inputs.prompts import load_jsonl
    from gguf_bench.measure.plan import Grid

    return Grid(ks=[2, 4], ngls=[0], nglds=[0], temperatures=[0.0, 0.7], prompts=load_jsonl(PROMPTS),
                repetitions=2, n_predict=8, threads=1, strategies=strategies("draft,ngram", 1, 4, "0", 0, "fixed", 16))


def _server_grid():
    from gguf_bench.measure.inputs.prompts import load_jsonl
    from gguf_bench.measure.plan import Grid

    return Grid(ks=[2, 4], ngls=[0], nglds=[0], temperatures=[0.0], prompts=load_jsonl(PROMPTS)[:1],
                n_predict=8, threads=1, engines=("server",), parallels=[1, 2], clients=[2])


def _both_grid():
    from gguf_bench.measure.inputs.prompts import load_jsonl
    from gguf_bench.measure.plan import Grid

    return Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=load_jsonl(PROMPTS)[:1], n_predict=8, threads=1,
                engines=("python", "server"))


@pytest.mark.parametrize(("path", "grid"), [(SWEEP, _python_grid), (SERVER, _server_grid), (BOTH, _both_grid)],
                         ids=["python", "server", "both"])
def test_sweep_resume_keys_are_stable(path, grid):
    """The records' stored `cell` keys are the keys today's code gives the cells of the same grid, one each: a
    `sweep --resume` of these files finds every cell done."""
    from gguf_bench.measure.plan import cell_key, cells_for
    from gguf_bench.models.pairs import PairFiles
    from gguf_bench.results.schema.records import RunRecord, read_file

    records, bad = read_file(DATA / path)
    assert not bad and records and all(isinstance(r, RunRecord) for r in records)
    first = records[0]
    files = PairFiles(Path(first.models.target.file), Path(first.models.draft.file), first.pair)

    g = replace(grid(), n_ctx=first.config.n_ctx)  # as sized_context left it
    keys = [cell_key(first.pair, files, cell.config(g, load), cell.mode) for load in g.settings() for engine in g.engines
            for cell in cells_for(g, True, engine)]
    # the same cells, one record each (in the server engine's own order: it groups cells by server launch)
    assert sorted(r.cell for r in records) == sorted(keys)
    assert [cell_key(r.pair, files, r.config, r.mode) for r in records] == [r.cell for r in records]  # from their configs


def _regenerate() -> None:
    for name, args, width in CASES:
        code, out, err_text = report(args, width)
        if code != 0:
            raise SystemExit(f"report {' '.join(args)} failed ({code}): {err_text}")
        (GOLDEN / f"{name}.out").write_text(out, encoding="utf-8")
        err_file = GOLDEN / f"{name}.err"
        if err_text:
            err_file.write_text(err_text, encoding="utf-8")
        else:
            err_file.unlink(missing_ok=True)
        print(f"wrote {name}.out" + (" and .err" if err_text else ""))


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        raise SystemExit(__doc__)
    _regenerate()
