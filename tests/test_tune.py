"""`gguf-bench tune`: the prediction arithmetic by hand, the greedy round simulation against the real
loop, the calibration record, and the command (JSON, --check, bad input) on tiny pairs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.measure.flows.calibrate import calibrate, match_flags
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.options import ALL_LAYERS
from gguf_bench.results.predictions import costmodel as tn
from gguf_bench.results.predictions import tune_checks
from gguf_bench.results.presentation import tuning
from gguf_bench.results.schema.records import parse, to_dict

TM = tn.Timings(t_draft=0.01, t_draft2=0.015, t_verify=(0.1, 0.12, 0.14, 0.16, 0.2), round_overhead=0.002)


# --- the model by hand --------------------------------------------------------------------------------


def test_expected_tokens_is_one_plus_the_products():
    assert tn.expected_tokens([0.5] * 4, 0) == 1.0
    assert tn.expected_tokens([0.5] * 4, 4) == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625)
    assert tn.expected_tokens([1.0, 0.5, 0.0], 3) == pytest.approx(1 + 1 + 0.5 + 0)


def test_steady_tokens_per_s_by_hand():
    # K=2, a = 0.5: E = 1.75; the previous round was full with probability 0.25 -> catch-up 0.25 * 5 ms
    time_round = 2 * 0.01 + 0.25 * 0.005 + 0.14 + 0.002
    assert tn.steady_tokens_per_s(TM, [0.5] * 4, 2) == pytest.approx(1.75 / time_round)
    # a = 0: one token a round, the K drafts are wasted
    assert tn.steady_tokens_per_s(TM, [0.0] * 4, 1) == pytest.approx(1 / (0.01 + 0.12 + 0.002))


def test_timings_components():
    assert TM.t_target == 0.1
    assert TM.draft_cost_ratio() == pytest.approx(0.1)
    assert TM.verify_curve() == pytest.approx([1.0, 1.2, 1.4, 1.6, 2.0])
    assert TM.round_s(2, catch_up=False) == pytest.approx(0.02 + 0.14 + 0.002)
    assert TM.round_s(2, catch_up=True) == pytest.approx(0.015 + 0.01 + 0.14 + 0.002)
    assert TM.round_s(0, catch_up=True) == pytest.approx(0.1 + 0.002)  # nothing drafted: no catch-up either
    with pytest.raises(tn.ConfigError, match="batch of 6"):
        TM.verify(6)


F, T = False, True


def test_simulate_rounds_by_hand():
    m = [F, T, T, F, T, T, F, T, T, F]  # 10 tokens; m[i]: the draft guesses token i
    # K=2: accept 1,2 (+3 from the target), 4,5 (+6), 7,8 (+9): three full rounds
    assert tn.simulate_rounds(m, 2, 10) == [tn.Round(2, 2)] * 3
    # K=3: 1,2, miss at 3 (the target's 3); 4,5, miss at 6; then only 10 - 7 - 1 = 2 may be drafted: 7,8 (+9)
    assert tn.simulate_rounds(m, 3, 10) == [tn.Round(3, 2), tn.Round(3, 2), tn.Round(2, 2)]
    # K=1, 4 tokens: 1 (+2); from token 2, 4 - 3 - 1 = 0 may be drafted: the target adds 3 alone
    assert tn.simulate_rounds([F, T, F, T], 1, 4) == [tn.Round(1, 1), tn.Round(0, 0)]
    # end of generation at index 3, which the draft also predicts: it drafts 3 tokens and stops
    assert tn.simulate_rounds([F, T, T, T], 4, 10, ends_with_eog=True) == [tn.Round(3, 3)]
    # the draft misses the end: all 4 drafted, 2 accepted, the target's own token ends generation
    assert tn.simulate_rounds([F, T, T, F], 4, 10, ends_with_eog=True) == [tn.Round(4, 2)]


def test_heuristic_schedule_by_hand():
    """K += 2 after a fully accepted round, K -= 1 (at least 1) after one that was not, capped."""
    m = [F, T, T, T, T, T, F, F, F, F, F, F]
    text = tn.Text("p", tuple(m), 12, False)
    # K=1: 1 accepted (+2), K=3: 3,4,5 (+6), K=5 but only 12-6-2 = 4 may be drafted: miss at 7, K=4; from 7
    # 3 may be drafted (miss, K=3), from 8 two (K=2), from 9 one (K=1), from 10 none
    rounds = text.rounds(1, 12, Strategy(k_schedule="heuristic", k_cap=5))
    assert rounds == [tn.Round(1, 1), tn.Round(3, 3), tn.Round(4, 0), tn.Round(3, 0), tn.Round(2, 0), tn.Round(1, 0),
                      tn.Round(0, 0)]


def test_ngram_rounds_come_from_the_history():
    # prompt 1 2 3 4; output 1 2 3 9 ...: after "1" the 1-gram lookup finds the earlier 1 and proposes 2 3 4
    text = tn.Text("p", (F,) * 6, 6, False, prompt=(1, 2, 3, 4), tokens=(1, 2, 3, 9, 9, 9))
    rounds = text.rounds(3, 6, Strategy("ngram"))
    assert rounds[0] == tn.Round(3, 2, "ngram")  # 2, 3 accepted, 4 is not 9: the target's 9
    assert all(r.source in ("ngram", "") for r in rounds)
    seconds, _ = text.decode_s(TM, 3, 6, Strategy("ngram"))
    assert seconds == pytest.approx(sum(TM.verify(r.drafted + 1) + TM.round_overhead for r in rounds))  # no draft model cost


def test_strategies_outside_the_model_are_refused():
    for spec in ("ngram+draft",):
        with pytest.raises(tn.ConfigError, match="tune predicts"):
            tuning.tune_strategies(spec, "fixed", 1, 4, None, [1, 2])
    with pytest.raises(tn.ConfigError, match="tune predicts"):
        tn.modeled(Strategy(p_min=0.5))
    with pytest.raises(tn.ConfigError, match="--k-cap 9 is above"):
        tuning.tune_strategies("draft", "heuristic", 1, 4, 9, [1, 2])
    got = tuning.tune_strategies("draft,ngram", "fixed,heuristic", 1, 4, None, [1, 2, 3])
    assert [s.label(2) for s in got] == ["draft K=2", "draft heuristic K=2..3", "ngram(1-4) K=2", "ngram(1-4) heuristic K=2..3"]


class GuessingDraft:
    """A fake draft model whose greedy guess for output token i is guesses.get(i, 0) (prompt of P tokens)."""

    n_batch, n_vocab = 512, 16

    def __init__(self, p: int, guesses: dict[int, int]):
        self.p, self.guesses, self.n_past = p, guesses, 0

    def rewind(self, n: int) -> None:
        self.n_past = min(self.n_past, n)

    def eval(self, tokens, n_logits=1):
        import numpy as np

        rows = np.zeros((n_logits, self.n_vocab), dtype=np.float32)
        first = self.n_past + len(tokens) - n_logits  # input position of the first row
        for r in range(n_logits):
            rows[r, self.guesses.get(first + r - self.p + 1, 0)] = 1.0  # input position q predicts output q - P + 1
        self.n_past += len(tokens)
        return rows

    def is_eog(self, token: int) -> bool:
        return token == 15


def test_match_flags_trust_the_runs_own_draft_tokens_over_the_batched_pass():
    from gguf_bench.decoding.loop import GenerationResult

    # output 1 2 3 4 after a 2-token prompt; the batched pass guesses 2 (right), 9 (wrong), 4 (right)
    draft = GuessingDraft(2, {1: 2, 2: 9, 3: 4})
    res = GenerationResult(tokens=[1, 2, 3, 4], verify_log=[(2, [1, 2, 3, 7])])  # the run's round from token 0
    # the run drafted 2 and 3 one token at a time (both right: flag 2 is True after all), then 7 for token 3
    assert match_flags(draft, [5, 5], res) == [False, True, True, False]
    # no round reached token 3: the batched pass decides; an end of generation the draft also proposes matches
    res = GenerationResult(tokens=[1, 2, 3, 4], verify_log=[(2, [1, 2])], stopped_by_eog=True)
    assert match_flags(GuessingDraft(2, {1: 2, 2: 9, 3: 4, 4: 15}), [5, 5], res) == [False, True, False, True, True]


def test_decode_time_counts_the_catch_up_and_the_last_short_rounds():
    text = tn.Text("p", (F, T, T, F, F, F, F), n_tokens=7, stopped_by_eog=False)
    seconds, rounds = text.decode_s(TM, 2, 7)
    assert rounds == [tn.Round(2, 2), tn.Round(2, 0), tn.Round(1, 0), tn.Round(0, 0)]
    want = ((2 * 0.01 + 0.14 + 0.002) + (0.015 + 0.01 + 0.14 + 0.002)  # second round starts with the 2-token catch-up
            + (0.01 + 0.12 + 0.002) + (0.1 + 0.002))
    assert seconds == pytest.approx(want)
    p = tn.predict(TM, [text], 2, 7)
    # the first token comes with the prompt: 6 tokens in the decode window (decode_window.py), as a run counts them
    assert p.tokens_per_s == pytest.approx(6 / want)
    assert p.baseline_tokens_per_s == pytest.approx(6 / (6 * 0.1))
    assert p.gain_pct == pytest.approx(100 * ((6 / want) / (6 / 0.6) - 1))
    assert p.tokens_per_round == pytest.approx((2 + 4) / 4)
    assert p.acceptance == pytest.approx(2 / 5)


def test_prediction_is_the_mean_over_prompts_like_a_sweep():
    good = tn.Text("good", (F,) + (T,) * 9, 10, False)
    bad = tn.Text("bad", (F,) * 10, 10, False)
    p = tn.predict(TM, [good, bad], 2, 10)
    assert p.tokens_per_s == pytest.approx((tn.predict(TM, [good], 2, 10).tokens_per_s
                                            + tn.predict(TM, [bad], 2, 10).tokens_per_s) / 2)


def record_for(tm: tn.Timings, texts, ks, ngl="0", ngld="0", time="2026-01-01T00:00:00+00:00"):
    """A calibration record as a file of an earlier version holds it (fewer fields), read back."""
    return parse({"kind": "calibration", "time": time, "pair": "p",
            "config": {"ngl": ngl, "ngld": ngld, "n_predict": 10, "ks": list(ks), "k_max": max(ks)},
            "timings": {"t_draft_s": tm.t_draft, "t_draft2_s": tm.t_draft2, "t_verify_s": list(tm.t_verify),
                        "round_overhead_s": tm.round_overhead},
            "acceptance": {"a": [0.5] * max(ks), "prompts": [{"prompt_id": t.prompt_id, "matches": [int(x) for x in t.matches],
                                                              "n_tokens": t.n_tokens, "stopped_by_eog": t.stopped_by_eog}
                                                             for t in texts]}})


def test_best_is_the_argmax_over_settings_and_ks():
    texts = [tn.Text("a", (F, T, T, T, F, T, T, T, T, F), 10, False)]
    slow_verify = tn.Timings(0.01, 0.015, (0.1, 0.2, 0.3, 0.4, 0.5), 0.0)
    cals = [tn.Calibration.from_record(record_for(TM, texts, [1, 2, 3, 4])),
            tn.Calibration.from_record(record_for(slow_verify, texts, [1, 2, 3, 4], ngl="all"))]
    every = [(c, p) for c in cals for p in c.predictions()]
    cal, top = tn.best(cals)
    assert top.tokens_per_s == max(p.tokens_per_s for _, p in every)
    rows = tuning.prediction_rows(cals)
    assert len(rows) == 8 and sum(r["best"] for r in rows) == 1
    marked = next(r for r in rows if r["best"])
    assert (marked["k"], marked["ngl"]) == (top.k, cal.ngl)
    assert marked["predicted_tokens_per_s"] == max(r["predicted_tokens_per_s"] for r in rows)


def test_predicted_frame_has_report_columns_and_keeps_the_latest_record():
    texts = [tn.Text("a", (F, T, T, F, T, T, T, T, F, T), 10, False)]
    old = record_for(tn.Timings(1.0, 1.0, (1.0,) * 5, 0.0), texts, [1, 2, 3], time="2026-01-01T00:00:00+00:00")
    new = record_for(TM, texts, [1, 2, 3], time="2026-01-02T00:00:00+00:00")
    df = tuning.predicted_frame([new, parse({"kind": "eval"}), old, parse({"mode": "target"})])
    assert list(df.columns) == ["pair", "host", "ngl", "ngld", "placement", "temperature", "n_predict", "depth", "k",
                                "predicted_tokens_per_s", "predicted_gain_pct",
                                "predicted_baseline_tokens_per_s", "predicted_best", "prompts"]
    assert list(df["k"]) == [1, 2, 3] and set(df["ngl"]) == {"0"}
    assert list(df["predicted_tokens_per_s"]) == pytest.approx([tn.predict(TM, texts, k, 10).tokens_per_s for k in (1, 2, 3)])
    assert df["predicted_best"].sum() == 1


def test_effective_settings_without_and_with_gpu_offload():
    settings, warnings = tune_checks.effective_settings([0, 16, ALL_LAYERS], [0, ALL_LAYERS], gpu=False, target_layers=18,
                                               draft_layers=18)
    assert settings == [(0, 0)]
    assert len(warnings) == 1 and "cannot offload" in warnings[0] and "-ngl 16 -ngld 0" in warnings[0]
    assert tune_checks.effective_settings([0], [0], gpu=False, target_layers=18, draft_layers=18) == ([(0, 0)], [])
    settings, warnings = tune_checks.effective_settings([0, 16, 30, ALL_LAYERS], [0], gpu=True, target_layers=18, draft_layers=18)
    assert settings == [(0, 0), (16, 0), (ALL_LAYERS, 0)]
    assert len(warnings) == 1 and "-ngl all" in warnings[0]


def test_check_rows_put_measured_next_to_predicted():
    texts = [tn.Text("a", (F, T, T, F, T, T, T, T, F, T), 10, False)]
    cal = tn.Calibration.from_record(record_for(TM, texts, [1, 2, 3]))
    recs = [{"mode": "target", "config": {"k": 0}, "metrics": {"tokens_per_s": 10.0}, "error": None},
            {"mode": "speculative", "config": {"k": 2}, "metrics": {"tokens_per_s": 12.0}, "error": None},
            {"mode": "speculative", "config": {"k": 2}, "metrics": {"tokens_per_s": 14.0}, "error": None},
            {"mode": "speculative", "config": {"k": 3}, "metrics": None, "error": "boom"}]
    rows = tune_checks.check_rows(cal, [parse(r) for r in recs])
    assert [r["k"] for r in rows] == [0, 2]
    k2 = rows[1]
    assert k2["measured_tokens_per_s"] == 13.0 and k2["runs"] == 2
    assert "measured_gain_pct" not in k2  # the gain is the verdict rule's (results/checks.gain_fields), not 13 / 10
    assert k2["predicted_tokens_per_s"] == pytest.approx(cal.predict(2).tokens_per_s)
    assert k2["error_pct"] == pytest.approx(100 * (k2["predicted_tokens_per_s"] / 13.0 - 1))
    assert rows[0]["predicted_tokens_per_s"] == pytest.approx(cal.predict(1).baseline_tokens_per_s)
    assert tune_checks.check_ks(cal, 3) == [2, 3] and tune_checks.check_ks(cal, 2) == [1, 2, 3]


# --- real llama.cpp on tiny pairs ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def middle_calibration(tiny_pairs):
    files = PairFiles(*tiny_pairs["middle"], "tiny-middle")
    prompts = builtin(["code-short", "chat-short"])
    record = calibrate(files, LoadConfig(n_ctx=512, threads=2), prompts, 24, [1, 2, 3, 4], reps=1)
    return files, prompts, record


def test_calibration_record_fields(middle_calibration):
    _, _, record = middle_calibration
    rec = to_dict(record)  # as stored
    assert rec["kind"] == "calibration" and rec["pair"] == "tiny-middle"
    cfg = rec["config"]
    assert (cfg["ngl"], cfg["ngld"], cfg["threads"], cfg["n_predict"], cfg["k_max"]) == (0, 0, 2, 24, 4)
    assert cfg["prompts"] == ["code-short", "chat-short"] and cfg["ks"] == [1, 2, 3, 4]
    tm = rec["timings"]
    assert len(tm["t_verify_s"]) == 5 and all(t > 0 for t in tm["t_verify_s"])
    assert tm["t_draft_s"] > 0 and tm["t_draft2_s"] > 0 and tm["round_overhead_s"] >= 0
    assert tm["in_loop"]["rounds"] > 0
    acc = rec["acceptance"]
    assert len(acc["a"]) == 4 and all(a is None or 0 <= a <= 1 for a in acc["a"])
    assert acc["accepted_at"][0] <= acc["reached_at"][0]
    for p in acc["prompts"]:
        assert len(p["matches"]) == p["n_tokens"] + int(p["stopped_by_eog"]) and set(p["matches"]) <= {0, 1}
    assert rec["env"]["llama_cpp_python"] and rec["models"]["target"]["sha256"]
    json.dumps(rec)  # storable as it is
    assert parse(json.loads(json.dumps(rec))) == record
    cal = tn.Calibration.from_record(record)
    assert [p.k for p in cal.predictions()] == [1, 2, 3, 4]


def test_calibration_of_k_1_alone(tiny_pairs):
    files = PairFiles(*tiny_pairs["high"], "tiny-high")
    rec = calibrate(files, LoadConfig(n_ctx=256, threads=2), builtin(["code-short"]), 8, [1], reps=1)
    assert len(rec.timings.t_verify_s) == 2 and len(rec.acceptance.a) == 1
    assert tn.Calibration.from_record(rec).predict(1).tokens_per_s > 0


def test_simulated_rounds_equal_the_real_loop_for_every_k(middle_calibration):
    """One run at K_max gives every K's rounds: simulate each K and run it for real."""
    files, prompts, rec = middle_calibration
    cal = tn.Calibration.from_record(rec)
    with LoadedPair(files, LoadConfig(n_ctx=512, threads=2)) as pair:
        for prompt, text in zip(prompts, cal.texts):
            tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
            for k in (1, 2, 3, 4):
                res = pair.generate("speculative", tokens, 24, k, SamplingConfig())
                rounds = tn.simulate_rounds(text.matches, k, 24, text.stopped_by_eog)
                got = (len(rounds), sum(r.drafted for r in rounds), sum(r.accepted for r in rounds))
                assert got == (res.rounds, res.drafted, res.accepted), (prompt.id, k)


@pytest.mark.parametrize("strategy", [Strategy(k_schedule="heuristic", k_cap=4), Strategy("ngram"),
                                      Strategy("ngram", ngram_min=2, ngram_max=3, k_schedule="heuristic", k_cap=4)])
def test_other_strategies_simulated_equal_the_real_loop(middle_calibration, strategy):
    files, prompts, rec = middle_calibration
    cal = tn.Calibration.from_record(rec)
    with LoadedPair(files, LoadConfig(n_ctx=512, threads=2)) as pair:
        for prompt, text in zip(prompts, cal.texts):
            tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
            for k in (1, 3):
                res = pair.generate("speculative", tokens, 24, k, SamplingConfig(), strategy=strategy)
                rounds = text.rounds(k, 24, strategy)
                got = (len(rounds), sum(r.drafted for r in rounds), sum(r.accepted for r in rounds))
                assert got == (res.rounds, res.drafted, res.accepted), (prompt.id, k, strategy.label(k))


def test_tune_json_shape_and_stored_record(tiny_pairs, isolated):
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-3", "-n", "16", "--prompt-ids", "code-short",
                    "--threads", "2", "-c", "256", "--reps", "1", "-ngl", "0,8", "--json", "--name", "tj")
    assert result.exit_code == 0, result.output
    assert "Warning: this llama-cpp-python build cannot offload" in result.stderr
    doc = json.loads(result.stdout)
    assert [r["k"] for r in doc["rows"]] == [1, 2, 3]
    for row in doc["rows"]:
        assert {"k", "ngl", "ngld", "predicted_tokens_per_s", "predicted_gain_pct", "best"} <= set(row)
    assert set(doc["best"]) == {"k", "ngl", "ngld", "strategy", "predicted_tokens_per_s", "predicted_gain_pct", "from"}
    assert doc["best"]["from"] == "predicted" and "predicted_best" not in doc
    assert doc["scatter_guard"]["on"] is False and "--reps 1" in doc["scatter_guard"]["line"]  # one timing: said off
    fastest = max(doc["rows"], key=lambda r: r["predicted_tokens_per_s"])
    if fastest["predicted_tokens_per_s"] > max(r["predicted_baseline_tokens_per_s"] for r in doc["rows"]):  # the fastest K
        assert doc["best"]["predicted_tokens_per_s"] == fastest["predicted_tokens_per_s"] and fastest["best"]
        assert f"--spec-type draft-simple --spec-draft-n-max {doc['best']['k']}" in doc["deploy"]
    else:  # no K beats the target alone: never a slowdown (tests/test_trust.py)
        assert doc["best"]["strategy"] == "run the target alone" and not any(r["best"] for r in doc["rows"])
        assert "--spec-type none" in doc["deploy"] and "-md" not in doc["deploy"]
    assert "llama-server" in doc["deploy"] and "-c 256" in doc["deploy"] and "predicted" in doc["deploy_note"]
    assert len(doc["settings"][0]["verify_curve"]) == 4 and doc["settings"][0]["verify_curve"][0] == 1.0
    records = stored(isolated / "results" / "tj.jsonl")
    assert [r["kind"] for r in records] == ["calibration"]


def test_tune_several_strategies_in_one_table(tiny_pairs):
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-3", "-n", "16", "--prompt-ids", "code-short",
                    "--threads", "2", "-c", "256", "--reps", "1", "--spec-type", "draft,ngram", "--k-schedule", "fixed,heuristic",
                    "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {r["strategy"] for r in rows if r["k"] == 2} == {"draft K=2", "draft heuristic K=2..3", "ngram(1-4) K=2",
                                                            "ngram(1-4) heuristic K=2..3"}
    beats = max(r["predicted_tokens_per_s"] for r in rows) > max(r["predicted_baseline_tokens_per_s"] for r in rows)
    assert sum(r["best"] for r in rows) == int(beats)  # none when no setting beats the target alone
    table = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-2", "-n", "12", "--prompt-ids", "code-short",
                   "--threads", "2", "-c", "256", "--reps", "1", "--spec-type", "draft,ngram")
    assert table.exit_code == 0, table.output
    assert "ngram" in table.stdout and "draft" in table.stdout and "tokens/s (gain %)" in table.stdout


def test_tune_check_prints_measured_next_to_predicted_and_stores_the_runs(tiny_pairs, isolated, tmp_path):
    plot = tmp_path / "tune.png"
    result = invoke("tune", *pair_args(tiny_pairs["high"]), "-K", "1-3", "-n", "12", "--prompt-ids", "code-short",
                    "--threads", "2", "-c", "256", "--reps", "1", "--check", "--name", "tc", "--plot", str(plot))
    assert result.exit_code == 0, result.output
    out = result.stdout
    # the title may fold at the table's width
    assert "predicted tokens/s" in " ".join(out.split()) and "scatter guard off: --reps 1" in " ".join(out.split())
    assert "--check: predicted against measured" in out and "measured tok/s" in out and "target alone" in out
    assert plot.stat().st_size > 0
    records = stored(isolated / "results" / "tc.jsonl")
    assert records[0]["kind"] == "calibration"
    runs = records[1:]
    assert {r["mode"] for r in runs} == {"target", "speculative"} and all(r["sweep"] == "tc" for r in runs)
    # the recommendation is --check's verdict on what it measured: one run per K (one prompt, one repetition) gives
    # no interval (a machine shared with other work decides nothing, and on tiny models the draft may simply be slower),
    # so the target alone is what it says to run, and what it deploys
    verdict = " ".join(out.split("recommended (measured by --check): ")[1].split())
    assert verdict.startswith("run the target alone (-ngl 0 -ngld 0, ")
    assert any(why in verdict for why in ("fewer than 2 pairs of runs", "the machine was busy", "is not faster"))
    assert "deploy (measured in the Python loop by --check" in out and "--spec-type none" in out
    assert "predicted: " in verdict
    check_report_shows_predictions(isolated / "results", records, tmp_path)


def speed(x: float) -> str:
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 100 else f"{x:.2f}"


def check_report_shows_predictions(results, stored, tmp_path):
    """`report` puts tune's prediction beside each measured row of the same setting and prompts, draws it,
    and leaves it out for runs of other prompts."""
    cal = tn.Calibration.from_record(parse(stored[0]))
    md = invoke("report", str(results / "tc.jsonl"), "--format", "md")
    assert md.exit_code == 0, md.output
    lines = md.stdout.splitlines()
    assert "| predicted tokens/s |" in lines[0]
    ks = sorted({r["config"]["k"] for r in stored[1:] if r["mode"] == "speculative"})
    for k in ks:
        row = next(ln for ln in lines if f"K={k}" in ln)
        assert f"| {speed(cal.predict(k).tokens_per_s)} |" in row, row
    target = next(ln for ln in lines[2:] if "K=" not in ln)
    assert f"| {speed(cal.predict(ks[0]).baseline_tokens_per_s)} |" in target, target
    table = invoke("report", str(results / "tc.jsonl"))
    assert "pred." in table.stdout and "kind calibration" not in table.stderr
    plot = tmp_path / "report.png"
    assert invoke("report", str(results / "tc.jsonl"), "--plot", str(plot)).exit_code == 0 and plot.stat().st_size > 0
    other = [stored[0]] + [{**r, "config": {**r["config"], "prompt_id": "chat-short"}} for r in stored[1:]]
    (tmp_path / "other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    md = invoke("report", str(tmp_path / "other.jsonl"), "--format", "md")
    assert md.exit_code == 0 and "predicted" not in md.stdout


@pytest.mark.parametrize("args, needle", [
    (["-K", "0-2"], "-K/--draft-max must be >= 1, got 0"),
    (["-K", "two"], "bad -K value 'two'"),
    (["-ngl", "lots"], "bad -ngl value 'lots'"),
    (["-n", "1"], "--n-predict must be >= 2"),
    (["--name", "a/b"], "--name 'a/b' may hold only"),
    (["--prompt-ids", "nope"], "unknown built-in prompt 'nope'"),
    (["--spec-type", "ngram+draft"], "tune predicts"),
    (["--k-schedule", "sometimes"], "unknown --k-schedule 'sometimes'"),
    (["--prompt-tokens", "64,128"], "tune calibrates one prompt length"),
    (["--objective", "throughput"], "tune predicts --objective decode or request"),
    (["--objective", "request", "--twin"], "drop --twin"),
    (["--engine", "server", "--objective", "request"], "are for --engine python"),
])
def test_tune_bad_input_is_one_error_line(tiny_pairs, args, needle):
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "--prompt-ids", "code-short", "-n", "8", "--reps", "1", *args)
    assert_user_error(result, needle)


def test_tune_pair_that_does_not_load_is_one_error_line(tiny_pairs, tmp_path):
    target, draft = tiny_pairs["middle"]
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(target.read_bytes()[:700_000])  # header intact, tensor data cut short
    result = invoke("tune", "--target", str(cut), "--draft", str(draft), "-K", "1-2", "-n", "8", "--prompt-ids", "code-short")
    assert_user_error(result, "cut.gguf", "fetch it again")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    assert_user_error(invoke("tune", "--target", str(junk), "--draft", str(draft)), "is not a GGUF file")


# --- --k-schedule cost: predicted for n-gram drafting, said so for the draft model ----------------------


def test_ngram_cost_schedule_rounds_by_hand():
    """The cost schedule over a known text: a long copy is drafted where a batch is cheap, nothing where it costs
    its tokens (each round a plain target step)."""
    text = tn.Text("p", (F,) * 9, 9, False, prompt=(5, 1, 2, 3, 4, 6, 7, 8, 5), tokens=(1, 2, 3, 4, 6, 7, 8, 9, 9))
    cheap = tn.Timings(0.0, 0.0, (0.1,) * 5, 0.0)
    rounds = text.rounds(4, 9, Strategy("ngram", k_schedule="cost"), cheap.costs(False))
    assert rounds[0] == tn.Round(4, 4, "ngram")  # after 5: the copy 1 2 3 4, all accepted
    dear = tn.Timings(0.0, 0.0, tuple(0.1 * b for b in range(1, 6)), 0.0)
    assert all(r == tn.Round(0, 0, "") for r in text.rounds(4, 9, Strategy("ngram", k_schedule="cost"), dear.costs(False)))
    with pytest.raises(tn.ConfigError, match="n-gram drafting only"):
        tuning.tune_strategies("draft", "cost", 1, 4, None, [1, 2])


def test_cost_outlook_recommends_only_a_gain_over_the_best_fixed_k():
    text = tn.Text("p", (F, T, T, F) * 6, 24, False, prompt=(7, 1, 2, 3, 4, 5, 6, 8) * 2,
                   tokens=(7, 1, 2, 3, 4, 5, 6, 8) * 3)
    cal = tn.Calibration("p", "0", "0", 24, (1, 2, 4), TM, (text,), (0.5, 0.5, 0.5, 0.5))
    ngram = [Strategy("ngram")]
    (o,) = tn.cost_outlook([cal], ngram)
    assert o.prediction is not None and o.prediction.strategy.startswith("ngram(1-4) cost K=")
    assert o.best_fixed == max(cal.predictions(ngram), key=lambda p: p.tokens_per_s)
    rec = tn.recommend([cal], ngram)
    assert o.beats(rec) == (o.prediction.tokens_per_s > max(o.best_fixed.tokens_per_s, rec.baseline_tokens_per_s))
    assert "over the best fixed K: ngram(1-4) K=" in tuning.cost_outlook_lines([o])[0]
    (d,) = tn.cost_outlook([cal])  # the draft model: not predicted, the acceptance-only length said instead
    assert d.prediction is None and not d.beats(tn.recommend([cal])) and d.length == tn.acceptance_length(cal, 4)
    assert "not predicted" in tuning.cost_outlook_lines([d])[0]


@pytest.mark.parametrize("k", [2, 4])
def test_ngram_cost_schedule_simulated_equals_the_real_loop(middle_calibration, k):
    """With the calibration's timings as its costs, the real loop makes the rounds tune simulates."""
    files, prompts, rec = middle_calibration
    cal = tn.Calibration.from_record(rec)
    strategy = Strategy("ngram", k_schedule="cost")
    costs = cal.timings.costs(False)
    with LoadedPair(files, LoadConfig(n_ctx=512, threads=2)) as pair:
        pair.costs = costs
        for prompt, text in zip(prompts, cal.texts):
            tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
            res = pair.generate("speculative", tokens, 24, k, SamplingConfig(), strategy=strategy)
            rounds = text.rounds(k, 24, strategy, costs)
            got = (len(rounds), sum(r.drafted for r in rounds), sum(r.accepted for r in rounds))
            assert got == (res.rounds, res.drafted, res.accepted), (prompt.id, k)


def test_tune_prints_the_cost_schedule_against_the_best_fixed_k(tiny_pairs):
    args = (*pair_args(tiny_pairs["middle"]), "-K", "1-3", "-n", "16", "--prompt-ids", "code-short", "--threads", "2",
            "-c", "256", "--reps", "1")
    result = invoke("tune", *args, "--spec-type", "draft,ngram", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    draft, ngram = doc["cost_schedule"]
    assert draft["spec"] == "draft" and not draft["predicted"] and not draft["recommended"]
    assert ngram["spec"] == "ngram(1-4)" and ngram["predicted"] and ngram["strategy"].startswith("ngram(1-4) cost K=")
    assert ngram["recommended"] == (ngram["predicted_tokens_per_s"] > max(
        [r["predicted_tokens_per_s"] for r in doc["rows"]] + [r["predicted_baseline_tokens_per_s"] for r in doc["rows"]]))
    if ngram["recommended"]:
        assert doc["best"]["strategy"] == ngram["strategy"] and doc["best"]["k"] == ngram["k_cap"]
    table = invoke("tune", *args, "--spec-type", "ngram", "--k-schedule", "fixed,cost")
    assert table.exit_code == 0, table.output
    assert "ngram(1-4) cost" in table.stdout and "--k-schedule cost (ngram(1-4) cost K=" in table.stdout
    assert "assumes the calibration's greedy texts" in " ".join(table.stdout.split())
    plain = invoke("tune", *args)
    assert "--k-schedule cost (draft): not predicted" in plain.stdout
    assert "recommended:" in plain.stdout and "--k-schedule cost" not in plain.stdout.split("recommended:")[1]


def test_tune_check_measures_the_cost_schedule_it_predicts(tiny_pairs, isolated, tmp_path):
    """--check runs the n-gram cost schedule tune predicted, at the cap it predicted, as sweep does (its costs: the
    calibration just stored), and prints it beside the prediction; --plot draws both."""
    plot = tmp_path / "tune.png"
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-3", "-n", "16", "--prompt-ids", "code-short",
                    "--threads", "2", "-c", "256", "--reps", "1", "--spec-type", "ngram", "--check", "--json",
                    "--name", "tcc", "--plot", str(plot))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (cost,) = [r for r in doc["check"] if "strategy" in r]
    (outlook,) = [o for o in doc["cost_schedule"] if o["predicted"]]
    assert cost["strategy"] == outlook["strategy"] and cost["k"] == outlook["k_cap"]
    assert cost["measured_tokens_per_s"] > 0 and cost["runs"] == 1
    # its gain is report's: none where the schedule drafted nothing (it ran the target alone), and then it says why
    assert (cost["measured_gain_pct"] is None) == bool(cost["no_drafts"]) and cost["decided"] is None
    runs = [r for r in stored(isolated / "results" / "tcc.jsonl") if r["kind"] == "run"]
    schedule = [r for r in runs if (r["config"].get("strategy") or {}).get("k_schedule") == "cost"]
    assert len(schedule) == 1 and schedule[0]["config"]["k"] == cost["k"]
    assert schedule[0]["metrics"]["costs_source"] == "calibration"
    assert sum(r["mode"] == "target" for r in runs) == 1  # the cost runs add no target alone of their own
    assert plot.stat().st_size > 0
    table = invoke("report", str(isolated / "results" / "tcc.jsonl"))
    assert table.exit_code == 0 and outlook["strategy"] in table.stdout


# --- the noise guard and --check's verdict (issue 55, item 6) ------------------------------------------


def test_relative_scatter_and_the_decode_timers_target_scatter():
    """The target's one-token decodes at 10, 12.5 and 10 ms: speeds 100, 80 and 100 tokens/s, the slow one 20% from
    their median. One timing: nothing to tell (None)."""
    from gguf_bench.measure.costs import DecodeTimer

    assert tn.relative_scatter([100.0, 80.0, 100.0]) == pytest.approx(0.2)
    assert tn.relative_scatter([100.0]) is None and tn.relative_scatter([]) is None
    timer = DecodeTimer([[1, 2, 3]], 8, 1)
    timer.verify[1] += [(0.010, 0.009), (0.0125, 0.011), (0.010, 0.009)]
    assert timer.result()["target_scatter"] == pytest.approx(0.2)
    timer.verify[1][1:] = []
    assert timer.result()["target_scatter"] is None


def guarded(scatter):
    texts = [tn.Text("a", (F, T, T, F, T, T, T, T, F, T), 10, False)]
    return replace(tn.Calibration.from_record(record_for(TM, texts, [1, 2, 3])), scatter=scatter)


def test_the_python_tune_recommends_no_gain_inside_the_target_alones_own_scatter():
    """K=2 is predicted at +50.5% over the target alone. Its one-token timings scattered ±10%: K=2 is recommended.
    ±60%: the gain is inside the machine's own noise, so the target alone is, and the line and --json say why. One
    timing (--reps 1): the guard is off, K=2 is recommended, and the legend and --json say the guard is off."""
    quiet, noisy, once = (tn.recommend([guarded(s)]) for s in (0.10, 0.60, None))
    assert quiet.speculative and quiet.gain_pct == pytest.approx(50.50, abs=0.01) and not quiet.within_scatter
    assert not noisy.speculative and noisy.within_scatter and noisy.prediction is None
    assert once.speculative and not once.guard.on
    cal = guarded(0.60)
    line = tuning.recommendation_line(noisy, cal, noisy.fastest, None, False, (1, 4))
    assert line.startswith("recommended: run the target alone") and "(+50.5%), within the scatter" in line
    assert "one-token decode timings (±60.0%)" in line
    doc = tuning.as_json("p", Path("r.jsonl"), [cal], [Strategy()], None, [])
    assert doc["best"]["strategy"] == "run the target alone" and not any(r["best"] for r in doc["rows"])
    assert doc["within_scatter"]["k"] == 2 and doc["scatter_guard"]["on"] and doc["settings"][0]["target_scatter"] == 0.6
    off = tuning.as_json("p", Path("r.jsonl"), [guarded(None)], [Strategy()], None, [])
    assert off["scatter_guard"]["on"] is False and "scatter guard off: --reps 1" in off["scatter_guard"]["line"]
    assert off["best"]["k"] == 2 and "within_scatter" not in off
    assert "scatter guard off: --reps 1" in rendered(tuning.prediction_table(guarded(None), [Strategy()], None, None,
                                                                             200, once.guard))
    assert "no predicted gain under +10.0% is recommended" in rendered(
        tuning.prediction_table(guarded(0.1), [Strategy()], None, None, 200, quiet.guard))


def test_the_cost_schedule_is_held_to_the_same_guard():
    text = tn.Text("p", (F, T, T, F) * 6, 24, False, prompt=(7, 1, 2, 3, 4, 5, 6, 8) * 2,
                   tokens=(7, 1, 2, 3, 4, 5, 6, 8) * 3)
    cal = tn.Calibration("p", "0", "0", 24, (1, 2, 4), TM, (text,), (0.5, 0.5, 0.5, 0.5))
    ngram = [Strategy("ngram"), Strategy("ngram", k_schedule="cost")]
    (o,) = tn.cost_outlook([cal], ngram)
    gain = 100 * (o.prediction.tokens_per_s / tn.recommend([cal], ngram).baseline_tokens_per_s - 1)
    assert gain > 0 and o.beats(tn.recommend([cal], ngram)) == (o.prediction.tokens_per_s > o.best_fixed.tokens_per_s)
    inside = replace(cal, scatter=gain / 100 + 0.01)
    assert not tn.cost_outlook([inside], ngram)[0].beats(tn.recommend([inside], ngram))


def rendered(group, width: int = 200) -> str:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(group)
    return out.getvalue()


def run(mode, tps, k=0, rep=0, prompt="p1", design="shuffled"):
    """A --check run of the Python loop, interleaved (parts.order.Order) unless `design` is None."""
    r = {"pair": "p", "mode": mode, "error": None,
         "config": {"k": k, "ngl": 0, "ngld": 0, "temperature": 0.0, "n_predict": 10, "prompt_id": prompt,
                    "repetition": rep},
         "metrics": {"tokens_per_s": tps, "n_tokens": 10, "drafted": 4 if mode == "speculative" else 0},
         "models": {"target": {"file": "t.gguf"}, "draft": {"file": "d.gguf"}}}
    if design:
        r["order"] = {"design": design, "position": 0, "started": 1_800_000_000.0 + 10 * rep + k}
    return parse(r)


def check_runs(alone, gains: dict[int, list[float]], design="shuffled"):
    """Per repetition a block: the target alone at alone[rep], each K at alone[rep] * (1 + gain)."""
    return [r for rep, a in enumerate(alone) for r in
            [run("target", a, rep=rep, design=design)]
            + [run("speculative", a * (1 + g[rep % len(g)]), k, rep, design=design) for k, g in gains.items()]]


def test_check_gains_are_the_verdict_rules_and_the_fastest_decided_setting_wins(monkeypatch, tmp_path):
    """--check measures K=1..3 and the target alone in 4 interleaved blocks, the machine wandering from 20 to 14
    tokens/s. K=2 gains a steady +30% (decided); K=3 a scattered +5% or so (not decided); K=1 +10% (decided, slower
    than K=2). The verdict: K=2 at its measured speed, and what tune deploys; the measured gains are the paired ones
    with their intervals, not ratios of the means."""
    from gguf_bench.measure.flows import tune as flow
    from gguf_bench.measure.inputs.prompts import Prompt

    records = check_runs([20.0, 17.0, 14.0, 19.0], {1: [0.10, 0.11, 0.09, 0.10], 2: [0.30, 0.31, 0.29, 0.30],
                                                    3: [0.30, -0.20, 0.25, -0.10]})
    monkeypatch.setattr(flow, "measure_grid", lambda job, grid, events: [r for r in records if r.k in (0, *grid.ks)])
    cal = guarded(None)
    files = PairFiles(tmp_path / "t.gguf", tmp_path / "d.gguf", "p")
    job = flow.TuneJob(files, [Prompt("p1", "code", "hi")], [1, 2, 3], 10, 256, None, "t", tmp_path / "t.jsonl")
    rec = tn.recommend([cal])
    tuned = flow.Tuned(job, [cal], cal, rec.fastest, rec, [], None)
    flow._check(tuned, flow.TuneEvents())
    rows = {r["k"]: r for r in tuned.checked}
    assert rows[2]["decided"] is True and rows[1]["decided"] is True and rows[3]["decided"] is False
    assert rows[0]["measured_gain_pct"] is None and rows[2]["measured_gain_lo"] > 25
    assert rows[2]["measured_gain_pct"] == pytest.approx(100 * (np.exp(np.log([1.3, 1.31, 1.29, 1.3]).mean()) - 1))
    assert tuned.verdict["k"] == 2 and tuned.verdict["tokens_per_s"] == pytest.approx(np.mean([26, 17 * 1.31, 14 * 1.29,
                                                                                               19 * 1.3]))
    chosen, cost = tuned.chosen
    assert chosen.speculative and chosen.fastest.k == 2 and cost is None
    assert tuning.gain_cell(rows[3]).startswith("~") and "[" in tuning.gain_cell(rows[3])
    line = tuning.measured_line(tuned.verdict, rec, None)
    assert line.startswith("recommended (measured by --check): -K 2 -ngl 0 -ngld 0: ") and "decided" in line
    doc = tuning.as_json("p", job.out, [cal], [Strategy()], tuned.checked, [], tuned.verdict)
    assert doc["best"]["k"] == 2 and doc["best"]["from"] == "measured by --check" and doc["predicted_best"]["k"] == 2


def test_a_check_whose_gain_is_not_decided_recommends_the_target_alone_and_says_why(monkeypatch, tmp_path):
    """One block (one pair of runs per K): no interval can be made, so however fast K=2 measured, the verdict is the
    target alone, whatever tune predicted, and it says why; so do the deploy line's Recommendation and --json."""
    from gguf_bench.measure.flows import tune as flow
    from gguf_bench.measure.inputs.prompts import Prompt

    records = check_runs([20.0], {1: [0.2], 2: [0.4], 3: [0.3]})
    monkeypatch.setattr(flow, "measure_grid", lambda job, grid, events: [r for r in records if r.k in (0, *grid.ks)])
    cal = guarded(None)
    job = flow.TuneJob(PairFiles(tmp_path / "t", tmp_path / "d", "p"), [Prompt("p1", "code", "hi")], [1, 2, 3], 10,
                       256, None, "t", tmp_path / "t.jsonl")
    rec = tn.recommend([cal])
    assert rec.speculative  # predicted: K=2 at +50%
    tuned = flow.Tuned(job, [cal], cal, rec.fastest, rec, [], None)
    flow._check(tuned, flow.TuneEvents())
    assert tuned.verdict["k"] == 0 and all(r["decided"] is None for r in tuned.checked)
    assert "K=2 at 28.00 tokens/s" in tuned.verdict["why"] and "fewer than 2 pairs" in tuned.verdict["why"]
    chosen, _ = tuned.chosen
    assert not chosen.speculative and chosen.baseline_cal is cal
    line = tuning.measured_line(tuned.verdict, rec, None)
    assert line.startswith("recommended (measured by --check): run the target alone (-ngl 0 -ngld 0, 20.00 tokens/s")
    assert "predicted: draft K=2 -ngl 0 -ngld 0 at 15.05 tokens/s" in line  # 9 tokens after the first
    assert tuning.gain_cell(tuned.checked[-1]) == "~+30.0"


def test_a_check_on_a_busy_machine_decides_nothing():
    """The steady +30% of K=2, measured while other processes kept the cores busy: not decided, so the verdict is the
    target alone, and it says why."""
    from gguf_bench.results.decision.tune_verdict import check_summary, measured_verdict
    from gguf_bench.results.schema.records import to_dict

    quiet = check_runs([20.0, 17.0, 14.0, 19.0], {2: [0.30, 0.31, 0.29, 0.30]})
    assert measured_verdict(check_summary(quiet))["k"] == 2
    busy = [parse(to_dict(r) | {"load": {"wall_s": 1.0, "others_cpu_s": 1.5, "cpu_count": 2}}) for r in quiet]
    verdict = measured_verdict(check_summary(busy))
    assert verdict["k"] == 0 and verdict["ngl"] == "0" and "the machine was busy" in verdict["why"]


def test_a_checked_row_that_drafted_nothing_has_no_gain_and_says_so():
    from gguf_bench.results.decision.tune_verdict import check_summary, gain_fields
    from gguf_bench.results.schema.records import to_dict

    runs = check_runs([20.0, 19.0], {2: [0.3, 0.3]})
    runs = [parse(to_dict(r) | {"metrics": {**to_dict(r)["metrics"], "drafted": 0}}) if r.k else r for r in runs]
    row = gain_fields(check_summary(runs), 2)
    assert row["measured_gain_pct"] is None and row["no_drafts"] and tuning.gain_cell(row) == "no drafts"


# --- request latency: the prompt's processing, the draft's included ------------------------------------------------


def test_request_prediction_by_hand_counts_the_drafts_prompt_too():
    """A request is the prompt's processing (the target's, and with a draft model the draft's), then -n tokens at the
    predicted decode speed (run_fields.request_latency): a decode gain can be a request loss."""
    text = tn.Text("p", (F, T, T, F, F, F, F), 7, False, prompt_s=0.5, draft_prompt_s=0.2)
    decode_s, _ = text.decode_s(TM, 2, 7)
    p = tn.predict(TM, [text], 2, 7)
    assert p.request_s == pytest.approx(0.5 + 0.2 + decode_s)  # -n 7 tokens at 7 / decode_s tokens/s
    assert p.baseline_request_s == pytest.approx(0.5 + 0.6)
    assert p.request_tokens_per_s == pytest.approx(7 / p.request_s)
    assert tuning.request_gain_pct(p) == pytest.approx(100 * (1.1 / p.request_s - 1))
    ngram = tn.predict(TM, [replace(text, prompt=(1, 2, 3), tokens=(4, 5, 6, 7, 8, 9, 10))], 2, 7, Strategy("ngram"))
    assert ngram.request_s - ngram.baseline_request_s == pytest.approx(ngram.request_s - 0.5 - 0.6)  # no draft prompt
    assert tn.predict(TM, [replace(text, prompt_s=None)], 2, 7).request_s is None  # an older record: not predicted


def test_under_request_a_long_prompt_turns_the_recommendation_to_the_target_alone():
    texts = (tn.Text("p", (F,) + (T,) * 9, 10, False, prompt_s=2.0, draft_prompt_s=1.5),)
    cal = tn.Calibration("p", "0", "0", 10, (1, 2, 3, 4), TM, texts, (0.9,) * 4)
    decode = tn.recommend([cal])
    assert decode.speculative and decode.gain_pct > 20
    request = tn.recommend([replace(cal, objective="request")])
    assert not request.speculative and request.fastest.tokens_per_s < request.baseline_tokens_per_s
    assert request.fastest.objective == "request" and request.fastest.tokens_per_s == decode.fastest.request_tokens_per_s
    line = tuning.recommendation_line(request, request.fastest_cal, request.fastest, None, False, (1, 4))
    assert "run the target alone" in line and "request tokens/s" in line
    old = tn.Calibration.from_record(record_for(TM, texts, [1, 2]))  # a record without prompt timings
    with pytest.raises(tn.BenchError, match="calibrate again"):
        replace(old, objective="request").predict(1)


def test_calibration_times_each_prompt_for_both_models(middle_calibration):
    _, prompts, record = middle_calibration
    tm = record.timings
    assert len(tm.prompt_target_s) == len(tm.prompt_draft_s) == len(prompts)
    assert all(t > 0 for t in tm.prompt_target_s + tm.prompt_draft_s)
    cal = tn.Calibration.from_record(record)
    p = cal.predict(2)
    assert p.request_s > p.baseline_request_s - 1  # predicted, and of the right kind (seconds)
    assert tuning.request_line(cal, p).startswith("request (n=24, ")


def test_tune_objective_request_at_a_prompt_length(tiny_pairs, isolated):
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-2", "-n", "12", "--prompt-ids", "code-short",
                    "--threads", "2", "-c", "512", "--reps", "1", "--prompt-tokens", "96", "--objective", "request",
                    "--json", "--name", "tr")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    for row in doc["rows"]:
        assert row["objective"] == "request" and row["predicted_request_s"] > 0
        assert row["predicted_tokens_per_s"] == pytest.approx(12 / row["predicted_request_s"])
    record = stored(isolated / "results" / "tr.jsonl")[0]
    assert [len(p["prompt"]) for p in record["acceptance"]["prompts"]] == [96]  # the prompt made 96 tokens long
    assert record["config"]["prompts"] == ["code-short@96"]
    table = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-2", "-n", "12", "--prompt-ids", "code-short",
                   "--threads", "2", "-c", "512", "--reps", "1", "--prompt-tokens", "96", "--objective", "request")
    assert table.exit_code == 0, table.output
    assert "predicted request tokens/s" in table.stdout and "of 96 tokens" in table.stdout
    assert "request (n=12, 96-token prompts, predicted)" in table.stdout
