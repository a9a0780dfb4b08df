"""The whole request (issue 64, items 1 and 3): every run's time to first token, the speculative row's prompt cost over
its target alone as a paired interval (shown where prompts are long enough), and --objective decode|request|throughput
for the gain, the star, -r auto and the deploy line. Bookkeeping over records written here, no model."""

from __future__ import annotations

import json

import pytest
from cli_helpers import invoke
from rich.console import Console

from gguf_bench.errors import BenchError
from gguf_bench.measure import deploy
from gguf_bench.measure.repeat import undecided
from gguf_bench.results.presentation import answer
from gguf_bench.results.presentation.report import render, rich_table
from gguf_bench.results.presentation.summary import TTFT_PROMPT_TOKENS, for_objective, summarize, to_frame
from gguf_bench.results.schema.records import parse
from gguf_bench.results.schema.run_fields import RUN_FIELDS, run_row

T0 = 1_800_000_000.0


def rec(mode, tps, prompt_s, k=0, rep=0, prompt_tokens=2000, engine=None, ttft=None, requests=None, t=0.0):
    """A run, interleaved (paired with the target alone of its block): -n 64 tokens at `tps`, its prompt in `prompt_s`."""
    return {"pair": "P", "mode": mode, "error": None,
            "config": {"k": k, "ngl": 0, "ngld": 0, "temperature": 0.0, "n_predict": 64, "prompt_id": "p1",
                       "repetition": rep, "engine": engine},
            "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "n_tokens": 64, "decode_s": 64 / tps,
                        "prompt_tokens": prompt_tokens, "prompt_s": prompt_s, "ttft_s": ttft, "requests": requests,
                        "acceptance": 0.8 if mode == "speculative" else None,
                        "drafted": 8 if mode == "speculative" else 0},
            "offload": {"target": "0/19", "draft": "0/19"},
            "models": {"target": {"file": "t.gguf"}, "draft": {"file": "d.gguf"}},
            "order": {"design": "shuffled", "position": 0, "started": T0 + t}}


# per repetition: the target alone at 20 tokens/s with its prompt in 4 s; K=4 at +40% decode, its prompt 2.0x as long
ALONE = [20.0, 20.4, 19.8, 20.2, 20.1, 19.9]
GAIN = [0.40, 0.42, 0.39, 0.41, 0.40, 0.38]
COST = [1.00, 1.04, 0.97, 1.02, 1.01, 0.99]


def sweep(prompt_tokens=2000, prompt_s=4.0):
    out = []
    for rep, a in enumerate(ALONE):
        out.append(rec("target", a, prompt_s, rep=rep, prompt_tokens=prompt_tokens, t=2 * rep))
        out.append(rec("speculative", a * (1 + GAIN[rep]), prompt_s * (1 + COST[rep]), k=4, rep=rep,
                       prompt_tokens=prompt_tokens, t=2 * rep + 1))
    return out


def plain(table, width=80) -> str:
    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text()


def spec_row(summary):
    [row] = [r for _, r in summary[summary["mode"] == "speculative"].iterrows()]
    return row


def heads(records, objective="decode"):
    df = for_objective(to_frame(records), objective)
    summary = deploy.with_deploy(summarize(df), df, [parse(r) for r in records])
    return summary, [head for head, _ in answer.lines(summary)]


# --- 1. the time to first token of every run, and the speculative row's prompt cost ---------------------------------


def test_every_engine_has_a_time_to_first_token():
    """The Python loop and llama-server one request at a time: the prompt's processing as the engine timed it; rounds of
    clients and the endpoint: the client's first-token time, which they store."""
    fields = {f.name: f for f in RUN_FIELDS}
    loop = parse(rec("speculative", 30.0, 2.5, k=4))
    server = parse(rec("target", 20.0, 1.2, engine="server"))
    endpoint = parse(rec("speculative", 30.0, 0.0, k=0, engine="endpoint", ttft=1.7))
    assert fields["ttft_s"].get(loop) == 2.5 and fields["ttft_s"].get(server) == 1.2
    assert fields["ttft_s"].get(endpoint) == 1.7
    row = run_row(loop)
    assert row["pp_tokens_per_s"] == pytest.approx(2000 / 2.5)
    assert row["request_latency_s"] == pytest.approx(2.5 + 64 / 30.0)  # TTFT + -n tokens at its speed
    assert row["request_tokens_per_s"] == pytest.approx(64 / (2.5 + 64 / 30.0))
    assert row["served_tokens_per_s"] == pytest.approx(64 / (2.5 + 64 / 30.0))
    rounded = parse(rec("target", 40.0, 3.0, engine="server", ttft=0.9, requests=[{}, {}]))
    assert run_row(rounded)["served_tokens_per_s"] == 40.0  # a round's own: every token over its wall time


def test_the_prompt_cost_is_a_paired_interval_shown_for_long_prompts():
    summary = summarize(to_frame(sweep()))
    row = spec_row(summary)
    assert row["ttft_cost_pct"] == pytest.approx(100.0, abs=3)
    assert row["ttft_cost_lo"] < row["ttft_cost_pct"] < row["ttft_cost_hi"] and row["ttft_cost_lo"] > 90
    text = plain(rich_table(summary, width=80))
    assert "TTFT" in text and "+100% [" in text
    assert f"shown for prompts of {TTFT_PROMPT_TOKENS}+ tokens" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_short_prompts_keep_the_table_and_json_still_carries_the_cost():
    summary = summarize(to_frame(sweep(prompt_tokens=19, prompt_s=0.004)))
    assert "TTFT" not in plain(rich_table(summary, width=80))
    rows = json.loads(render(summary, "json"))
    for r in rows:
        assert {"ttft_s", "pp_tokens_per_s", "ttft_cost_pct", "ttft_cost_lo", "ttft_cost_hi"} <= set(r)
        assert r["ttft_s"] is not None and r["pp_tokens_per_s"] is not None
    assert [r["ttft_cost_pct"] is not None for r in rows] == [r["mode"] == "speculative" for r in rows]


# --- 3. --objective ------------------------------------------------------------------------------------------------


def test_a_decided_decode_gain_is_not_deployed_for_request_latency_when_the_prompt_costs_more():
    """K=4 decodes 40% faster, but its 2,000-token prompt takes 8 s against 4: a request of 64 tokens takes 8 + 2.3 s
    against 4 + 3.2 s. Decode deploys K=4; request latency does not (its gain is 7.2 / 10.3 - 1 = -30%, decided)."""
    summary, lines = heads(sweep())
    assert lines[0].startswith("deploy P: K=4 (") and "objective" not in lines[0]
    summary, lines = heads(sweep(), "request")
    row = spec_row(summary)
    assert row["gain_pct"] == pytest.approx(100 * (7.2 / (8 + 64 / 28) - 1), abs=2) and row["gain_hi"] < 0  # latency ratio
    assert row["decode_tokens_per_s"] == pytest.approx(28.1, abs=0.3)  # the decode speed kept beside it
    assert lines[0].startswith("deploy P (objective: request latency): no speculation ("), lines[0]
    assert "s per request of 64 tokens" in lines[0]
    assert not summary["best_k"].any()


def test_request_latency_deploys_where_the_prompt_is_short():
    _, lines = heads(sweep(prompt_tokens=19, prompt_s=0.004), "request")
    assert lines[0].startswith("deploy P (objective: request latency): K=4 ("), lines[0]


def test_r_auto_reads_the_objective():
    """The verdicts -r auto closes are the objective's: the request latency's is decided here too (slower)."""
    records = [parse(r) for r in sweep()]
    assert undecided(records, objective="request").rows == []
    assert undecided(records, objective="throughput").rows == []


def test_an_unknown_objective_is_one_line(tmp_path):
    with pytest.raises(BenchError, match="unknown objective"):
        for_objective(to_frame(sweep()), "joy")
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in sweep()))
    result = invoke("report", str(path), "--objective", "joy")
    assert result.exit_code == 1 and "--objective takes decode, request, throughput" in result.output


def test_report_objective_request(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in sweep()))
    result = invoke("report", str(path), "--objective", "request")
    assert result.exit_code == 0, result.output
    assert "objective: request latency" in result.output
    rows = json.loads(invoke("report", str(path), "--objective", "request", "--format", "json").output)
    assert {r["objective"] for r in rows} == {"request"}
