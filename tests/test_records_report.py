"""One record schema read back by report: kinds kept apart, old files read, corrupt lines named,
tables that fit 80 columns, plots with error bars and acceptance by position."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from gguf_bench.cli.app import app
from gguf_bench.results.presentation.plots import figure
from gguf_bench.results.presentation.report import rich_table
from gguf_bench.results.presentation.summary import load, summarize, to_frame
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.records import Kind, Mode, OtherRecord, RunRecord, parse, to_dict

runner = CliRunner()


def run_dict(mode, tps, k=0, rep=0, acc=None, prompt="code-short", **extra):
    m = {"tokens_per_s": tps, "ms_per_token": 1000 / tps, "acceptance": acc, "tokens_per_round": 4.85 if k else None,
         "overhead_pct": 3.2, "accepted_at": [9, 8, 7, 6][:k] if k else [], "reached_at": [10, 9, 8, 7][:k] if k else []}
    return {"pair": "gemma-270m-f32+q4km", "mode": mode, "error": None, "sweep": "quickstart",
            "config": {"k": k, "ngl": 0, "ngld": 0, "temperature": 0.0, "n_predict": 64, "prompt_id": prompt,
                       "repetition": rep},
            "metrics": m, "offload": {"target": "0/19", "draft": "0/19"},
            "models": {"target": {"file": "gemma-3-270m-q4_k_m.F32.gguf"}, "draft": {"file": "gemma-3-270m-q4_k_m.gguf"}},
            **extra}


QUICKSTART = ([run_dict("target", 30.28 + r, rep=r) for r in range(2)] + [run_dict("draft", 84.3 + r, rep=r) for r in range(2)]
              + [run_dict("speculative", 35 + 4 * k + r, k=k, rep=r, acc=0.97) for k in (1, 2, 4, 8) for r in range(2)])

EVAL = {"kind": "eval", "pair": "gemma-270m-f32+q4km", "time": "2026-11-22T07:00:00+00:00",
        "config": {"temperature": 0, "k": 4, "nb_prompts": 10},
        "metrics": {"n": 10, "regular_ok": 3, "speculative_ok": 3, "identical": 9, "batch_numerics": 1,
                    "loop_errors": 0, "p_value": 1.0, "acceptance": 0.97}, "rows": []}


def test_records_round_trip_and_old_files_read_as_runs():
    old = run_dict("speculative", 40, k=4, acc=0.9)  # written before kinds existed: no "kind"
    rec = parse(old)
    assert isinstance(rec, RunRecord) and rec.kind == Kind.RUN and rec.mode == Mode.SPECULATIVE
    assert parse(to_dict(rec)) == rec and to_dict(rec)["kind"] == "run"
    assert isinstance(parse(EVAL), EvalRecord) and parse(EVAL).metrics.n == 10
    other = parse({"kind": "speculation-2", "pair": "p", "t_draft": 0.01})  # a kind of a later version
    assert isinstance(other, OtherRecord) and other.data["t_draft"] == 0.01
    with pytest.raises(ValueError):
        parse({**old, "mode": "generate"})  # a mode that does not exist is refused, never run as speculative


def test_report_over_sweeps_and_evals_shows_no_bogus_rows(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "quickstart.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QUICKSTART))
    (folder / "eval-1.jsonl").write_text(json.dumps(EVAL) + "\n")
    loaded = load([folder], folder)
    assert len(loaded.runs) == len(QUICKSTART) and len(loaded.evals) == 1 and not loaded.unreadable
    assert set(to_frame(loaded.runs)["mode"]) == {"target", "draft", "speculative"}
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert "nan" not in result.output and "K=0" not in result.output
    assert "evaluations (multiplication benchmark)" in result.output and "9/10" in result.output


def test_report_names_corrupt_lines(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(QUICKSTART[0]) + "\n{not json\n" + json.dumps(QUICKSTART[4]) + "\n[1, 2]\n")
    result = runner.invoke(app, ["report", str(path)])
    assert result.exit_code == 0, result.output
    assert f"skipped 2 unreadable line(s): {path} line 2, {path} line 4" in result.stderr
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text("{torn\n")
    result = runner.invoke(app, ["report", str(only_bad)])
    assert result.exit_code == 1 and "every line was unreadable" in result.stderr and f"{only_bad} line 1" in result.stderr


def render(table, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(table)
    return out.getvalue().splitlines()


def test_quickstart_table_fits_80_columns_without_wrapping():
    summary = summarize(to_frame(QUICKSTART))
    lines = render(rich_table(summary, title="sweep quickstart"), 80)
    assert max(len(ln) for ln in lines) <= 80
    body = [ln for ln in lines if ln.lstrip().startswith(("target alone", "draft alone", "K="))]
    assert len(body) == len(summary)  # one line per row: no cell wrapped onto a second line
    assert any(ln.lstrip().startswith("K=8 ★") for ln in body)
    text = "\n".join(lines)
    assert "gemma-3-270m-q4_k_m.F32 (0/19 on GPU)" in text and "gemma-270m-f32+q4km" in text and "…" not in text
    wide = "\n".join(render(rich_table(summary, width=140), 140))
    assert "GPU layers" in wide and "0/19 + 0/19" in wide


def test_tables_with_several_offloads_and_hosts_still_fit():
    records = [r | {"config": {**r["config"], "ngl": ngl}, "offload": {"target": f"{ngl}/19", "draft": "0/19"},
                    "node": {"host": host}}
               for r in QUICKSTART for ngl in (0, 19) for host in ("rtx3060", "a100")]
    summary = summarize(to_frame(records))
    lines = render(rich_table(summary), 80)
    assert max(len(ln) for ln in lines) <= 80
    assert sum(ln.startswith(("a100 ", "rtx3060 ")) for ln in lines) == len(summary) and "…" not in "\n".join(lines)
    assert "rtx3060" in "\n".join(lines) and "19/19 + 0/19" in "\n".join(lines)


def test_plot_has_error_bars_a_baseline_band_and_acceptance_by_position():
    df = to_frame(QUICKSTART)
    fig = figure(summarize(df), "tokens_per_s", df)
    speed, accept = fig.axes
    assert speed.containers  # errorbar containers: ± std bars
    assert any(p.get_alpha() == pytest.approx(0.15) for p in speed.patches)  # the target alone's band
    (line,) = accept.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    assert list(line.get_ydata()) == pytest.approx([9 / 10, 8 / 9, 7 / 8, 6 / 7])
    assert "gemma-270m-f32+q4km" in fig._suptitle.get_text() and "T=0" in fig._suptitle.get_text()


def test_gain_is_computed_in_one_place():
    from gguf_bench.results.schema import kinds

    summary = summarize(to_frame(QUICKSTART)).set_index(["mode", "k"])
    base = summary.loc[("target", 0), "tokens_per_s"]
    assert summary.loc[("speculative", 4), "gain_pct"] == pytest.approx(kinds.gain_pct(51.5, base))
    assert isinstance(summary, pd.DataFrame)
