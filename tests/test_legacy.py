"""Files written by earlier versions still read (tests/data/legacy/, each made by that version's own code on a
tiny pair): every line parses into today's typed records, resume keys stay the same, and `report` shows them."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import invoke

from gguf_bench.measure.plan import cell_key
from gguf_bench.models.pairs import PairFiles
from gguf_bench.results.predictions.costmodel import Calibration
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.records import Mode, RunRecord, read_file

LEGACY = Path(__file__).parent / "data" / "legacy"


def records(name: str) -> list:
    got, bad = read_file(LEGACY / name)
    assert not bad and got, (name, bad)
    return got


def test_runs_of_the_first_version_read_as_runs():
    """No kind, no strategy or time split (target_s/draft_s/python_s, dropped now): runs of the draft model."""
    runs = records("runs-first-version.jsonl")
    assert [type(r) for r in runs] == [RunRecord] * 3
    assert [r.mode for r in runs] == [Mode.TARGET, Mode.DRAFT, Mode.SPECULATIVE]
    spec = runs[2]
    assert spec.label == "K=2" and spec.strategy_name == "draft" and spec.metrics.tokens_per_s > 0
    assert spec.metrics.overhead_pct is None and spec.metrics.identity is None
    assert spec.metrics.predicted_tokens_per_s is None and spec.metrics.costs_source is None  # before the cost schedule


def test_runs_with_strategies_keep_their_resume_keys():
    """The shape just before typed records: the cell key computed from today's RunConfig equals the stored one,
    so `sweep --resume` continues such a file instead of running its cells again."""
    runs = records("runs-with-strategies.jsonl")
    assert {r.strategy_name for r in runs if r.mode == Mode.SPECULATIVE} == {"draft", "ngram(1-4)"}
    for r in runs:
        files = PairFiles(Path(r.models.target.file), Path(r.models.draft.file), r.pair)
        assert cell_key(r.pair, files, r.config, r.mode) == r.cell, r.label
    spec = next(r for r in runs if r.strategy_name == "ngram(1-4)")
    assert spec.config.category == "code" and spec.metrics.identity.identical in (True, False)


def test_an_eval_that_stored_ngl_as_typed_reads_as_all():
    (ev,) = records("eval-ngl-as-typed.jsonl")
    assert isinstance(ev, EvalRecord) and ev.config.ngl == "all" and ev.config.ngld == 0
    assert ev.metrics.n == 3 and len(ev.rows) == 3 and ev.greedy


def test_a_calibration_record_predicts():
    (cal,) = records("calibration.jsonl")
    assert isinstance(cal, CalibrationRecord)
    assert [p.k for p in Calibration.from_record(cal).predictions()] == [1, 2]


def test_report_shows_every_legacy_file():
    result = invoke("report", str(LEGACY))
    assert result.exit_code == 0, result.output
    assert "evaluations (multiplication benchmark)" in result.output and "ngram(1-4) K=2" in result.output
