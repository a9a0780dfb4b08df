"""Grids, stored results that survive a kill, and report arithmetic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pandas as pd
import pytest
from cli_helpers import stored
from typer.testing import CliRunner

from gguf_bench.cli.app import app
from gguf_bench.errors import ConfigError
from gguf_bench.options import ALL_LAYERS, int_list, layer_list, layers, temperatures
from gguf_bench.results.presentation.report import render
from gguf_bench.results.presentation.summary import summarize, to_frame
from gguf_bench.results.schema.parts.provenance import Build

runner = CliRunner()


@pytest.mark.parametrize("spec, want", [
    ("1,2,4,8", [1, 2, 4, 8]), ("1-4", [1, 2, 3, 4]), ("1-8+2", [1, 3, 5, 7]), ("1-16*2", [1, 2, 4, 8, 16]),
    ("3", [3]), ("2,1-3", [2, 1, 3]), (" 1, 2 ", [1, 2]),
])
def test_int_grid_specs(spec, want):
    assert int_list(spec, "K") == want


def test_layer_specs_accept_all_max_and_minus_one_everywhere():
    assert layer_list("0,16,all") == [0, 16, ALL_LAYERS]
    assert layer_list("-1,max,all") == [ALL_LAYERS] and layer_list("0-8+4,-1") == [0, 4, 8, ALL_LAYERS]
    assert layers("-1") == layers("all") == layers("MAX") == ALL_LAYERS and layers("7") == 7


@pytest.mark.parametrize("spec, needle", [
    ("a", "bad K value 'a'"), ("4-1", "bad K range '4-1'"), ("1-8+0", "step >= 1"), ("1-8*1", "factor >= 2"),
    ("all", "bad K value 'all'"), ("1,,2", "bad K value ''"),
])
def test_bad_int_grid_specs(spec, needle):
    with pytest.raises(ConfigError, match=None) as exc:
        int_list(spec, "K")
    assert needle in str(exc.value)


def test_float_specs():
    assert temperatures("0,0.7,1") == [0.0, 0.7, 1.0]
    with pytest.raises(ConfigError, match="bad temperature list"):
        temperatures("0,hot")
    with pytest.raises(ConfigError, match="--temp must be >= 0, got -1"):
        temperatures("0,-1")


# --- report arithmetic on hand-written records ---------------------------------------------


def rec(mode, tps, k=0, rep=0, ngl=0, temp=0.0, acc=None, error=None, prompt="p1"):
    return {"pair": "P", "mode": mode, "error": error,
            "config": {"k": k, "ngl": ngl, "ngld": 0, "temperature": temp, "n_predict": 64, "prompt_id": prompt,
                       "repetition": rep},
            "metrics": None if error else {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "acceptance": acc,
                                           "tokens_per_round": None},
            "offload": {"target": f"{ngl}/29", "draft": "0/29"},
            "models": {"target": {"file": "t.gguf"}, "draft": {"file": "d.gguf"}}}


def test_report_means_std_gain_and_best_k():
    records = [rec("target", 10, rep=0), rec("target", 10.4, rep=1),
               rec("speculative", 15, k=2, acc=0.9), rec("speculative", 15.6, k=2, rep=1, acc=0.8),
               rec("speculative", 12, k=4, acc=0.7), rec("speculative", 12.4, k=4, rep=1, acc=0.6),
               rec("speculative", 0, k=8, error="out of memory")]
    s = summarize(to_frame(records)).set_index(["mode", "k"])
    assert s.loc[("target", 0), "tokens_per_s"] == pytest.approx(10.2)
    assert s.loc[("target", 0), "tokens_per_s_std"] == pytest.approx(pd.Series([10, 10.4]).std())
    assert s.loc[("speculative", 2), "gain_pct"] == pytest.approx(100 * (15.3 / 10.2 - 1))
    assert s.loc[("speculative", 4), "gain_pct"] == pytest.approx(100 * (12.2 / 10.2 - 1))
    assert s.loc[("speculative", 2), "acceptance"] == pytest.approx(0.85)
    assert bool(s.loc[("speculative", 2), "best_k"]) and not bool(s.loc[("speculative", 4), "best_k"])
    assert s.loc[("speculative", 8), "failed"] == 1 and s.loc[("speculative", 8), "runs"] == 0


def test_no_best_k_where_the_fastest_gain_is_not_decided():
    """Two runs each that spread by 20%: the fastest K's gain cannot be told from zero, so no K is starred."""
    records = [rec("target", 10, rep=0), rec("target", 12, rep=1), rec("speculative", 14, k=2),
               rec("speculative", 16, k=2, rep=1), rec("speculative", 12, k=4), rec("speculative", 13, k=4, rep=1)]
    s = summarize(to_frame(records)).set_index(["mode", "k"])
    assert s.loc[("speculative", 2), "gain_lo"] < 0 < s.loc[("speculative", 2), "gain_hi"]
    assert not s["best_k"].any()


def test_report_baseline_matches_offload_and_temperature():
    records = [rec("target", 10, ngl=0), rec("target", 20, ngl=99), rec("speculative", 15, k=2, ngl=0),
               rec("speculative", 30, k=2, ngl=99), rec("speculative", 5, k=2, temp=0.7)]
    s = summarize(to_frame(records))
    spec = s[s["mode"] == "speculative"].set_index(["ngl", "temperature"])
    assert spec.loc[("0", 0.0), "gain_pct"] == pytest.approx(50)
    assert spec.loc[("99", 0.0), "gain_pct"] == pytest.approx(50)
    assert pd.isna(spec.loc[("0", 0.7), "gain_pct"])  # no baseline at that temperature: no gain claimed


def test_report_by_prompt_keeps_prompts_apart():
    records = [rec("target", 10, prompt="a"), rec("target", 20, prompt="b"),
               rec("speculative", 15, k=2, prompt="a"), rec("speculative", 20, k=2, prompt="b")]
    by = summarize(to_frame(records), by_prompt=True).set_index(["prompt_id", "mode"])
    assert by.loc[("a", "speculative"), "gain_pct"] == pytest.approx(50)
    assert by.loc[("b", "speculative"), "gain_pct"] == pytest.approx(0)
    pooled = summarize(to_frame(records)).set_index("mode")
    assert pooled.loc["speculative", "gain_pct"] == pytest.approx(100 * (17.5 / 15 - 1))


def test_markdown_has_the_notebook_shape():
    md = render(summarize(to_frame([rec("target", 10), rec("speculative", 13, k=3, acc=0.7)])), "md")
    lines = md.splitlines()
    assert lines[0].startswith("| model | GPU layers offload | tokens/s | gain % |")
    assert "| t (target alone) | 0/29 | 10.00 |" in md
    assert "| t + d, K=3 | 0/29 + 0/29 | 13.00 | +30.0% | 70.0% |" in md


# --- sweeps on a tiny pair through the CLI ---------------------------------------------------


def sweep_args(files, name, *extra):
    return ["sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", name, "-n", "24",
            "--prompt-ids", "code-short,chat-short", *extra]


def test_sweep_stores_every_cell_and_resume_does_nothing_twice(tiny_pairs, isolated):
    args = sweep_args(tiny_pairs["middle"], "s1", "-K", "1-3", "--temp", "0,0.8", "-r", "2")
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    out = isolated / "results" / "s1.jsonl"
    records = stored(out)
    # 2 temps x 2 prompts x 2 reps x (target + draft + 3 K)
    assert len(records) == 2 * 2 * 2 * 5 and len({r["cell"] for r in records}) == len(records)
    assert all(r["env"]["llama_cpp_python"] and r["models"]["target"]["sha256"] for r in records)
    assert "K=3" in first.output
    rows = json.loads(runner.invoke(app, ["report", str(out), "--format", "json"]).stdout)
    assert {r["build"] for r in rows} == {Build(**records[0]["build"]).label}  # the llama.cpp build, in every row
    starred = [r for r in rows if r["best_k"]]  # a star only on a decided gain above zero (none while busy)
    assert ("★" in first.output) == bool(starred) and all(r["decided"] and r["gain_pct"] > 0 for r in starred)
    again = runner.invoke(app, args + ["--resume"])
    assert again.exit_code == 0 and "40 cells already done, 0 to go" in again.output
    assert len(stored(out)) == 40
    clash = runner.invoke(app, args)
    assert clash.exit_code == 1 and "already exists" in clash.stderr


def test_sweep_killed_then_resumed_runs_every_cell_once(tiny_pairs, isolated):
    args = sweep_args(tiny_pairs["low"], "killed", "-K", "1-6", "-r", "3", "-n", "400", "--ctx-size", "1024")
    cmd = [sys.executable, "-m", "gguf_bench.cli", *args]
    out = isolated / "results" / "killed.jsonl"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(stored(out))
    total = 2 * 3 * (2 + 6)
    assert 5 <= done_before < total, done_before
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, env=os.environ.copy())
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {done_before} cells already done" in resumed.stdout
    counts = Counter(r["cell"] for r in stored(out))
    assert len(counts) == total and set(counts.values()) == {1}


def test_sweep_records_a_failed_setting_and_goes_on(tmp_path, tiny_pairs, isolated):
    """The target file is truncated when the second offload setting starts loading (as when a
    file goes bad mid-sweep): that setting's cells are recorded with the error, the rest run."""
    from gguf_bench.measure.inputs.prompts import builtin
    from gguf_bench.measure.pair import PairFiles
    from gguf_bench.measure.plan import Grid
    from gguf_bench.measure.sweep import SweepEvents, run_sweep

    target = tmp_path / "target.gguf"
    target.write_bytes(tiny_pairs["high"][0].read_bytes())
    loads = []

    def loading(load):
        loads.append(load)
        if len(loads) == 2:
            target.write_bytes(target.read_bytes()[:5000])

    grid = Grid(ks=[2], ngls=[0, 1], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), n_predict=8)
    out = isolated / "results" / "bad.jsonl"
    run_sweep("bad", PairFiles(target, tiny_pairs["high"][1], "p"), grid, out, False, SweepEvents(loading=loading))
    records = stored(out)
    assert len(records) == 6
    ok, failed = records[:3], records[3:]
    assert all(r["error"] is None and r["config"]["ngl"] == 0 for r in ok)
    assert all(r["error"].startswith("model load failed") and r["config"]["ngl"] == 1 for r in failed)
    summary = summarize(to_frame(records))
    assert summary["failed"].sum() == 3


def passes(tiny_pairs, reps=(1, 2), loads_per="once"):
    """Two settings (-ngl 0, 1; a CPU build runs both on the CPU) through sweep.Measuring, one pass per entry of
    `reps` (-r auto's way: each pass the repetitions up to it, the earlier ones done): the records of each pass and
    the -ngl of each load."""
    from gguf_bench.measure.inputs.prompts import builtin
    from gguf_bench.measure.pair import PairFiles
    from gguf_bench.measure.plan import Grid
    from gguf_bench.measure.sweep import Measuring, SweepEvents

    loads = []
    events = SweepEvents(loading=lambda load: loads.append(load.ngl))
    grid = Grid(ks=[2], ngls=[0, 1], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), n_predict=8,
                loads=loads_per)
    measuring = Measuring("passes", PairFiles(*tiny_pairs["high"], "p"), grid, events)
    out, done = [], set()
    try:
        for n in reps:
            out.append(list(measuring.records(events, done, repetitions=n)))
            done |= {r.cell for r in out[-1]}
            assert measuring.loaded is not None
    finally:
        measuring.close()
    assert measuring.loaded is None
    return out, loads


def test_two_settings_loaded_side_by_side_take_turns_repetition_by_repetition(tiny_pairs):
    """Where the planner's figures hold both loads (tiny files): each loaded once, in all passes; repetition 0 is
    measured -ngl 0 then 1, repetition 1 (the next pass) -ngl 1 then 0 (A B | B A), every record saying so
    (Order.settings 'settings-alternate') with its own start and end, and each setting's positions counting on."""
    (first, second), loads = passes(tiny_pairs)
    assert loads == [0, 1]
    assert [r.config.ngl for r in first] == [0, 0, 0, 1, 1, 1] and [r.config.ngl for r in second] == [1, 1, 1, 0, 0, 0]
    records = first + second
    assert all(r.error is None and r.order.settings == "settings-alternate" for r in records)
    assert [r.config.repetition for r in records] == [0] * 6 + [1] * 6
    starts = [r.order.started for r in records]
    assert starts == sorted(starts) and all(r.order.started <= r.order.ended for r in records)
    assert [r.order.position for r in records if r.config.ngl == 0] == [0, 1, 2, 0, 1, 2]  # positions of each pass


def test_two_settings_that_cannot_be_held_at_once_alternate_in_chunks(tiny_pairs, monkeypatch):
    """Where the planner's figures do not hold both loads: one loaded at a time, repetition by repetition in the
    balanced order A B | B A | A B; the setting a repetition (or a pass) ends with starts the next, so three
    repetitions over two passes load 0, 1, 0, 1: four loads, not one per chunk (six)."""
    from gguf_bench.measure import capacity

    monkeypatch.setattr(capacity, "side_by_side", lambda files, loads, n_ctx, budget: False)
    (first, second), loads = passes(tiny_pairs, reps=(1, 3))
    assert loads == [0, 1, 0, 1]
    assert [(r.config.ngl, r.config.repetition) for r in first + second][::3] == [
        (0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    assert all(r.error is None and r.order.settings == "settings-chunks" for r in first + second)
    # --loads each (the default): every repetition meets fresh loads, the turn's setting too, in the same order
    (first, second), loads = passes(tiny_pairs, reps=(1, 3), loads_per="each")
    assert loads == [0, 1, 1, 0, 0, 1] and {r.order.loads for r in first + second} == {"each"}


def test_loads_each_loads_every_setting_again_for_each_repetition(tiny_pairs):
    """Side by side, --loads each: each repetition loads both settings afresh (A B | B A), so a repetition is one
    observation of each load's own speed; every record says so (Order.loads)."""
    (first, second), loads = passes(tiny_pairs, loads_per="each")
    assert loads == [0, 1, 1, 0]
    assert {r.order.loads for r in first + second} == {"each"} and len({r.order.invocation for r in first + second}) == 1


def test_sweep_r_auto_over_two_settings_keeps_them_taking_turns(tiny_pairs, isolated):
    """-r auto over -ngl 0,1: both loaded once (side by side) however many passes; each repetition, the first pass's
    and those the later passes select, measures one setting's cells then the other's, in the order its index says
    (even: -ngl 0 first, odd: -ngl 1 first), every record saying 'settings-alternate'."""
    result = runner.invoke(app, sweep_args(tiny_pairs["middle"], "auto2", "-K", "2", "-n", "8", "-ngl", "0,1", "-r",
                                           "auto", "--max-reps", "3", "--prompt-ids", "code-short", "--loads", "once"))
    assert result.exit_code == 0, result.output
    assert result.output.count("loading models with") == 2 and "-r auto: " in result.output
    records = stored(isolated / "results" / "auto2.jsonl")
    assert {r["order"]["settings"] for r in records} == {"settings-alternate"}
    for rep in sorted({r["config"]["repetition"] for r in records}):
        ngls = [r["config"]["ngl"] for r in records if r["config"]["repetition"] == rep]
        turns = list(dict.fromkeys(ngls))
        assert turns == ([0, 1] if rep % 2 == 0 else [1, 0])[:len(turns)], (rep, ngls)
        assert ngls == sorted(ngls, key=turns.index)  # one setting's cells of a repetition together


def test_sweep_r_auto_loads_its_one_setting_once(tiny_pairs, isolated):
    """However many passes -r auto takes, a one-setting sweep under --loads once loads the pair once, stops with its
    reason, and repeats only up to --max-reps."""
    result = runner.invoke(app, sweep_args(tiny_pairs["middle"], "auto", "-K", "1,2", "-n", "8", "-r", "auto",
                                           "--max-reps", "3", "--loads", "once"))
    assert result.exit_code == 0, result.output
    assert result.output.count("loading models with") == 1 and "-r auto: " in result.output
    reps = Counter(r["config"]["repetition"] for r in stored(isolated / "results" / "auto.jsonl"))
    assert reps[0] == reps[1] == 2 * 4 and set(reps) <= {0, 1, 2}  # 2 prompts x (target, draft, K=1, K=2)


def test_sweep_refuses_a_model_that_does_not_load_before_starting(tmp_path, tiny_pairs):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_pairs["high"][0].read_bytes()[:5000])
    result = runner.invoke(app, ["sweep", "--target", str(broken), "--draft", str(tiny_pairs["high"][1]),
                                 "--name", "bad", "-K", "2", "--prompt-ids", "code-short", "-n", "8"])
    assert result.exit_code == 1 and "could not read" in result.stderr


def test_report_formats_and_plot(tiny_pairs, isolated, tmp_path):
    assert runner.invoke(app, sweep_args(tiny_pairs["middle"], "r", "-K", "1,2,4")).exit_code == 0
    results = str(isolated / "results")
    table = runner.invoke(app, ["report", results])
    assert table.exit_code == 0 and "gain" in table.output and "target alone" in table.output
    md = runner.invoke(app, ["report", results, "--format", "md"])
    assert md.stdout.startswith("| model | GPU layers offload | tokens/s | gain % |")
    csv_path = tmp_path / "r.csv"
    assert runner.invoke(app, ["report", results, "--format", "csv", "-o", str(csv_path)]).exit_code == 0
    frame = pd.read_csv(csv_path)
    flagged = frame["unreliable"].astype("object").fillna("").str.contains("busy").any()  # busy: no star (test_trust)
    decided = frame["decided"].astype("object").eq(True) & frame["mode"].eq("speculative") & frame["gain_pct"].gt(0)
    assert set(frame["mode"]) == {"target", "draft", "speculative"}
    assert frame["best_k"].sum() == (1 if decided.any() and not flagged else 0)  # a star only on a decided gain
    if frame["best_k"].any():
        assert frame.loc[frame["best_k"], "tokens_per_s"].iloc[0] == frame.loc[decided, "tokens_per_s"].max()
    as_json = json.loads(runner.invoke(app, ["report", results, "--format", "json"]).stdout)
    assert len(as_json) == len(frame)
    lines = runner.invoke(app, ["report", results, "--format", "jsonl"]).stdout.splitlines()
    assert len(lines) == len(frame) and json.loads(lines[0])["pair"]
    png = tmp_path / "plot.png"
    plotted = runner.invoke(app, ["report", results, "--plot", str(png)])
    assert plotted.exit_code == 0, plotted.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(png).shape[0] > 100


def test_report_bad_input(tmp_path):
    assert runner.invoke(app, ["report", str(tmp_path / "none.jsonl")]).exit_code == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["report", str(empty)])
    assert result.exit_code == 1 and "no .jsonl results" in result.stderr
    bad_fmt = runner.invoke(app, ["report", str(empty), "--format", "xml"])
    assert bad_fmt.exit_code == 1 and "unknown --format" in bad_fmt.stderr


def test_sweep_bad_specs(tiny_pairs):
    result = runner.invoke(app, sweep_args(tiny_pairs["high"], "x", "-K", "0-2"))
    assert result.exit_code == 1 and "draft length -K/--draft-max must be >= 1, got 0" in result.stderr
    result = runner.invoke(app, sweep_args(tiny_pairs["high"], "x", "-ngl", "many"))
    assert result.exit_code == 1 and "bad -ngl value 'many'" in result.stderr
    result = runner.invoke(app, sweep_args(tiny_pairs["high"], "x", "-r", "3", "--max-reps", "5"))
    assert result.exit_code == 1 and "--max-reps: how far -r auto repeats; -r 3 is a fixed count" in result.stderr


def test_minus_one_means_all_layers_in_run_and_sweep(tiny_pairs, isolated):
    """`run -ngl -1` and `sweep -ngl -1,all` parse the same way: one setting, stored as 'all'."""
    swept = runner.invoke(app, sweep_args(tiny_pairs["high"], "m1", "-K", "2", "-ngl", "-1,all", "-ngld", "max",
                                          "--prompt-ids", "code-short", "-n", "6", "--no-draft-alone"))
    assert swept.exit_code == 0, swept.output
    records = stored(isolated / "results" / "m1.jsonl")
    assert len(records) == 2 and {(r["config"]["ngl"], r["config"]["ngld"]) for r in records} == {("all", "all")}
    ran = runner.invoke(app, ["run", "--target", str(tiny_pairs["high"][0]), "--draft", str(tiny_pairs["high"][1]),
                              "-ngl", "-1", "-ngld", "all", "-n", "6", "--json", "--name", "r1"])
    assert ran.exit_code == 0, ran.output
    assert {(r["config"]["ngl"], r["config"]["ngld"]) for r in json.loads(ran.stdout)} == {("all", "all")}
    assert len(stored(isolated / "results" / "r1.jsonl")) == 3  # run stores its records too


# --- whether speculation ran, and whether its gain can be told from zero (issue 49) ---------------


def proof_rec(mode, tps, k=0, rep=0, drafted=None, prompt="p1"):
    """A run that says what it drafted (a speculative run drafts unless told otherwise)."""
    r = rec(mode, tps, k=k, rep=rep, prompt=prompt)
    r["metrics"].update(n_tokens=64, drafted=(8 if mode == "speculative" else 0) if drafted is None else drafted)
    r["models"]["target"]["path"] = r["models"]["draft"]["path"] = "/models/x.gguf"
    return r


def deploy_headline(records) -> str:
    from gguf_bench.measure import deploy
    from gguf_bench.results.presentation import answer
    from gguf_bench.results.schema.records import parse

    df = to_frame(records)
    runs = [parse(r) for r in records]
    return answer.lines(deploy.with_deploy(summarize(df), df, runs))[0][0]


def test_a_gain_the_repetitions_cannot_tell_from_zero_is_marked_and_not_deployed():
    """Runs not interleaved (no order stored): Welch's test on three runs each, its 95% interval corrected for the two
    rows: K=2 (+3%, within the noise) is shown as '~+3.3% [...]' and not recommended; K=4 (+33%, far outside it) is
    the deploy line, with its interval."""
    alone = [proof_rec("target", v, rep=i) for i, v in enumerate((29.0, 31.0, 30.0))]
    noise = [proof_rec("speculative", v, k=2, rep=i) for i, v in enumerate((28.0, 33.0, 32.0))]
    real = [proof_rec("speculative", v, k=4, rep=i) for i, v in enumerate((40.0, 39.5, 40.5))]
    s = summarize(to_frame(alone + noise + real)).set_index(["mode", "k"])
    assert s.loc[("speculative", 2), "gain_p"] > 0.05 and s.loc[("speculative", 4), "gain_p"] < 0.05
    from gguf_bench.results.presentation.report import _gain_text, proof_lines
    rows = s.reset_index()
    assert [_gain_text(r) for _, r in rows[rows["mode"] == "speculative"].iterrows()] == ["~+3.3% [-23,+29]",
                                                                                         "+33.3% [+24,+42]"]
    assert any(line.startswith("~ not decided") for line in proof_lines(rows))
    assert any("Welch's test" in line and "2 rows" in line for line in proof_lines(rows))
    assert deploy_headline(alone + noise + real).startswith("deploy P: K=4 (40.00 tokens/s, gain +33.3% [+24,+42] from one")
    # the noise alone: the target alone is the line, and it says why
    assert deploy_headline(alone + noise).startswith("deploy P: no speculation (30.00 tokens/s; the fastest speculative "
                                                     "row, K=2 at 31.00 tokens/s, +3.3% [-")


def test_one_run_each_gets_no_test_and_no_recommendation():
    """With one repetition no test is possible: the gain is shown, the caption and the deploy line say so."""
    records = [proof_rec("target", 28.0), proof_rec("speculative", 33.0, k=4)]
    s = summarize(to_frame(records))
    assert s["gain_p"].isna().all()
    from gguf_bench.results.presentation.report import proof_lines
    assert any("fewer than 2 runs of each side" in line for line in proof_lines(s))
    headline = deploy_headline(records)
    assert "no speculation" in headline and "+17.9%, comes from fewer than 2 pairs" in headline and "-r 2" in headline


def test_a_row_that_drafted_nothing_is_no_gain_no_best_k_and_no_deploy_line():
    """K=4 drafted no token in any run (and was fastest, by chance): 'no drafts' with its reason, no gain, no ★;
    K=2 drafted and gained, so it is the best K and the deploy line."""
    alone = [proof_rec("target", v, rep=i) for i, v in enumerate((29.0, 31.0, 30.0))]
    k2 = [proof_rec("speculative", v, k=2, rep=i) for i, v in enumerate((36.0, 35.5, 36.5))]
    k4 = [proof_rec("speculative", v, k=4, rep=i, drafted=0) for i, v in enumerate((40.0, 39.5, 40.5))]
    for r in k4:
        r["metrics"]["no_drafts"] = "the prompt is short"
    s = summarize(to_frame(alone + k2 + k4)).set_index(["mode", "k"])
    assert s.loc[("speculative", 4), "no_drafts"] == "the prompt is short"
    assert pd.isna(s.loc[("speculative", 4), "gain_pct"]) and not s.loc[("speculative", 4), "best_k"]
    assert s.loc[("speculative", 2), "best_k"]
    from gguf_bench.results.presentation.report import proof_lines
    assert "no drafts: K=4 drafted no token, so it measured the target alone: the prompt is short" in proof_lines(
        s.reset_index())
    assert deploy_headline(alone + k2 + k4).startswith("deploy P: K=2 (36.00 tokens/s, gain +20.0% [+11,+29] from one")


def test_server_greedy_text_says_where_it_parts_from_its_target_alone():
    """A greedy llama-server speculative run whose text parted from its own target alone's: the line names the run,
    the prompt and the token (the record's identity); where all agree, one line says so."""
    from gguf_bench.results.presentation.report import server_greedy_lines

    records = [proof_rec("target", 30.0), proof_rec("speculative", 33.0, k=2), proof_rec("speculative", 34.0, k=4)]
    for r in records:
        r["config"]["engine"] = "server"
    records[1]["metrics"]["identity"] = {"identical": True}
    records[2]["metrics"]["identity"] = {"identical": False, "position": 12}
    assert server_greedy_lines(to_frame(records)) == ["greedy text: llama-server K=4 on p1 parts from its target "
                                                      "alone at token 12"]
    records[2]["metrics"]["identity"] = {"identical": True}
    assert server_greedy_lines(to_frame(records)) == ["greedy text: every llama-server speculative run (2) equals "
                                                      "its target alone's"]
