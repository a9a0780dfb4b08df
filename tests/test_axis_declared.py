"""A new axis, declared only here: llama.cpp's `op_offload` context param (0 or 1; on this CPU build it moves
nothing), one `axes.Axis` that the Python engine passes through to llama_context_params. Declared before the modules
that derive from the declarations are imported (their classes hold a field per axis), so each command runs in a child
process that declares it first. It is swept on the tiny pair (-opo 0,1: two loads), resumed (--resume runs nothing),
reported (its column, by its flag) and narrowed to one setting as a Ray unit is, with no other file touched. If adding
an axis needed an edit elsewhere (a Grid list, a LoadConfig or RunConfig field, a CLI option, a column, a label), this
test could not pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_helpers import pair_args, stored

DECLARE = """
import sys
from gguf_bench import axes, options
from gguf_bench.errors import ConfigError


def zero_or_one(spec, what):
    values = options.int_list(spec, what)
    if any(v not in (0, 1) for v in values):
        raise ConfigError(f"{what} takes 0 or 1, got '{spec}'")
    return values


axes.declare(axes.Axis("op_offload", "op_offloads", ("--op-offload", "-opo"), zero_or_one, int,
                       "llama.cpp's op_offload: host tensor operations offloaded to the device (0 or 1)", default=1,
                       llama="op_offload", engines=("python",)))
"""

CLI = DECLARE + """
from gguf_bench.cli import main
sys.argv[0] = "gguf-bench"
main()
"""

NARROWED = DECLARE + """
from collections import Counter
from pathlib import Path

from gguf_bench.measure.distributed import unit_grid
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid, expand

files = PairFiles(Path("t.gguf"), Path("d.gguf"), "P")
g = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), op_offloads=[0, 1],
         ubatch_sizes=[256, 512])
loads = g.settings()
assert sorted((lo.op_offload, lo.ubatch_size) for lo in loads) == [(0, 256), (0, 512), (1, 256), (1, 512)], loads
local = Counter(u.setting.key(c) for u in expand(files, g, {}).units for c in u.cells)
on_units = Counter()
for load in loads:
    narrowed = unit_grid(g, load)
    assert narrowed.op_offloads == [load.op_offload] and narrowed.settings() == [load]
    on_units.update(u.setting.key(c) for u in expand(files, narrowed, {}).units for c in u.cells)
assert on_units == local and set(local.values()) == {1}, (on_units, local)
# llama.cpp's default (1) given or not is one cell: the resume keys of records from before the axis stay the same
default = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]))
given = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), op_offloads=[1])
keys = [{u.setting.key(c) for u in expand(files, grid, {}).units for c in u.cells} for grid in (default, given)]
assert keys[0] == keys[1]
assert sorted(lo.label for lo in loads if "-opo 0" in lo.label) == ["-ngl 0 -ngld 0 -ub 256 -opo 0", "-ngl 0 -ngld 0 -ub 512 -opo 0"]
# the Python loop passes it to llama.cpp's context params; llama-server, which it does not declare, is not given it
off = next(lo for lo in loads if lo.op_offload == 0)
assert off.context["op_offload"] == 0 and "op_offload" not in off.server_context, (off.context, off.server_context)
print("narrowed")
"""


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})


def test_an_axis_declared_only_here_is_swept_resumed_and_reported(tiny_pairs, isolated):
    sweep = [*pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short",
             "--no-draft-alone", "-opo", "0,1", "--name", "ax"]
    first = _run(CLI, "sweep", *sweep)
    assert first.returncode == 0, first.stdout + first.stderr
    path = Path(os.environ["GGUF_BENCH_RESULTS"]) / "ax.jsonl"
    records = stored(path)
    assert len(records) == 2 * 2 and not [r["error"] for r in records if r["error"]]  # two loads x (alone, K=2)
    assert sorted(r["config"]["op_offload"] for r in records) == [0, 0, 1, 1]
    assert len({r["cell"] for r in records}) == 4

    again = _run(CLI, "sweep", *sweep, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(stored(path)) == 4  # every cell was done: nothing measured again

    report = _run(CLI, "report")
    assert report.returncode == 0, report.stdout + report.stderr
    head = next((line for line in report.stdout.splitlines() if "tokens/s" in line and "pp t/s" in line), "").split()
    assert head[:1] == ["-opo"], report.stdout  # the column of the one axis that varies, by its flag
    rows = [line.split() for line in report.stdout.splitlines()
            if "target alone" in line and "gain vs" not in line and not line.startswith("deploy")]
    assert sorted(r[0] for r in rows) == ["0", "1"], report.stdout

    csv = _run(CLI, "report", "--format", "csv").stdout.splitlines()
    assert "op_offload" in csv[0].split(",")


def test_an_axis_declared_only_here_is_narrowed_to_one_setting_as_a_ray_unit_is():
    result = _run(NARROWED)
    assert result.returncode == 0 and "narrowed" in result.stdout, result.stdout + result.stderr


def test_an_axis_declared_only_here_is_refused_in_one_line_for_a_bad_value_and_where_no_engine_acts_on_it(tiny_pairs, isolated):
    result = _run(CLI, "sweep", *pair_args(tiny_pairs["high"]), "-opo", "2")
    assert result.returncode == 1 and "-opo takes 0 or 1, got '2'" in result.stderr, result.stderr
    # llama-server is not among the engines that act on it: two values would be one setting measured twice
    result = _run(CLI, "sweep", *pair_args(tiny_pairs["high"]), "-opo", "0,1", "--engine", "both")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "-opo is a setting llama-server does not pass to llama.cpp: leave it out, or choose --engine python" in (
        result.stderr), result.stderr
