"""Verdicts that hold (issue 55): paired gains with corrected intervals, a drift monitor, the order runs are measured
in, the deploy line as the fastest measured setting, and -r auto's choice of cells. Bookkeeping over records written
here (the engines' real runs are in test_sweep_report, test_server and test_trust)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gguf_bench.measure import deploy
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Cell, Unit, auto_looks, counterbalanced, shuffled
from gguf_bench.measure.repeat import undecided
from gguf_bench.results.presentation import answer
from gguf_bench.results.presentation.report import drift_lines, proof_lines
from gguf_bench.results.presentation.summary import gain_decided, summarize, to_frame
from gguf_bench.results.schema.records import Mode, parse

T0 = 1_800_000_000.0


def rec(mode, tps, k=0, rep=0, prompt="p1", ngl=0, t=None, design="shuffled", busy=False):
    """A run of the Python loop; `design` None: a file written before runs were interleaved."""
    r = {"pair": "P", "mode": mode, "error": None,
         "config": {"k": k, "ngl": ngl, "ngld": 0, "temperature": 0.0, "n_predict": 64, "prompt_id": prompt,
                    "repetition": rep},
         "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "acceptance": 0.8, "n_tokens": 64,
                     "drafted": 8 if mode == "speculative" else 0},
         "offload": {"target": f"{ngl}/19", "draft": "0/19"},
         "models": {"target": {"file": "t.gguf", "path": "/m/t.gguf"}, "draft": {"file": "d.gguf", "path": "/m/d.gguf"}}}
    if design:
        r["order"] = {"design": design, "position": 0, "started": T0 + (t if t is not None else 10 * rep)}
    if busy:
        r["load"] = {"wall_s": 1.0, "others_cpu_s": 1.5, "cpu_count": 2}
    return r


def interleaved(alone, gains: dict[int, list[float]], prompts=("p1",), ngl=0, start=0.0, design="shuffled"):
    """Per repetition a block: the target alone at alone[rep], each K at alone[rep] * (1 + gain)."""
    out, t = [], start
    for rep, a in enumerate(alone):
        for p in prompts:
            out.append(rec("target", a, rep=rep, prompt=p, ngl=ngl, t=t, design=design))
            for k, g in gains.items():
                t += 1
                out.append(rec("speculative", a * (1 + g[rep % len(g)]), k=k, rep=rep, prompt=p, ngl=ngl, t=t,
                               design=design))
            t += 1
    return out


def spec_row(summary, k, ngl="0"):
    return summary[(summary["mode"] == "speculative") & (summary["k"] == k) & (summary["ngl"] == ngl)].iloc[0]


def test_a_paired_gain_is_the_geometric_mean_of_the_ratios_with_its_interval():
    records = interleaved([20.0, 18.0, 22.0, 19.0], {2: [0.1, 0.12, 0.11, 0.1], 4: [0.30, 0.34, 0.32, 0.28]})
    row = spec_row(summarize(to_frame(records)), 4)
    ratios = np.array([1.30, 1.34, 1.32, 1.28])
    assert row["gain_test"] == "paired" and row["gain_pairs"] == 4
    assert row["gain_pct"] == pytest.approx(100 * (np.exp(np.log(ratios).mean()) - 1))
    assert row["gain_lo"] < row["gain_pct"] < row["gain_hi"] and row["gain_lo"] > 20 and row["gain_hi"] < 40
    assert gain_decided(row) is True and row["best_k"]


def test_a_drift_the_pairs_cancel_would_decide_a_false_gain_unpaired():
    """The machine slows by half during the sweep; K=4 is as fast as the target alone in every block. Paired: no
    gain, nothing decided; the same runs measured all target first (no pairing), the drift names itself and the
    unpaired verdict is not decided either."""
    alone = [30.0, 28.0, 26.0, 24.0, 22.0, 20.0, 18.0, 16.0]
    paired = summarize(to_frame(interleaved(alone, {4: [0.0, 0.01, -0.01]})))
    row = spec_row(paired, 4)
    assert abs(row["gain_pct"]) < 1.5 and gain_decided(row) is False and not row["best_k"]
    grouped = ([rec("target", a, rep=i, t=i, design=None) for i, a in enumerate(alone)]
               + [rec("speculative", a * 0.6, k=4, rep=i, t=100 + i, design=None) for i, a in enumerate(alone)])
    timed = to_frame(grouped).assign(started=[T0 + i for i in range(8)] + [T0 + 100 + i for i in range(8)])
    unpaired = summarize(timed)
    assert spec_row(unpaired, 4)["gain_test"] == "unpaired"
    assert gain_decided(spec_row(unpaired, 4)) is not True
    [line] = drift_lines(paired)
    assert line.startswith("drift: the target alone moved -41.4% from the first to the last quarter of its 8 runs")
    assert line.endswith("the paired gains cancel a slow drift")


def test_a_drift_that_spreads_paired_runs_still_stars_the_decided_best_k():
    """The machine slows by half across the blocks: every row's runs spread (flagged 'spread'), but each block's K=4 is
    30% over its own target alone. The paired interval decides it, so the star goes where the deploy line goes; the
    same spread in unpaired runs (an older file) withholds it (test_trust)."""
    alone = [30.0, 26.0, 22.0, 18.0, 15.0]
    summary = summarize(to_frame(interleaved(alone, {2: [0.10, 0.12, 0.11], 4: [0.30, 0.32, 0.29]})))
    row = spec_row(summary, 4)
    assert "spread" in row["unreliable"] and row["gain_test"] == "paired" and gain_decided(row) is True
    assert row["best_k"] and summary["best_k"].sum() == 1


def test_the_interval_widens_with_the_rows_that_compete():
    """The same K=4 runs beside 1 and beside 7 other K's: the family correction widens its interval."""
    alone = [20.0, 21.0, 19.0]
    g = [0.10, 0.02, 0.14]
    alone_one = summarize(to_frame(interleaved(alone, {4: g})))
    many = summarize(to_frame(interleaved(alone, {k: g for k in (1, 2, 3, 4, 5, 6, 7, 8)})))
    one, eight = spec_row(alone_one, 4), spec_row(many, 4)
    assert one["gain_family"] == 1 and eight["gain_family"] == 8
    assert eight["gain_hi"] - eight["gain_lo"] > one["gain_hi"] - one["gain_lo"]
    assert "corrected for 8 rows" in " ".join(proof_lines(many))


def test_a_busy_target_alone_leaves_out_its_pair_and_decides_nothing_without_two_good_pairs():
    """Issue 62: a busy run is left out with its pair (the row keeps the others); only a row left fewer than 2 good
    pairs is unreliable."""
    records = interleaved([20.0, 20.5, 19.5, 20.0], {4: [0.4, 0.42, 0.38, 0.41]})
    records[0] = rec("target", 20.0, rep=0, t=0, busy=True)
    row = spec_row(summarize(to_frame(records)), 4)
    assert row["gain_pairs"] == 3 and row["gain_lo"] > 0 and gain_decided(row) is True and row["unreliable"] == ""
    for i in (2, 4):  # the target alone of repetitions 1 and 2 busy too: one good pair
        records[i] = rec("target", records[i]["metrics"]["tokens_per_s"], rep=i // 2, t=records[i]["order"]["started"] - T0,
                         busy=True)
    row = spec_row(summarize(to_frame(records)), 4)
    assert row["gain_pairs"] == 1 and "busy" in row["unreliable"] and gain_decided(row) is not True


def test_the_deploy_line_is_the_fastest_measured_setting():
    """-ngl 0: K=8 gains +48%, at 37 tokens/s; -ngl 99: the target alone runs at 76 tokens/s and K=8 gains +10%. The
    deploy line is -ngl 99 K=8; where that +10% is not decided, the -ngl 99 target alone, never -ngl 0's K=8."""
    slow = interleaved([25.0, 25.5, 24.5, 25.2], {8: [0.48, 0.50, 0.46, 0.49]})
    fast_decided = interleaved([76.0, 75.5, 76.5, 75.8], {8: [0.10, 0.11, 0.09, 0.10]}, ngl=99, start=100)
    fast_open = interleaved([76.0, 75.5, 76.5, 75.8], {8: [0.30, -0.08, 0.25, -0.05]}, ngl=99, start=100)
    for fast, want in ((fast_decided, ("99", "speculative")), (fast_open, ("99", "target"))):
        records = slow + fast
        df = to_frame(records)
        summary = deploy.with_deploy(summarize(df), df, [parse(r) for r in records])
        [chosen] = [r for _, r in summary.iterrows() if r["deploy"]]
        assert (chosen["ngl"], chosen["mode"]) == want
        assert chosen["tokens_per_s"] >= summary[summary["mode"] == "target"]["tokens_per_s"].max()
        assert "-ngl 99" in chosen["deploy"]
        [(head, _)] = answer.lines(summary)
        assert ("no speculation" in head) == (want[1] == "target"), head


def test_a_aa_pair_is_no_difference_in_at_least_19_of_20_simulated_sweeps():
    """A/A: an n-gram row that drafts nothing useful, as fast as the target alone (noise 4%, a drift of 15% over the
    sweep, 2 prompts x 4 repetitions, interleaved); 20 sweeps with fixed seeds, K=1..4 beside it (a family of 4)."""
    rng = np.random.default_rng(55)
    false_decisions = 0
    for _ in range(20):
        drift = np.linspace(1.0, 0.85, 4)
        records = []
        for rep in range(4):
            for p, base in (("p1", 30.0), ("p2", 20.0)):
                records.append(rec("target", base * drift[rep] * rng.lognormal(0, 0.04), rep=rep, prompt=p))
                for k in (1, 2, 3, 4):
                    records.append(rec("speculative", base * drift[rep] * rng.lognormal(0, 0.04), k=k, rep=rep,
                                       prompt=p))
        summary = summarize(to_frame(records))
        false_decisions += int(any(gain_decided(r) is True for _, r in summary[summary["mode"] == "speculative"].iterrows()))
    assert false_decisions <= 1


def test_old_files_still_report_unpaired_and_say_so():
    records = [rec("target", v, rep=i, design=None) for i, v in enumerate((10.0, 11.0, 10.5))] + [
        rec("speculative", v, k=4, rep=i, design=None) for i, v in enumerate((14.0, 15.0, 14.5))]
    summary = summarize(to_frame(records))
    row = spec_row(summary, 4)
    assert row["gain_test"] == "unpaired" and row["gain_pct"] == pytest.approx(100 * (14.5 / 10.5 - 1))
    assert gain_decided(row) is True
    assert any("Welch's test (runs not interleaved" in line for line in proof_lines(summary))


# --- the order runs are measured in ------------------------------------------------------------------------------


def cells(reps=4, ks=(2, 4), prompts=("a", "b")):
    out = []
    for p in prompts:
        for rep in range(reps):
            out.append(Cell(Mode.TARGET, 0, 0.0, Prompt(p, "text"), rep))
            out += [Cell(Mode.SPECULATIVE, k, 0.0, Prompt(p, "text"), rep) for k in ks]
    return out


def test_shuffled_blocks_are_seeded_and_no_cell_is_always_first():
    order = shuffled(cells(reps=8), seed=3)
    assert order == shuffled(cells(reps=8), seed=3) and order != shuffled(cells(reps=8), seed=4)
    firsts = [order[i] for i in range(0, len(order), 3)]
    assert {(c.mode, c.k) for c in firsts} == {(Mode.TARGET, 0), (Mode.SPECULATIVE, 2), (Mode.SPECULATIVE, 4)}
    blocks = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert all(len({(c.prompt.id, c.repetition) for c in b}) == 1 for b in blocks)  # a block stays together
    # no cell forced first (the greedy reference is made untimed where missing): the first block's leader varies by seed
    assert {shuffled(cells(reps=1), seed)[0].mode for seed in range(12)} == {Mode.TARGET, Mode.SPECULATIVE}
    # a block's order is its own (seed and block key): the same whether measured in one pass or repetition by repetition
    # (-r auto's passes, interleaved settings), so a later pass does not repeat the first pass's orders
    by_rep = [c for rep in range(8) for c in shuffled([c for c in cells(reps=8) if c.repetition == rep], seed=3)]
    assert sorted(by_rep, key=lambda c: (c.prompt.id, c.repetition)) == sorted(order, key=lambda c: (c.prompt.id,
                                                                                                    c.repetition))
    assert [(c.prompt.id, c.repetition, c.k) for c in by_rep if c.prompt.id == "a"] == [
        (c.prompt.id, c.repetition, c.k) for c in order if c.prompt.id == "a"]


def test_counterbalanced_blocks_switch_at_least_four_times_in_a_b_b_a_order():
    order = counterbalanced(cells(reps=4, ks=(4,), prompts=("a",)), lambda c: (c.mode, c.k))
    sides = ["A" if c.mode == Mode.TARGET else "B" for c in order]
    assert "".join(sides) == "ABBAABBA"
    switches = sum(a != b for a, b in zip(sides, sides[1:]))
    assert switches >= 3 and order[0].mode == Mode.TARGET
    assert sorted((c.mode, c.repetition) for c in order) == sorted((c.mode, c.repetition)
                                                                 for c in cells(reps=4, ks=(4,), prompts=("a",)))


def test_counterbalanced_alternates_one_repetition_chunks_for_any_r_and_across_auto_passes():
    """-r 6: six one-repetition chunks A B | B A | A B | B A | A B | B A (not 2,1,2,1); -r auto's one-repetition passes
    go on from the repetition's own index (pass of rep 2: A B, of rep 3: B A), so their sequence is balanced too."""
    def sides(order):
        return "".join("A" if c.mode == Mode.TARGET else "B" for c in order)

    group = lambda c: (c.mode, c.k)  # noqa: E731
    assert sides(counterbalanced(cells(reps=6, ks=(4,), prompts=("a",)), group)) == "ABBAABBAABBA"
    assert sides(counterbalanced(cells(reps=3, ks=(4,), prompts=("a", "b")), group)) == "AABBBBAAAABB"
    passes = [counterbalanced([c for c in cells(reps=5, ks=(4,), prompts=("a",)) if c.repetition == rep], group)
              for rep in range(5)]
    assert "".join(map(sides, passes)) == "ABBAABBAAB"


def test_interleaved_settings_take_turns_one_repetition_at_a_time():
    """Two settings (-ngl 0 and 1): each repetition's cells of one setting together, A B | B A | A B; a later pass's
    repetitions (or a resumed sweep's) go on in the same balanced order; one setting is left as it is."""
    from pathlib import Path

    from gguf_bench.measure.pair import PairFiles
    from gguf_bench.measure.plan import Grid, expand
    from gguf_bench.measure.plan import interleaved as in_turn

    grid = Grid(ks=[2], ngls=[0, 1], nglds=[0], temperatures=[0.0], prompts=[Prompt("a", "x")], repetitions=3)
    units = expand(PairFiles(Path("t.gguf"), Path("d.gguf"), "P"), grid, {}).units
    turns = in_turn(units)
    assert [(u.setting.load.ngl, {c.repetition for c in u.cells}) for u in turns] == [
        (0, {0}), (1, {0}), (1, {1}), (0, {1}), (0, {2}), (1, {2})]
    assert sorted(map(id, (c for u in turns for c in u.cells))) == sorted(map(id, (c for u in units for c in u.cells)))
    later = [Unit(u.setting, [c for c in u.cells if c.repetition == 1]) for u in units]
    assert [u.setting.load.ngl for u in in_turn(later)] == [1, 0]
    assert in_turn(units[:1]) == units[:1]


def test_the_caption_says_paired_in_time_only_where_the_pairs_began_close_together():
    """Each pair's gap in time (parts.order.Order.started): interleaved runs a second or two apart read 'paired in time'
    with the median and largest gap; the same blocks measured all of A, then all of B, an hour apart, do not."""
    close = interleaved([20.0, 18.0, 22.0, 19.0], {4: [0.30, 0.34, 0.32, 0.28]})
    summary = summarize(to_frame(close))
    row = spec_row(summary, 4)
    assert row["pair_gap_median_s"] == 1.0 and row["pair_gap_max_s"] == 1.0
    assert "runs paired in time (gaps median 1.0 s, largest 1.0 s)" in "\n".join(proof_lines(summary))
    apart = [r | {"order": {**r["order"], "invocation": "a",
                            "started": r["order"]["started"] + (3600 if r["mode"] == "speculative" else 0)}}
             for r in close]
    caption = "\n".join(proof_lines(summarize(to_frame(apart))))
    assert "paired in time" not in caption and "far apart in time (gaps median 60.0 min, largest 60.0 min" in caption
    # records that name no invocation pair only within a session: an hour apart, the two sides are two sessions
    unnamed = [r | {"order": {k: v for k, v in r["order"].items() if k != "invocation"}} for r in apart]
    assert spec_row(summarize(to_frame(unnamed)), 4)["gain_pairs"] == 0


def test_auto_looks_are_few_and_end_at_the_maximum():
    assert auto_looks(10) == [2, 3, 5, 8, 10] and auto_looks(2) == [2] and auto_looks(4) == [2, 3, 4]


def test_auto_repeats_only_the_cells_of_an_open_verdict():
    """K=8 is clearly the best and decided; K=4 beside it close, ahead in one block and behind in the other. A first
    pass leaves K=8 against K=4 open: the rows to repeat are K=8, K=4 and the target alone, not K=1."""
    records = interleaved([20.0, 20.4], {1: [0.05, 0.3], 4: [0.50, 0.56], 8: [0.55, 0.53]})
    open_ = undecided([parse(r) for r in records])
    assert {(r["mode"], r["k"]) for r in open_.rows} == {("speculative", 8), ("speculative", 4), ("target", 0)}
    assert open_.why and "K=8" in open_.why[0]
    decided = interleaved([20.0, 20.2, 19.9, 20.1, 20.0], {1: [0.0, 0.01, -0.01], 8: [0.50, 0.51, 0.49]})
    assert undecided([parse(r) for r in decided]).rows == []


def test_records_keep_their_order():
    frame = to_frame([rec("target", 10.0, t=5)])
    assert frame.loc[0, "design"] == "shuffled" and frame.loc[0, "started"] == T0 + 5
    assert pd.isna(to_frame([rec("target", 10.0, design=None)]).loc[0, "design"])


@pytest.mark.parametrize("design, settings, across, clusters", [
    ("shuffled", "settings-chunks", True, True),  # two settings loaded one at a time: a repetition is one observation
    ("shuffled", "settings-alternate", True, False),  # side by side, block by block: every pair counts
    ("shuffled", "settings-chunks", False, False),  # within one setting (a gain): its runs share every chunk
    ("blocks", None, False, True),  # llama-server one process at a time: the gain's pairs share two processes
])
def test_pairs_measured_in_chunks_of_a_repetition_count_once_per_repetition(design, settings, across, clusters):
    """summary._paired: two prompts' pairs of one repetition, measured in the same two chunks, are one observation (the
    repetition's mean log-ratio, its t over the repetitions) wherever in_chunks says so; else each pair is one."""
    from gguf_bench.results.decision.estimates import _paired

    ratios = {0: (1.10, 1.12), 1: (1.00, 1.01), 2: (1.06, 1.05)}  # per repetition, prompts a and b
    mine = pd.DataFrame([{"_sweep": "s", "prompt_id": p, "repetition": r, "tokens_per_s": 100 * ratio, "design": design,
                          "settings_design": settings} for r, both in ratios.items() for p, ratio in zip("ab", both)])
    theirs = mine.assign(tokens_per_s=100.0)
    got = _paired(mine, theirs, "tokens_per_s", across=across)
    logs = np.log([x for both in ratios.values() for x in both])
    units = logs.reshape(3, 2).mean(axis=1) if clusters else logs
    assert got["gain_pairs"] == 6 and got["_dof"] == len(units) - 1
    assert got["_est"] == pytest.approx(units.mean()) and got["_se"] == pytest.approx(units.std(ddof=1) / np.sqrt(len(units)))


def test_two_settings_loaded_one_at_a_time_are_compared_over_their_repetitions():
    """summary.compare between two settings measured in chunks (settings-chunks): the interval is the t-interval over
    the repetitions' mean log-ratios, not over the 6 pairs; the same rows measured side by side use every pair."""
    from scipy import stats

    from gguf_bench.results.presentation.summary import compare

    alone = {0: (100.0, 101.0), 1: (95.0, 96.0), 2: (104.0, 103.0)}  # per repetition, prompts a and b, at -ngl 0
    ratio = {0: (1.03, 1.04), 1: (0.99, 1.00), 2: (1.02, 1.02)}  # -ngl 99 over -ngl 0, pair by pair
    for settings, clusters in (("settings-chunks", True), ("settings-alternate", False)):
        records = []
        for rep, speeds in alone.items():
            for p, a, r in zip("ab", speeds, ratio[rep]):
                for ngl, tps in ((0, a), (99, a * r)):
                    records.append(rec("target", tps, rep=rep, prompt=p, ngl=ngl))
                    records[-1]["order"]["settings"] = settings
        frame = to_frame([parse(r) for r in records])
        rows = summarize(frame)
        fast, slow = (rows[(rows["mode"] == "target") & (rows["ngl"] == n)].iloc[0] for n in ("99", "0"))
        got = compare(fast, slow, frame, margin=5.0, family=1)
        logs = np.log([x for both in ratio.values() for x in both])
        units = logs.reshape(3, 2).mean(axis=1) if clusters else logs
        half = stats.t.ppf(0.975, len(units) - 1) * units.std(ddof=1) / np.sqrt(len(units))
        assert got.lo == pytest.approx(100 * np.expm1(units.mean() - half))
        assert got.hi == pytest.approx(100 * np.expm1(units.mean() + half))
