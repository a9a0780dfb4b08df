"""The real CLI on tiny pairs: info, run, compare, eval, check-dist, and bad input."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.models.tiny import TinySpec, make_pair


@pytest.fixture(scope="module")
def incompatible(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("incompat"), seed=0, draft_spec=TinySpec(extra_tokens=200))


def test_info_compatible_pair(tiny_pairs):
    result = invoke("info", *map(str, tiny_pairs["middle"]))
    assert result.exit_code == 0, result.output
    assert "llama-cpp-python 0.3" in result.output and "GPU offload:" in result.output
    assert "llama" in result.output and "266 (bpe)" in result.output
    assert "compatible: yes" in result.output


def rule_row(output: str, rule: str) -> str:
    rows = [ln for ln in output.splitlines() if ln.strip("│ ").startswith(rule)]
    assert len(rows) == 1, output
    return rows[0]


def test_info_incompatible_pair_names_the_rule(incompatible):
    """The draft has 200 extra tokens before BOS/EOS: those rules fail on their own rows, the flags pass. EOS ids
    differ too, but llama.cpp compares them only when EOS is added (it is not here): that row passes."""
    result = invoke("info", *map(str, incompatible))
    assert result.exit_code == 0
    assert "compatible: NO (BOS id, vocab size, token text from id 5 differ)" in result.output
    failing = {"BOS id": "264 / 464", "vocab size": "266 / 466 (difference 200, at most 128)",
               "token text from id 5": "token 264 differs"}
    for rule, detail in failing.items():
        row = rule_row(result.output, rule)
        assert " NO " in row and detail in row, row
    for rule in ("vocab type", "add BOS flag", "add EOS flag", "EOS id"):
        assert " yes " in rule_row(result.output, rule)


def test_info_not_gguf_and_missing(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    assert_user_error(invoke("info", str(junk)), "is not a GGUF file")
    assert_user_error(invoke("info", str(tmp_path / "ghost.gguf")), "ghost.gguf does not exist")


def test_models_lists_pairs_and_default():
    result = invoke("models")
    assert result.exit_code == 0
    assert "gemma-270m-f32+q4km (default)" in result.output and "llama3-70b+8b" in result.output
    assert "unverified" in result.output


def test_run_prints_the_three_rows(tiny_pairs):
    result = invoke("run", *pair_args(tiny_pairs["middle"]), "-n", "40", "-K", "3", "-r", "2", "--show-text")
    assert result.exit_code == 0, result.output
    for needle in ("target alone", "draft alone", "K=3", "0/5", "gain", "tiny-target.gguf+tiny-draft.gguf · T=0 · n=40"):
        assert needle in result.output, result.output
    # mean ± std over 2 repetitions; a run measured while the machine was busy is left out of its row (the caption
    # says so), which leaves that row one run and no std
    assert result.output.count("± ") >= 3 or "runs left out: busy" in result.output, result.output


def test_run_json_records(tiny_pairs):
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "20", "--json", "--verify", "sequential")
    records = json.loads(result.stdout)
    assert [r["mode"] for r in records] == ["target", "draft", "speculative"]
    spec = records[2]["metrics"]
    assert spec["acceptance"] == 1.0 and spec["n_tokens"] == 20
    assert records[0]["metrics"]["text"] == spec["text"] and spec["identity"]["identical"] is True
    assert records[2]["config"]["verify"] == "sequential"
    assert records[0]["env"]["llama_cpp_python"].startswith("0.3")
    # each record names the llama.cpp build it ran: libllama's version, ggml's commit, its system info, the file loaded
    build = records[0]["build"]
    assert all(r["build"] == build for r in records) and build["version"] and build["commit"]
    assert build["system_info"] == records[0]["env"]["system_info"] and "CPU :" in build["system_info"]
    assert Path(build["path"]).name.startswith("libllama") and build["build_number"] is None
    assert build["sha256"] == hashlib.sha256(Path(build["path"]).read_bytes()).hexdigest()
    # the time split: inside llama_decode (target, draft), sampling, the rest; the overhead as % of decode
    assert spec["target_decode_s"] > 0 and spec["draft_decode_s"] > 0 and spec["sample_s"] > 0
    parts = spec["target_decode_s"] + spec["draft_decode_s"] + spec["sample_s"] + spec["other_s"]
    assert parts == pytest.approx(spec["decode_s"])
    assert spec["overhead_pct"] == pytest.approx(100 * (spec["sample_s"] + spec["other_s"])
                                                 / (spec["target_decode_s"] + spec["draft_decode_s"]))


def test_run_footer_says_whether_greedy_output_matches(tiny_pairs):
    result = invoke("run", *pair_args(tiny_pairs["middle"]), "-n", "30", "-K", "3", "--verify", "sequential")
    assert result.exit_code == 0, result.output
    assert "greedy check, K=3: output identical to the target alone's" in result.output


def test_run_warns_about_offload_on_a_cpu_build(tiny_pairs):
    from gguf_bench.runtimes.llama_cpp import gpu_offload_supported

    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "5", "-ngl", "all", "-ngld", "3")
    assert result.exit_code == 0
    assert ("cannot offload" in result.stderr) != gpu_offload_supported()


@pytest.mark.parametrize("args, needle", [
    (["-K", "0"], "draft length -K/--draft-max must be >= 1, got 0"),
    (["-n", "0"], "--n-predict must be >= 1"),
    (["--temp", "-1"], "--temp must be >= 0"),
    (["-ngl", "lots"], "GPU layers must be a number or 'all'"),
    (["--name", "a/b"], "--name 'a/b' may hold only"),
])
def test_run_bad_input(tiny_pairs, args, needle):
    assert_user_error(invoke("run", *pair_args(tiny_pairs["high"]), *args), needle)


def test_eval_refuses_a_name_with_a_path_separator(tiny_pairs, isolated):
    assert_user_error(invoke("eval", *pair_args(tiny_pairs["high"]), "--name", "a/b"), "--name 'a/b' may hold only")
    assert not (isolated / "results" / "a").exists()


def test_run_incompatible_pair(incompatible):
    assert_user_error(invoke("run", *pair_args(incompatible)), "cannot draft for", "vocab size")


def test_run_model_that_fails_to_load(tmp_path, tiny_pairs):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_pairs["high"][0].read_bytes()[:5000])  # GGUF magic, truncated body
    assert_user_error(invoke("run", "--target", str(broken), "--draft", str(tiny_pairs["high"][1])))


def test_run_unknown_pair_and_bad_registry(tmp_path):
    assert_user_error(invoke("run", "gemma-270m-f32+q4kn"), "Did you mean: gemma-270m-f32+q4km")
    bad = tmp_path / "models.yaml"
    bad.write_text("models: {a: {path: x.gguf}}\npairs: {p: {target: a, draft: zz}}\ndefault: p\n")
    assert_user_error(invoke("run", "p", "--registry", str(bad)), str(bad), "pairs.p.draft")


def test_a_prompt_longer_than_the_context_grows_it_and_says_so(tiny_pairs, isolated):
    """issue 31: the context holds prompt + output + a verify batch (rounded up to 256), with a note."""
    result = invoke("run", *pair_args(tiny_pairs["high"]), "--ctx-size", "64", "-p", "word " * 80, "-n", "8", "--name", "grow")
    assert result.exit_code == 0, result.output
    assert "Note: --ctx-size 64 cannot hold" in result.stderr and "the longest prompt (401 tokens)" in result.stderr
    assert "running with -c 512" in result.stderr  # 401 + 8 + 5 tokens, rounded up to 256
    assert {r["config"]["n_ctx"] for r in stored(isolated / "results" / "grow.jsonl")} == {512}


def test_compare_shows_both_and_a_summary(tiny_pairs):
    result = invoke("compare", *pair_args(tiny_pairs["middle"]), "-n", "30", "-K", "3", "--verify", "sequential")
    assert result.exit_code == 0, result.output
    assert "regular: tiny-target.gguf" in result.output and "speculative K=3" in result.output
    assert "acceptance" in result.output and "gain" in result.output and "output identical to the target alone's" in result.output


def test_eval_on_tiny_pair_stores_a_record(tiny_pairs, isolated):
    result = invoke("eval", *pair_args(tiny_pairs["low"]), "--nb-prompts", "6", "-n", "6", "--name", "ev",
                    "--verify", "sequential")
    assert result.exit_code == 0, result.output
    assert "identical outputs (greedy): 6/6 (100%)" in result.output
    record = json.loads((isolated / "results" / "ev.jsonl").read_text())
    assert record["kind"] == "eval" and len(record["rows"]) == 6


def test_check_dist_passes_on_a_correct_loop(tiny_pairs):
    result = invoke("check-dist", *pair_args(tiny_pairs["middle"]), "--samples", "150", "-m", "4")
    assert result.exit_code == 0, result.output
    assert "no evidence of a difference" in result.output


def test_console_script_reports_errors_without_traceback(tmp_path):
    env = {**os.environ, "GGUF_BENCH_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "run", "--target", "nope.gguf", "--draft", "x"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and proc.stderr.strip() == "Error: model file nope.gguf does not exist"


def test_compare_panels_end_on_the_summary_figures(tiny_pairs):
    import re

    result = invoke("compare", *pair_args(tiny_pairs["middle"]), "-n", "40", "-K", "3")
    assert result.exit_code == 0, result.output
    summary = re.search(r"regular: \d+ tokens in [\d.]+ s \(([\d.]+) tokens/s\).*speculative: \d+ tokens in [\d.]+ s "
                        r"\(([\d.]+) tokens/s\)", result.output.replace("\n", " "))
    assert summary, result.output
    for rate in summary.groups():
        assert f"40 tokens, {rate} tokens/s" in result.output  # each panel's last subtitle
