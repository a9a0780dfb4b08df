"""`gguf-bench tune --engine server`'s flow: a short calibration through llama-server (the target alone and each
speculative type at two or three draft lengths, on the same server build and slot count), the cost model of
results/predictions/server_costs.py, and with --check the recommended K and its neighbours measured as `sweep` measures them.
Prints nothing: the CLI shows the `ServerTuned` result.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import BenchError
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import SweepEvents, iter_records
from gguf_bench.models.twin import twin_of, twin_pair
from gguf_bench.results.decision.tune_verdict import check_summary, gain_fields, measured_verdict
from gguf_bench.results.predictions.costmodel import Prediction
from gguf_bench.results.predictions.server_costs import ServerCalibration, calibrations, check_predictable
from gguf_bench.results.schema.parts.order import LOADS_ONCE  # calibrations: one load a setting
from gguf_bench.results.schema.records import SERVER_ENGINE, Mode, RunRecord
from gguf_bench.results.schema.store import append_record


@dataclass(frozen=True)
class ServerTuneJob:
    """What tune measures through llama-server, and where it stores the runs."""

    files: PairFiles
    prompts: Sequence[Prompt]
    ks: Sequence[int]  # the draft lengths to predict
    spec_types: Sequence[str]  # llama-server's types, one at a time (server_costs.check_predictable)
    n_predict: int
    ctx_size: int
    threads: int | None
    name: str
    out: Path
    reps: int = 2
    ngl: int | str = 0
    ngld: int | str = 0
    parallel: int | None = None  # llama-server's slots, as many clients (None: one request at a time)
    engine_options: tuple = ()  # the server engine's own (measure/engines/server_options.ServerOptions)

    def __post_init__(self) -> None:
        for t in self.spec_types:
            check_predictable(t)
        if self.reps < 1:
            raise BenchError(f"--reps must be >= 1, got {self.reps}")

    @property
    def calibrated_ks(self) -> list[int]:
        """The draft lengths the calibration runs: the smallest, the middle and the largest of -K."""
        ks = sorted(set(self.ks))
        return sorted({ks[0], ks[len(ks) // 2], ks[-1]})

    def grid(self, ks: Sequence[int], with_target_alone: bool = True) -> Grid:
        return Grid(loads=LOADS_ONCE, ks=list(ks), ngls=[self.ngl], nglds=[self.ngld], temperatures=[0.0], prompts=list(self.prompts),
                    repetitions=self.reps, n_predict=self.n_predict, n_ctx=self.ctx_size, threads=self.threads,
                    with_draft_alone=False, with_target_alone=with_target_alone,
                    strategies=[Strategy(t) for t in self.spec_types], engines=(SERVER_ENGINE,),
                    engine_options=self.engine_options, parallels=[self.parallel] if self.parallel else None)


@dataclass
class ServerTuned:
    job: ServerTuneJob
    calibrations: list[ServerCalibration]
    top: tuple[ServerCalibration, Prediction] | None  # the fastest prediction that beats the target alone; None: none
    records: list[RunRecord]  # the calibration's runs (their commands are the deploy line's)
    checked: list[dict] | None = None
    within_scatter: tuple[ServerCalibration, Prediction] | None = None  # the fastest, its gain inside the drift
    verdict: dict | None = None  # --check's measured verdict (results/checks.measured_verdict)

    @property
    def checked_cal(self) -> ServerCalibration:
        """The type --check measures: the recommended one, else the fastest predicted."""
        return self.top[0] if self.top else self.fastest()[0]

    def fastest(self) -> tuple[ServerCalibration, Prediction]:
        return max(((c, p) for c in self.calibrations for p in c.predictions(self.job.ks)), key=lambda o: o[1].tokens_per_s)

    @property
    def chosen(self) -> tuple[ServerCalibration, Prediction] | None:
        """What to deploy (None: the target alone): --check's verdict where it ran (never a setting slower than another
        it measured), else the recommendation."""
        if self.verdict is None:
            return self.top
        return (self.checked_cal, self.checked_cal.predict(self.verdict["k"])) if self.verdict["k"] else None


def twin_files(name: str, target: str, draft: str | None, folder: Path, registry: Path | None = None) -> PairFiles:
    """Twins of the target (and of the draft, where a type reads one) under `folder`, named '<name> twin'."""
    if draft is not None:
        return twin_pair((name, target, draft), folder, registry)
    (folder / "target").mkdir()
    return PairFiles(twin_of(target, folder / "target", registry), None, f"{name} twin")


def tune_server(job: ServerTuneJob, check: bool, step: Callable[[str], None] = lambda what: None,
                twin: bool = False) -> ServerTuned:
    """Calibrate, predict every K of every type, recommend (never a slowdown, never a gain smaller than the target
    alone's own scatter between repetitions), and with `check` measure. On twins
    (`twin`) only the round times mean anything: no recommendation, the CLI predicts at named acceptance rates."""
    if twin and check:
        raise BenchError("--check measures the real pair's speed-up, which a twin cannot show: tune the real files")
    records = _measure(job, job.grid(job.calibrated_ks), "calibrating", step)
    cals = calibrations(records)
    if twin:
        return ServerTuned(job, cals, None, records)
    top, within = recommend(cals, job.ks)
    tuned = ServerTuned(job, cals, top, records, within_scatter=within)
    if check:
        tuned.checked, tuned.verdict = run_check(tuned, step)
    return tuned


def recommend(cals: Sequence[ServerCalibration], ks: Sequence[int]) -> tuple[tuple | None, tuple | None]:
    """(the recommendation, None) when the fastest prediction gains more than the target alone's repetitions scattered
    (more than nothing where the guard is off: --reps 1, which the legend and --json say); (None, the fastest) when it
    gains less than that; (None, None) when nothing gains."""
    cal, best = max(((c, p) for c in cals for p in c.predictions(ks)), key=lambda o: o[1].tokens_per_s)
    if best.gain_pct <= 0:
        return None, None
    return ((cal, best), None) if cal.guard.passes(best.gain_pct) else (None, (cal, best))


def _measure(job: ServerTuneJob, grid: Grid, what: str, step: Callable[[str], None]) -> list[RunRecord]:
    """Run a grid through llama-server, storing each record in job.out as it comes; a failed cell is an error."""
    out = []
    events = SweepEvents(loading=lambda load: step(f"{what} {job.files.name} through llama-server ..."))
    for record in iter_records(job.name, job.files, grid, events=events):
        append_record(job.out, record)
        step(f"{what} {job.files.name}: {record.label} measured")
        if record.error:
            raise BenchError(f"{what}: a llama-server run failed ({record.label}): {record.error}")
        out.append(record)
    return out


def run_check(tuned: ServerTuned, step: Callable[[str], None]) -> tuple[list[dict], dict]:
    """The recommended type at its K and the K's beside it (and the target alone), measured as `sweep` does, each beside
    its prediction: tokens/s one request at a time, each request's own tokens/s (req t/s) with several slots. Its
    measured gains and what it says to run are the verdict rule's (results/checks.check_summary), on the same speeds."""
    cal, top = tuned.top or tuned.fastest()
    ks = sorted(set(tuned.job.ks))
    at = ks.index(top.k)
    job = tuned.job
    checked = replace(job, spec_types=[cal.spec_type])
    records = _measure(checked, checked.grid(ks[max(0, at - 1): at + 2]), "checking", step)
    rows = []
    for k in [0, *ks[max(0, at - 1): at + 2]]:
        runs = [r for r in records if (r.mode == Mode.TARGET) == (k == 0) and (k == 0 or r.k == k)]
        measured = statistics.fmean(_speed(r) for r in runs)
        predicted = top.baseline_tokens_per_s if k == 0 else cal.predict(k).tokens_per_s
        rows.append({"k": k, "spec_type": None if k == 0 else cal.spec_type, "predicted_tokens_per_s": predicted,
                     "measured_tokens_per_s": measured, "error_pct": 100 * (predicted / measured - 1), "runs": len(runs),
                     "predicted_gain_pct": 100 * (predicted / top.baseline_tokens_per_s - 1) if k else None})
    summary = check_summary(records, per_request=bool(job.parallel))
    return [r | gain_fields(summary, r["k"]) for r in rows], measured_verdict(summary)


def _speed(record: RunRecord) -> float:
    """What the prediction is of: the record's tokens/s, or with several slots each request's own (req t/s)."""
    m = record.metrics
    return m.per_request_tokens_per_s if m.requests else m.tokens_per_s
