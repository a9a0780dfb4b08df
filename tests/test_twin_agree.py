"""Agreeing twins (twin --agree, models/twin.py): every logit 0, so a target's twin and its draft's both predict
token 0 everywhere. Through the real loop and sweep: acceptance exactly 1 greedy and sampled, the target alone
generates all n tokens and none is an end-of-generation token; plain twins of the same pair still disagree; records,
report and tune say so; bad input is one line. The script bench_known_acceptance.py runs end to end on tiny twins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.models.parts import local_header
from gguf_bench.models.tiny import TinySpec, make_pair
from gguf_bench.models.twin import AGREEING, MARKER, is_agreeing_file, write_twin

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny pair whose draft is narrower than its target (as a real draft is): their plain twins' logits differ."""
    return make_pair(tmp_path_factory.mktemp("agree"), noise=0.0, draft_spec=TinySpec(n_layers=2, width=32, ff=64))


def _twins(pair, folder: Path, agree: bool) -> tuple[Path, Path]:
    return tuple(write_twin(local_header(p), folder / f"{p.stem}.{'agree' if agree else 'plain'}.gguf", p.name,
                            agree=agree).path for p in pair)


def _sweep(files, name: str, folder: Path) -> list[dict]:
    result = invoke("sweep", *pair_args(files), "--name", name, "-K", "2", "--temp", "0,0.7", "-n", "12",
                    "--prompt-ids", "code-short", "--no-draft-alone", "--threads", "2")
    assert result.exit_code == 0, result.output
    return stored(folder / "results" / f"{name}.jsonl")


def test_agreeing_twins_accept_every_draft_greedy_and_sampled(pair, isolated):
    twins = _twins(pair, isolated, agree=True)
    assert all(is_agreeing_file(t) for t in twins)
    records = [r for r in _sweep(twins, "agree", isolated) if r.get("kind", "run") == "run" and r.get("metrics")]
    spec = [r for r in records if r["mode"] == "speculative"]
    assert {(r["config"]["k"], r["config"]["temperature"]) for r in spec} == {(2, 0.0), (2, 0.7)}
    for r in spec:
        m = r["metrics"]
        assert m["drafted"] > 0 and m["accepted"] == m["drafted"], (r["config"], m["drafted"], m["accepted"])
    alone = [r for r in records if r["mode"] == "target"]
    assert alone and all(r["metrics"]["n_tokens"] == 12 and not r["metrics"]["stopped_by_eog"] for r in alone)
    assert all(r["models"]["target"]["twin_agrees"] and r["models"]["draft"]["twin_agrees"] for r in records)
    # the report keeps the agreeing twins' acceptance and gain (1 by construction), and says what they are
    rows = json.loads(invoke("report", str(isolated / "results" / "agree.jsonl"), "--format", "json").stdout)
    assert all(r["acceptance"] == 1.0 and r["gain_pct"] is not None for r in rows if r["mode"] == "speculative")
    assert "agreeing twins (twin --agree)" in invoke("report", str(isolated / "results" / "agree.jsonl")).stdout


def test_the_agreeing_target_alone_generates_token_0_which_is_no_end_token(pair, isolated):
    from gguf_bench.decoding.loop import generate_regular
    from gguf_bench.decoding.sampling import SamplingConfig
    from gguf_bench.runtimes.llama_cpp import Model, Vocabulary

    twin = _twins(pair, isolated, agree=True)[0]
    with Model(twin, n_ctx=256) as t:
        logits = t.eval(t.tokenize("hello world"), 3)
        assert np.isfinite(logits).all() and not logits.any()  # every logit exactly 0, no NaN from the zero norm
        res = generate_regular(t, t.tokenize("hello"), 24, SamplingConfig())
    assert res.tokens == [0] * 24 and not res.stopped_by_eog
    with Vocabulary(pair[0]) as v:  # the source's own vocabulary (a twin's is_eog is always False)
        assert not v.twin and not v.is_eog(0)


def test_plain_twins_of_the_same_pair_still_disagree(pair, isolated):
    records = [r for r in _sweep(_twins(pair, isolated, agree=False), "plain", isolated) if r["mode"] == "speculative"]
    drafted = sum(r["metrics"]["drafted"] for r in records)
    accepted = sum(r["metrics"]["accepted"] for r in records)
    assert drafted and accepted / drafted < 0.5
    assert not any(r["models"]["target"]["twin_agrees"] for r in records)
    rows = json.loads(invoke("report", str(isolated / "results" / "plain.jsonl"), "--format", "json").stdout)
    assert all(r["acceptance"] is None for r in rows if r["mode"] == "speculative")  # a twin's chance: left out


def test_twin_command_agree_and_bad_input(pair, moe_pair, tmp_path):
    ok = invoke("twin", str(pair[0]), "-o", str(tmp_path / "a.gguf"), "--agree")
    assert ok.exit_code == 0, ok.output
    assert "twin of" in ok.stdout and "(agreeing: token 0 everywhere)" in ok.stdout
    from gguf_bench.models.parts import tensor_table

    assert tensor_table(tmp_path / "a.gguf")[0][MARKER].startswith(AGREEING)
    eos0, _ = make_pair(tmp_path / "eos0", eos_id=0)
    assert_user_error(invoke("twin", str(eos0), "-o", str(tmp_path / "e.gguf"), "--agree"), "token 0",
                      "end-of-generation", "without --agree")
    assert_user_error(invoke("twin", str(moe_pair[0]), "-o", str(tmp_path / "m.gguf"), "--agree"),
                      "mixture of experts", "dense")
    plain = write_twin(local_header(pair[0]), tmp_path / "p.gguf", pair[0].name).path
    assert_user_error(invoke("twin", str(plain), "-o", str(tmp_path / "pa.gguf"), "--agree"), "twin already")
    assert_user_error(invoke("twin", str(tmp_path / "a.gguf"), "-o", str(tmp_path / "ap.gguf")), "agreeing twin")
    assert not any(p.name.startswith((".e.gguf", "e.gguf", "m.gguf", "pa.gguf", "ap.gguf")) for p in tmp_path.iterdir())
    assert_user_error(invoke("tune", *pair_args(pair), "--agree"), "--agree", "--twin")


def test_tune_twin_agree_predicts_at_acceptance_1_and_checks(pair, isolated):
    args = [*pair_args(pair), "-K", "1-2", "-n", "8", "--prompt-ids", "code-short", "--reps", "1", "--threads", "2"]
    result = invoke("tune", "--twin", "--agree", *args, "--check", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {r["k"] for r in doc["rows"]} >= {1, 2}  # predicted from its own calibration: acceptance 1
    assert all(r["acceptance"] == 1.0 for r in doc["rows"])
    assert any(r["k"] and r["measured_tokens_per_s"] > 0 for r in doc["check"])  # --check measured it as sweep does
    text = invoke("tune", "--twin", "--agree", *args).stdout
    assert "acceptance 1 by construction" in text and "agreeing twin" in text


def test_bench_known_acceptance_runs_on_tiny_twins(pair, isolated):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_known_acceptance.py"), "--target", str(pair[0]),
                          "--draft", str(pair[1]), "-K", "1,2", "-n", "12", "-r", "1", "--tune-reps", "1", "-ngl", "0",
                          "-ngld", "0", "--threads", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["K", "measured", "t/s"])
    rows = [line.split() for line in lines[head + 1:head + 4]]
    assert rows[0][:2] == ["target", "alone"] and [r[0] for r in rows[1:]] == ["1", "2"]
    assert all(r[2] == "1.000" for r in rows[1:])  # measured acceptance
    assert lines[-1].startswith("within 10%: ") and lines[-1].endswith(" of 2 K")


def test_an_agreeing_twins_gain_is_shown_never_deployed(pair, isolated):
    """Records of agreeing twins rewritten so that K=2 gains 50% on a quiet machine: report shows the gain and deploys
    no speculation; the same records with the twin flags cleared deploy K=2 (the rule that keeps it out is the twin's)."""
    from test_deploy_cases import rewrite, truth, write

    twins = _twins(pair, isolated, agree=True)
    result = invoke("sweep", *pair_args(twins), "--name", "gain", "-K", "2", "-r", "3", "-n", "8", "--prompt-ids",
                    "code-short", "--no-draft-alone", "--threads", "2")
    assert result.exit_code == 0, result.output
    faster = rewrite([r for r in stored(isolated / "results" / "gain.jsonl") if r.get("metrics")], truth({2: 0.5}))
    real = [{**r, "models": {role: {**m, "twin": False, "twin_agrees": False} for role, m in r["models"].items()}}
            for r in faster]
    deploys = {}
    for name, records in (("twins", faster), ("real", real)):
        shown = invoke("report", str(write(isolated / f"{name}.jsonl", records)), "--format", "json")
        rows = json.loads(shown.stdout)
        spec = next(r for r in rows if r["mode"] == "speculative")
        assert spec["gain_pct"] > 40 and spec["acceptance"] == 1.0
        deploys[name] = next(line for line in invoke("report", str(isolated / f"{name}.jsonl")).stdout.splitlines()
                             if line.startswith("deploy"))
    assert "no speculation" in deploys["twins"] and "ran on twins: their gain is shown, never deployed" in \
        " ".join(deploys["twins"].split()), deploys
    assert "K=2" in deploys["real"] and "no speculation" not in deploys["real"], deploys
