"""--prompt-tokens (issue 64, item 2): each prompt made that many tokens long by real text before its task, timed;
the length stored in the record and kept apart as its own workload (its rows, its deploy line). A real sweep of a
tiny pair."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_helpers import assert_user_error, invoke, pair_args


def stored(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_each_prompt_is_made_that_long_and_each_length_is_its_own_workload(tiny_pairs, isolated):
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "-r", "2",
                    "--no-draft-alone", "--prompt-ids", "code-short,chat-short", "--prompt-tokens", "160,100",
                    "--name", "lengths")
    assert result.exit_code == 0, result.output
    runs = [r for r in stored(Path(os.environ["GGUF_BENCH_RESULTS"]) / "lengths.jsonl") if r.get("mode")]
    assert len(runs) == 2 * 2 * 2 * 2 and not [r["error"] for r in runs if r["error"]]
    for r in runs:  # the prompt the models processed is that many tokens, chat template included
        length = r["config"]["prompt_length"]
        assert r["config"]["prompt_id"].endswith(f"@{length}") and r["metrics"]["prompt_tokens"] == length, r["config"]
    assert {r["config"]["prompt_length"] for r in runs} == {100, 160}
    assert len({r["cell"] for r in runs}) == len(runs)  # the length is part of the cell
    deploys = [line for line in result.stdout.splitlines() if line.startswith("deploy")]
    assert len(deploys) == 2 and "100-token prompts" in deploys[0] and "160-token prompts" in deploys[1], deploys
    report = json.loads(invoke("report", "--format", "json").stdout)
    alone = [row for row in report if row["mode"] == "target"]
    assert sorted(row["prompt_length"] for row in alone) == [100, 160]
    assert all(row["prompt_tokens"] == row["prompt_length"] for row in report)


def test_a_length_the_prompt_already_passes_is_refused_in_one_line(tiny_pairs, isolated):
    short = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "--prompt-ids", "code-short",
                   "--prompt-tokens", "3", "--name", "short")
    assert_user_error(short, "prompt code-short is already", "--prompt-tokens 3")
