"""What a new user meets first (issue 23, point 7): progress that is never silent, words that say what happened,
--version, --results-dir, and the same token text and layer count in every command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cli_helpers import assert_user_error, invoke, pair_args

from hubserver import HubServer

# --- download: "fetched" for what this call fetched, and a line per step where no bar can draw ---------------


def test_download_says_fetched_for_a_source_it_fetched_for_a_derived_model(tmp_path, tiny_pairs):
    """The pair's target is derived from its draft: the draft is fetched for the target, then is not 'already
    cached' seconds later. Output to a pipe (not a terminal) gets one line per step."""
    draft = tiny_pairs["middle"][1]
    reg = tmp_path / "models.yaml"
    reg.write_text("default: p\nmodels:\n  d: {hf: {repo: acme/tiny-GGUF, file: tiny-draft.gguf}}\n"
                   "  t: {derive: {from: d, quant: F16}}\npairs:\n  p: {target: t, draft: d}\n")
    with HubServer() as hub:
        hub.state.files["acme/tiny-GGUF"] = {"tiny-draft.gguf": draft.read_bytes()}
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_ETAG_TIMEOUT": "5",
               "HF_HUB_DOWNLOAD_TIMEOUT": "5"}
        args = [sys.executable, "-m", "gguf_bench.cli", "download", "p", "--registry", str(reg)]
        first = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
        again = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["d", "t"], first.stdout  # the source first, each once
    assert all(": fetched " in ln for ln in lines) and "already cached" not in first.stdout, first.stdout
    steps = first.stderr.splitlines()
    assert steps == ["quantize tiny-draft.gguf -> F16 ..."], first.stderr  # the 1 MB download is too short to announce
    assert again.returncode == 0 and again.stdout.count("already cached, nothing to do") == 2, again.stdout
    assert again.stderr == "", again.stderr  # nothing to do: no step lines


def test_a_long_step_gets_one_line_where_no_bar_can_draw(capsys):
    from gguf_bench.cli.progress import DownloadProgress

    with DownloadProgress() as progress:
        for done in range(0, 253_113_024, 8 << 20):
            progress("assemble gemma-3-270m-q4_k_m.gguf", done, 253_113_024)
        progress("quantize gemma-3-270m-q4_k_m.gguf -> F32", 0, None)
    assert capsys.readouterr().err.splitlines() == ["assemble gemma-3-270m-q4_k_m.gguf ... (253 MB)",
                                                    "quantize gemma-3-270m-q4_k_m.gguf -> F32 ..."]


# --- progress lines -------------------------------------------------------------------------------------


def test_sweep_progress_says_target_alone_not_k0(tiny_pairs):
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "--name", "p", "--prompt-ids", "code-short", "-n", "8",
                    "-K", "2", "-t", "1")
    assert result.exit_code == 0, result.output
    progress = [ln.strip() for ln in result.output.splitlines() if " rep 0:" in ln]
    labels = [ln.split(" T=")[0].strip() for ln in progress]
    assert sorted(labels) == ["K=2", "draft alone", "target alone"], result.output  # in a shuffled order: none first
    assert "K=0" not in result.output


# --- info: the same token text and layer count as everywhere else ---------------------------------------------


def test_info_shows_token_text_as_run_does_and_layers_as_tables_count_them(tiny_pairs, monkeypatch):
    """A token text like '[multimodal]' is the file's text, never rich markup (it printed b'' where run printed
    b'[multimodal]'); layers read '5 (4 blocks + output)', as tables show 0/5, not '4'."""
    import dataclasses

    import gguf_bench.cli.models as cli_models
    from gguf_bench.measure.pair import check_compatible
    from gguf_bench.models.pairs import PairFiles
    from gguf_bench.runtimes.llama_cpp import read_info

    target, draft = tiny_pairs["high"]

    def with_token5(path):
        info = read_info(path)
        tokens = list(info.tokens)
        tokens[5] = b"[multimodal]" if path == target else b"<unused0>"
        return dataclasses.replace(info, tokens=tuple(tokens))

    monkeypatch.setattr(cli_models, "read_info", with_token5)
    result = invoke("info", str(target), str(draft))
    assert result.exit_code == 0, result.output
    assert "token 5 differs: b'[multimodal]' / b'<unused0>'" in result.output, result.output
    assert "compatible: NO (token text from id 5 differ)" in result.output
    layers = next(ln for ln in result.output.splitlines() if ln.startswith("layers"))
    assert layers.count("5 (4 blocks + output)") == 2, layers

    import gguf_bench.measure.pair as pair_module

    monkeypatch.setattr(pair_module, "read_info", with_token5)
    try:
        check_compatible(PairFiles(target, draft, "p"))
    except Exception as exc:  # what run and sweep print: the same text
        assert "token 5 differs: b'[multimodal]' / b'<unused0>'" in str(exc)
    else:
        raise AssertionError("the pair should be refused")


# --- --version, --results-dir, report --format with evaluations only, run --prompt-ids ----------------------


def test_version_names_gguf_bench_and_llama_cpp_python():
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"gguf-bench {version('gguf-bench')}, llama-cpp-python {version('llama-cpp-python')}"


def test_results_dir_option_beats_the_environment_variable(tiny_pairs, isolated, tmp_path):
    chosen = tmp_path / "chosen"
    ran = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "8", "-t", "1", "--name", "r", "--results-dir", str(chosen))
    assert ran.exit_code == 0, ran.output
    assert (chosen / "r.jsonl").is_file() and not (isolated / "results").exists()  # $GGUF_BENCH_RESULTS untouched
    assert f"stored 3 runs in {chosen / 'r.jsonl'}" in ran.output
    shown = invoke("report", "--results-dir", str(chosen))
    assert shown.exit_code == 0 and "target alone" in shown.stdout, shown.output
    again = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "8", "-t", "1", "--name", "r")  # no option: the variable
    assert again.exit_code == 0 and (isolated / "results" / "r.jsonl").is_file(), again.output
    swept = invoke("sweep", *pair_args(tiny_pairs["high"]), "-n", "8", "-t", "1", "-K", "2", "--prompt-ids", "code-short",
                   "--no-draft-alone", "--name", "s", "--results-dir", str(chosen))
    assert swept.exit_code == 0 and (chosen / "s.jsonl").is_file(), swept.output
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    result = invoke("eval", *pair_args(tiny_pairs["high"]), "--nb-prompts", "2", "--results-dir", str(blocked))
    assert result.exit_code == 1 and f"cannot store results in {blocked} (from --results-dir)" in result.stderr, result.output


def test_report_format_writes_files_that_hold_only_evaluations(tiny_pairs, isolated):
    assert invoke("eval", *pair_args(tiny_pairs["high"]), "--nb-prompts", "3", "-n", "4", "--name", "ev").exit_code == 0
    md = invoke("report", "--format", "md")
    assert md.exit_code == 0, md.output
    lines = md.stdout.splitlines()
    assert lines[0].startswith("| pair | T | K | regular | speculative |") and len(lines) == 3, md.stdout
    assert "| 0 | 4 | " in lines[2] and "/3 |" in lines[2], md.stdout
    csv = invoke("report", "--format", "csv")
    assert csv.exit_code == 0 and csv.stdout.splitlines()[0].startswith("pair,temperature,k,n,regular_ok"), csv.output
    assert invoke("run", *pair_args(tiny_pairs["high"]), "-n", "8", "-t", "1", "--name", "r").exit_code == 0
    both = invoke("report", "--format", "md").stdout
    assert "(target alone)" in both and "| pair | T | K | regular |" in both, both  # runs, then evaluations


def test_run_takes_one_built_in_prompt_by_id(tiny_pairs):
    """The README's n-gram example: --target alone, --spec-type ngram, --prompt-ids code-edit-hints."""
    target = str(tiny_pairs["high"][0])
    result = invoke("run", "--target", target, "--spec-type", "ngram", "-K", "16", "--prompt-ids", "code-edit-hints",
                    "-n", "8", "-t", "1", "--json")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert {r["config"]["prompt_id"] for r in records} == {"code-edit-hints"} and records[-1]["config"]["chat"] is True
    assert_user_error(invoke("run", "--target", target, "--spec-type", "ngram", "--prompt-ids", "code"),
                      "run measures one prompt, and --prompt-ids code names 2", "sweep --prompt-ids")
    assert_user_error(invoke("run", "--target", target, "--spec-type", "ngram", "--prompt-ids", "code-short", "-p", "x"),
                      "give one of --prompt, --prompt-file and --prompt-ids")


def test_two_runs_in_one_second_get_two_files(tiny_pairs, isolated):
    for _ in range(2):  # each well under a second on the tiny pair
        result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "4", "-t", "1", "-K", "1")
        assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (isolated / "results").glob("run-*.jsonl"))
    assert len(files) == 2, files
