"""Where the weights go beyond -ngl (placing.py): the options, llama.cpp's own account of what an override moved, the
sweep axes and their records, on a tiny mixture-of-experts pair loaded by the real llama.cpp."""

from __future__ import annotations

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.errors import ConfigError
from gguf_bench.options import ALL_LAYERS
from gguf_bench.placing import EXPERTS_REGEX, Placing, parse_label, placing_axes, placings
from gguf_bench.runtimes.llama_cpp import Model, check_placement

# --- the value and its option text ---


def test_every_combination_of_the_alternatives_with_labels_that_read_back():
    got = placings("0,2,all", ["exps=CPU", "none"], ["none"])
    assert len(got) == 6
    assert Placing(2, (("exps", "CPU"),), ("none",)) in got
    for p in got:
        assert parse_label(p.label()) == p and parse_label(p.label(draft=True), draft=True) == p
    assert Placing(ALL_LAYERS).label() == "-cmoe" and Placing(ALL_LAYERS).label(draft=True) == "-cmoed"
    assert Placing().label() is None


def test_overrides_in_llama_cpps_order_ot_first_then_one_per_layer():
    p = Placing(n_cpu_moe=2, overrides=(("attn_q", "CPU"),))
    assert p.tensor_overrides(n_layers=4) == [("attn_q", "CPU"), (rf"blk\.0{EXPERTS_REGEX}", "CPU"),
                                              (rf"blk\.1{EXPERTS_REGEX}", "CPU")]
    assert Placing(n_cpu_moe=9).tensor_overrides(n_layers=3)[-1][0] == rf"blk\.2{EXPERTS_REGEX}"  # capped at the layers
    assert Placing(n_cpu_moe=ALL_LAYERS).tensor_overrides(4) == [(EXPERTS_REGEX, "CPU")]


@pytest.mark.parametrize("kw, needle", [
    ({"override": ["exps"]}, "PATTERN=BUFFER"),
    ({"override": ["(unclosed=CPU"]}, "bad -ot pattern"),
    ({"device": ["none,Vulkan0"]}, "-dev none means no device"),
    ({"n_cpu_moe": "x"}, "bad --n-cpu-moe value"),
])
def test_bad_option_text_is_one_clear_error(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        placings(**kw)


def test_run_takes_one_placement_per_model():
    with pytest.raises(ConfigError, match="one value each"):
        placing_axes(n_cpu_moe="0,2", single=True)


# --- what llama.cpp did with it (its load log, runtimes/placement.py) ---


def test_n_cpu_moe_puts_exactly_that_many_layers_experts_on_the_cpu(moe_pair):
    with Model(moe_pair[0], 0, 256, 2, placing=Placing(n_cpu_moe=2)) as m:
        assert m.placement.host_expert_layers() == [0, 1]  # 'CPU' here, 'Vulkan_Host' on a Vulkan build
        assert "experts of 2 layers on " in m.placement.summary() and "(blk 0-1)" in m.placement.summary()
    with Model(moe_pair[0], 0, 256, 2, placing=Placing(n_cpu_moe=ALL_LAYERS)) as m:
        assert m.placement.host_expert_layers() == [0, 1, 2, 3]
    with Model(moe_pair[0], 0, 256, 2) as m:  # no override: nothing reported moved
        assert m.placement.expert_layers == {} and m.placement.overridden == {}


def test_an_override_pattern_moves_the_weights_it_matches(moe_pair):
    with Model(moe_pair[0], 0, 256, 2, placing=Placing(overrides=((r"attn_(q|k)\.weight", "CPU"),))) as m:
        assert m.placement.host_overridden() == 8  # q and k of 4 layers
        assert m.placement.expert_layers == {}


def test_what_llama_cpp_would_refuse_is_one_line_before_loading(moe_pair, tiny_pairs):
    target = moe_pair[0]
    with pytest.raises(ConfigError, match="matches no tensor of tiny-target.gguf"):
        check_placement(target, Placing(overrides=(("no_such_weight", "CPU"),)))
    with pytest.raises(ConfigError, match="no buffer type 'Nowhere0'; it has .*CPU"):
        check_placement(target, Placing(overrides=(("attn_q", "Nowhere0"),)))
    with pytest.raises(ConfigError, match="no device 'Nowhere0'"):
        check_placement(target, Placing(devices=("Nowhere0",)))
    assert check_placement(target, Placing(devices=("none",))) is None
    note = check_placement(tiny_pairs["high"][0], Placing(n_cpu_moe=2))  # a dense model: a note, not an error
    assert note and "no expert weights" in note


# --- both engines: axes, records, resume keys, report ---


def test_sweep_over_placements_stores_each_and_reads_it_back(moe_pair, tmp_path):
    args = ["sweep", *pair_args(moe_pair), "-K", "2", "-n", "8", "--prompt-ids", "code-short", "--no-draft-alone",
            "-ncmoe", "0,2", "-ncmoed", "1", "--name", "placed"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    records = stored(tmp_path / "results" / "placed.jsonl")
    by_placement = {(r["config"]["placement"], r["mode"]): r for r in records}
    assert set(by_placement) == {(p, m) for p in (None, "-ncmoe 2") for m in ("target", "speculative")}
    assert all(r["config"]["placement_draft"] == "-ncmoed 1" for r in records)
    placed = by_placement[("-ncmoe 2", "speculative")]["offload"]
    assert list(placed["target_placement"]["expert_layers"].values()) == [[0, 1]]
    assert list(placed["draft_placement"]["expert_layers"].values()) == [[0]]
    assert by_placement[(None, "target")]["offload"]["target_placement"]["expert_layers"] == {}
    assert len({r["cell"] for r in records}) == len(records)
    assert "placement" in result.output and "-ncmoe 2 -ncmoed 1" in result.output
    again = invoke(*args, "--resume")  # every cell is done: nothing runs again
    assert again.exit_code == 0 and len(stored(tmp_path / "results" / "placed.jsonl")) == len(records)


def test_run_prints_where_the_experts_went_and_a_dense_pair_gets_a_note(moe_pair, tiny_pairs):
    result = invoke("run", *pair_args(moe_pair), "-K", "2", "-n", "16", "-ncmoe", "2", "-ncmoed", "all", "--prompt-ids",
                    "code-short", "--verify", "sequential")
    assert result.exit_code == 0, result.output
    lines = {line.split(":")[0]: line for line in result.output.splitlines() if " placement: " in line}
    assert "experts of 2 layers on " in lines["target placement"] and "(blk 0-1)" in lines["target placement"]
    assert "experts of 4 layers on " in lines["draft placement"] and "(blk 0-3)" in lines["draft placement"]
    assert "greedy check, K=2: output identical to the target alone's" in result.output  # exact by construction
    dense = invoke("run", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "8", "-ncmoe", "2", "--prompt-ids", "code-short")
    assert dense.exit_code == 0 and "Note: --n-cpu-moe does nothing for tiny-target.gguf" in dense.output


def test_bad_placement_on_the_command_line_is_one_error_line(moe_pair):
    assert_user_error(invoke("run", *pair_args(moe_pair), "-n", "4", "-ot", "nothing_here=CPU"), "matches no tensor")
    assert_user_error(invoke("run", *pair_args(moe_pair), "-n", "4", "-devd", "Nowhere0"), "no device 'Nowhere0'")
    assert_user_error(invoke("run", *pair_args(moe_pair), "-n", "4", "-ncmoe", "0,2"), "one value each")


def test_the_server_engine_gets_the_same_flags_and_the_deploy_line_carries_them(moe_pair, server_bin, tmp_path):
    """llama-server gets the placement flags (-ncmoe, -ncmoed) and runs; the stored command (what deploy prints) carries
    them. (llama-server logs each override only at -lv 5, which also logs every token: its records keep the buffer sizes
    per device, which -lv 4 gives, and the per-layer list comes from the Python engine.)"""
    result = invoke("run", *pair_args(moe_pair), "-K", "2", "-n", "8", "-t", "2", "--prompt-ids", "code-short",
                    "-ncmoe", "2", "-ncmoed", "1", "--engine", "both", "--server-bin", str(server_bin), "--name", "both")
    assert result.exit_code == 0, result.output
    records = [r for r in stored(tmp_path / "results" / "both.jsonl") if r["mode"] == "speculative"]
    assert len(records) == 2 and all(r["error"] is None for r in records)
    assert all(r["config"]["placement"] == "-ncmoe 2" and r["config"]["placement_draft"] == "-ncmoed 1" for r in records)
    python = next(r for r in records if r["config"].get("engine") is None)
    assert list(python["offload"]["target_placement"]["expert_layers"].values()) == [[0, 1]]
    command = next(r for r in records if r["config"].get("engine") == "server")["server"]["command"]
    assert command[command.index("-ncmoe") + 1] == "2" and command[command.index("-ncmoed") + 1] == "1"
    assert command.index("-ncmoed") < command.index("--spec-type")  # with the draft's flags
