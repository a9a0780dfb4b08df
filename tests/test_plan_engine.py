"""The plan apart from the run (measure/plan.py), prepared prompts (measure/inputs/prepared.py) and the server engine's run
order: pure bookkeeping, no model loaded."""

from __future__ import annotations

from pathlib import Path

from gguf_bench.decoding.strategy import Strategy
from gguf_bench.measure.engines.server import ServerSession
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid, expand
from gguf_bench.results.schema.records import Mode

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


def test_the_server_engine_alternates_its_processes_where_they_fit_else_counterbalances(monkeypatch):
    """Tiny files fit side by side: 'alternate', each (prompt, repetition) block together, in a seeded order that forces
    no cell first (a missing greedy reference is made untimed). Where they would not fit: 'blocks', each process's cells
    together per repetition, in A B | B A order. A cold pool gets a process per cell either way."""
    from gguf_bench.measure.engines import server as server_engine
    from gguf_bench.measure.engines.server import _process_key

    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=PROMPTS, engines=("server",), repetitions=2,
                strategies=[Strategy("draft-simple"), Strategy("ngram-mod")], with_draft_alone=False)
    unit = expand(FILES, grid, {}).units[0]
    session = ServerSession.__new__(ServerSession)  # ordering needs no server
    session.grid, session.setting = grid, unit.setting
    monkeypatch.setattr(server_engine, "processes_fit", lambda setting, count: True)
    order = session.order(unit.cells)
    assert session.design == "alternate" and session.capacity == 3
    assert sorted(map(id, order)) == sorted(map(id, unit.cells))
    blocks = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert all(len({(c.prompt.id, c.repetition) for c in b}) == 1 for b in blocks)
    assert all(_process_key(c, warm_pool=False) is None for c in order if c.strategy.spec_type == "ngram-mod")
    assert len({_process_key(c, warm_pool=True) for c in order if c.strategy.spec_type == "ngram-mod"}) == 1

    monkeypatch.setattr(server_engine, "processes_fit", lambda setting, count: False)
    order = session.order(unit.cells)
    assert session.design == "blocks" and session.capacity == 1
    groups = [(c.mode, c.strategy.spec_type if c.mode == Mode.SPECULATIVE else "", c.repetition) for c in order]
    assert [g[:2] for g in groups[::2]] == [(Mode.TARGET, ""), (Mode.SPECULATIVE, "draft-simple"),
                                            (Mode.SPECULATIVE, "ngram-mod"), (Mode.SPECULATIVE, "ngram-mod"),
                                            (Mode.SPECULATIVE, "draft-simple"), (Mode.TARGET, "")]


def test_processes_fit_counts_each_process_files_against_the_memory_available(tmp_path):
    """Two processes of a pair whose files are a few bytes fit; of a pair whose target is 10 TB (a sparse file) they do
    not, so the sweep falls back to counterbalanced blocks."""
    from gguf_bench.measure.engines.server import processes_fit
    from gguf_bench.measure.pair import PairFiles

    small, huge, draft = tmp_path / "small.gguf", tmp_path / "huge.gguf", tmp_path / "draft.gguf"
    small.write_bytes(b"x" * 100)
    draft.write_bytes(b"x" * 100)
    with open(huge, "wb") as fh:
        fh.truncate(10 * 1024 ** 4)
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=PROMPTS, engines=("server",))
    for target, fits in ((small, True), (huge, False)):
        setting = expand(PairFiles(target, draft, "p"), grid, {}).units[0].setting
        assert processes_fit(setting, 2) is fits


def test_prepared_prompts_follow_the_filler_without_a_second_bos():
    prepared = PreparedPrompts({"a": [1, 5, 6]}, filler=[1, 9, 9, 9])
    assert prepared.after("a", 0) == [1, 5, 6]
    assert prepared.after("a", 3) == [5, 6] and prepared.whole("a", 3) == [1, 9, 9, 5, 6]


def test_each_new_server_gets_a_warm_up_that_a_cold_ngram_pool_cannot_see():
    """A warmed process: the first cell's prompt and up to 16 tokens. A cold ngram-mod pool: prompt and output together
    shorter than its 24-token lookup (llama.cpp adds nothing to the pool below that). The other cold pools: none."""
    from gguf_bench.runtimes.llama_server import NGRAM_MOD_MATCH, Speculation

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
