"""What a pair is (issue 62): a speculative run and the target alone of its own block in its own sweep; busy runs left
out with their pairs, never a whole row; the deploy line's advantage over another setting's target alone, paired where
the two settings' runs took turns. Bookkeeping over records written here (no model)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gguf_bench.measure import deploy
from gguf_bench.measure.repeat import undecided
from gguf_bench.measure.trackers.load import LoadTracker, machine_steal_s
from gguf_bench.results.presentation import answer
from gguf_bench.results.presentation.report import left_out_lines
from gguf_bench.results.presentation.summary import gain_decided, load, summarize, to_frame
from gguf_bench.results.schema.parts.machine_load import Load
from gguf_bench.results.schema.records import parse

T0 = 1_800_000_000.0


def rec(mode, tps, k=0, rep=0, prompt="p1", ngl=0, t=0.0, sweep="s", busy=False, settings=None, design="shuffled",
        threads=None, steal=None):
    r = {"pair": "P", "mode": mode, "error": None, "sweep": sweep, "cell": f"{mode}-{k}-{ngl}-{prompt}-{rep}",
         "config": {"k": k, "ngl": ngl, "ngld": 0, "temperature": 0.0, "n_predict": 64, "prompt_id": prompt,
                    "repetition": rep, "threads": threads},
         "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "acceptance": 0.8, "n_tokens": 64,
                     "drafted": 8 if mode == "speculative" else 0},
         "offload": {"target": f"{ngl}/19", "draft": "0/19"},
         "models": {"target": {"file": "t.gguf", "path": "/m/t.gguf"}, "draft": {"file": "d.gguf", "path": "/m/d.gguf"}}}
    if design:
        r["order"] = {"design": design, "position": 0, "started": T0 + t, "settings": settings}
    if busy or steal is not None:
        r["load"] = {"wall_s": 1.0, "others_cpu_s": 1.5 if busy else 0.0, "cpu_count": 2, "steal_s": steal}
    return r


def grid(alone, gains, ngl=0, sweep="s", start=0.0, busy=(), **kw):
    """Per repetition a block: the target alone at alone[rep], each K at alone[rep] * (1 + gains[k][rep]); `busy`: the
    (mode, rep) runs measured on a busy machine."""
    out, t = [], start
    for rep, a in enumerate(alone):
        out.append(rec("target", a, rep=rep, ngl=ngl, t=t, sweep=sweep, busy=("target", rep) in busy, **kw))
        for k, g in gains.items():
            t += 1
            out.append(rec("speculative", a * (1 + g[rep % len(g)]), k=k, rep=rep, ngl=ngl, t=t, sweep=sweep,
                           busy=("speculative", rep) in busy, **kw))
        t += 1
    return out


def spec_row(summary, k=4, ngl="0"):
    return summary[(summary["mode"] == "speculative") & (summary["k"] == k) & (summary["ngl"] == ngl)].iloc[0]


def alone_row(summary, ngl="0"):
    return summary[(summary["mode"] == "target") & (summary["ngl"] == ngl)].iloc[0]


ALONE = [20.0, 26.0, 17.0, 23.0]  # the machine moves between blocks; the ratios are what the pairs see
GAIN = {4: [0.05, 0.25, -0.02, 0.30]}  # about +14%, scattered: undecided from 4 pairs


# --- 1. pairs never leave their sweep ----------------------------------------------------------------------------


def test_two_sweeps_of_one_grid_add_their_pairs():
    one = summarize(to_frame(grid(ALONE, GAIN)))
    two = summarize(to_frame(grid(ALONE, GAIN) + grid(ALONE, GAIN, sweep="again", start=100)))
    assert spec_row(one)["gain_pairs"] == 4 and spec_row(two)["gain_pairs"] == 8  # a sum, not 16
    assert spec_row(one)["sweeps"] == 1 and spec_row(two)["sweeps"] == 2
    assert spec_row(two)["gain_pct"] == pytest.approx(spec_row(one)["gain_pct"])


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def report_of(paths, tmp_path):
    loaded = load(paths, tmp_path)
    return summarize(to_frame(loaded.runs, loaded.sources))


def test_a_file_beside_a_copy_of_itself(tmp_path):
    """The same file twice (an exact copy) reads as the file alone; under another sweep name it is another sweep: the
    sum of the pairs, and the rows say 2 sweeps. Before, both turned 4 pairs into 16 and decided a scattered +14%."""
    records = grid(ALONE, GAIN)
    alone = report_of([write(tmp_path / "a.jsonl", records)], tmp_path)
    copy = report_of([tmp_path / "a.jsonl", write(tmp_path / "copy.jsonl", records)], tmp_path)
    cols = ["runs", "gain_pct", "gain_lo", "gain_hi", "gain_pairs", "gain_family", "decided", "sweeps"]
    assert copy[cols].equals(alone[cols])
    assert spec_row(alone)["gain_pairs"] == 4 and gain_decided(spec_row(alone)) is False
    renamed = report_of([tmp_path / "a.jsonl", write(tmp_path / "b.jsonl", [r | {"sweep": "b"} for r in records])],
                        tmp_path)
    row = spec_row(renamed)
    assert row["gain_pairs"] == 8 and row["sweeps"] == 2 and row["runs"] == 8
    assert any("pool up to 2 sweeps" in line for line in left_out_lines(renamed))
    assert not any("sweeps" in line for line in left_out_lines(alone))
    # the same name in two files (two machines' results of one sweep): two sweeps as well
    other_file = report_of([tmp_path / "a.jsonl", write(tmp_path / "c.jsonl", [r | {"cell": r["cell"] + "x"}
                                                                                 for r in records])], tmp_path)
    assert spec_row(other_file)["gain_pairs"] == 8 and spec_row(other_file)["sweeps"] == 2


def test_settings_that_differ_only_in_threads_context_or_sampling_keep_their_rows():
    four = grid(ALONE, GAIN, threads=4)
    eight = grid([2 * a for a in ALONE], GAIN, threads=8, sweep="t8", start=100)
    summary = summarize(to_frame(four + eight))
    assert len(summary[summary["mode"] == "target"]) == 2 and set(summary["threads"]) == {4, 8}
    assert (summary[summary["mode"] == "speculative"]["gain_pairs"] == 4).all()
    old = grid(ALONE, GAIN) + grid(ALONE, GAIN, sweep="again", start=100)  # no threads stored: None equals None
    assert len(summarize(to_frame(old))) == 2
    sampled = [r | {"config": r["config"] | {"top_k": 40}} for r in grid(ALONE, GAIN, sweep="k40")]
    assert len(summarize(to_frame(grid(ALONE, GAIN) + sampled))) == 4


# --- 2. busy never hides a row -----------------------------------------------------------------------------------


STEADY = [20.0, 20.5, 19.5, 20.2]
PLUS40 = {4: [0.40, 0.42, 0.38, 0.41]}


def test_a_busy_run_is_left_out_with_its_pair_and_the_row_keeps_the_others():
    summary = summarize(to_frame(grid(STEADY, PLUS40, busy={("target", 0)})))
    row = spec_row(summary)
    assert row["gain_pairs"] == 3 and row["unreliable"] == "" and gain_decided(row) is True
    assert alone_row(summary)["busy_runs"] == 1 and alone_row(summary)["unreliable"] == ""
    assert alone_row(summary)["tokens_per_s"] == pytest.approx(np.mean(STEADY[1:]))  # the busy run's speed left out
    [line] = [ln for ln in left_out_lines(summary) if "left out" in ln]
    assert line.startswith("1 of 8 runs left out: busy (others used 1.5 of 2 cores"), line
    # three of four blocks busy: one good pair is no interval; the row is unreliable until measured again
    summary = summarize(to_frame(grid(STEADY, PLUS40, busy={("target", 0), ("speculative", 1), ("target", 2)})))
    row = spec_row(summary)
    assert row["gain_pairs"] == 1 and "busy" in row["unreliable"] and gain_decided(row) is not True
    assert pd.notna(row["gain_pct"]) and pd.notna(row["tokens_per_s"])  # shown, not hidden


def test_auto_measures_again_the_rows_busy_runs_left_without_good_pairs():
    records = grid(STEADY[:2], {4: [0.40, 0.42]}, busy={("speculative", 1)})
    open_ = undecided([parse(r) for r in records])
    assert {(r["mode"], r["k"]) for r in open_.rows} >= {("speculative", 4), ("target", 0)}
    assert any("busy" in why for why in open_.why)


def test_a_faster_setting_with_some_busy_runs_is_still_deployed():
    """-ngl 99's target alone runs at 3x -ngl 0's; one of its four runs was busy. Before, the whole row was dropped
    and the slow -ngl 0 K=4 deployed; now the busy run is left out and -ngl 99 is the line."""
    slow = grid(STEADY, PLUS40)
    fast = grid([60.0, 60.5, 59.8, 60.2], {}, ngl=99, start=100, busy={("target", 2)})
    records = slow + fast
    df = to_frame(records)
    summary = deploy.with_deploy(summarize(df), df, [parse(r) for r in records])
    [chosen] = [r for _, r in summary.iterrows() if r["deploy"]]
    assert (chosen["ngl"], chosen["mode"]) == ("99", "target")


def test_a_fastest_setting_measured_busy_decides_nothing_across_it():
    slow = grid(STEADY, PLUS40)
    fast = grid([60.0, 60.5, 59.8, 60.2], {}, ngl=99, start=100, busy={("target", 0), ("target", 1), ("target", 2)})
    records = slow + fast
    df = to_frame(records)
    summary = deploy.with_deploy(summarize(df), df, [parse(r) for r in records])
    assert not summary["deploy"].notna().any()
    [(head, command)] = answer.lines(summary)
    assert command == ""
    assert head.startswith("deploy P: none yet: the fastest measured setting, -ngl 99 target alone at 60.2 tokens/s, "
                           "was measured on a busy machine"), head
    assert head.endswith("measure it again (-r auto)")


def test_steal_time_counts_as_busy():
    quiet = summarize(to_frame(grid(STEADY, PLUS40, steal=0.01)))
    assert (quiet["busy_runs"] == 0).all()
    stolen = [r | {"load": {**r["load"], "steal_s": 0.2}} if r["config"]["repetition"] == 0 else r
              for r in grid(STEADY, PLUS40, steal=0.0)]
    summary = summarize(to_frame(stolen))
    assert spec_row(summary)["gain_pairs"] == 3 and alone_row(summary)["busy_runs"] == 1
    assert "steal" in " ".join(left_out_lines(summary))
    assert Load(wall_s=2.0, steal_s=0.5).steal_cores == 0.25 and Load().steal_cores is None


def test_the_load_tracker_measures_steal_where_linux_reports_it():
    with LoadTracker() as tracked:
        sum(range(10000))
    assert (tracked.load.steal_s is None) == (machine_steal_s() is None)
    if tracked.load.steal_s is not None:
        assert tracked.load.steal_s >= 0.0


# --- 3. the deploy line's advantage over another setting -----------------------------------------------------------


def two_settings(settings, sweeps=("s", "s")):
    """-ngl 0: K=8 gains +60% over a target alone at 20; -ngl 99: the target alone at 27 (+/- the block's drift)."""
    drift = [1.0, 1.3, 0.8, 1.15, 0.9, 1.2]
    out = []
    for rep, d in enumerate(drift):
        t = 10.0 * rep
        out.append(rec("target", 20 * d, rep=rep, t=t, sweep=sweeps[0], settings=settings))
        out.append(rec("speculative", 20 * d * (1.6 + 0.01 * (rep % 3)), k=8, rep=rep, t=t + 1, sweep=sweeps[0],
                       settings=settings))
        out.append(rec("target", 27 * d * (1 + 0.01 * (rep % 2)), rep=rep, ngl=99, t=t + 2, sweep=sweeps[1],
                       settings=settings))
    return out


def deployed(records):
    df = to_frame(records)
    summary = deploy.with_deploy(summarize(df), df, [parse(r) for r in records])
    return summary, answer.lines(summary)


def test_the_advantage_over_another_settings_target_alone_is_paired_when_their_runs_took_turns():
    summary, [(head, _)] = deployed(two_settings("settings-alternate"))
    row = spec_row(summary, 8)
    assert row["over_test"] == "paired" and row["over_pairs"] == 6 and row["over_decided"] == True  # noqa: E712
    assert row["over_lo"] > 10 and row["over_pct"] == pytest.approx(100 * (np.exp(np.mean(np.log(
        [1.6 * 20 / 27, 1.61 * 20 / 27.27, 1.62 * 20 / 27, 1.6 * 20 / 27.27, 1.61 * 20 / 27, 1.62 * 20 / 27.27]))) - 1))
    assert row["gain_family"] == 2  # its gain over its own target alone, and over -ngl 99's: two comparisons
    assert "K=8" in head and "over -ngl 99 alone" in head and "unpaired" not in head, head
    assert f"{row['over_pct']:+.0f}% [{row['over_lo']:+.0f},{row['over_hi']:+.0f}] over -ngl 99 alone" in head


def test_measured_apart_the_advantage_is_welchs_and_says_so():
    """The same speeds with no turns between the settings (an older sweep, or two sweeps): the drift between blocks
    is in both rows' runs, so Welch's interval is wide and it says that the rows were measured apart."""
    for records in (two_settings(None), two_settings("settings-alternate", sweeps=("s", "other"))):
        summary, lines = deployed(records)
        row = spec_row(summary, 8)
        assert row["over_test"] == "unpaired" and row["over_hi"] - row["over_lo"] > 20
        heads = " ".join(head for head, _ in lines)
        if row["over_decided"]:
            assert "(unpaired: measured apart)" in heads, heads
        else:
            assert "no speculation" in heads and [r["ngl"] for _, r in summary.iterrows() if r["deploy"]] == ["99"]


def alone_settings(ratio_by_rep, settings="settings-alternate"):
    """Two settings' targets alone and a K=4 that loses at both: -ngl 0 at 20 (times the block's drift), -ngl 99 at
    20 * ratio_by_rep[rep], taking turns (the answer is a target alone: which one?)."""
    drift = [1.0, 1.3, 0.8, 1.15, 0.9, 1.2]
    out = []
    for rep, d in enumerate(drift):
        for ngl, speed in ((0, 20 * d), (99, 20 * d * ratio_by_rep[rep % len(ratio_by_rep)])):
            t = 10.0 * rep + (2 if ngl else 0)
            out.append(rec("target", speed, rep=rep, ngl=ngl, t=t, settings=settings))
            out.append(rec("speculative", speed * (0.5 + 0.01 * (rep % 3)), k=4, rep=rep, ngl=ngl, t=t + 1,
                           settings=settings))  # a ratio that varies: one of zero width decides nothing
    return out


def test_a_target_alone_deployed_over_another_settings_says_its_paired_advantage():
    summary, [(head, _)] = deployed(alone_settings([1.30, 1.31, 1.29]))
    assert head.startswith("deploy P: no speculation (") and "+30% [" in head and "over -ngl 0 alone)" in head, head
    assert [r["ngl"] for _, r in summary.iterrows() if r["deploy"]] == ["99"]


def test_two_targets_alone_not_told_apart_say_so_and_auto_measures_them_again():
    records = alone_settings([1.10, 0.92, 1.06, 0.97])
    _, [(head, _)] = deployed(records)
    assert "over -ngl 0 alone, not told apart" in head, head
    open_ = undecided([parse(r) for r in records])
    assert open_.why == ["-ngl 99 target alone against -ngl 0 target alone"], open_.why
    assert sorted((r["mode"], str(r["ngl"])) for r in open_.rows) == [("target", "0"), ("target", "99")]


def test_settings_held_side_by_side_take_turns_block_by_block():
    """plan.interleaved(by_block=True): A B | B A per prompt and repetition, so no two pairs share their order."""
    from gguf_bench.measure.inputs.prompts import builtin
    from gguf_bench.measure.plan import Cell, Unit, interleaved
    from gguf_bench.results.schema.records import Mode

    prompts = builtin(["code-short", "chat-short"])
    cells = [Cell(Mode.TARGET, 0, 0.0, p, rep) for rep in range(2) for p in prompts]
    units = [Unit(name, cells) for name in ("A", "B")]
    order = [(u.setting, u.cells[0].prompt.id, u.cells[0].repetition) for u in interleaved(units, by_block=True)]
    assert order == [("A", "code-short", 0), ("B", "code-short", 0), ("B", "chat-short", 0), ("A", "chat-short", 0),
                     ("B", "code-short", 1), ("A", "code-short", 1), ("A", "chat-short", 1), ("B", "chat-short", 1)]
    assert all(len(u.cells) == 1 for u in interleaved(units, by_block=True))
