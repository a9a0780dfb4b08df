"""`gguf-bench tune`'s flow: size the context, calibrate every offload setting (measure/flows/calibrate.py), predict
(results/predictions/costmodel.py), and with --check measure the recommendation as `sweep` does. Prints nothing: the CLI shows the
`Tuned` result.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gguf_bench import options
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.errors import BenchError, ConfigError, ModelError
from gguf_bench.measure.capacity import check_placements
from gguf_bench.measure.flows.calibrate import CalibrationEvents, calibrate
from gguf_bench.measure.inputs.prepared import PreparedPrompts, sized_context
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import LoadConfig, PairFiles, check_compatible
from gguf_bench.measure.plan import Grid, measured
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models.twin import twin_pair
from gguf_bench.placing import Placing, split_label
from gguf_bench.results.decision.tune_verdict import check_summary, gain_fields, measured_verdict
from gguf_bench.results.predictions.costmodel import (
    DEFAULT_REPS,
    Calibration,
    CostOutlook,
    Prediction,
    Recommendation,
    best,
    cost_outlook,
    recommend,
)
from gguf_bench.results.predictions.tune_checks import check_ks, check_rows, effective_settings
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.parts.order import LOADS_ONCE  # calibrations: one load a setting
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import append_record, read_records, results_dir
from gguf_bench.runtimes.llama_cpp import gpu_offload_supported, read_info

DEFAULT_NAME = DEFAULT_STRATEGY.name  # the summary's strategy of the draft model with a fixed K ('draft')


@dataclass
class TuneEvents:
    """What the CLI shows while tuning (the flow itself prints nothing)."""

    step: Callable[[str], None] = lambda what: None  # a status line
    warn: Callable[[str], None] = lambda line: None  # a warning to show and go on
    note: Callable[[str], None] = lambda line: None  # something the user should know (a context grown to fit)


@dataclass(frozen=True)
class TuneJob:
    """What tune measures and where it stores it."""

    files: PairFiles
    prompts: Sequence[Prompt]
    ks: Sequence[int]
    n_predict: int
    ctx_size: int
    threads: int | None
    name: str
    out: Path  # appended to: tune into a sweep's file to report both together
    reps: int = DEFAULT_REPS
    depth: int = 0
    real_pair: str | None = None  # the files are twins of this pair's (models/twin.py): timings only
    placings: tuple[Placing, ...] = (Placing(),)  # the target's placements beyond -ngl to calibrate (placing.py)
    placings_draft: tuple[Placing, ...] = (Placing(),)
    objective: str = "decode"  # what the predictions and the recommendation rank by: decode tokens/s, or request
    agree: bool = False  # the twins agree (twin --agree): their acceptance is 1 by construction, measured and checked

    def grid(self, cal: Calibration, ks: list[int], **kw) -> Grid:
        """A sweep grid of one calibrated setting, greedy, without the draft alone (what --check measures)."""
        placing, placing_draft = split_label(cal.placement)
        return Grid(loads=LOADS_ONCE, ks=ks, ngls=[options.layers(cal.ngl)], nglds=[options.layers(cal.ngld)], temperatures=[0.0],
                    prompts=list(self.prompts), n_predict=self.n_predict, n_ctx=self.ctx_size, threads=self.threads,
                    with_draft_alone=False, depths=[cal.depth], placings=[placing], placings_draft=[placing_draft], **kw)


@dataclass
class Tuned:
    """What tune found: the calibrations, the fastest prediction, the recommendation (never a slowdown), the cost
    schedule's outlook, and --check's rows."""

    job: TuneJob  # with the context size tune ran at
    calibrations: list[Calibration]
    top_cal: Calibration | None  # None: twins whose pair's acceptance was never measured (no prediction of a K)
    top: Prediction | None
    rec: Recommendation | None
    outlooks: list[CostOutlook]
    cost_top: CostOutlook | None  # the cost schedule, when it is predicted to beat the recommendation
    checked: list[dict] | None = None
    check_top: Prediction | None = None  # what --check measured (the best draft-model fixed K)
    verdict: dict | None = None  # --check's measured verdict (results/checks.measured_verdict): what to run, by the deploy rule
    measured: Recommendation | None = None  # the verdict as a recommendation (its `measured` set)
    measured_cost: CostOutlook | None = None  # the cost schedule, where the verdict is it

    @property
    def chosen(self) -> tuple[Recommendation, CostOutlook | None]:
        """What to deploy: --check's measured verdict where it ran (never a setting slower than another it measured),
        else the prediction."""
        return (self.measured, self.measured_cost) if self.measured is not None else (self.rec, self.cost_top)


def tune(job: TuneJob, ngls: Sequence[int], nglds: Sequence[int], strategies: list[Strategy], check: bool,
         events: TuneEvents = TuneEvents()) -> Tuned:
    if check and job.real_pair and not job.agree:
        raise ConfigError("--check measures the real pair's speed-up, which a twin cannot show: tune the real files "
                          "(or tune --twin --agree: acceptance 1 by construction)")
    job = _sized(job, events)
    calibrations = calibrate_settings(job, ngls, nglds, events)
    if job.real_pair and not job.agree:  # a twin's acceptance is chance: the real pair's, where measured, else none
        calibrations = [with_real_acceptance(cal, job.real_pair) for cal in calibrations]
        if not calibrations[0].acceptance_known:
            return Tuned(job, calibrations, None, None, None, [], None)
    top_cal, top = best(calibrations, strategies)
    rec = recommend(calibrations, strategies)  # never a slowdown: the target alone when no K beats it
    outlooks = cost_outlook(calibrations, strategies)  # --k-schedule cost against the best fixed K
    cost_top = max((o for o in outlooks if o.beats(rec)), key=lambda o: o.prediction.tokens_per_s, default=None)
    tuned = Tuned(job, calibrations, top_cal, top, rec, outlooks, cost_top)
    if check:
        _check(tuned, events)
    return tuned


def twin_job(job: TuneJob, sources: tuple[str, str], folder: Path, registry: Path | None = None,
             agree: bool = False) -> TuneJob:
    """The job on twins of the pair's two models (written into `folder` from their headers: nothing is downloaded);
    its records name the pair '<pair> twin' ('<pair> agreeing twin'), apart from the real pair's. agree: agreeing
    twins, whose own acceptance (1) is the one predicted."""
    files = twin_pair((job.files.name, *sources), folder, registry, agree)
    return replace(job, files=files, real_pair=job.files.name, agree=agree)


def with_real_acceptance(cal: Calibration, pair: str) -> Calibration:
    """A twin's calibration with the acceptance tune measured on the real pair (the latest calibration of `pair` at
    the same depth, on real files, in the results folder), or as it is when there is none."""
    found = []
    folder = results_dir()
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        try:
            records = read_records(path)
        except BenchError:  # a file report would complain about is simply not a source
            continue
        found += [(r, path) for r in records if isinstance(r, CalibrationRecord) and r.pair == pair
                  and (r.config.depth or 0) == cal.depth and not Calibration.from_record(r).twin]
    if not found:
        return cal
    record, path = max(found, key=lambda rp: rp[0].time or "")
    return cal.with_acceptance_of(Calibration.from_record(record), f"measured on {pair} by tune at {record.time} "
                                                                   f"({path.name})")


def _sized(job: TuneJob, events: TuneEvents) -> TuneJob:
    """The job with a context that holds the depth, the longest prompt and the output."""
    prompts = PreparedPrompts.for_target(job.files.target, job.prompts, job.depth)
    n_ctx, note = sized_context(job.files, prompts, n_ctx=job.ctx_size, depth=job.depth, n_predict=job.n_predict,
                                verify=max(DEFAULT_STRATEGY.max_k(k) for k in job.ks))
    if note:
        events.note(note)
    return TuneJob(**{**job.__dict__, "ctx_size": n_ctx})


def _check(tuned: Tuned, events: TuneEvents) -> None:
    """sweep measures the draft model with a fixed K: check the best of those, and the cost schedule tune predicted;
    then the verdict on what was measured (results/checks.measured_verdict), which the recommendation follows."""
    check_cal, tuned.check_top = best(tuned.calibrations)
    if tuned.check_top != tuned.top:
        events.note(f"--check measures the best draft-model fixed-K setting ({tuned.check_top.strategy}); "
                    f"sweep cannot run {tuned.top.strategy}")
    rows, records = run_check(tuned.job, check_cal, tuned.check_top.k, events)
    costs = [o for o in tuned.outlooks if o.prediction is not None]
    for o in costs:
        row, runs = run_cost_check(tuned.job, o, events)
        rows.append(row)
        records += [replace(r, order=None) for r in runs]  # measured apart from its target alone: never paired
    summary = check_summary(records, objective=tuned.job.objective)
    tuned.checked = [r | gain_fields(summary, r["k"], _strategy_name(r, costs)) for r in rows]
    tuned.verdict = measured_verdict(summary)
    tuned.measured, tuned.measured_cost = _measured(tuned, check_cal, costs)


def _strategy_name(row: dict, costs: Sequence[CostOutlook]) -> str:
    """The summary's strategy of a check row: the cost schedule's where the row is one, else the draft model's."""
    return next((o.schedule.name for o in costs if row.get("strategy") == o.prediction.strategy), DEFAULT_NAME)


def _measured(tuned: Tuned, cal: Calibration, costs: Sequence[CostOutlook]) -> tuple[Recommendation, CostOutlook | None]:
    """The verdict as a recommendation (and the cost schedule, where the verdict is it)."""
    v, rec = tuned.verdict, tuned.rec
    base = cal.predict(min(cal.ks)).baseline_tokens_per_s
    if v["k"] == 0:
        return replace(rec, baseline_cal=cal, baseline_tokens_per_s=base, measured=False), None
    cost = next((o for o in costs if o.schedule.name == v["strategy"] and o.prediction.k == v["k"]), None)
    if cost is not None:
        return replace(rec, measured=True), cost
    return replace(rec, fastest_cal=cal, fastest=cal.predict(v["k"]), baseline_cal=cal, baseline_tokens_per_s=base,
                   measured=True), None


def calibrate_settings(job: TuneJob, ngls: Sequence[int], nglds: Sequence[int],
                       events: TuneEvents = TuneEvents()) -> list[Calibration]:
    """Calibrate each offload setting this build can run and store each record in `job.out`; a setting that fails to
    load is skipped with a warning while another one loads, and is the error when none does."""
    files = job.files
    check_compatible(files)
    settings, warnings = effective_settings(ngls, nglds, gpu_offload_supported(),
                                            read_info(files.target).n_layers, read_info(files.draft).n_layers)
    for w in warnings:
        events.warn(w)
    for note in check_placements(files, job.placings, job.placings_draft):
        events.note(note)
    calibrations, failures = [], []
    loads = [LoadConfig(ngl, ngld, job.ctx_size, job.threads, placing=pt, placing_draft=pd)
             for ngl, ngld in settings for pt in job.placings for pd in job.placings_draft]
    for load in loads:
        timed: dict = {}  # the decode timings as measured: the target's scatter, which the record does not keep
        steps = CalibrationEvents(step=lambda what, at=f"{files.name} {load.label}": events.step(f"calibrating {at}: {what}"),
                                  timed=timed.update)
        try:
            record = replace(calibrate(files, load, job.prompts, job.n_predict, job.ks, job.reps, steps, job.depth),
                             tune=job.name)
        except (ModelError, MemoryError) as exc:
            if len(loads) == 1:
                raise
            failures.append(f"{load.label}: {exc}")
            events.warn(f"{load.label} could not be calibrated, skipped: {exc}")
            continue
        append_record(job.out, record)
        calibrations.append(replace(Calibration.from_record(record), scatter=timed.get("target_scatter"),
                                    objective=job.objective))
    if not calibrations:
        raise ModelError(f"no offload setting could be loaded ({failures[0]})")
    return calibrations


def measure_grid(job: TuneJob, grid: Grid, events: TuneEvents = TuneEvents(),
                 failed: str = "--check could not measure") -> list[RunRecord]:
    """The grid's runs, each stored in `job.out` as it is measured (as sweep stores them); an error (`failed`) if
    every one failed."""
    records = []
    for record in iter_records(job.name, job.files, grid):
        append_record(job.out, record)
        records.append(record)
        events.step(f"checking: measured {record.label} on {record.config.prompt_id}")
    return measured(records, failed)


def run_check(job: TuneJob, cal: Calibration, k: int, events: TuneEvents = TuneEvents()
              ) -> tuple[list[dict], list[RunRecord]]:
    """Measure K-1, K, K+1 and the target alone as `sweep` does (same cells, same records, stored), next to the
    prediction (tuning.check_rows); and the records."""
    grid = job.grid(cal, check_ks(cal, k))
    events.step(f"checking K={', '.join(map(str, grid.ks))} as sweep measures them ...")
    records = measure_grid(job, grid, events)
    return check_rows(cal, records, job.objective), records


def run_cost_check(job: TuneJob, outlook: CostOutlook, events: TuneEvents = TuneEvents()
                   ) -> tuple[dict, list[RunRecord]]:
    """Measure the cost schedule tune predicted (n-gram, at the cap it predicts fastest) as `sweep` does, without a
    target alone of its own (run_check measures that); its costs are the calibration just stored. A check_rows row,
    and the records."""
    cal, p = outlook.cal, outlook.prediction
    grid = job.grid(cal, [p.k], with_target_alone=False, strategies=[outlook.schedule])
    events.step(f"checking {p.strategy} as sweep measures it ...")
    records = measure_grid(job, grid, events)
    speeds = [r.tokens_per_s for r in records if not r.error and r.tokens_per_s]
    tokens_per_s = statistics.fmean(speeds)
    return {"k": p.k, "strategy": p.strategy, "ngl": cal.ngl, "ngld": cal.ngld, "predicted_tokens_per_s": p.tokens_per_s,
            "measured_tokens_per_s": tokens_per_s, "error_pct": 100.0 * (p.tokens_per_s / tokens_per_s - 1.0),
            "runs": len(speeds)}, records
