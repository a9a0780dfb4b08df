"""The plan apart from the run (measure/plan.py), prepared prompts (measure/prepared.py) and the server engine's run
order: pure bookkeeping, no model loaded."""

from __future__ import annotations

from pathlib import Path

from gguf_bench.decoding.strategy import Strategy
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid, expand
from gguf_bench.measure.prepared import PreparedPrompts
from gguf_bench.measure.prompts import Prompt
from gguf_bench.measure.server_engine import ServerSession
from gguf_bench.results.records import Mode

FILES = PairFiles(Path("t.gguf"), Path("d.gguf"), "P")
PROMPTS = [Prompt("a", "x"), Prompt("b", "y")]


def test_expand_lists_each_setting_once_and_leaves_done_cells_out():
    grid = Grid(ks=[1, 2], ngls=[0, 1], nglds=[0], temperatures=[0.0], prompts=PROMPTS)
    plan = expand(FILES, grid, {"sweep": "s", "pair": "P"})
    assert [u.setting.load.ngl for u in plan.units] == [0, 1]
    assert plan.total == plan.todo == 2 * 2 * 4  # 2 settings x 2 prompts x (target, draft, K=1, K=2)
    first = plan.units[0]
    done = {first.setting.key(c) for c in first.cells}  # the whole first setting is in the file
    again = expand(FILES, grid, {"sweep": "s", "pair": "P"}, done)
    assert [u.setting.load.ngl for u in again.units] == [1] and again.todo == plan.todo // 2 and again.total == plan.total


def test_a_record_names_its_cell_by_the_key_resume_looks_for():
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=PROMPTS[:1])
    unit = expand(FILES, grid, {"sweep": "s", "pair": "P", "env": None, "models": None}).units[0]
    cell = unit.cells[-1]
    record = unit.setting.record(cell, error="boom")
    assert record.cell == unit.setting.key(cell) and record.error == "boom" and record.mode == Mode.SPECULATIVE


def test_the_server_engine_runs_the_target_alone_first_and_a_cold_pool_in_a_process_per_cell():
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=PROMPTS, engines=("server",),
                strategies=[Strategy("draft-simple"), Strategy("ngram-mod")], with_draft_alone=False)
    cells = expand(FILES, grid, {}).units[0].cells
    session = ServerSession.__new__(ServerSession)  # ordering needs no server
    session.grid = grid
    order = session.order(cells)
    assert sorted(map(id, order)) == sorted(map(id, cells))
    assert [c.mode for c in order[:2]] == [Mode.TARGET, Mode.TARGET]  # both prompts' baselines first
    draft = [c.prompt.id for c in order if c.strategy.spec_type == "draft-simple" and c.mode == Mode.SPECULATIVE]
    assert draft == ["a", "b"]  # one process for both prompts
    from gguf_bench.measure.server_engine import _process_key

    assert all(_process_key(c, warm_pool=False) is None for c in order if c.strategy.spec_type == "ngram-mod")
    assert len({_process_key(c, warm_pool=True) for c in order if c.strategy.spec_type == "ngram-mod"}) == 1


def test_prepared_prompts_follow_the_filler_without_a_second_bos():
    prepared = PreparedPrompts({"a": [1, 5, 6]}, filler=[1, 9, 9, 9])
    assert prepared.after("a", 0) == [1, 5, 6]
    assert prepared.after("a", 3) == [5, 6] and prepared.whole("a", 3) == [1, 9, 9, 5, 6]


def test_each_new_server_gets_a_warm_up_that_a_cold_ngram_pool_cannot_see():
    """A warmed process: the first cell's prompt and up to 16 tokens. A cold ngram-mod pool: prompt and output together
    shorter than its 24-token lookup (llama.cpp adds nothing to the pool below that). The other cold pools: none."""
    from gguf_bench.engines.llama_server import NGRAM_MOD_MATCH, Speculation

    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=PROMPTS[:1], n_predict=64, engines=("server",),
                strategies=[Strategy("ngram-mod")], with_draft_alone=False)
    cell = expand(FILES, grid, {}).units[0].cells[-1]
    session = ServerSession.__new__(ServerSession)  # no server needed
    session.grid, session.prompts = grid, PreparedPrompts({"a": list(range(40))}, filler=[])
    prompt, n = session._warm_up(cell, Speculation("ngram-mod", 2), "cold")
    assert len(prompt) + n < NGRAM_MOD_MATCH and n > 0 and prompt == list(range(len(prompt)))
    assert session._warm_up(cell, Speculation("ngram-mod", 2), "warm") == (list(range(40)), 16)
    assert session._warm_up(cell, Speculation("ngram-map-k", 2, ngram_n=4), "cold") is None
    assert session._warm_up(cell, Speculation("draft-simple", 2), None) == (list(range(40)), 16)
