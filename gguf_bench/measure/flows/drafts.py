"""`gguf-bench drafts TARGET --measure N`: the N best compatible drafts that fit (ranked from headers by
results/predictions/draft_ranking.py) are downloaded, each calibrated beside the target on the user's prompts by tune's own flow
(measure/flows/tune.py: the same records, stored in one results file), and ranked again by the tokens/s the cost model
predicts from what was measured: the acceptance on these prompts and the real speed of each model. Every candidate
serves the same target, so this is the order of their gains. The gains share one denominator: the target alone, timed
again in each calibration, drifts between calibrations on a busy machine by more than the drafts differ, so it is
taken as the median over all of them. Prints nothing: the CLI shows the `MeasuredDrafts` result.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypeVar

from gguf_bench.decoding.strategy import DEFAULT_STRATEGY
from gguf_bench.errors import BenchError, ConfigError, DownloadError, ModelError
from gguf_bench.measure.deploy import setting_line
from gguf_bench.measure.flows.tune import TuneEvents, TuneJob, tune
from gguf_bench.measure.pair import PairFiles
from gguf_bench.models.download import fetch_model, no_progress
from gguf_bench.models.registry import Named
from gguf_bench.options import layers_label
from gguf_bench.results.predictions.costmodel import (
    DECODE_TIMINGS,
    Calibration,
    Recommendation,
    ScatterGuard,
    recommend,
)
from gguf_bench.results.predictions.draft_ranking import Ranked
from gguf_bench.results.predictions.draft_ranking import to_json as ranking_json
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.store import read_records
from gguf_bench.runtimes.llama_cpp import quantize

# A context manager giving a download.Progress callback while a file is fetched (the CLI's progress bar).
ProgressFactory = Callable[[], AbstractContextManager]
T = TypeVar("T")
# What makes one candidate unmeasurable while the others can be: its file (or twin) does not load, cannot be read or
# written, or its header cannot be read from the hub; memory it does not fit in
CANDIDATE_ERRORS = (ModelError, DownloadError, MemoryError)


@dataclass(frozen=True)
class MeasureJob(TuneJob):
    """How `--measure` calibrates the candidates of one target: the calibration each candidate gets (a TuneJob made with
    files None, each candidate's pair given to tune_job), how many candidates, and the one offload setting."""

    n: int = 1  # how many candidates to measure
    resume: bool = False
    ngl: int = 0
    ngld: int = 0

    def tune_job(self, files: PairFiles) -> TuneJob:
        return TuneJob(**{f.name: getattr(self, f.name) for f in fields(TuneJob)} | {"files": files})


@dataclass
class CalibratedDraft:
    """One candidate, calibrated: the size-based ranking row beside what its calibration predicts."""

    row: Ranked
    files: PairFiles
    calibrations: list[Calibration]
    rec: Recommendation  # the fastest K (rec.fastest, even when it does not gain) and the target alone
    n_ctx: int  # the context the calibration ran at
    resumed: bool = False  # read back from the results file, not calibrated again

    @property
    def cost_ratio(self) -> float:
        """c measured: the draft's one-token time over the target's."""
        return self.rec.fastest_cal.timings.draft_cost_ratio()


@dataclass
class MeasuredDrafts:
    target: Path
    measured: list[CalibratedDraft]  # best first: by the predicted tokens/s at each one's best K
    failed: list[tuple[Ranked, str]] = field(default_factory=list)  # could not be calibrated, and why
    skipped: list[tuple[Ranked, str]] = field(default_factory=list)  # ranked but not measured, and why
    deploy: str | None = None  # the winner's llama-server line (the target alone when no draft gains)

    @property
    def winner(self) -> CalibratedDraft | None:
        return self.measured[0] if self.measured else None

    @property
    def baseline_tokens_per_s(self) -> float:
        """The target alone: the median over every calibration of this run (each times the same target anew)."""
        return statistics.median(m.rec.baseline_tokens_per_s for m in self.measured)

    def gain_pct(self, m: CalibratedDraft) -> float:
        """m's predicted gain at its best K over the target alone of the whole run."""
        return 100.0 * (m.rec.fastest.tokens_per_s / self.baseline_tokens_per_s - 1.0)

    def beats_target_alone(self, m: CalibratedDraft) -> bool:
        return m.rec.fastest.tokens_per_s > self.baseline_tokens_per_s

    @property
    def guard(self) -> ScatterGuard:
        """tune's noise guard over this run's calibrations: the largest scatter of the target alone's own one-token
        timings (off where none was timed more than once, or every calibration was read back from the file)."""
        scatters = [m.rec.scatter for m in self.measured if m.rec.scatter is not None]
        return ScatterGuard(max(scatters) if scatters else None, DECODE_TIMINGS)

    def recommends(self, m: CalibratedDraft) -> bool:
        """Whether m is recommended over the target alone: predicted faster by more than the guard's scatter."""
        return self.beats_target_alone(m) and self.guard.passes(self.gain_pct(m))


@dataclass
class MeasureEvents:
    step: Callable[[str], None] = lambda what: None  # a status line
    note: Callable[[str], None] = lambda line: None  # a line to keep (a candidate calibrated, resumed, skipped)


def check_count(n: int) -> None:
    if n < 1:
        raise ConfigError(f"--measure takes how many drafts to download and calibrate, at least 1 (got {n})")


def choose(rows: Sequence[Ranked], n: int) -> tuple[list[Ranked], list[tuple[Ranked, str]]]:
    """The n best rows that fit (or were not checked) and that the Python loop can run (a draft model: not a sidecar),
    and the rest of the ranking with why each is not measured."""
    chosen, skipped = [], []
    for r in rows:
        if r.candidate.kind != "draft-simple":
            skipped.append((r, f"{r.candidate.kind}: a llama-server sidecar, measured with sweep --engine server"))
        elif r.fits is False:
            skipped.append((r, f"does not fit: {r.fit_note}"))
        elif len(chosen) < n:
            chosen.append(r)
    return chosen, skipped


def pair_name(target: Path, draft: Path) -> str:
    """TARGETSTEM+DRAFTSTEM: stable across runs and downloads, so that `report` groups each pair's calibrations."""
    return f"{target.name.removesuffix('.gguf')}+{draft.name.removesuffix('.gguf')}"


def measure_drafts(named: Named, job: MeasureJob, rows: Sequence[Ranked], events: MeasureEvents = MeasureEvents(),
                   progress: ProgressFactory | None = None) -> MeasuredDrafts:
    """Fetch the target (`named`: resolved once by the command) and the job.n best candidates among `rows`
    (results.predictions.drafts.rank's order), calibrate each pair (or, with job.resume, read back a calibration of the same pair,
    prompts and settings from job.out), and rank them by their predicted tokens/s (best_first)."""
    check_count(job.n)
    chosen, skipped = choose(rows, job.n)
    if not chosen:
        raise BenchError(f"no compatible draft model to measure for {named.name}"
                         + (f" ({skipped[0][0].candidate.name}: {skipped[0][1]})" if skipped else ""))
    target = _fetch(named, progress, events)
    stored = _stored(job.out) if job.resume else []
    result = MeasuredDrafts(target, [], skipped=skipped)
    names: set[str] = set()
    for row in chosen:
        draft = _fetch(row.candidate.named, progress, events)
        name = pair_name(target, draft)
        name = name if name not in names else f"{name}~{len(names)}"  # two files of one name from two repositories
        names.add(name)
        with one_candidate(row.candidate.name, row, result.failed, events.note, "could not be calibrated"):
            result.measured.append(_calibrated(job, row, PairFiles(target, draft, name), stored, events))
    if not result.measured:
        raise ModelError(f"no draft could be calibrated ({result.failed[0][0].candidate.name}: {result.failed[0][1]})")
    result.measured = best_first(result.measured)
    result.deploy = deploy_line(result.measured[0], result.recommends(result.measured[0]), job.threads)
    return result


@contextmanager
def one_candidate(name: str, item: T, failed: list[tuple[T, str]], note: Callable[[str], None],
                  what: str) -> Iterator[None]:
    """The block measuring one candidate (`name`); when the candidate cannot be written, loaded or calibrated
    (CANDIDATE_ERRORS), (item, why) joins `failed`, `note` says so and the block's work is left undone: the other
    candidates still stand (--measure's calibrations, --twins' twins). Any other error goes on up."""
    try:
        yield
    except CANDIDATE_ERRORS as exc:
        failed.append((item, str(exc)))
        note(f"{name} {what}, skipped: {exc}")


def best_first(measured: Sequence[CalibratedDraft]) -> list[CalibratedDraft]:
    """By the predicted tokens/s at each one's best K, not by the gain over the target alone as timed in its own
    calibration, which drifts from one calibration to the next: every pair has the same target."""
    return sorted(measured, key=lambda m: -m.rec.fastest.tokens_per_s)


def _fetch(named: Named, progress: ProgressFactory | None, events: MeasureEvents) -> Path:
    events.step(f"fetching {named.name} ...")
    with (progress() if progress else nullcontext(no_progress)) as callback:
        return fetch_model(named, callback, quantize)


def _calibrated(job: MeasureJob, row: Ranked, files: PairFiles, stored: list[CalibrationRecord],
                events: MeasureEvents) -> CalibratedDraft:
    tune_job = job.tune_job(files)
    done = [r for r in stored if _same(r, job, files.name)]
    if done:
        events.note(f"{files.name}: calibrated before ({job.out.name}), not again")
        cals = [Calibration.from_record(done[-1])]
        return CalibratedDraft(row, files, cals, recommend(cals), done[-1].config.n_ctx, resumed=True)
    tune_events = TuneEvents(step=events.step, note=events.note, warn=events.note)
    tuned = tune(tune_job, [job.ngl], [job.ngld], [DEFAULT_STRATEGY], check=False, events=tune_events)
    events.note(f"{files.name}: calibrated")
    return CalibratedDraft(row, files, tuned.calibrations, tuned.rec, tuned.job.ctx_size)


def _stored(out: Path) -> list[CalibrationRecord]:
    return [r for r in read_records(out) if isinstance(r, CalibrationRecord)] if out.is_file() else []


def _same(record: CalibrationRecord, job: MeasureJob, pair: str) -> bool:
    """Whether `record` calibrated this pair on the job's prompts with its settings (what --resume skips)."""
    cfg = record.config
    return (record.pair == pair and list(cfg.prompts) == [p.id for p in job.prompts] and cfg.n_predict == job.n_predict
            and list(cfg.ks) == list(job.ks) and str(cfg.ngl) == str(layers_label(job.ngl))
            and str(cfg.ngld) == str(layers_label(job.ngld)) and cfg.threads == job.threads and not (cfg.depth or 0)
            and not cfg.placement)


def deploy_line(m: CalibratedDraft, gains: bool, threads: int | None) -> str:
    """The llama-server line of the measured winner: its best K, or the target alone when no K is predicted to gain."""
    rec = m.rec
    if gains:
        return setting_line(m.files, DEFAULT_STRATEGY, rec.fastest.k, rec.fastest_cal, m.n_ctx, threads)
    return setting_line(m.files, None, 0, rec.baseline_cal, m.n_ctx, threads)


def to_json(result: MeasuredDrafts) -> dict:
    """The measured ranking (best first), what was not measured, and the winner's deploy line, JSON-ready."""
    rows = []
    for m in result.measured:
        top, sizes = m.rec.fastest, ranking_json([m.row])[0]
        rows.append({"name": m.row.candidate.name, "origin": m.row.candidate.origin, "pair": m.files.name,
                     "draft_file": str(m.files.draft), "resumed": m.resumed, "from_sizes": sizes,
                     "measured": {"cost_ratio": m.cost_ratio, "acceptance": top.acceptance, "k": top.k,
                                  "a": list(m.rec.fastest_cal.a), "predicted_tokens_per_s": top.tokens_per_s,
                                  "predicted_gain_pct": result.gain_pct(m),
                                  "calibration_baseline_tokens_per_s": m.rec.baseline_tokens_per_s,
                                  "beats_target_alone": result.beats_target_alone(m),
                                  "recommended": result.recommends(m)}})
    return {"target_file": str(result.target), "measured": rows, "deploy": result.deploy,
            "scatter_guard": result.guard.as_json() if result.measured else None,
            "predicted_baseline_tokens_per_s": result.baseline_tokens_per_s,
            "not_measured": [{"name": r.candidate.name, "reason": why} for r, why in result.failed + result.skipped]}
