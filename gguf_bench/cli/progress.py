"""What the CLI shows while work runs (download bars, sweep progress), and pair resolution with them."""

from __future__ import annotations

from pathlib import Path

from rich.live import Live
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from gguf_bench import options
from gguf_bench.cli.app import console, err
from gguf_bench.errors import ConfigError
from gguf_bench.measure.pair import LoadConfig, LoadedPair, open_pair
from gguf_bench.measure.sweep import SweepEvents
from gguf_bench.models.pairs import PairChoice, PairFiles, model_file, resolve
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.runtimes.llama_cpp import gpu_offload_supported, quantize

STEP_LINE_BYTES = 10_000_000  # where no bar can draw, a step of known size below this passes without a line


class DownloadProgress:
    """A rich progress display fed by download.Progress callbacks; where stderr is not a terminal (a log, CI), where
    no bar can draw, one line per step that can take a while ('quantize X -> F32 ...', 'download X ... (253 MB)')
    so that minutes of work are never silent."""

    def __init__(self):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=True)
        self.tasks: dict[str, int] = {}

    def __call__(self, desc: str, done: int, total: int | None) -> None:
        if desc not in self.tasks:
            self.tasks[desc] = self.progress.add_task(desc, total=total)
            if not err.is_terminal and (total is None or total >= STEP_LINE_BYTES):
                err.print(f"{desc} ..." + (f" ({total / 1e6:,.0f} MB)" if total else ""), markup=False)
        self.progress.update(self.tasks[desc], completed=done, total=total)

    def __enter__(self):
        if err.is_terminal:  # elsewhere the bar would only leave blank lines
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if err.is_terminal:
            self.progress.stop()


class QuietStatus:
    """A one-line status (like rich's console.status) redrawn when its text changes, never on a timer, so nothing of
    this process wakes while a run is timed (see SweepProgress)."""

    def __init__(self, text: str, on=None):
        self.live = Live(Text(text), console=on or err, auto_refresh=False, transient=True)

    def update(self, text: str) -> None:
        self.live.update(Text(text), refresh=True)

    def __enter__(self) -> QuietStatus:
        self.live.start(refresh=True)
        return self

    def __exit__(self, *exc) -> None:
        self.live.stop()


class SweepProgress:
    """Progress bar with ETA and a line per finished cell. It is drawn when something happens (a cell ends, a setting
    loads), never on a timer: a refresh thread would wake during every measured run, take the GIL from the Python
    loop between its decodes, and take a core from llama-server's threads, which want every core."""

    def __init__(self, label: str):
        self.progress = Progress(TextColumn(f"{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=console, auto_refresh=False)
        self.task = self.progress.add_task("cells", total=None)
        self.events = SweepEvents(start=self.start, cell=self.cell, loading=self.loading, note=self.note)

    def start(self, total: int, skipped: int, stored: int) -> None:
        self.progress.update(self.task, total=total, refresh=True)
        if stored:  # --resume of a file that holds cells: say how many belong to this grid
            other = stored - skipped
            self.progress.console.print(
                f"resuming: {skipped} cells already done, {total} to go" + (
                    f"; {other} of the {stored} cells in the file are not in this grid (another -K, -n, --temp, "
                    "prompt or setting): they stay in the file, and `report` shows them beside this grid's"
                    if other else ""), markup=False)

    def note(self, line: str) -> None:
        self.progress.console.print(f"Note: {line}", markup=False)

    def loading(self, load: LoadConfig) -> None:
        self.progress.console.print(f"loading models with {load.label}")
        self.progress.refresh()

    def cell(self, r: RunRecord) -> None:
        c, m = r.config, r.metrics
        what = f"{r.label:<12} T={c.temperature:g} {c.prompt_id} rep {c.repetition}"
        if r.error:
            self.progress.console.print(f"  [red]failed[/red] {what}: {r.error}")
        else:
            acc = f", acceptance {m.acceptance:.0%}" if m.acceptance is not None else ""
            self.progress.console.print(f"  {what}: {m.tokens_per_s:.2f} tokens/s{acc}")
        self.progress.advance(self.task)
        self.progress.refresh()

    def __enter__(self):
        self.progress.start()
        return self.events

    def __exit__(self, *exc):
        self.progress.stop()


def pair_files(pair: str | None, target: Path | None, draft: Path | None, registry: Path | None,
               need_draft: bool = True) -> PairFiles:
    """The pair's two files, fetched with a progress bar when missing. need_draft False: --target alone is enough
    (n-gram drafting); its PairFiles.draft is None."""
    if target and not draft and not pair:
        if need_draft:
            raise ConfigError("--spec-type draft needs a draft model: give --draft FILE with --target (or a pair name); "
                              "--spec-type ngram runs on --target alone")
        path = model_file(str(target), registry, DownloadProgress, quantize)
        return PairFiles(path, None, path.name)
    return resolve(pair, target, draft, registry, progress=DownloadProgress, quantize=quantize)


def warn_offload(*layer_values: int) -> None:
    if options.offload_requested(*layer_values) and not gpu_offload_supported():
        err.print("Warning: this llama-cpp-python build cannot offload to a GPU, so -ngl/-ngld are ignored; "
                  "reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\" (see README)", markup=False)


def load_pair(choice: PairChoice, ngl: str, ngld: str, ctx_size: int, threads: int | None,
              seed: int) -> tuple[PairFiles, LoadedPair]:
    """Resolve the pair (the first name of `choice`, or its files), check its vocabularies, load both models with their
    offload."""
    load = LoadConfig(options.layers(ngl), options.layers(ngld), ctx_size, threads, seed)
    files = pair_files(choice.names[0] if choice.names else None, choice.target, choice.draft, choice.registry)
    warn_offload(load.ngl, load.ngld)
    return files, open_pair(files, load)
