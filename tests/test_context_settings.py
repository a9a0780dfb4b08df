"""llama.cpp's context settings as options and sweep axes (issue 23, what llama-bench users look for): flash attention,
KV-cache types, batch/ubatch sizes and draft threads are stored in every record, shown by `report` where they vary,
passed to llama-server as its own flags, and leave the --resume keys of runs with llama.cpp's defaults unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.axes import AXES, grid_lists
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import LoadConfig
from gguf_bench.measure.plan import Grid, cell_key, cells_for
from gguf_bench.models.pairs import PairFiles
from gguf_bench.models.tiny import TinySpec, make_pair
from gguf_bench.results.schema.records import RunConfig
from gguf_bench.runtimes.llama_server import Launch, Speculation


def context_axes(*given, **named) -> dict:
    """The context options as the Grid's lists, given in the declared axes' order (axes.grid_lists)."""
    return grid_lists({**dict(zip((a.name for a in AXES), given)), **named})


@pytest.fixture(scope="module")
def pair32(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny pair whose attention heads are 32 wide: a q8_0 KV cache needs heads a multiple of its 32-value block."""
    return make_pair(tmp_path_factory.mktemp("ctx"), noise=0.05, spec=TinySpec(width=128, n_heads=4))


def test_a_sweep_over_flash_attention_and_k_cache_types_stores_and_shows_them(pair32, monkeypatch):
    from gguf_bench.cli.app import console

    result = invoke("sweep", *pair_args(pair32), "-K", "2", "-n", "8", "-t", "1", "--prompt-ids", "code-short",
                    "-fa", "on,off", "-ctk", "f16,q8_0", "-td", "1,2", "--name", "ctx")
    assert result.exit_code == 0, result.output
    records = stored(Path(os.environ["GGUF_BENCH_RESULTS"]) / "ctx.jsonl")
    assert len(records) == 2 * 2 * 2 * 3 and not [r["error"] for r in records if r["error"]]
    got = {(r["config"]["flash_attn"], r["config"]["cache_type_k"], r["config"]["threads_draft"]) for r in records}
    assert got == {(fa, ctk, td) for fa in ("on", "off") for ctk in ("f16", "q8_0") for td in (1, 2)}
    assert {(r["config"]["cache_type_v"], r["config"]["batch_size"], r["config"]["ubatch_size"]) for r in records} == {
        ("f16", 512, 512)}
    assert len({r["cell"] for r in records}) == len(records)
    monkeypatch.setattr(console, "width", 160)
    report = invoke("report")
    assert report.exit_code == 0, report.output
    head = next(line for line in report.stdout.splitlines()  # the table's header: the deploy lines come first
                if "tokens/s" in line and not line.startswith(("deploy", " "))).split()
    assert head[:3] == ["-fa", "-ctk", "-td"] and "pp t/s" in " ".join(head) and "-ctv" not in head
    rows = [line.split() for line in report.stdout.splitlines()  # the table's rows, not a deploy line naming one
            if "target alone" in line and "gain vs" not in line and not line.startswith("deploy")]
    assert {(r[0], r[1], r[2]) for r in rows} == {(fa, ctk, td) for fa in ("on", "off") for ctk in ("f16", "q8_0")
                                                  for td in ("1", "2")}
    csv = invoke("report", "--format", "csv").stdout.splitlines()
    pp = csv[0].split(",").index("pp_tokens_per_s")
    assert all(float(line.split(",")[pp]) > 0 for line in csv[1:])  # prompt tokens / prompt seconds, every row


def test_a_run_with_one_setting_names_it_in_the_title(pair32):
    result = invoke("run", *pair_args(pair32), "-K", "2", "-n", "8", "-t", "1", "-fa", "on", "-ctv", "q8_0", "-b", "64",
                    "-ub", "32", "--name", "one")
    assert result.exit_code == 0, result.output
    assert "-fa on · -ctv q8_0 · -b 64 · -ub 32" in " ".join(result.stdout.split()), result.stdout
    records = stored(Path(os.environ["GGUF_BENCH_RESULTS"]) / "one.jsonl")
    assert len(records) == 3 and not [r["error"] for r in records if r["error"]]
    for r in records:
        c = r["config"]
        assert (c["flash_attn"], c["cache_type_k"], c["cache_type_v"], c["batch_size"], c["ubatch_size"]) == (
            "on", "f16", "q8_0", 64, 32)


@pytest.mark.parametrize("args, needle", [
    (["-fa", "maybe"], "bad -fa/--flash-attn value 'maybe'"),
    (["-ctk", "q9"], "bad -ctk cache type 'q9'"),
    (["-fa", "off", "-ctv", "q8_0"], "llama.cpp needs flash attention for a quantized V cache"),
    (["-b", "0"], "-b must be >= 1"),
    (["-b", "4", "-K", "4"], "more than -b 4"),
    (["-ub", "1024"], "-ub 1024 with -b 512"),
    (["-td", "two"], "bad -td value 'two'"),
    (["-fa", "on,off"], "-fa takes one value here"),
])
def test_a_bad_setting_is_one_error_line(tiny_pairs, args, needle):
    assert_user_error(invoke("run", *pair_args(tiny_pairs["high"]), *args), needle)


def test_a_sweep_leaves_out_what_llama_cpp_cannot_run_and_says_so(tiny_pairs):
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "hi")],
                **context_axes("on,off", None, "f16,q8_0"))
    assert [(lo.flash_attn, lo.cache_type_v) for lo in grid.settings()] == [("on", "f16"), ("on", "q8_0"), ("off", "f16")]
    assert grid.left_out() == ["-fa off with -ctv q8_0: llama.cpp needs flash attention for a quantized V cache "
                               "(use -fa on or auto, or -ctv f16)"]
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-fa", "on,off", "-ctv", "f16,q8_0", "--no-draft-alone",
                    "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short")
    # -fa on with -ctv q8_0 runs, and fails: the tiny model's 16-wide heads are not whole q8_0 blocks of 32 (its records
    # say so), and a sweep with failed cells ends with their count and exit status 3
    assert result.exit_code == 3, result.output
    assert "Warning: the sweep leaves out -fa off with -ctv q8_0" in result.stderr
    assert "2 cells failed" in result.output


def test_llama_cpp_defaults_keep_the_cell_keys_of_earlier_files():
    """Records made before these options hold none of them; a cell run with llama.cpp's defaults, given or not, has the
    very key such a record has (so `sweep --resume` continues an old file instead of running it again)."""
    files = PairFiles(Path("t.gguf"), Path("d.gguf"), "P")
    prompt = Prompt("p", "hi")

    def keys(**axes) -> list[str]:
        grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[prompt], threads=2, **axes)
        (load,) = grid.settings()
        return [cell_key("P", files, c.config(grid, load), c.mode) for c in cells_for(grid)]

    old = keys()
    assert keys(**context_axes("auto", "f16", "f16", "512", "512", "2")) == old
    assert keys(**context_axes("on")) != old and keys(**context_axes(threads_draft="1")) != old
    old_config = RunConfig(threads=2)  # a record of an earlier version: the new fields absent
    new_config = RunConfig(threads=2, flash_attn="auto", cache_type_k="f16", cache_type_v="f16", batch_size=512,
                           ubatch_size=512, threads_draft=2)
    assert new_config.cell_fields() == old_config.cell_fields()


def test_llama_server_gets_the_same_settings_and_its_old_defaults_when_none_are_given():
    launch = Launch(Path("llama-server"), Path("t.gguf"), Path("d.gguf"), Speculation("draft-simple", 4), "0", "0", 256, 3)
    argv = launch.argv()
    assert argv[argv.index("-b") + 1] == "512" and argv[argv.index("-ub") + 1] == "512"
    assert argv[argv.index("-td") + 1] == "3" and not {"-fa", "-ctk", "-ctv"} & set(argv)
    load = LoadConfig(flash_attn="on", cache_type_k="q8_0", cache_type_v="q4_0", batch_size=256, ubatch_size=64,
                      threads_draft=1)
    from gguf_bench.measure.engines.server import ServerEngine

    engine = ServerEngine.__new__(ServerEngine)  # the binary is not probed: argv only
    engine.binary = Path("llama-server")
    argv = engine.launch(PairFiles(Path("t.gguf"), Path("d.gguf"), "P"), load, Speculation("draft-simple", 4)).argv()
    flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1)
             if argv[i] in ("-fa", "-ctk", "-ctv", "-ctkd", "-ctvd", "-b", "-ub", "-td")}
    assert flags == {"-fa": "on", "-ctk": "q8_0", "-ctv": "q4_0", "-ctkd": "q8_0", "-ctvd": "q4_0", "-b": "256", "-ub": "64",
                     "-td": "1"}


def test_both_engines_run_the_same_settings(pair32, server_bin):
    result = invoke("run", *pair_args(pair32), "--engine", "both", "--server-bin", str(server_bin), "-K", "2", "-n", "8",
                    "-t", "2", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-b", "64", "-ub", "32", "-td", "1",
                    "--name", "both")
    assert result.exit_code == 0, result.output
    records = stored(Path(os.environ["GGUF_BENCH_RESULTS"]) / "both.jsonl")
    assert len(records) == 5 and not [r["error"] for r in records if r["error"]]
    settings = {(c["flash_attn"], c["cache_type_k"], c["cache_type_v"], c["batch_size"], c["ubatch_size"], c["threads_draft"])
                for c in (r["config"] for r in records)}
    assert settings == {("on", "q8_0", "q8_0", 64, 32, 1)}
    spec = next(r for r in records if r["server"] and r["mode"] == "speculative")
    assert {"-fa on", "-ctk q8_0", "-ctv q8_0", "-ctkd q8_0", "-b 64", "-ub 32", "-td 1"} <= {
        " ".join(pair) for pair in zip(spec["server"]["command"], spec["server"]["command"][1:])}


def test_a_ray_unit_holds_one_setting_of_the_context_axes():
    from gguf_bench.measure.distributed import unit_grid

    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "hi")],
                **context_axes("on,off", "f16,q8_0", None, "256,512", None, "1,2"))
    assert len(grid.settings()) == 16
    assert all(unit_grid(grid, load).settings() == [load] for load in grid.settings())
