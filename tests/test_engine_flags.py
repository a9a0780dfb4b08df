"""Each engine owns its options (measure/engines/declared.py): the commands' flags come from the declarations, a flag
no chosen engine owns is refused by its declaration, and an engine declared only here gets its flag on a command and
its options in the command's hands without an edit anywhere else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest
import typer
from cli_helpers import assert_user_error, at_width, invoke
from typer.testing import CliRunner

from gguf_bench import engine_registry
from gguf_bench.cli import engine_flags
from gguf_bench.errors import ConfigError
from gguf_bench.measure.engines.declared import EngineOptions, option
from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Grid


def test_sweep_help_lists_each_engines_options_under_its_name(monkeypatch):
    at_width(monkeypatch, 200)
    text = invoke("sweep", "--help").output
    owned = text[text.index("--server-bin"):].split("--help")[0]  # the engines' options, last, together
    for flag, owner in (("--server-bin", "[llama-server]"), ("--warm-pool", "[llama-server]"), ("--url", "[endpoint]"),
                        ("--request-timeout", "[llama-server and endpoint]")):  # one flag, two owners
        assert owner in owned.split(flag)[1].split("--")[0], owned
    assert "--warm-pool" not in invoke("run", "--help").output  # a flag only the commands it names take
    assert "--server-bin" in invoke("tune", "--help").output


@pytest.mark.parametrize("args, needles", [
    (["sweep", "--warm-pool"], ["--warm-pool is an option of llama-server", "the Python loop", "add --engine server"]),
    (["run", "--server-bin", "/x"], ["--server-bin is an option of llama-server", "leave it out, or add --engine server"]),
    (["sweep", "--engine", "server", "--request-timeout", "0"], ["--request-timeout must be above 0 seconds"]),
    (["sweep", "--engine", "endpoint", "--url", "http://127.0.0.1:9", "--baseline-url", "http://127.0.0.1:9",
      "--server-bin", "/x"], ["--server-bin is an option of llama-server", "a server at --url"]),
])
def test_an_option_no_chosen_engine_owns_is_one_line(args, needles, tmp_path):
    assert_user_error(invoke(*args, "--results-dir", str(tmp_path)) if args[0] == "sweep" else invoke(*args), *needles)


def test_the_grid_hands_each_engine_its_own_options_or_its_defaults():
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "hi")],
                engine_options=(ServerOptions(warm_pool=True),))
    assert grid.options_of("server").warm_pool is True and grid.options_of("server").request_timeout_s == 600.0
    assert grid.options_of("endpoint").request_timeout_s == 600.0  # not given: its declared defaults
    assert grid.options_of("python").lib is None  # not given: its declared defaults (--lib: none, this process's)
    with pytest.raises(ConfigError, match="--request-timeout"):
        ServerOptions(request_timeout_s=-1)


@dataclass(frozen=True)
class ReplayOptions(EngineOptions):
    engine: ClassVar[str] = "replay"
    speedup: float = option(1.0, "--replay-speedup", help="how much faster than stored to replay")


def test_an_engine_declared_only_here_gets_its_flag_and_its_options(monkeypatch):
    """An engine's line in the registry with its options' class: a command decorated with engine_flags takes its flag
    under its heading, hands its instance to the command, and refuses the flag for another engine."""
    kind = dataclasses.replace(engine_registry.ENGINES["endpoint"], name="replay", title="replay",
                               options=f"{__name__}:ReplayOptions")
    monkeypatch.setattr(engine_registry, "KINDS", (*engine_registry.KINDS, kind))
    monkeypatch.setitem(engine_registry.ENGINES, "replay", kind)
    seen = []
    app = typer.Typer()

    @app.command()
    @engine_flags.engine_flags("sweep")
    def fake(engine: str = "python", engine_options: tuple = ()) -> None:
        seen.append(engine_options)

    runner = CliRunner()
    assert "--replay-speedup" in runner.invoke(app, ["--help"]).output
    assert runner.invoke(app, ["--engine", "replay", "--replay-speedup", "2"]).exit_code == 0
    assert seen[-1] == (ReplayOptions(speedup=2.0),)
    refused = runner.invoke(app, ["--replay-speedup", "2"])
    assert refused.exit_code != 0 and "--replay-speedup is an option of replay" in str(refused.exception)


@dataclass(frozen=True)
class ClientOptions(EngineOptions):
    engine: ClassVar[str] = "client"
    takes: ClassVar[frozenset[str] | None] = frozenset({"n_predict"})  # what a client may set; the rest is refused

    server: str | None = option(None, "--client-url", help="the server")


def test_an_engine_that_takes_only_some_parameters_refuses_the_rest_by_its_declaration(monkeypatch):
    """EngineOptions.takes: the declaration says which of the command's parameters the engine takes; another one given
    is refused in its one line, the command's `always` ones are taken by every engine, and a command the engine has no
    options for is left to say itself what it refuses."""
    kind = dataclasses.replace(engine_registry.ENGINES["endpoint"], name="client", title="client",
                               options=f"{__name__}:ClientOptions")
    monkeypatch.setattr(engine_registry, "KINDS", (*engine_registry.KINDS, kind))
    monkeypatch.setitem(engine_registry.ENGINES, "client", kind)
    app = typer.Typer()

    @app.command()
    @engine_flags.engine_flags("sweep", always=frozenset({"name"}))
    def fake(engine: str = "python", n_predict: int = 8, ks: str = typer.Option("1", "-K"), name: str = "",
             engine_options: tuple = ()) -> None:
        pass

    runner = CliRunner()
    assert runner.invoke(app, ["--engine", "client", "--client-url", "u", "--n-predict", "4", "--name", "x"]).exit_code == 0
    refused = runner.invoke(app, ["--engine", "client", "-K", "2"])
    assert refused.exit_code != 0 and str(refused.exception) == "-K: not an option of --engine client: leave it out"
    assert runner.invoke(app, ["-K", "2"]).exit_code == 0  # the Python loop takes every parameter
