"""One answer per workload, and "the same" as a verdict (issue 62, items 3 and 6): a deploy line, a ★ and the -r auto
verdicts per workload (pair, slots and clients, depth, temperature, length, and prompt where the report keeps prompts
apart); every gain faster, slower, the same within --margin (≈) or undecided; the simpler setting between two that
are the same. Bookkeeping over records written here, no model (but the last test: a one-repetition sweep)."""

from __future__ import annotations

import json

from cli_helpers import invoke

from gguf_bench.measure import deploy
from gguf_bench.measure.repeat import undecided
from gguf_bench.results.presentation import answer, crossover
from gguf_bench.results.presentation.report import proof_lines, rich_table
from gguf_bench.results.presentation.summary import FAMILY, MARGIN, compare, summarize, to_frame
from gguf_bench.results.schema.records import parse

T0 = 1_800_000_000.0


def rec(mode, tps, k=0, rep=0, prompt="p1", ngl=0, temp=0.0, depth=0, t=0.0):
    """A run of the Python loop, interleaved (paired with the target alone of its block)."""
    return {"pair": "P", "mode": mode, "error": None,
            "config": {"k": k, "ngl": ngl, "ngld": 0, "temperature": temp, "n_predict": 64, "prompt_id": prompt,
                       "repetition": rep, "depth": depth},
            "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "acceptance": 0.8, "n_tokens": 64,
                        "drafted": 8 if mode == "speculative" else 0},
            "offload": {"target": f"{ngl}/19", "draft": "0/19"},
            "models": {"target": {"file": "t.gguf", "path": "/m/t.gguf"}, "draft": {"file": "d.gguf", "path": "/m/d.gguf"}},
            "order": {"design": "shuffled", "position": 0, "started": T0 + t}}


def blocks(alone, gains: dict[int, list[float]], ngl=0, temp=0.0, depth=0, prompts=("p1",)):
    """Per repetition a block: the target alone at alone[rep], each K at alone[rep] * (1 + gain[rep])."""
    out, t = [], 0.0
    for rep, a in enumerate(alone):
        for p in prompts:
            out.append(rec("target", a, rep=rep, prompt=p, ngl=ngl, temp=temp, depth=depth, t=t))
            for k, g in gains.items():
                t += 1
                out.append(rec("speculative", a * (1 + g[rep % len(g)]), k=k, rep=rep, prompt=p, ngl=ngl, temp=temp,
                               depth=depth, t=t))
            t += 1
    return out


ALONE = [20.0, 20.4, 19.8, 20.2, 20.1, 19.9]


def deploy_heads(records, **kw):
    df = to_frame(records)
    summary = deploy.with_deploy(summarize(df, **kw), df, [parse(r) for r in records])
    return summary, [head for head, _ in answer.lines(summary)]


def spec(summary, k, **where):
    rows = summary[(summary["mode"] == "speculative") & (summary["k"] == k)]
    for c, v in where.items():
        rows = rows[rows[c] == v]
    [row] = [r for _, r in rows.iterrows()]
    return row


# --- 3. one answer per workload ----------------------------------------------------------------------------------


def test_two_temperatures_give_two_deploy_lines_each_naming_its_temperature():
    """--temp 0,0.7: K=8 pays greedily, nothing pays at 0.7; one line each, named by the temperature (what varies)."""
    records = (blocks(ALONE, {4: [0.20, 0.22, 0.21], 8: [0.40, 0.42, 0.41]}, temp=0.0)
               + blocks(ALONE, {4: [-0.10, -0.12, -0.11], 8: [-0.30, -0.28, -0.31]}, temp=0.7))
    summary, heads = deploy_heads(records)
    assert len(heads) == 2, heads
    assert heads[0].startswith("deploy P (T=0): K=8 (") and "gain +41" in heads[0]
    assert heads[1].startswith("deploy P (T=0.7): no speculation (") and "no speculative setting gained" in heads[1]
    assert summary[summary["best_k"]]["temperature"].tolist() == [0.0]  # a star per workload: none at 0.7 (no gain)


def test_one_workload_keeps_todays_line():
    _, heads = deploy_heads(blocks(ALONE, {4: [0.20, 0.22, 0.21], 8: [0.40, 0.42, 0.41]}))
    assert len(heads) == 1 and heads[0].startswith("deploy P: K=8 (")


def test_depths_are_workloads_and_r_auto_repeats_only_the_open_one():
    """-d 0,4096: at -d 0 K=8 is decided; at -d 4096 K=8 and K=4 are too close to call after 2 repetitions. -r auto
    repeats the -d 4096 rows only, and its reason names nothing of -d 0."""
    records = (blocks(ALONE[:3], {4: [0.20, 0.21, 0.22], 8: [0.40, 0.41, 0.42]}, depth=0)
               + blocks(ALONE[:2], {4: [0.30, 0.45], 8: [0.33, 0.50]}, depth=4096))
    open_ = undecided([parse(r) for r in records])
    assert open_.rows and {r["depth"] for r in open_.rows} == {4096}
    _, heads = deploy_heads(records)
    assert [h.split(":")[0] for h in heads] == ["deploy P (-d 0)", "deploy P (-d 4096)"]


def test_the_star_the_deploy_line_and_the_verdicts_share_one_workload():
    """-ngl 0 and -ngl 99 are two settings of one workload: one ★ (not one per -ngl), on the row the deploy line takes;
    the rows its interval is corrected for are the workload's, across both -ngl."""
    records = blocks(ALONE[:4], {4: [0.20, 0.21, 0.22], 8: [0.40, 0.41, 0.42]}) + blocks(
        [v * 1.5 for v in ALONE[:4]], {4: [0.10, 0.11, 0.12], 8: [0.05, 0.06, 0.04]}, ngl=99)
    summary, heads = deploy_heads(records)
    starred = summary[summary["best_k"]]
    assert len(starred) == 1 and (starred.iloc[0]["ngl"], starred.iloc[0]["k"]) == ("99", 4)
    assert summary.loc[summary["mode"] == "speculative", "gain_family"].nunique() == 1  # one family: the workload's
    assert [r for _, r in summary.iterrows() if r["deploy"]][0]["k"] == 4 and heads[0].startswith("deploy P: K=4 (")
    assert "prompt_id" in FAMILY and deploy.GROUP is FAMILY


def test_by_prompt_each_prompt_is_its_own_workload():
    records = blocks(ALONE[:4], {4: [0.20, 0.21, 0.22], 8: [0.40, 0.41, 0.42]}, prompts=("p1", "p2"))
    df = to_frame(records)
    summary = deploy.with_deploy(summarize(df, by_prompt=True), df, [parse(r) for r in records])
    heads = [h for h, _ in answer.lines(summary)]
    assert [h.split(":")[0] for h in heads] == ["deploy P (prompt p1)", "deploy P (prompt p2)"]
    assert summary["best_k"].sum() == 2


def test_the_per_slot_map_is_per_workload():
    """Two temperatures at 1 and 2 slots: one map per temperature, each named by it."""
    def server(mode, tps, slots, k=0, rep=0, temp=0.0):
        r = rec(mode, tps, k=k, rep=rep, temp=temp, t=60 * rep + k)
        r["config"] |= {"engine": "server", "parallel": slots, "clients": slots}
        r["order"]["design"] = "alternate"
        return r
    records = []
    for temp in (0.0, 0.7):
        for slots, gain in ((1, 0.3), (2, -0.2)):
            for rep, a in enumerate((29.5, 30.5, 30.0)):
                records += [server("target", a * slots, slots, rep=rep, temp=temp),
                            server("speculative", a * slots * (1 + gain + 0.01 * rep), slots, k=4, rep=rep, temp=temp)]
    text = crossover.lines(summarize(to_frame(records)))
    assert [ln for ln in text if not ln.startswith("  ")] == [
        "P (T=0) per slot count: the best speculative setting, its gain over the target alone there",
        "P (T=0.7) per slot count: the best speculative setting, its gain over the target alone there"]


# --- 6. "no difference" is a verdict ----------------------------------------------------------------------------


def test_every_gain_is_faster_slower_the_same_or_undecided():
    records = blocks(ALONE, {1: [0.004, -0.006, 0.002, 0.0, -0.003, 0.005], 2: [0.30, 0.31, 0.29],
                             4: [-0.20, -0.21, -0.19], 8: [0.30, -0.25, 0.10, -0.05]})
    summary = summarize(to_frame(records))
    verdicts = {int(r["k"]): r["verdict"] for _, r in summary[summary["mode"] == "speculative"].iterrows()}
    assert verdicts == {1: "same", 2: "faster", 4: "slower", 8: "undecided"}
    assert [bool(spec(summary, k)["decided"]) for k in (1, 2, 4, 8)] == [False, True, True, False]  # faster or slower
    assert summary.loc[summary["mode"] == "target", "verdict"].isna().all() and (summary["margin_pct"] == MARGIN).all()
    wide = summarize(to_frame(records), margin=60)  # a margin wider than K=8's interval: the same
    assert spec(wide, 8)["verdict"] == "same" and spec(wide, 2)["verdict"] == "same"  # +30% does not clear 60%


def test_the_same_is_marked_and_its_mark_explained_only_where_it_appears():
    same = summarize(to_frame(blocks(ALONE, {4: [0.004, -0.006, 0.002, 0.0, -0.003, 0.005], 8: [0.30, 0.31, 0.29]})))
    table = rich_table(same, width=120)
    cells = [str(c) for col in table.columns for c in col._cells]
    assert any(c.startswith("≈+0.") and c.endswith("]") for c in cells), cells
    assert any(line.startswith(f"≈ the same as the target alone: the whole interval within ±{MARGIN:g}% (--margin)")
               for line in proof_lines(same))
    apart = summarize(to_frame(blocks(ALONE, {8: [0.30, 0.31, 0.29]})))
    assert not any(line.startswith("≈") for line in proof_lines(apart))


def test_r_auto_closes_a_verdict_of_the_same():
    """K=4 and K=8 both as fast as the target alone within 1%: nothing to repeat. With a margin too narrow to
    reach, the same runs stay open."""
    records = blocks(ALONE, {4: [0.004, -0.006, 0.002, 0.0, -0.003, 0.005], 8: [0.005, -0.002, 0.0, 0.003, -0.004, 0.001]})
    assert undecided([parse(r) for r in records]).rows == []
    assert undecided([parse(r) for r in records], margin=0.1).rows


def test_between_k_that_are_the_same_the_deploy_line_takes_the_smaller_k():
    """K=4 and K=8 both +40%, within 1% of each other block by block: the smaller K, and the line says why; the ★ goes
    with it."""
    records = blocks(ALONE, {4: [0.40, 0.41, 0.39, 0.40, 0.405, 0.395], 8: [0.404, 0.405, 0.392, 0.41, 0.40, 0.40]})
    summary, [head] = deploy_heads(records)
    assert head.startswith("deploy P: K=4 ("), head
    assert f"K=4 and K=8 are the same within {MARGIN:g}%: the smaller K" in head
    assert spec(summary, 4)["best_k"] and not spec(summary, 8)["best_k"]
    df = to_frame(records)
    assert compare(spec(summary, 8), spec(summary, 4), df).verdict == "same"
    _, [apart] = deploy_heads(records, margin=0.1)  # a margin these runs cannot reach: the fastest
    assert "the same" not in apart


def test_a_k_that_is_the_same_as_the_target_alone_deploys_no_speculation():
    records = blocks(ALONE, {8: [0.004, -0.006, 0.002, 0.0, -0.003, 0.005]})
    _, [head] = deploy_heads(records)
    assert head.startswith("deploy P: no speculation (") and f"K=8 is the same as the target alone within {MARGIN:g}%: +" in head


def test_between_settings_that_are_the_same_the_deploy_line_takes_fewer_gpu_layers():
    """Speculation loses everywhere; the target alone at -ngl 99 is within 1% of -ngl 0's, block by block: -ngl 0."""
    near = [1.003, 0.998, 1.006, 1.001, 0.999, 1.004]  # -ngl 99 over -ngl 0, block by block: +0.2% [-0.1,+0.5]
    records = blocks(ALONE, {4: [-0.3, -0.31, -0.29]}) + blocks([a * m for a, m in zip(ALONE, near)],
                                                              {4: [-0.3, -0.31, -0.29]}, ngl=99)
    summary, [head] = deploy_heads(records)
    [chosen] = [r for _, r in summary.iterrows() if r["deploy"]]
    assert (chosen["mode"], chosen["ngl"]) == ("target", "0") and "-ngl 0" in chosen["deploy"]
    assert f"-ngl 0 target alone and -ngl 99 target alone are the same within {MARGIN:g}%: fewer GPU layers" in head


def test_report_takes_a_margin_and_refuses_a_bad_one(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in blocks(ALONE, {8: [0.30, -0.25, 0.10, -0.05]})))
    rows = json.loads(invoke("report", str(path), "--format", "json").stdout)
    assert [r["verdict"] for r in rows if r["mode"] == "speculative"] == ["undecided"]
    wide = json.loads(invoke("report", str(path), "--format", "json", "--margin", "60").stdout)
    assert [(r["verdict"], r["margin_pct"]) for r in wide if r["mode"] == "speculative"] == [("same", 60.0)]
    bad = invoke("report", str(path), "--margin", "-1")
    assert bad.exit_code == 1 and "--margin is a percentage" in bad.stderr


def test_a_sweep_of_one_repetition_says_it_decides_nothing(tiny_pairs, isolated):
    files = tiny_pairs["high"]
    out = invoke("sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", "one", "-n", "8",
                 "--prompt-ids", "code-short", "-K", "2", "--no-draft-alone")
    assert out.exit_code == 0, out.output
    assert ("1 repetition decides nothing (a verdict counts loads, one per repetition, and needs 2): continue it with "
            "`gguf-bench sweep ... --name one --resume -r auto` (or -r 2)") in " ".join(out.output.split())
    again = invoke("sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", "one", "-n", "8",
                   "--prompt-ids", "code-short", "-K", "2", "--no-draft-alone", "--resume", "-r", "2")
    assert again.exit_code == 0 and "decides nothing" not in again.output
