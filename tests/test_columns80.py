"""At 80 columns (issue 23, point 3), what run, tune, models and info print never hides a column that tells rows
apart and never wraps a cell: every name stays whole on one line. Tiny pairs keep it fast."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_helpers import at_width, invoke, pair_args

WIDTH = 80


@pytest.fixture
def columns80(monkeypatch):
    """The CLI's consoles at 80 columns, as a terminal of 80 columns (or COLUMNS=80) makes them."""
    at_width(monkeypatch, WIDTH)


def assert_fits(text: str, *whole: str) -> None:
    """No line wider than WIDTH but for a path that cannot fit (kept whole at the end of its line) and a command line to
    paste (the deploy line: folding it would break the paste), no cell cut short
    ('…'), and every string of `whole` on one line."""
    for line in text.splitlines():
        if line.startswith(("llama-server ", "LD_LIBRARY_PATH=")):  # a command line to paste: kept whole on purpose
            continue
        last = line.split()[-1] if line.strip() else ""
        assert len(line) <= WIDTH or (last.lstrip("(").startswith("/") and len(line) - len(last) <= WIDTH), (line, text)
    assert "…" not in text, text
    for needle in whole:
        assert needle in text, f"{needle!r} is not whole in:\n{text}"


def header(text: str, needle: str) -> list[str]:
    return next(ln for ln in text.splitlines() if needle in ln).split()


def test_models_at_80_columns_keeps_every_name_whole(isolated):
    from gguf_bench.models.registry import load_registry

    env = {**os.environ, "COLUMNS": str(WIDTH)}
    proc = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "models"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    reg = load_registry(None)
    names = [n for pair in reg.pairs.values() for n in (pair.name, pair.target.name, pair.draft.name)]
    assert_fits(proc.stdout, *names, *(ref.source.label for ref in reg.models.values() if ref.name in names))
    assert f"{reg.default} (default)" in proc.stdout


def test_run_at_80_columns_keeps_every_row_label_and_cell_whole(tiny_pairs, columns80):
    result = invoke("run", *pair_args(tiny_pairs["middle"]), "-n", "12", "-t", "1", "-r", "2", "--spec-type", "ngram,draft",
                    "--draft-p-min", "0.8", "-K", "8")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert {"run", "tokens/s", "gain"} <= set(header(text, "tokens/s")), text
    assert_fits(text, "target alone", "draft alone", "ngram(1-4)+draft p-min 0.8 K=8", "stored 6 runs in")
    rows = [ln for ln in text.splitlines() if ln.startswith(("target alone", "draft alone", "ngram(1-4)"))]
    assert len(rows) == 3 and all(" ± " in ln for ln in rows), text  # mean ± std on each row's one line


def test_tune_at_80_columns_keeps_k_and_every_strategy_and_wraps_no_cell(tiny_pairs, columns80):
    """Four strategies side by side (their cells wrapped onto a second line before), and --check's table."""
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-3", "-n", "12", "--prompt-ids", "code-short",
                    "-t", "2", "-c", "256", "--reps", "1", "--spec-type", "draft,ngram", "--k-schedule", "fixed,heuristic",
                    "--check")
    assert result.exit_code == 0, result.output
    text = result.stdout
    head = " ".join(header(text, "h<=3"))
    assert head.startswith("K a_K") and all(s in head for s in ("draft draft h<=3", "ngram ngram h<=3")), text
    rows = [ln.split() for ln in text.split("h<=3", 1)[1].splitlines() if ln[:1].isdigit() or ln.strip()[:1].isdigit()]
    k_rows = [r for r in rows if r[0] in ("1", "2", "3") and sum("%)" in c for c in r) == 4]
    assert [r[0] for r in k_rows] == ["1", "2", "3"], text  # each K on one line with its four predictions
    assert {"K", "predicted", "measured", "error", "gain", "runs"} <= set(header(text, "measured tok/s")), text
    assert_fits(text, "cells: tokens/s (gain %)", "target alone")


def test_info_at_80_columns_keeps_paths_and_layer_counts_whole(tiny_pairs, columns80):
    target, draft = tiny_pairs["middle"]
    result = invoke("info", str(target), str(draft))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert ["target", "draft"] in [ln.split() for ln in text.splitlines()], text  # the table's header
    assert_fits(text, str(target), str(draft), "5 (4 blocks + output)", "266 / 266 (difference 0, at most 128)")


def test_plan_of_a_moe_pair_at_80_columns_keeps_every_placement_whole(moe_pair, columns80):
    """Each draft placement (-ngld rows, the draft on the CPU) with its target placements, best first: every layer
    with the fewest -ncmoe, then the most layers without; no column hidden, no cell folded."""
    result = invoke("plan", *pair_args(moe_pair), "--vram", "521MiB", "--ctx", "512", "--draft-device", "none")
    assert result.exit_code == 0, result.output
    assert_fits(result.stdout, "tiny-target.gguf + tiny-draft.gguf")
    head = [w for w in header(result.stdout, "-ncmoe") if w != "┃"]
    assert head == ["-ngld", "draft", "-ngl", "-ncmoe", "weights", "KV", "compute", "total", "free"], head
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in result.stdout.splitlines() if line.startswith("│")]
    placements = [(r[0], r[2], r[3]) for r in rows]
    assert placements[:3] == [("0/5", "5/5", "0"), ("1/5", "5/5", "0"), ("2/5", "5/5", "2")], placements
    assert placements[3] == ("", "4/5", "0") and placements[-1] == ("none", "5/5", "0"), placements


@pytest.mark.parametrize("width", [80, 120])
def test_titles_and_captions_fold_at_a_separator_or_not_at_all(width):
    """A long title (a sweep name and its path) and a long caption (busy rows, concurrency) fit the terminal, and every
    line they break into ends at a separator (' ·', ';', ',', ':'): nothing is cut mid-phrase."""
    from rich.console import Console
    from test_trust import hand_record

    from gguf_bench.results.presentation.report import rich_table
    from gguf_bench.results.presentation.summary import summarize, to_frame

    records = [hand_record("target", 10), hand_record("speculative", 14, k=2, others=1.3),
               hand_record("speculative", 12, k=4)]
    title = "sweep quickstart-longer-name (results/quickstart-longer-name.jsonl)"
    console = Console(width=width, record=True)
    console.print(rich_table(summarize(to_frame(records)), title=title, width=width))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    header_at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("run"))
    busy_at = next(i for i, line in enumerate(lines) if line.startswith("! unreliable"))
    busy_end = next((i for i in range(busy_at + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    for block in (lines[:header_at], lines[busy_at:busy_end]):  # the title; the caption's longest line (its own lines)
        block = [line.rstrip() for line in block if line.strip()]
        assert all(line[-1] in "·;,:" for line in block[:-1]), "\n".join(lines)
    text = " ".join(" ".join(lines).split())
    assert "others used 1.3 of 2 cores" in text and "(results/quickstart-longer-name.jsonl) ·" in text
