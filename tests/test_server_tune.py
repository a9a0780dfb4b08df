"""tune --engine server (issue 49, 3): llama-server's own timings and counters calibrate the cost model. The model's
bookkeeping on records written here; then the command on a real llama-server with the tiny pair, --check included."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_helpers import invoke, stored
from rich.console import Console

from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.results.predictions.server_costs import calibrations, check_predictable
from gguf_bench.results.presentation import server_tuning
from gguf_bench.results.schema.records import parse


def rec(mode, k, n, decode_s, rounds=0, accepted=0, accepted_at=(), spec="draft-simple", requests=None, parallel=None):
    cfg = {"k": k, "ngl": 0, "ngld": 0, "temperature": 0.0, "n_predict": n, "prompt_id": "p1", "repetition": 0,
           "engine": "server", "parallel": parallel, "clients": parallel}
    if mode == "speculative":
        cfg["strategy"] = {"spec_type": spec}
    return parse({"pair": "P", "mode": mode, "error": None, "config": cfg,
                  "metrics": {"tokens_per_s": (n - 1) / decode_s, "n_tokens": n, "decode_s": decode_s, "rounds": rounds,
                              "drafted": None if rounds is None else rounds * k, "accepted": accepted,
                              "accepted_at": list(accepted_at), "requests": requests},
                  "models": {"target": {"file": "t.gguf"}, "draft": {"file": "d.gguf"}}})


def test_rounds_per_position_acceptance_and_the_prediction():
    """Target alone 10 ms/token. K=4: 10 rounds, 20 accepted (10, 6, 3, 1 at positions 1-4), 1 plain step of the 32
    tokens, 0.25 s: a round is (0.25 - 0.01) / 10 = 24 ms. K=1: 16 rounds, 12 accepted, 3 plain, 0.222 s: 12 ms."""
    records = [rec("target", 0, 32, 0.31), rec("speculative", 4, 32, 0.25, 10, 20, (10, 6, 3, 1)),
               rec("speculative", 1, 32, 0.222, 16, 12, (12,))]
    [cal] = calibrations(records)
    assert cal.t_target == pytest.approx(0.01) and cal.a_from == "per position"
    assert dict(cal.rounds_s) == pytest.approx({1: 0.012, 4: 0.024})
    assert cal.a == pytest.approx((1.0, 0.6, 0.5, 1 / 3))
    assert cal.round_at(2) == pytest.approx(0.016)  # linear between K=1 and K=4
    assert dict(cal.drafting) == pytest.approx({1: 16 / 19, 4: 10 / 11})  # rounds over rounds and plain steps
    p = cal.predict(4)
    assert p.tokens_per_round == pytest.approx(3.0)
    # the largest K (whose counters give a) gives back its own run: 31 tokens after the prompt's in 0.25 s (10 rounds
    # of 3, 1 plain token)
    assert p.tokens_per_s == pytest.approx(31 / 0.25) and p.gain_pct == pytest.approx(100 * (124 / 100 - 1))
    with pytest.raises(ConfigError, match="outside the calibrated 1..4"):
        cal.predict(8)


def test_concurrent_rounds_share_out_their_counters_and_fit_one_a():
    """Two slots: the round's 20 verification rounds and 24 accepted tokens shared by each request's drafted tokens;
    no per-position counters, so one a with a + a^2 = 1.2 accepted tokens per round (K=2)."""
    req = {"predicted_n": 32, "predicted_ms": 400.0, "draft_n": 20, "draft_n_accepted": 12, "error": None}
    alone = {"predicted_n": 32, "predicted_ms": 620.0, "draft_n": 0, "draft_n_accepted": 0, "error": None}
    records = [rec("target", 0, 64, 0.7, requests=[alone, alone], parallel=2),
               rec("speculative", 2, 64, 0.5, 20, 24, requests=[req, req], parallel=2)]
    [cal] = calibrations(records)
    assert cal.parallel == 2 and cal.t_target == pytest.approx(0.02)
    a = cal.a[0]
    assert cal.a_from.startswith("one a") and a + a * a == pytest.approx(1.2, abs=1e-6)
    assert dict(cal.rounds_s)[2] == pytest.approx((0.4 - 9 * 0.02) / 10)  # per slot: 32 = 1 + 10 rounds + 12 + 9 plain


def test_an_ngram_type_drafting_at_some_steps_is_predicted_from_its_share_of_drafting_steps():
    """ngram-mod drafts where the text repeats: at K=2, 4 rounds and 27 plain steps of the 40 tokens (d = 4/31); at
    K=8, 4 rounds and 15 plain steps (d = 4/19). Between them d is linear, and tokens/s mixes rounds and plain steps."""
    records = [rec("target", 0, 40, 0.39), rec("speculative", 2, 40, 0.35, 4, 8, (4, 4), spec="ngram-mod"),
               rec("speculative", 8, 40, 0.3, 4, 20, (4, 4, 4, 4, 1, 1, 1, 1), spec="ngram-mod")]
    [cal] = calibrations(records)
    assert dict(cal.drafting) == pytest.approx({2: 4 / 31, 8: 4 / 19})
    assert cal.drafting_at(1) == pytest.approx(4 / 31) and cal.drafting_at(5) == pytest.approx((4 / 31 + 4 / 19) / 2)
    assert cal.predict(8).tokens_per_s == pytest.approx(39 / 0.3)  # its own run: 4 rounds of 6, 15 plain tokens
    d, p = cal.drafting_at(4), cal.predict(4)
    expected = (d * p.tokens_per_round + 1 - d) / (d * cal.round_at(4) + (1 - d) * 0.01)
    assert p.tokens_per_round == pytest.approx(5.0) and p.tokens_per_s == pytest.approx(expected)


def test_a_predicted_gain_inside_the_target_alones_scatter_is_not_a_recommendation():
    """The target alone's two repetitions ran at 100 and 110 tokens/s (±4.8% around their median): K=4 predicted at
    +18% is recommended; with the repetitions at 90 and 130 (±18.2%) the same run predicts +16.5%, within their
    scatter, so the target alone stays."""
    from gguf_bench.measure.flows.server_tune import recommend

    def cals(slow_s, fast_s):
        alone = [rec("target", 0, 32, slow_s), rec("target", 0, 32, fast_s)]
        return calibrations([*alone, rec("speculative", 4, 32, 0.25, 10, 20, (10, 6, 3, 1))])

    [decided] = cals(0.31, 31 / 110)
    assert decided.scatter == pytest.approx(110 / 105 - 1)
    top, within = recommend([decided], [4])
    assert within is None and top[1].k == 4 and top[1].gain_pct > 100 * decided.scatter
    [drifting] = cals(31 / 90, 31 / 130)
    assert drifting.scatter == pytest.approx(130 / 110 - 1)
    top, within = recommend([drifting], [4])
    assert top is None and within[1].k == 4 and 0 < within[1].gain_pct < 100 * drifting.scatter
    assert calibrations([rec("target", 0, 32, 0.31), rec("speculative", 4, 32, 0.25, 10, 20, (10, 6, 3, 1))])[0].scatter is None


def test_rounds_too_few_to_time_are_interpolated_between_neighbours_and_an_error_at_the_largest_k():
    """K=4: 2 rounds among 35 steps in 0.30 s, less than its 33 plain steps alone take at 10 ms: no time is left for
    the rounds, so K=4's round is linear between the target alone and K=8, and the table says why. The same at the
    largest K, where the acceptance is read, is one error line."""
    alone = rec("target", 0, 40, 0.39)
    few = rec("speculative", 4, 40, 0.30, 2, 4, (2, 1, 1, 0), spec="ngram-mod")
    many = rec("speculative", 8, 40, 0.3, 4, 20, (4, 4, 4, 4, 1, 1, 1, 1), spec="ngram-mod")
    [cal] = calibrations([alone, few, many])
    assert [k for k, _ in cal.rounds_s] == [8] and cal.untimed == ((4, 2, 35),)
    assert cal.round_at(4) == pytest.approx(0.01 + (0.0375 - 0.01) / 2)
    assert dict(cal.drafting)[4] == pytest.approx(2 / 35)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(server_tuning.prediction_table(cal, [4, 8], None, 200))
    assert "K=4: its 2 rounds among 35 steps could not be timed apart from the plain steps" in out.getvalue()
    with pytest.raises(BenchError, match=r"rounds at K=8 could not be timed apart .*\(2 rounds among 35 steps\)"):
        calibrations([alone, rec("speculative", 2, 40, 0.35, 4, 8, (4, 4), spec="ngram-mod"),
                      rec("speculative", 8, 40, 0.30, 2, 4, (2, 1, 1, 0, 0, 0, 0, 0), spec="ngram-mod")])


def test_json_names_each_k_measured_interpolated_or_not_calibrated():
    """Target alone 10 ms/token; -K 1,2,4,8, calibrated at 1, 4 and 8. K=1: 16 rounds, 11 plain steps, 0.302 s: 12 ms a
    round, measured. K=4: 4 rounds, 27 plain steps, 0.29 s: 5 ms a round, less than one target step, so no measurement:
    interpolated. K=8: 37.5 ms, measured. K=2 never ran: not calibrated."""
    from types import SimpleNamespace

    records = [rec("target", 0, 40, 0.39), rec("speculative", 1, 40, 0.302, 16, 12, (12,)),
               rec("speculative", 4, 40, 0.29, 4, 8, (4, 2, 1, 1)),
               rec("speculative", 8, 40, 0.3, 4, 20, (4, 4, 4, 4, 1, 1, 1, 1))]
    [cal] = calibrations(records)
    assert dict(cal.rounds_s) == pytest.approx({1: 0.012, 8: 0.0375}) and cal.untimed == ((4, 4, 31),)
    tuned = SimpleNamespace(calibrations=[cal], job=SimpleNamespace(ks=[1, 2, 4, 8], out=Path("r.jsonl")), top=None,
                            within_scatter=None, checked=None, verdict=None)
    doc = server_tuning.as_json(tuned)
    want = {1: "measured", 2: "not calibrated", 4: "interpolated", 8: "measured"}
    assert {r["k"]: r["round_from"] for r in doc["rows"]} == want == doc["calibrations"][0]["round_from"]
    assert server_tuning.as_json(tuned, twin=True)["calibrations"][0]["round_from"] == want


def test_rounds_the_servers_metrics_did_not_count_are_not_measured_not_no_drafts():
    """A llama-server whose /metrics lacks the speculative counters: the completion's rounds, drafted and accepted are
    None, the run is not marked 'no drafts', and tune stops in one line saying they were not measured."""
    from gguf_bench.measure.proof import marked
    from gguf_bench.results.schema.records import Mode
    from gguf_bench.runtimes.server_metrics import spec_counters

    assert spec_counters({}, {"n_decode_total": 40.0}) == (None, None, None)
    counters = {"spec_decode_num_drafts_total": 12.0, "spec_decode_num_draft_tokens_total": 48.0,
                "spec_decode_num_accepted_tokens_total": 30.0}
    assert spec_counters({"spec_decode_num_drafts_total": 2.0}, counters) == (10, 48, 30)
    uncounted = rec("speculative", 4, 32, 0.25, None, None)
    assert marked(uncounted.metrics, Mode.SPECULATIVE, uncounted.strategy, 4, "server", Path("t.gguf")).no_drafts is None
    with pytest.raises(BenchError, match=r"no speculative counters .* at K=4: its rounds were not measured") as stopped:
        calibrations([rec("target", 0, 32, 0.31), uncounted, rec("speculative", 1, 32, 0.222, 16, 12, (12,))])
    assert "\n" not in str(stopped.value)


def test_with_one_repetition_the_scatter_guard_says_it_is_off():
    """--reps 1: one target-alone run per prompt, no scatter to tell a gain from. K=4 is still recommended (+24%), and
    the table's legend and --json say the guard is off; with two repetitions they give its margin instead."""
    from types import SimpleNamespace

    from gguf_bench.measure.flows.server_tune import recommend

    spec = rec("speculative", 4, 32, 0.25, 10, 20, (10, 6, 3, 1))
    [once] = calibrations([rec("target", 0, 32, 0.31), spec])
    top, within = recommend([once], [4])
    assert top[1].k == 4 and within is None and not once.guard.on
    legend = rendered(server_tuning.prediction_table(once, [4], top, 200))
    assert "scatter guard off: --reps 1 times the target alone once (repetitions of each prompt)" in legend
    tuned = SimpleNamespace(calibrations=[once], job=SimpleNamespace(ks=[4], out=Path("r.jsonl")), top=top,
                            within_scatter=None, checked=None, verdict=None)
    guard = server_tuning.as_json(tuned)["scatter_guard"]
    assert guard["on"] is False and guard["target_scatter"] is None and guard["line"].startswith("scatter guard off")
    [twice] = calibrations([rec("target", 0, 32, 0.31), rec("target", 0, 32, 31 / 110), spec])
    assert "no predicted gain under +4.8% is recommended" in rendered(server_tuning.prediction_table(twice, [4], top, 200))
    tuned.calibrations = [twice]
    assert server_tuning.as_json(tuned)["scatter_guard"]["on"] is True


def rendered(group, width: int = 200) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(group)
    return out.getvalue()


def checked_run(mode, k, tps, rep, prompt="p1"):
    """A --check run through llama-server, interleaved (parts.order.Order 'alternate') with its block's other runs."""
    cfg = {"k": k, "ngl": 0, "ngld": 0, "temperature": 0.0, "n_predict": 32, "prompt_id": prompt, "repetition": rep,
           "engine": "server"}
    if mode == "speculative":
        cfg["strategy"] = {"spec_type": "draft-simple"}
    return parse({"pair": "P", "mode": mode, "error": None, "config": cfg,
                  "metrics": {"tokens_per_s": tps, "n_tokens": 32, "decode_s": 32 / tps, "rounds": 8 if k else 0,
                              "drafted": 8 * k, "accepted": 4 * k},
                  "order": {"design": "alternate", "position": 0, "started": 1_800_000_000.0 + 10 * rep + k},
                  "models": {"target": {"file": "t.gguf"}, "draft": {"file": "d.gguf"}}})


@pytest.mark.parametrize("k4_gains, verdict_k", [([0.20, 0.22, 0.19, 0.21], 4), ([0.4, -0.3, 0.35, -0.25], 0)])
def test_a_server_check_decides_by_the_verdict_rule(monkeypatch, tmp_path, k4_gains, verdict_k):
    """--check measures K=2, 4 and 8 (the recommended K=4 and its neighbours) and the target alone in 4 interleaved
    blocks. K=4 gaining a steady +20%: decided, the verdict and what tune deploys. K=4 gaining +40% and losing 30% by
    turns (K=2 and K=8 slower than the target alone): nothing decided, the verdict is the target alone although K=4
    was predicted, and --json's best says so beside the prediction."""
    from gguf_bench.measure.flows import server_tune as flow
    from gguf_bench.measure.inputs.prompts import Prompt
    from gguf_bench.measure.pair import PairFiles

    [cal] = calibrations([rec("target", 0, 32, 0.31), rec("target", 0, 32, 0.31),
                          rec("speculative", 2, 32, 0.27, 16, 15, (12, 3)), rec("speculative", 4, 32, 0.25, 10, 20, (10, 6, 3, 1)),
                          rec("speculative", 8, 32, 0.26, 6, 24, (6, 6, 6, 6, 0, 0, 0, 0))])
    gains = {2: [-0.05] * 4, 4: k4_gains, 8: [-0.1] * 4}
    runs = [checked_run("target", 0, a, rep) for rep, a in enumerate([100.0, 90.0, 80.0, 95.0])]
    runs += [checked_run("speculative", k, r.metrics.tokens_per_s * (1 + g[r.config.repetition]), r.config.repetition)
             for k, g in gains.items() for r in list(runs)]
    monkeypatch.setattr(flow, "_measure", lambda job, grid, what, step: runs)
    job = flow.ServerTuneJob(PairFiles(tmp_path / "t.gguf", tmp_path / "d.gguf", "P"), [Prompt("p1", "code", "hi")],
                             [2, 4, 8], ["draft-simple"], 32, 256, None, "st", tmp_path / "st.jsonl", reps=4)
    top, within = flow.recommend([cal], job.ks)
    assert top[1].k == 4
    tuned = flow.ServerTuned(job, [cal], top, [], within_scatter=within)
    tuned.checked, tuned.verdict = flow.run_check(tuned, lambda what: None)
    by_k = {r["k"]: r for r in tuned.checked}
    assert tuned.verdict["k"] == verdict_k and by_k[4]["decided"] is (verdict_k == 4)
    assert by_k[2]["decided"] is False or by_k[2]["measured_gain_pct"] < 0
    chosen = tuned.chosen
    assert (chosen[1].k if chosen else 0) == verdict_k
    doc = server_tuning.as_json(tuned)
    assert doc["best"]["k"] == verdict_k and doc["best"]["from"] == "measured by --check"
    assert doc["predicted_best"]["k"] == 4 and doc["check"] == tuned.checked
    line = server_tuning.recommendation_line(tuned)
    assert line.startswith("recommendation (measured by --check): ") and line.endswith("predicted: --spec-type "
                                                                                         "draft-simple at K=4")
    assert ("run the target alone" in line) == (verdict_k == 0)
    [k4] = [ln for ln in rendered(server_tuning.check_table(tuned)).splitlines() if "K=4" in ln]
    assert ("/ ~" in k4) == (verdict_k == 0) and "[" in k4


def test_ngram_twins_and_other_types_are_refused_with_one_line():
    with pytest.raises(ConfigError, match="repeats by chance"):
        check_predictable("ngram-mod", twin=True)
    with pytest.raises(ConfigError, match="takes llama-server's types"):
        check_predictable("draft")
    with pytest.raises(ConfigError, match="ngram-cache drafts at most 8 tokens whatever -K says"):
        check_predictable("ngram-cache")
    check_predictable("ngram-mod")  # one type, real files: taken
    check_predictable("draft-mtp", twin=True)


def test_tune_through_llama_server_predicts_recommends_and_checks(tiny_pairs, server_bin, isolated):
    """The tiny pair through a real llama-server: the calibration's runs are stored, each K of -K is predicted (the
    calibrated ones from their own rounds), --check measures the recommended K beside its neighbours and the target
    alone, and the deploy line is a calibration run's own command at the recommended K (or the target alone's)."""
    target, draft = tiny_pairs["high"]
    result = invoke("tune", "--target", str(target), "--draft", str(draft), "--engine", "server", "--server-bin",
                    str(server_bin), "-K", "1,2,4", "--prompt-ids", "code-short", "-n", "48", "--reps", "1",
                    "--check", "--json", "--name", "st")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    [cal] = doc["calibrations"]
    # each K calibrated; the largest timed (a smaller K's few rounds may drown in a noisy machine's plain steps: then
    # interpolated, never dropped)
    assert cal["spec_type"] == "draft-simple" and "4" in cal["rounds_s"] and len(cal["a"]) == 4
    assert {k: v in ("measured", "interpolated") for k, v in cal["round_from"].items()} == dict.fromkeys("124", True)
    assert all(cal["round_from"][k] == "measured" for k in cal["rounds_s"])
    assert [r["k"] for r in doc["rows"]] == [1, 2, 4] and all(r["predicted_tokens_per_s"] > 0 for r in doc["rows"])
    check = doc["check"]
    assert check[0]["k"] == 0 and all(r["measured_tokens_per_s"] > 0 and r["runs"] == 1 for r in check)
    k = doc["best"]["k"]
    if k:
        assert f"--spec-draft-n-max {k} " in doc["deploy"] and "-md " in doc["deploy"]
    else:
        assert "--spec-type none" in doc["deploy"]
    runs = stored(isolated / "results" / "st.jsonl")
    assert {r["config"]["engine"] for r in runs} == {"server"} and all(r["error"] is None for r in runs)
    spec = [r for r in runs if r["mode"] == "speculative"]
    assert spec and all(r["metrics"]["rounds"] > 0 and r["metrics"]["accepted_at"] for r in spec)
    refused = invoke("tune", "--target", str(target), "--engine", "server", "--spec-type", "ngram-mod", "--twin",
                     "-K", "2")
    assert refused.exit_code == 1 and "repeats by chance" in refused.stderr


def test_tune_through_llama_server_at_two_slots(tiny_pairs, server_bin, isolated):
    """--parallel 2: calibrated with two clients on two slots, each request's own share of the rounds."""
    target, draft = tiny_pairs["high"]
    result = invoke("tune", "--target", str(target), "--draft", str(draft), "--engine", "server", "--server-bin",
                    str(server_bin), "-K", "1,3", "--parallel", "2", "--prompt-ids", "code-short,chat-short", "-n", "16",
                    "--reps", "1", "--json", "--name", "st2")
    assert result.exit_code == 0, result.output
    [cal] = json.loads(result.stdout)["calibrations"]
    assert cal["parallel"] == 2 and cal["a_from"].startswith("one a") and set(cal["rounds_s"]) == {"1", "3"}
    assert "-np 2" in json.loads(result.stdout)["deploy"]
    runs = stored(isolated / "results" / "st2.jsonl")
    assert all(r["config"]["parallel"] == 2 and len(r["metrics"]["requests"]) == 2 for r in runs)


def test_tune_twins_of_an_mtp_target_through_llama_server(tmp_path, server_bin, isolated):
    """draft-mtp on a twin of the tiny MTP target (its header, synthetic weights): round times measured at the calibrated
    K's, tokens/s predicted at the named acceptance rates, no recommendation (a twin's acceptance is chance)."""
    from gguf_bench.models.tiny_heads import write_mtp_target

    target = write_mtp_target(tmp_path / "tiny-mtp.gguf", heads=1)
    result = invoke("tune", "--target", str(target), "--engine", "server", "--server-bin", str(server_bin), "--spec-type",
                    "draft-mtp", "--twin", "-K", "1,2", "--acceptance", "0.6,0.8", "--prompt-ids", "code-short", "-n",
                    "16", "--reps", "3", "--json", "--name", "mtp-twin")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["pair"] == "tiny-mtp.gguf twin" and doc["deploy"] is None and "rows" not in doc
    assert set(doc["calibrations"][0]["rounds_s"]) == {"1", "2"}
    rows = doc["at_acceptance"]
    assert {(r["acceptance"], r["k"]) for r in rows} == {(0.6, 1), (0.6, 2), (0.8, 1), (0.8, 2)}
    for k in (1, 2):  # the same round, more tokens at the higher rate
        at = {r["acceptance"]: r["predicted_tokens_per_s"] for r in rows if r["k"] == k}
        assert at[0.8] > at[0.6] > 0
    spec = [r for r in stored(isolated / "results" / "mtp-twin.jsonl") if r["mode"] == "speculative"]
    assert spec and all(r["metrics"]["drafted"] > 0 for r in spec)


def looping_target(folder: Path) -> Path:
    """A tiny target whose every logit is exactly 0 (its output norm zeroed): greedy takes the first token at every step
    on any machine, so the text repeats from its first tokens and an n-gram lookup finds a match at each step."""
    from gguf_bench.models.tiny import TinySpec, random_weights, vocabulary, write_gguf

    spec = TinySpec()
    weights = random_weights(spec, len(vocabulary()[0]), seed=0)
    weights["output_norm.weight"][:] = 0.0
    return write_gguf(folder / "looping.gguf", spec, weights)


def test_tune_an_ngram_type_through_llama_server(server_bin, isolated):
    """ngram-map-k on a target whose text repeats: the share of drafting steps is measured at each calibrated K and
    enters every prediction, and the deploy line carries the type's own size flag at the recommended K. (ngram-simple
    would draft nothing here: it copies from the nearest match, one token back in a text of one token repeated.)"""
    # one thread: a tiny model's token takes a fraction of a millisecond, and two threads spinning at their barriers on
    # a busy machine scatter it several-fold, which can leave a round no time once the plain steps are taken out
    result = invoke("tune", "--target", str(looping_target(isolated)), "--engine", "server", "--server-bin",
                    str(server_bin), "--spec-type", "ngram-map-k", "-K", "2,4", "--prompt-ids", "code-short", "-n", "64",
                    "-t", "1", "--reps", "1", "--json", "--name", "stn")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    [cal] = doc["calibrations"]
    assert cal["spec_type"] == "ngram-map-k" and set(cal["drafting_share"]) == {"2", "4"}
    assert all(0 < d <= 1 for d in cal["drafting_share"].values()) and cal["a"][:2] == [1.0, 1.0]
    assert [r["k"] for r in doc["rows"]] == [2, 4] and all(r["predicted_tokens_per_s"] > 0 for r in doc["rows"])
    k = doc["best"]["k"]
    assert f"--spec-ngram-map-k-size-m {k} " in doc["deploy"] if k else "--spec-type none" in doc["deploy"]
