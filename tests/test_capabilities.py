"""Engines by name, each with what it can do (issue 50, 3), declared once (issue 57, 2): the plan asks the
declarations, so an engine's abilities change its cells and its refusals without a branch on its name, and no module
but the registry compares an engine's name."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest
from cli_helpers import assert_user_error, invoke
from test_layout import modules

from gguf_bench import engine_registry, options
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import ConfigError
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Grid, cells_for


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
def name_comparisons(path) -> list[str]:
    """Comparisons (==, !=, in) with an engine's name: a string the registry declares, or a *_ENGINE constant."""
    names = set(engine_registry.ENGINES)

    def names_an_engine(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(names_an_engine(e) for e in node.elts)
        return (isinstance(node, ast.Name) and node.id.endswith("_ENGINE")) or (
            isinstance(node, ast.Attribute) and node.attr.endswith("_ENGINE"))

    return [ast.unparse(node) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Compare) and any(names_an_engine(x) for x in [node.left, *node.comparators])]


def test_no_module_but_the_registry_compares_an_engine_name():
    found = {mod: name_comparisons(path) for mod, path in modules().items() if mod != "gguf_bench.engine_registry"}
    assert not any(found.values()), {m: f for m, f in found.items() if f}


def test_tune_runs_the_flow_its_engine_declares():
    """tune reaches each engine's flow through the registry: the server flow's own refusal, the python flow's own,
    --parallel only where the engine has slots, and one line for an engine without a calibration."""
    assert_user_error(invoke("tune", "--engine", "server", "--depth", "4"), "tune --engine server calibrates at depth 0")
    assert_user_error(invoke("tune", "--engine", "python", "-n", "1"), "--n-predict must be >= 2")
    assert_user_error(invoke("tune", "--parallel", "2"), "--parallel calibrates slots: add --engine server")
    assert_user_error(invoke("tune", "--engine", "both"), "unknown --engine 'both'")
