"""Commands that measure speed and show it: run, sweep, report."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from gguf_bench import engine_registry, options
from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.axis_flags import axis_flags
from gguf_bench.cli.engine_flags import engine_flags, given
from gguf_bench.cli.options import (
    AskedMarginOpt,
    AskedObjectiveOpt,
    ChatOpt,
    ClientsOpt,
    CtxOpt,
    DepthOpt,
    DeviceDraftOpt,
    DeviceOpt,
    DraftMinOpt,
    DraftOpt,
    EngineOpt,
    KCapOpt,
    KOpt,
    KScheduleOpt,
    KsOpt,
    LoadsOpt,
    MainGpuOpt,
    MaxRepsOpt,
    NCpuMoeDraftOpt,
    NCpuMoeOpt,
    NgldOpt,
    NgldsOpt,
    NglOpt,
    NglsOpt,
    NgramMaxOpt,
    NgramMinOpt,
    NPredictOpt,
    ObjectiveOpt,
    OverrideDraftOpt,
    OverrideOpt,
    PairArg,
    PairsArg,
    ParallelOpt,
    PerCategoryOpt,
    PMinOpt,
    PromptIdOpt,
    PromptIdsOpt,
    PromptOpt,
    PromptsFileOpt,
    PromptTokensOpt,
    RegistryOpt,
    RepsBudgetOpt,
    RepsOpt,
    ResultsDirOpt,
    RpcDelayOpt,
    RpcOpt,
    SeedOpt,
    SpecTypeOpt,
    SplitModeOpt,
    SweepRepsOpt,
    TargetOpt,
    TempOpt,
    TempsOpt,
    TensorSplitOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
    VerdictMarginOpt,
    VerifyOpt,
)
from gguf_bench.cli.progress import QuietStatus, SweepProgress, pair_files, warn_offload
from gguf_bench.decoding.divergence import LOOP_ERROR, describe
from gguf_bench.decoding.loop import Verify
from gguf_bench.decoding.strategy import strategies
from gguf_bench.errors import BenchError, ResultsError
from gguf_bench.measure import deploy
from gguf_bench.measure.capacity import vram_budget
from gguf_bench.measure.distributed import OnRay, failure_message, on_ray, ray_options
from gguf_bench.measure.inputs import prompts, workloads
from gguf_bench.measure.inputs.prompts import at_lengths
from gguf_bench.measure.plan import AUTO_FIRST, Grid, cells_failed, measured, single_run_grid
from gguf_bench.measure.sweep import SweepEvents, iter_records, run_sweep
from gguf_bench.models.pairs import PairChoice
from gguf_bench.placing import Split, placing_axes
from gguf_bench.results.presentation import answer, calibrations, crossover, html, specbench
from gguf_bench.results.presentation import evals as evals_view
from gguf_bench.results.presentation import report as rep
from gguf_bench.results.presentation import summary as summ
from gguf_bench.results.presentation.plots import check_plot, plot
from gguf_bench.results.schema.naming import results_path, run_path
from gguf_bench.results.schema.parts.order import LOADS_EACH
from gguf_bench.results.schema.records import Mode, RunRecord, to_dict
from gguf_bench.results.schema.store import (
    exclusive,
    read_records,
    results_dir,
    try_append_records,
    use_results_dir,
)
from gguf_bench.results.schema.text import fit_title, fold

# sweep's parameters about how it runs and reads, not what is measured: every engine takes them (pairs, --target and
# --draft too: an engine that measures no files refuses them where it resolves what it measures)
HOW_IT_RUNS = frozenset({"name", "resume", "results_dir_opt", "pairs", "target", "draft", "margin", "objective",
                         "page"})
PageOpt = Annotated[Path | None, typer.Option("--html", help="also write the report as one self-contained HTML page "
                                              "(opens offline: the answer first, then the pictures; docs/page.md)")]
FAILED_CELLS = 3  # sweep's exit status when it ends with failed cells (1: an error, 2: `check` found a difference)


@command
@engine_flags("run")
@axis_flags(single=True)
def run(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None, ngl: NglOpt = "0", ngld: NgldOpt = "0",
        k: KOpt = "4", temp: TempOpt = 0.0, top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, seed: SeedOpt = 0,
        n_predict: NPredictOpt = 64, prompt: PromptOpt = None, prompt_ids: PromptIdOpt = None,
        prompt_file: Annotated[Path | None, typer.Option("--prompt-file", "-f", help="read the prompt from a file")] = None,
        chat: ChatOpt = False, threads: ThreadsOpt = None, ctx_size: CtxOpt = 2048, repetitions: RepsOpt = 1,
        show_text: Annotated[bool, typer.Option("--show-text", help="print the generated texts")] = False,
        json_out: Annotated[bool, typer.Option("--json", help="print the run records as JSON")] = False,
        name: Annotated[str | None, typer.Option("--name", help="store the runs in results/NAME.jsonl "
                                                 "(default: run-TIMESTAMP)")] = None,
        verify: VerifyOpt = Verify.BATCHED, registry: RegistryOpt = None,
        spec_type: SpecTypeOpt = "draft", ngram_min: NgramMinOpt = 1, ngram_max: NgramMaxOpt = 4, p_min: PMinOpt = "0",
        n_min: DraftMinOpt = 0, k_schedule: KScheduleOpt = "fixed", k_cap: KCapOpt = 16, engine: EngineOpt = "python",
        axes: dict | None = None, depth: Annotated[int, typer.Option("--depth", "-d", help="tokens of "
        "context before the prompt (llama-bench's -d; prefilled, not timed)")] = 0,
        n_cpu_moe: NCpuMoeOpt = None, override_tensor: OverrideOpt = None, device: DeviceOpt = None,
        n_cpu_moe_draft: NCpuMoeDraftOpt = None, override_tensor_draft: OverrideDraftOpt = None,
        device_draft: DeviceDraftOpt = None, tensor_split: TensorSplitOpt = None, split_mode: SplitModeOpt = None,
        main_gpu: MainGpuOpt = None, rpc: RpcOpt = None, rpc_delay: RpcDelayOpt = None,
        margin: VerdictMarginOpt = summ.MARGIN, results_dir_opt: ResultsDirOpt = None, engine_options: tuple = ()) -> None:
    """Target alone, draft alone and speculative on one prompt, measured in one process (and in llama-server with
    --engine server|both)."""
    use_results_dir(results_dir_opt)
    out = run_path(name)  # before any work: a new file, in a folder that can hold it
    grid = single_run_grid(options.one_draft_length(k), ngl, ngld, options.temperature(temp),
                           prompts.from_options(prompt, prompt_file, chat, prompt_ids), repetitions=repetitions,
                           n_predict=n_predict, top_k=top_k, top_p=top_p, seed=seed, n_ctx=ctx_size, threads=threads,
                           verify=verify, strategies=strategies(spec_type, ngram_min, ngram_max, p_min, n_min,
                                                                k_schedule, k_cap),
                           engines=options.engines(engine), engine_options=engine_options, depths=[depth],
                           **axes,
                           **placing_axes(n_cpu_moe, override_tensor, device, n_cpu_moe_draft, override_tensor_draft,
                                          device_draft, single=True,
                                          split=Split(tensor_split, split_mode, main_gpu, rpc, rpc_delay)))
    files = pair_files(pair, target, draft, registry, need_draft=any(s.uses_model for s in grid.strategies))
    if not any(p.rpc for p in grid.placings):  # RPC servers' devices take layers whatever this build can do
        warn_offload(*grid.ngls, *grid.nglds)
    with exclusive(out):  # no other process writes NAME while this runs
        out = run_path(out.stem)  # nor did one create it since
        with QuietStatus(f"running {files.name} ...", console):
            note = SweepEvents(note=lambda line: err.print(f"Note: {line}", markup=False))
            records = measured(list(iter_records("run", files, grid, events=note)))
        unsaved = try_append_records(out, records)  # a failed write still prints the result, then exits 1
    records = sorted(records, key=lambda r: list(Mode).index(r.mode))  # shown target, draft, speculative (the file
    # keeps the order they ran in: plan.shuffled)
    if json_out:
        console.print_json(json.dumps([to_dict(r) for r in records], default=str))
    else:
        _show_runs(records, deploy_lines=False, margin=_margin(margin))
        _placement_lines(records[0])
        _greedy_footer(records)
    if show_text and not json_out:
        for r in records:
            if r.metrics and r.config.repetition == 0:
                console.rule(f"{r.mode} {r.label}" if r.strategy else str(r.mode))
                console.print(r.metrics.text, markup=False)
    if unsaved:
        raise unsaved
    (err if json_out else console).print(f"stored {len(records)} runs in {out}", markup=False, soft_wrap=True)


def _show_runs(runs: list[RunRecord], title: str = "", deploy_lines: bool = True, margin: float | None = None,
               objective: str = "decode", page: Path | None = None, source: Path | None = None) -> None:
    """The report of these runs, as every command prints it (verdicts read with `margin` %: summary.MARGIN, of the
    `objective`'s figure: summary.OBJECTIVES); page: the HTML page too (the runs read from `source`)."""
    df = summ.with_build_names(summ.for_objective(summ.to_frame(runs), objective))  # builds by their short names
    summary = summ.summarize(df, margin=margin)
    if page:  # first: the terminal's report then says where it is
        _write_page(page, summary, df, runs, [str(source)] * len(runs) if source else [], title)
    _show_summary(summary, df, runs, title, deploy_lines=deploy_lines)


def _write_page(page: Path, summary, df, runs: list[RunRecord], sources: list[str], title: str = "",
                to_err: bool = False) -> None:
    """The report as one HTML page (results/presentation/html): the same rows as --format json, deploy lines included;
    'wrote PAGE' on stderr where stdout carries --format's text."""
    size = html.write(page, deploy.with_deploy(summary, df, runs), df, runs, sources, title or "gguf-bench report")
    (err if to_err else console).print(f"wrote {page} ({size / 1e6:.1f} MB: the answer, then the pictures; opens "
                                       "offline)", markup=False, soft_wrap=True)


def _objective(name: str) -> str:
    """--objective's value, checked (summary.OBJECTIVES)."""
    if name not in summ.OBJECTIVES:
        raise BenchError(f"--objective takes {', '.join(summ.OBJECTIVES)}, got '{name}'")
    return name


def _margin(pct: float) -> float:
    """--margin's value, checked: a percentage in [0, 100)."""
    if not 0 <= pct < 100:
        raise BenchError(f"--margin is a percentage in [0, 100), got {pct:g}")
    return pct


def _show_summary(summary, df, runs: list[RunRecord], title: str = "", show_host: bool = False,
                  deploy_lines: bool = True, steps: bool = False) -> None:
    """Each workload's deploy line first (the answer), then the summary table (steps: with steps/s and tokens per step)
    and both engines side by side where both ran."""
    if deploy_lines:
        _deploy_lines(summary, df, runs)
    console.print(rep.rich_table(summary, title=title, width=console.width, show_host=show_host, steps=steps))
    for line in rep.server_greedy_lines(df):
        console.print(fold(line, console.width), markup=False, soft_wrap=True)
    _engines_side_by_side(summary, df)
    for line in crossover.lines(summary, df):
        console.print(fold(line, console.width), markup=False, soft_wrap=True)


def _engines_side_by_side(summary, df) -> None:
    """With both engines in the results: each K's tokens/s in both, and whether their greedy texts agree."""
    both = rep.engines_frame(summary)
    if both is not None:
        console.print(fit_title(rep.engines_table(both, rep.greedy_agreement(df), console.width), console.width))


def _spec_bench(df, fmt: str | None, output: Path | None) -> None:
    sb = specbench.frame(df) if not df.empty else None
    if sb is None:
        raise BenchError("--spec-bench needs runs with prompt categories (--prompts spec-bench, humaneval, or "
                         "--prompt-ids by category) and speculative rows")
    if not fmt:
        console.print(fit_title(specbench.table(sb, console.width), console.width))
        return
    _write(specbench.markdown(sb) if fmt == "md" else rep.render(sb, fmt), output)


def _write(text: str, output: Path | None) -> None:
    """--format's text into --output, else to stdout."""
    if output:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


def _deploy_lines(summary, df, runs: list) -> None:
    """Each pair's best cell as the llama-server command that reproduces it (measure/deploy.py)."""
    for headline, command_line in answer.lines(deploy.with_deploy(summary, df, runs)):
        console.print(fold(headline, console.width), markup=False, soft_wrap=True)  # broken at a separator only
        if command_line:  # none where a busy machine's row decides nothing
            console.print(command_line, markup=False, soft_wrap=True)  # one line, to paste


def _placement_lines(record: RunRecord) -> None:
    """Where llama.cpp put each model, as it reported it (on a GPU build, or where an override moved weights)."""
    offload = record.offload
    for role, where in (("target", offload and offload.target_placement), ("draft", offload and offload.draft_placement)):
        if where is not None and (where.on_gpu or where.device_mib() or where.expert_layers or where.overridden):
            console.print(f"{role} placement: {where.summary()}", markup=False)


def _greedy_footer(records: list[RunRecord]) -> None:
    """At temperature 0: whether each speculative text equals the target alone's, and if not, why."""
    for r in records:
        identity = r.metrics.identity if r.metrics else None
        if identity and r.config.repetition == 0:
            console.print(f"greedy check, {r.label}: {describe(identity)}", markup=False,
                          style="bold red" if identity.cause == LOOP_ERROR else None)


@command
@engine_flags("sweep", always=HOW_IT_RUNS)
@axis_flags()
def sweep(ctx: typer.Context, pairs: PairsArg = None, target: TargetOpt = None, draft: DraftOpt = None, ks: KsOpt = "1,2,4,8",
          ngls: NglsOpt = "0", nglds: NgldsOpt = "0", temps: TempsOpt = "0", prompt_ids: PromptIdsOpt = None,
          prompts_file: PromptsFileOpt = None, per_category: PerCategoryOpt = None,
          top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, seed: SeedOpt = 0,
          n_predict: NPredictOpt = 64, threads: ThreadsOpt = None, ctx_size: CtxOpt = 2048,
          repetitions: SweepRepsOpt = "1", max_reps: MaxRepsOpt = 10, reps_budget: RepsBudgetOpt = None,
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
          n_min: DraftMinOpt = 0, k_schedules: KScheduleOpt = "fixed", k_cap: KCapOpt = 16,
          engine: EngineOpt = "python", axes: dict | None = None, depths: DepthOpt = None,
          prompt_tokens: PromptTokensOpt = None, n_cpu_moe: NCpuMoeOpt = None, override_tensor: OverrideOpt = None,
          device: DeviceOpt = None,
          n_cpu_moe_draft: NCpuMoeDraftOpt = None, override_tensor_draft: OverrideDraftOpt = None,
          device_draft: DeviceDraftOpt = None, tensor_split: TensorSplitOpt = None, split_mode: SplitModeOpt = None,
          main_gpu: MainGpuOpt = None, rpc: RpcOpt = None, rpc_delay: RpcDelayOpt = None,
          parallels: ParallelOpt = None,
          clients: ClientsOpt = None,
          vram: Annotated[str | None, typer.Option("--vram", help="device memory to plan for (24GB, 8000MB): offload "
                          "settings predicted not to fit are skipped, with the reason in their records (default: the "
                          "GPU device's own figure)")] = None,
          margin: VerdictMarginOpt = summ.MARGIN, objective: ObjectiveOpt = "decode", loads: LoadsOpt = "each",
          results_dir_opt: ResultsDirOpt = None, page: PageOpt = None, engine_options: tuple = ()) -> None:
    """Sweep drafting strategy x draft length x -ngl x -ngld x placement (-ncmoe, -ot, -dev, -ts, -sm, -mg, --rpc-delay
    and the draft's) x context
    settings (-fa, -ctk, -ctv, -b, -ub, -td) x temperature
    x prompt; store every run and print the report."""
    use_results_dir(results_dir_opt)
    if page:
        html.check()
    reps = options.repetitions_text(repetitions)
    _refuse_auto_options(ctx, reps)
    grid = Grid(ks=options.draft_lengths(ks), ngls=options.layer_list(ngls, "-ngl"),
                nglds=options.layer_list(nglds, "-ngld"), temperatures=options.temperatures(temps),
                prompts=at_lengths(workloads.choose(prompt_ids, prompts_file, per_category, seed, registry),
                                   options.positive_ints(prompt_tokens, "--prompt-tokens") if prompt_tokens else None),
                repetitions=reps or AUTO_FIRST, max_reps=max_reps if reps is None else None,
                budget_s=options.duration_s(reps_budget, "--reps-budget") if reps_budget and reps is None else None,
                margin=_margin(margin), objective=_objective(objective), n_predict=n_predict, loads=loads,
                top_k=top_k, top_p=top_p, seed=seed, n_ctx=ctx_size, threads=threads, with_draft_alone=draft_alone,
                strategies=strategies(spec_types, ngram_min, ngram_max, p_mins, n_min, k_schedules, k_cap),
                vram=vram_budget(vram) if vram else None, engines=options.engines(engine), engine_options=engine_options,
                parallels=options.positive_ints(parallels, "--parallel") if parallels else None,
                clients=options.positive_ints(clients, "--clients") if clients else None,
                depths=options.int_list(depths, "-d") if depths else [0],
                **axes,
                **placing_axes(n_cpu_moe, override_tensor, device, n_cpu_moe_draft, override_tensor_draft, device_draft,
                               split=Split(tensor_split, split_mode, main_gpu, rpc, rpc_delay)))
    for why in grid.left_out():
        err.print(f"Warning: the sweep leaves out {why}", markup=False)
    name, out = results_path(name, resume)
    with exclusive(out):  # from here to the last record: no other process writes NAME
        choice = PairChoice(pairs, target, draft, registry)
        if ray_address and grid.max_reps is not None:
            raise BenchError("-r auto decides between passes on this machine; with --ray give a count (-r 4)")
        if ray_address and (local := [e for e in grid.engines if not engine_registry.of(e).ray]):
            raise BenchError(f"--engine {local[0]} runs on this machine only, not through --ray")
        if ray_address:  # the units as Ray tasks: each node finds or fetches its own pair, nothing is fetched here
            ray = on_ray(name, grid, out, choice, ray_options(ray_address, ray_gpus_per_task, ray_resources))
            return _sweep(name, grid, out, resume, [(f"Ray {ray.options.address}", ray)], ray, page)
        measured = engine_registry.kind(grid.engines[0]).engine_class().measured(grid, choice, pair_files)
        if not any(p.rpc for p in grid.placings):  # RPC servers' devices take layers whatever this build can do
            warn_offload(*grid.ngls, *grid.nglds)
        _sweep(name, grid, out, resume, measured, page=page)


def _interrupted(out: Path, name: str, flags: str = "") -> typer.Exit:
    err.print(f"Interrupted: every finished run is saved in {out}; continue with "
              f"`gguf-bench sweep ... --name {name} --resume{flags}`", markup=False)
    return typer.Exit(130)


def _sweep(name: str, grid: Grid, out: Path, resume: bool, measured: list[tuple[str, object]],
           ray: OnRay | None = None, page: Path | None = None) -> None:
    """The one sweep path: sweep.run_sweep over what is measured (local pairs, an engine's served URLs, or the units on
    Ray: `ray`), then the report (_finish)."""
    stops: list[str] = []
    flags = f" --ray {ray.options.address}" if ray else ""
    with _stopping(out, name, flags):
        for i, (label, what) in enumerate(measured):
            with SweepProgress(label) as events:
                events.stopped = lambda line, p=label: stops.append(f"{p}: {line}" if len(measured) > 1 else line)
                run_sweep(name, what, grid, out, resume=resume or i > 0, events=events)
    if ray is None:
        return _finish(name, grid, out, f"sweep {name} ({out})", stops, page=page)
    _ray_lines(ray)
    hosts = sorted({r.host for r in read_records(out) if isinstance(r, RunRecord)}) if out.is_file() else []
    _finish(name, grid, out, f"sweep {name} ({out}) on {len(hosts)} hosts: {', '.join(hosts)}", stops,
            ray.options.address, failed_units=failure_message(ray.summary, name) if ray.summary.failures else None,
            page=page)


def _ray_lines(ray: OnRay) -> None:
    """What only Ray's units can say: each unit that failed, and the nodes that could not offload."""
    for line in ray.summary.failures:
        err.print(f"unit failed: {line}", markup=False)
    if no_offload := ray.summary.no_offload:
        err.print(f"Warning: llama-cpp-python on {', '.join(sorted(no_offload))} cannot offload to a GPU, so -ngl/-ngld "
                  "were ignored there; reinstall it there with CMAKE_ARGS=\"-DGGML_CUDA=on\" (see README)", markup=False)


@contextmanager
def _stopping(out: Path, name: str, flags: str = ""):
    """Every sweep path's one line for Ctrl-C and for a results file that cannot be written, with how to resume."""
    try:
        yield
    except KeyboardInterrupt:
        raise _interrupted(out, name, flags) from None
    except ResultsError as exc:
        raise ResultsError(f"{exc}; once it can be written, continue with `gguf-bench sweep ... --name {name} "
                           f"--resume{flags}`") from None


def _finish(name: str, grid: Grid, out: Path, title: str, stops: list[str], ray: str | None = None,
            failed_units: str | None = None, page: Path | None = None) -> None:
    """Every sweep path's tail: the report of the file, why -r auto stopped, what one repetition cannot decide, then
    the exit status: one line for units that failed (Ray), else that of failed cells."""
    records = [r for r in read_records(out) if isinstance(r, RunRecord)] if out.is_file() else []
    if out.is_file():
        _show_runs(records, title=title, deploy_lines=ray is None, margin=grid.margin, objective=grid.objective,
                   page=page, source=out)
        for line in stops:
            console.print(line, markup=False, soft_wrap=True)
        _one_repetition_line(grid, name, ray)
    if failed_units:
        raise BenchError(failed_units)
    _fail_on_failed_cells(records, name, out, f" --ray {ray}" if ray else "")


def _one_repetition_line(grid: Grid, name: str, ray: str | None = None) -> None:
    """After a sweep of one repetition (the default, without -r): one line saying that it decides nothing and what would
    (every engine's sweep prints it: a gain needs at least 2 pairs for an interval; -r auto does not run through Ray)."""
    if grid.max_reps is not None or grid.repetitions != 1:
        return
    more = f"-r 2 --ray {ray}`" if ray else "-r auto` (or -r 2)"
    what = ("1 repetition decides nothing (a verdict counts loads, one per repetition, and needs 2)"
            if grid.loads == LOADS_EACH else "1 repetition: its pairs share one load of each setting, so any verdict is "
            "that load's")
    console.print(fold(f"{what}: continue it with `gguf-bench sweep ... --name {name} --resume {more}", console.width),
                  markup=False, soft_wrap=True)


def _refuse_auto_options(ctx: typer.Context, reps: int | None) -> None:
    """One line for --max-reps or --reps-budget beside a fixed -r N: they say how far -r auto goes, and would be ignored."""
    if reps is not None and (flags := given(ctx, frozenset(p.name for p in ctx.command.params) - AUTO_ONLY)):
        raise BenchError(f"{' and '.join(flags)}: how far -r auto repeats; -r {reps} is a fixed count: give -r auto, or "
                         f"leave {'them' if len(flags) > 1 else 'it'} out")


AUTO_ONLY = frozenset({"max_reps", "reps_budget"})


def _fail_on_failed_cells(records: list[RunRecord], name: str, out: Path, resume_flags: str = "") -> None:
    """One line counting the cells that failed and how to run them again, then exit FAILED_CELLS: scripts and CI see it."""
    failed = cells_failed(records)
    if failed:
        err.print(f"{len(failed)} cell{'s' if len(failed) > 1 else ''} failed (each record in {out} says why); run "
                  f"{'them' if len(failed) > 1 else 'it'} again with `gguf-bench sweep ... --name {name} --resume"
                  f"{resume_flags}`", markup=False)
        raise typer.Exit(FAILED_CELLS)


@command
def report(paths: Annotated[list[Path] | None, typer.Argument(help="results .jsonl files or folders (default: results/)")] = None,
           fmt: Annotated[str | None, typer.Option("--format", help="md | csv | json | jsonl (default: a table)")] = None,
           output: Annotated[Path | None, typer.Option("--output", "-o", help="write the --format output here")] = None,
           plot_path: Annotated[Path | None, typer.Option("--plot", help="write a PNG: tokens/s against K (± std, the target "
                                                          "alone as a band) and acceptance by draft position")] = None,
           plot_metric: Annotated[str, typer.Option("--plot-metric", help="tokens_per_s or gain_pct")] = "tokens_per_s",
           by: Annotated[str | None, typer.Option("--by", help="keep apart: prompt, host, or prompt,host "
                                                  "(hosts are never pooled; --by host shows the column)")] = None,
           by_prompt: Annotated[bool, typer.Option("--by-prompt", help="the same as --by prompt")] = False,
           spec_bench: Annotated[bool, typer.Option("--spec-bench", help="Spec-Bench's layout: per prompt category the "
                                 "speed-up over the target alone, then τ (mean tokens per round) and the overall "
                                 "speed-up (with --format md, csv, json: that table)")] = False,
           steps: Annotated[bool, typer.Option("--steps", help="steps/s and tokens per step beside tokens/s (their "
                                               "product); json and csv always carry both")] = False,
           margin: AskedMarginOpt = None, objective: AskedObjectiveOpt = None,
           results_dir_opt: ResultsDirOpt = None, page: PageOpt = None) -> None:
    """Summarize stored runs: mean ± std, gain % over the target alone, best draft length; evaluations apart."""
    use_results_dir(results_dir_opt)
    if fmt is not None and fmt not in rep.FORMATS:
        raise BenchError(f"unknown --format '{fmt}'; choose from {', '.join(rep.FORMATS)}")
    if output and not fmt:
        raise BenchError("--output needs --format (md, csv, json or jsonl)")
    if plot_path:
        check_plot(plot_metric)
    if page:
        html.check()
    keep = set((by or "").split(",")) - {""}
    if keep - set(summ.BY):
        raise BenchError(f"--by takes {' or '.join(summ.BY)}, got '{by}'")
    loaded = summ.load(paths or [results_dir()], results_dir())
    if loaded.unreadable:
        err.print(f"Warning: skipped {len(loaded.unreadable)} unreadable line(s): {', '.join(loaded.unreadable[:5])}"
                  + (" ..." if len(loaded.unreadable) > 5 else ""), markup=False)
    if not loaded.runs and not loaded.evals and not loaded.calibrations:
        raise BenchError("no runs, evaluations or calibrations in these results"
                         + (" (every line was unreadable)" if loaded.unreadable else ""))
    asked = summ.question(loaded.runs)  # the question the sweeps answered (their margin and objective), unless told
    margin = _margin(asked.margin if margin is None else margin)
    objective = _objective(asked.objective if objective is None else objective)
    df = summ.to_frame(loaded.runs, loaded.sources)  # each run's file: two files are two sweeps (summary.BLOCK)
    df = summ.for_objective(df, objective) if loaded.runs else df  # tokens_per_s: the objective's figure
    df = df if fmt in ("csv", "json", "jsonl") else summ.with_build_names(df)  # the data formats keep builds' paths
    summary = summ.summarize(df, by_prompt=by_prompt or "prompt" in keep, margin=margin) if loaded.runs else None
    if summary is not None:
        summary = summ.with_predictions(summary, df, loaded.calibrations)
    if page:
        if summary is None:
            raise BenchError("nothing to put on a page: these results hold no runs (evaluations or calibrations only)")
        _write_page(page, summary, df, loaded.runs, loaded.sources, to_err=bool(fmt) and output is None)
    if spec_bench:
        return _spec_bench(df, fmt, output)
    if fmt and summary is None and not loaded.evals:  # calibrations alone
        cals = calibrations.calibration_frame(loaded.calibrations)
        return _write(calibrations.calibration_markdown(cals) if fmt == "md" else rep.render(cals, fmt), output)
    if fmt:
        if summary is not None and fmt != "md":  # each pair's best cell carries its llama-server command line
            summary = deploy.with_deploy(summary, df, loaded.runs)
        text = rep.render_results(summary, loaded.evals, fmt)  # evaluations alone, or beside the runs in md
        _write(text + (crossover.markdown(summary, df) if fmt == "md" and summary is not None else ""), output)
    else:
        if summary is not None:
            _show_summary(summary, df, loaded.runs, show_host="host" in keep, steps=steps)
        if loaded.evals:
            console.print(fit_title(evals_view.table(loaded.evals), console.width))
    predicted = summary is not None and "predicted_tokens_per_s" in summary  # calibrations shown as pred.
    cal_table = not fmt and loaded.calibrations and summary is None  # calibrations alone: their own table
    if cal_table:
        console.print(calibrations.calibration_table(calibrations.calibration_frame(loaded.calibrations), console.width))
    unshown = [str(o.kind) for o in loaded.others] + ([] if predicted or cal_table else
                                                     [str(c.kind) for c in loaded.calibrations])
    if unshown:
        err.print(f"({len(unshown)} record(s) of kind {', '.join(sorted(set(unshown)))} not shown here)", markup=False)
    if plot_path:
        if summary is None:
            raise BenchError("nothing to plot: these results hold no runs (evaluations or calibrations only)")
        console.print(f"wrote {plot(summary, plot_path, plot_metric, df)}")
