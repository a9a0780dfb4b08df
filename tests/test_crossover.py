"""The crossover map (issue 49, 2): per slot count, the best speculative setting and its gain over the target alone at
that count, where speculation stops paying, what is missing, and a deploy line per slot count. Bookkeeping over
records written here; tests/test_deploy.py runs the same on a real llama-server."""

from __future__ import annotations

import json

from gguf_bench.measure import deploy
from gguf_bench.results.presentation import answer, crossover
from gguf_bench.results.presentation.summary import summarize, to_frame
from gguf_bench.results.schema.records import parse


def rec(mode, tps, slots, k=0, rep=0, drafted=None, clients=None):
    """A server-engine run at `slots` slots (and as many clients unless told), one prompt."""
    return {"pair": "P", "mode": mode, "error": None,
            "config": {"k": k, "ngl": 0, "ngld": 0, "temperature": 0.0, "n_predict": 64, "prompt_id": "p1",
                       "repetition": rep, "engine": "server", "parallel": slots, "clients": clients or slots},
            "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "acceptance": 0.8, "tokens_per_round": None,
                        "n_tokens": 64, "drafted": (8 if mode == "speculative" else 0) if drafted is None else drafted},
            "offload": {"target": "0/29", "draft": "0/29"},
            "models": {"target": {"file": "t.gguf", "path": "/m/t.gguf"}, "draft": {"file": "d.gguf", "path": "/m/d.gguf"}},
            "order": {"design": "alternate", "started": 1.8e9 + 60 * rep + k}}  # interleaved: paired by repetition


def runs(mode, values, slots, k=0, **kw):
    return [rec(mode, v, slots, k=k, rep=i, **kw) for i, v in enumerate(values)]


ALONE = (29.5, 30.5, 30.0)


def records_paying_up_to_two_slots():
    """1 slot: K=4 +33% (decided), K=2 +17%; 2 slots: K=2 +15% (decided, above the 5% margin), K=4 -3%; 4 slots: both lose."""
    return (runs("target", ALONE, 1) + runs("speculative", (35.0, 35.5, 34.5), 1, k=2)
            + runs("speculative", (40.0, 39.5, 40.5), 1, k=4)
            + runs("target", [2 * v for v in ALONE], 2) + runs("speculative", (69.0, 69.575, 68.425), 2, k=2)
            + runs("speculative", (58.0, 58.5, 57.5), 2, k=4)
            + runs("target", [3 * v for v in ALONE], 4) + runs("speculative", (80.0, 80.5, 79.5), 4, k=2)
            + runs("speculative", (70.0, 70.5, 69.5), 4, k=4))


def test_each_slot_count_gets_its_best_setting_and_the_crossover_is_named():
    summary = summarize(to_frame(records_paying_up_to_two_slots()))
    [(_, counts, missing)] = crossover.maps(summary)
    assert [c.label for c in counts] == ["1 slot", "2 slots", "4 slots"]
    assert [int(c.best["k"]) if c.pays else None for c in counts] == [4, 2, None]
    assert counts[0].verdict == "K=4 +33.3% [+22,+46]" and counts[1].verdict.startswith("K=2 +15.0% [+")
    assert counts[2].verdict == "none gains (best K=2 -11.1%)"
    assert crossover.crossover(counts) == "speculation pays up to 2 slots; at 4 slots and beyond, the target alone"
    assert missing == []


def test_a_deploy_line_per_slot_count_each_its_own_best():
    records = records_paying_up_to_two_slots()
    df = to_frame(records)
    heads = [head for head, _ in answer.lines(deploy.with_deploy(summarize(df), df, [parse(r) for r in records]))]
    assert len(heads) == 3, heads
    assert heads[0].startswith("deploy P: K=4 at 1 slot (40.00 tokens/s, gain +33.3% [+22,+46] from one load of each")
    assert heads[1].startswith("deploy P: K=2 at 2 slots (69.00 tokens/s, gain +15.0% [+")
    assert heads[2].startswith("deploy P: no speculation at 4 slots (90.00 tokens/s; no speculative setting gained)")


def test_missing_rows_are_named_and_never_read_as_a_verdict():
    """K=4 failed at 2 slots and 4 slots has no target alone: the map says both; 4 slots has no gain to compute."""
    records = [r for r in records_paying_up_to_two_slots()
               if not (r["config"]["parallel"] == 2 and r["config"]["k"] == 4)
               and not (r["config"]["parallel"] == 4 and r["mode"] == "target")]
    [(_, counts, missing)] = crossover.maps(summarize(to_frame(records)))
    assert missing == ["K=4 at 2 slots", "target alone at 4 slots"]
    assert counts[2].verdict == "no target alone at this slot count: no gain to compute" and not counts[2].pays
    assert crossover.crossover(counts) == "speculation pays at every slot count measured (up to 2 slots); unknown at 4 slots"
    text = crossover.lines(summarize(to_frame(records)))
    assert text[-1] == "  not measured: K=4 at 2 slots; target alone at 4 slots"


def test_an_undecided_gain_and_a_row_that_drafted_nothing_do_not_pay():
    """At 2 slots K=2's +3% is within the noise and K=4 drafted nothing: no setting pays there, each says why."""
    records = (runs("target", ALONE, 1) + runs("speculative", (40.0, 39.5, 40.5), 1, k=2)
               + runs("target", [2 * v for v in ALONE], 2) + runs("speculative", (56.0, 66.0, 64.0), 2, k=2)
               + runs("target", [3 * v for v in ALONE], 4) + runs("speculative", (99.0, 99.5, 98.5), 4, k=2, drafted=0))
    [(_, counts, _)] = crossover.maps(summarize(to_frame(records)))
    assert [c.pays for c in counts] == [True, False, False]
    assert counts[1].verdict.startswith("~K=2 +3.1% [-14,+23], not told from zero (its interval holds zero)")
    assert counts[2].verdict == "no speculative row drafted"
    assert crossover.crossover(counts) == "speculation pays up to 1 slot; at 2 slots and beyond, the target alone"


def test_clients_beyond_slots_are_their_own_count_and_one_count_draws_no_map():
    records = (runs("target", ALONE, 2, clients=2) + runs("speculative", (35.0, 35.5, 34.5), 2, k=2, clients=2)
               + runs("target", ALONE, 2, clients=4) + runs("speculative", (25.0, 25.5, 24.5), 2, k=2, clients=4))
    [(_, counts, _)] = crossover.maps(summarize(to_frame(records)))
    assert [c.label for c in counts] == ["2 slots", "4 clients on 2 slots"]
    assert crossover.crossover(counts) == "speculation pays up to 2 slots; at 4 clients on 2 slots and beyond, the target alone"
    one = summarize(to_frame(runs("target", ALONE, 2) + runs("speculative", (35.0, 35.5, 34.5), 2, k=2)))
    assert crossover.maps(one) == [] and crossover.lines(one) == []


def test_report_prints_the_map_and_writes_it_in_markdown(tmp_path):
    from cli_helpers import invoke

    path = tmp_path / "np.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records_paying_up_to_two_slots()))
    shown = invoke("report", str(path))
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "P per slot count:" in text and "4 slots: none gains (best K=2 -11.1%)" in text, shown.output
    assert "speculation pays up to 2 slots; at 4 slots and beyond, the target alone" in text
    md = invoke("report", str(path), "--format", "md")
    assert md.exit_code == 0 and "### Per slot count" in md.stdout and "  - 2 slots: K=2 +15.0% [" in md.stdout


def test_a_map_of_undecided_gains_says_so_rather_than_that_nothing_pays():
    records = (runs("target", ALONE, 1) + runs("speculative", (28.0, 36.0, 33.0), 1, k=2)
               + runs("target", [2 * v for v in ALONE], 2) + runs("speculative", (50.0, 60.0, 55.0), 2, k=2))
    [(_, counts, _)] = crossover.maps(summarize(to_frame(records)))
    assert [c.undecided for c in counts] == [True, False]
    assert crossover.crossover(counts) == ("no gain told from zero at any slot count (undecided at 1 slot: more -r "
                                           "decides): deploy the target alone")
