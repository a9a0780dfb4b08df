"""A load's axes are declared once (plan.LOAD_AXES): the product of a grid's settings and the narrowing of a grid to one
setting (Ray's units: distributed.unit_grid) read the same list, so a unit measures its own setting's cells and no
other's. Before, unit_grid re-listed eight axes and left out the placements: a sweep over two -ot placements handed
each Ray unit both. Bookkeeping only: nothing loads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gguf_bench.measure.distributed import unit_grid
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import LOAD_AXES, Grid, expand
from gguf_bench.placing import Placing

FILES = PairFiles(Path("t.gguf"), Path("d.gguf"), "P")


def grid() -> Grid:
    return Grid(ks=[2, 4], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), repetitions=2,
                placings=[Placing(), Placing(overrides=((r"token_embd\.weight", "CPU"),))], ubatch_sizes=[256, 512])


def test_every_load_axis_is_a_grid_list_and_a_load_field():
    g = grid()
    load = g.settings()[0]
    assert all(isinstance(getattr(g, axis), list) and hasattr(load, name) for axis, name in LOAD_AXES)


def test_ray_units_over_two_placements_and_two_ubatches_give_the_local_cells_each_once():
    g = grid()
    local = Counter(u.setting.key(c) for u in expand(FILES, g, {}).units for c in u.cells)
    assert len(g.settings()) == 4 and set(local.values()) == {1}
    on_units = Counter()
    for load in g.settings():
        narrowed = unit_grid(g, load)
        assert narrowed.settings() == [load]  # the unit's own setting, and only it
        on_units.update(u.setting.key(c) for u in expand(FILES, narrowed, {}).units for c in u.cells)
    assert on_units == local


def test_two_server_binaries_are_two_settings_and_the_python_loop_runs_once():
    """--server-bin A,B (the server engine's option) makes the grid's server_bins axis: each build a setting of the
    server engine, its cells keyed by its binary; the Python loop runs no binary, so its cells come once, unkeyed by
    it. A unit narrowed to one build (Grid.narrowed) keeps that build only."""
    from gguf_bench.measure.engines.server_options import ServerOptions

    a, b = Path("/builds/a/llama-server"), Path("/builds/b/llama")
    g = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), engines=("python", "server"),
             engine_options=(ServerOptions(server_bin=Path(f"{a},{b}")),))
    assert g.server_bins == [a, b] and [lo.server_bin for lo in g.settings()] == [a, b]
    units = expand(FILES, g, {}).units
    assert [(u.setting.engine, u.setting.load.server_bin) for u in units] == [("python", None), ("server", a), ("server", b)]
    bins = {u.setting.engine: {c.config(g, u.setting.load).server_bin for c in u.cells} for u in units[:2]}
    assert bins == {"python": {None}, "server": {str(a)}}
    assert len({u.setting.key(c) for u in units for c in u.cells}) == sum(len(u.cells) for u in units)
    assert [g.narrowed(lo).server_bins for lo in g.settings()] == [[a], [b]]
    one = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), engines=("server",),
               engine_options=(ServerOptions(server_bin=a),))
    assert one.server_bins == [None] and one.settings()[0].server_bin is None  # one binary: the engine's own, as before


def test_two_libraries_are_two_settings_of_the_python_loop_and_the_server_runs_once(tmp_path):
    """--lib A,B (the Python loop's option) makes the grid's libs axis: each library a setting of the Python loop, its
    cells keyed by it; the server runs no library, so its cells come once. One --lib is a setting too (its own
    process); a folder with no libllama.so is one line."""
    import pytest

    from gguf_bench.errors import ConfigError
    from gguf_bench.measure.engines.python_options import PythonOptions

    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "libllama.so").write_bytes(b"")
    g = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), engines=("python", "server"),
             engine_options=(PythonOptions(lib=f"{a},{b / 'libllama.so'}"),))
    assert g.libs == [a, b] and [lo.lib for lo in g.settings()] == [a, b]
    units = expand(FILES, g, {}).units
    assert [(u.setting.engine, u.setting.load.lib) for u in units] == [("python", a), ("server", None), ("python", b)]
    assert {c.config(g, units[0].setting.load).lib for c in units[0].cells} == {str(a)}
    assert len({u.setting.key(c) for u in units for c in u.cells}) == sum(len(u.cells) for u in units)
    assert [g.narrowed(lo).libs for lo in g.settings()] == [[a], [b]]
    one = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]),
               engine_options=(PythonOptions(lib=str(a)),))
    assert [lo.lib for lo in one.settings()] == [a]
    with pytest.raises(ConfigError, match="no libllama.so"):
        PythonOptions(lib=f"{a},{tmp_path}")
