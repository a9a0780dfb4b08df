"""Engines by name, each with what it can do (issue 50, 3), declared once (issue 57, 2): the plan asks the
declarations, so an engine's abilities change its cells and its refusals without a branch on its name, and no module
but the registry compares an engine's name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gguf_bench import engine_registry, options
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import ConfigError
from gguf_bench.measure.plan import Grid, cells_for
from gguf_bench.measure.prompts import Prompt


def grid(**kw) -> Grid:
    return Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "hello")], **kw)


def test_every_engine_is_one_declaration_whose_class_and_tune_flow_load():
    for name, kind in engine_registry.ENGINES.items():
        cls = kind.engine_class()
        assert cls.name == name and cls.capabilities is kind.capabilities
        if kind.tune is not None:
            assert callable(kind.tune_flow())
    assert options.engines("both") == tuple(k.name for k in engine_registry.KINDS if k.in_both)


def test_cells_follow_the_declarations_not_the_names(monkeypatch):
    """The same grid: draft-alone cells only where the engine runs the draft alone, slots only where it has them."""
    g = grid(engines=("server",), parallels=[1, 2])
    assert {(c.mode, c.parallel) for c in cells_for(g, engine="server")} == {
        ("target", 1), ("target", 2), ("speculative", 1), ("speculative", 2)}
    server = engine_registry.ENGINES["server"]
    monkeypatch.setitem(engine_registry.ENGINES, "server", replace(server, capabilities=replace(
        server.capabilities, concurrent=False, draft_alone=True)))
    assert {(c.mode, c.parallel) for c in cells_for(g, engine="server")} == {
        ("target", None), ("draft", None), ("speculative", None)}


def test_refusals_come_from_the_declarations():
    with pytest.raises(ConfigError, match="generates one stream at a time: --parallel and --clients need --engine server"):
        grid(parallels=[2])
    with pytest.raises(ConfigError, match="is llama-server's own: run it with --engine server"):
        grid(strategies=[Strategy("ngram-mod")])
    with pytest.raises(ConfigError, match="llama-server drafts a fixed K"):
        grid(engines=("server",), strategies=[Strategy("draft", k_schedule="heuristic")])
    with pytest.raises(ConfigError, match="unknown --engine 'vllm'"):
        engine_registry.of("vllm")
    with pytest.raises(ConfigError, match="unknown --engine 'vllm'"):
        options.engines("vllm")
