"""`gguf-bench tune`: its options, tables and JSON. The calibration is measure/flows/calibrate.py's, the prediction
results/predictions/costmodel.py's, the plot results/presentation/plots.py's."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from gguf_bench import engine_registry, options
from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.engine_flags import engine_flags
from gguf_bench.cli.options import (
    CtxOpt,
    DeviceDraftOpt,
    DeviceOpt,
    DraftOpt,
    MainGpuOpt,
    NCpuMoeDraftOpt,
    NCpuMoeOpt,
    NgldsOpt,
    NglsOpt,
    NgramMaxOpt,
    NgramMinOpt,
    ObjectiveOpt,
    OverrideDraftOpt,
    OverrideOpt,
    PairArg,
    PerCategoryOpt,
    PromptsFileOpt,
    PromptTokensOpt,
    RegistryOpt,
    ResultsDirOpt,
    RpcDelayOpt,
    RpcOpt,
    SplitModeOpt,
    TargetOpt,
    TensorSplitOpt,
    ThreadsOpt,
)
from gguf_bench.cli.progress import QuietStatus, pair_files
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy, parse_spec_types
from gguf_bench.errors import BenchError
from gguf_bench.measure import deploy
from gguf_bench.measure.flows.server_tune import ServerTuneJob, twin_files
from gguf_bench.measure.flows.server_tune import tune_server as tune_server_job
from gguf_bench.measure.flows.tune import TuneEvents, TuneJob, twin_job
from gguf_bench.measure.flows.tune import tune as run_tune
from gguf_bench.measure.inputs import workloads
from gguf_bench.measure.inputs.prompts import at_lengths
from gguf_bench.models.pairs import PairFiles, header_sources
from gguf_bench.models.twin import twin_folder
from gguf_bench.placing import Split, placing_axes
from gguf_bench.results.predictions.costmodel import DEFAULT_REPS
from gguf_bench.results.predictions.server_costs import check_predictable
from gguf_bench.results.presentation import server_tuning
from gguf_bench.results.presentation.plots import check_plot, plot_tune
from gguf_bench.results.presentation.tuning import (
    acceptance_table,
    as_json,
    check_table,
    components_line,
    cost_outlook_lines,
    measured_line,
    prediction_table,
    recommendation_line,
    request_line,
    tune_strategies,
    twin_json,
)
from gguf_bench.results.schema.store import default_name, ensure_results_dir, use_results_dir
from gguf_bench.results.schema.text import fit_title


@command
@engine_flags("tune")
def tune(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
         ks: Annotated[str, typer.Option("--draft-max", "-K", help="draft lengths to predict: 1-16, 1,2,4,8, 1-16+2")] = "1-16",
         ngls: NglsOpt = "0", nglds: NgldsOpt = "0",
         prompt_ids: Annotated[str | None, typer.Option("--prompt-ids", help="built-in prompts to calibrate on "
                               "(code-short, chat-short, code-long, chat-long; default all)")] = None,
         prompts_file: PromptsFileOpt = None, per_category: PerCategoryOpt = None,
         n_predict: Annotated[int, typer.Option("--n-predict", "-n", help="tokens to generate per prompt")] = 64,
         threads: ThreadsOpt = None, ctx_size: CtxOpt = 2048,
         reps: Annotated[int, typer.Option("--reps", help="repetitions of each decode timing, spread between "
                                                       "the prompts' runs (the median is kept); --engine server: "
                                                       "of each calibration request (default 3)")] = 6,
         check: Annotated[bool, typer.Option("--check", help="then measure the recommended K and its neighbours "
                          "(and the n-gram cost schedule, when predicted) the way `sweep` does, and print them next "
                          "to the prediction")] = False,
         json_out: Annotated[bool, typer.Option("--json", help="print the predictions as JSON")] = False,
         name: Annotated[str | None, typer.Option("--name", help="store in results/NAME.jsonl")] = None,
         plot: Annotated[Path | None, typer.Option("--plot", help="write a PNG: verify cost curve and predicted tokens/s")] = None,
         spec_types: Annotated[str, typer.Option("--spec-type", help="drafting to predict, a list: draft (the draft "
                               "model), ngram (prompt lookup)")] = "draft",
         k_schedules: Annotated[str, typer.Option("--k-schedule", help="fixed, heuristic, cost (n-gram only), a "
                                "list (heuristic: K is where each generation starts; cost: K is its cap); tune always "
                                "prints how --k-schedule cost compares with the best fixed K")] = "fixed",
         ngram_min: NgramMinOpt = 1, ngram_max: NgramMaxOpt = 4,
         k_cap: Annotated[int | None, typer.Option("--k-cap", help="the heuristic schedule's largest K "
                          "(default: the largest -K)")] = None,
         depth: Annotated[int, typer.Option("--depth", "-d", help="tokens of context before each prompt (llama-bench's "
                          "-d): the verify costs and acceptance are measured after it")] = 0,
         twin: Annotated[bool, typer.Option("--twin", help="calibrate twins of the pair (its headers with synthetic "
                         "weights: nothing is downloaded) for its speed; acceptance from an earlier tune of the real "
                         "pair, else predicted at --acceptance")] = False,
         acceptance: Annotated[str, typer.Option("--acceptance", help="with --twin: acceptance rates to predict "
                               "tokens/s at, each in (0, 1]")] = "0.5,0.7,0.9",
         agree: Annotated[bool, typer.Option("--agree", help="with --twin: agreeing twins (twin --agree: every draft "
                          "accepted, by construction): tune predicts each K at acceptance 1 from its own "
                          "calibration, and --check measures it; the upper bound of a draft's gain, not a real "
                          "draft's")] = False,
         n_cpu_moe: NCpuMoeOpt = None, override_tensor: OverrideOpt = None, device: DeviceOpt = None,
         n_cpu_moe_draft: NCpuMoeDraftOpt = None, override_tensor_draft: OverrideDraftOpt = None,
         device_draft: DeviceDraftOpt = None, tensor_split: TensorSplitOpt = None, split_mode: SplitModeOpt = None,
         main_gpu: MainGpuOpt = None, rpc: RpcOpt = None, rpc_delay: RpcDelayOpt = None,
         engine: Annotated[str, typer.Option("--engine", help="python: calibrate gguf-bench's loop (decode timings, "
                           "every K from one text); server: calibrate llama-server itself (its timings and "
                           "per-position counters at two or three K), for any type that drafts K tokens a round")] = "python",
         parallel: Annotated[int | None, typer.Option("--parallel", "-np", help="--engine server: calibrate and predict "
                             "at this many slots, as many clients (predicts each request's tokens/s)")] = None,
         objective: ObjectiveOpt = "decode", prompt_tokens: PromptTokensOpt = None,
         registry: RegistryOpt = None, results_dir_opt: ResultsDirOpt = None, engine_options: tuple = ()) -> None:
    """Predict tokens/s for every draft length and offload setting (and placement: -ncmoe, -ot, -dev and the draft's,
    each calibrated where it places the weights) from a short calibration, and
    recommend the fastest, without a full sweep (greedy)."""
    use_results_dir(results_dir_opt)
    kind = engine_registry.kind(engine)
    if parallel is not None and not kind.capabilities.concurrent:
        raise BenchError(f"--parallel calibrates slots: add --engine {' or '.join(_tunable('concurrent'))}")
    flow = kind.tune_flow()
    chosen = at_lengths(workloads.choose(prompt_ids, prompts_file, per_category, registry=registry),
                        _one_length(prompt_tokens))
    args = TuneArgs(pair, target, draft, options.draft_lengths(ks), ngls, nglds, chosen, n_predict, threads,
                    ctx_size, reps, check, json_out, name, plot, spec_types, k_schedules, ngram_min, ngram_max, k_cap, depth,
                    twin, acceptance, (n_cpu_moe, override_tensor, device, n_cpu_moe_draft, override_tensor_draft,
                                       device_draft, Split(tensor_split, split_mode, main_gpu, rpc, rpc_delay)),
                    parallel, engine_options, registry, _tune_objective(objective, twin), bool(prompt_tokens), agree)
    if agree and not twin:
        raise BenchError("--agree tunes agreeing twins: add --twin (the real files' acceptance is their own)")
    flow(args)


def _one_length(text: str | None) -> list[int] | None:
    """tune's --prompt-tokens: one length (a calibration predicts one workload; sweep takes a list)."""
    if not text:
        return None
    lengths = options.positive_ints(text, "--prompt-tokens")
    if len(lengths) > 1:
        raise BenchError(f"tune calibrates one prompt length, got {text}: run tune once per length, or sweep "
                         f"--prompt-tokens {text}")
    return lengths


def _tune_objective(name: str, twin: bool) -> str:
    """tune's --objective: decode tokens/s, or request latency (the Python engine, on real files)."""
    if name not in ("decode", "request"):
        raise BenchError(f"tune predicts --objective decode or request, got '{name}' (sweep measures throughput)")
    if name == "request" and twin:
        raise BenchError("--objective request predicts the prompt's processing, which tune times on the real files: "
                         "drop --twin")
    return name


@dataclass(frozen=True)
class TuneArgs:
    """The tune command's options, as given (each engine's flow reads what it takes)."""

    pair: str | None
    target: Path | None
    draft: Path | None
    k_list: list[int]
    ngls: str
    nglds: str
    chosen: list
    n_predict: int
    threads: int | None
    ctx_size: int
    reps: int
    check: bool
    json_out: bool
    name: str | None
    plot: Path | None
    spec_types: str
    k_schedules: str
    ngram_min: int
    ngram_max: int
    k_cap: int | None
    depth: int
    twin: bool
    acceptance: str
    placement: tuple  # -ncmoe, -ot, -dev, -ncmoed, -otd, -devd and the Split (placing.placing_axes' arguments)
    parallel: int | None
    engine_options: tuple  # the chosen engine's own options (cli/engine_flags.py)
    registry: Path | None
    objective: str = "decode"  # what the predictions rank by (python engine): decode tokens/s, or request latency
    prompt_length: bool = False  # --prompt-tokens given (the prompts in `chosen` carry it)
    agree: bool = False  # --twin --agree: agreeing twins (acceptance 1 by construction)


def _fastest_of(cal, predicted: list[Strategy]):
    """The calibration's fastest prediction over the strategies (what its request line is about)."""
    return max(cal.predictions(predicted), key=lambda p: p.tokens_per_s, default=None)


def _tunable(capability: str) -> list[str]:
    """The engines tune calibrates that have a capability."""
    return [n for n in engine_registry.names_with(capability) if engine_registry.kind(n).tune]


def tune_server(a: TuneArgs) -> None:
    """tune --engine server: a short calibration through llama-server itself (measure/flows/server_tune.py)."""
    if a.agree:
        raise BenchError("--agree is for --engine python: llama-server's acceptance of agreeing twins is not checked")
    if a.objective != "decode" or a.prompt_length:
        raise BenchError("tune --engine server predicts decode tokens/s on the built-in prompts: --objective request "
                         "and --prompt-tokens are for --engine python (sweep --engine server measures both)")
    if any(o.load_axes() for o in a.engine_options):  # --server-bin A,B
        raise BenchError("tune --engine server calibrates one build: give --server-bin one binary (sweep --engine "
                         "server --server-bin A,B measures several builds as settings)")
    ngl, ngld = _server_options(a.ngls, a.nglds, a.parallel, a.depth, a.k_schedules, a.plot)
    types = [SERVER_NAMES.get(t, t) for t in parse_spec_types(a.spec_types)]
    for t in types:
        check_predictable(t, a.twin)
    alphas = options.acceptances(a.acceptance) if a.twin else None
    name = options.results_name(a.name or default_name("tune"))
    with twin_folder("tune-twins-") as folder:  # twins live while tune runs
        files = _server_files(a.pair, a.target, a.draft, a.registry, types, a.twin, Path(folder))
        job = ServerTuneJob(files, a.chosen, a.k_list, types, a.n_predict, a.ctx_size, a.threads, name,
                            ensure_results_dir() / f"{name}.jsonl", a.reps if a.reps != DEFAULT_REPS else SERVER_REPS,
                            ngl, ngld, a.parallel, a.engine_options)
        with QuietStatus(f"calibrating {files.name} through llama-server ...") as status:
            tuned = tune_server_job(job, a.check, status.update, a.twin)
    _show_server(tuned, alphas, a.json_out)


def tune_python(a: TuneArgs) -> None:
    """tune --engine python: the loop's decode timings, every K predicted from one text (measure/flows/tune.py)."""
    predicted = tune_strategies(a.spec_types, a.k_schedules, a.ngram_min, a.ngram_max, a.k_cap, a.k_list)
    ngl_list, ngld_list = options.layer_list(a.ngls, "-ngl"), options.layer_list(a.nglds, "-ngld")
    if a.n_predict < 2 or a.reps < 1:
        raise BenchError(f"--n-predict must be >= 2 and --reps >= 1 (got {a.n_predict} and {a.reps})")
    if a.plot:
        check_plot()
    alphas = options.acceptances(a.acceptance)
    axes = placing_axes(*a.placement[:-1], split=a.placement[-1])
    placed = {"placings": tuple(axes["placings"]), "placings_draft": tuple(axes["placings_draft"])}
    name = options.results_name(a.name or default_name("tune"))
    out = ensure_results_dir() / f"{name}.jsonl"
    with twin_folder("tune-twins-") as folder:  # twins live while tune runs
        if a.twin:
            *sources, pair_name = header_sources(a.pair, a.target, a.draft, a.registry)
            job = TuneJob(PairFiles(Path(sources[0]), Path(sources[1]), pair_name), a.chosen, a.k_list, a.n_predict,
                          a.ctx_size, a.threads, name, out, a.reps, a.depth, **placed)
            job = twin_job(job, tuple(sources), Path(folder), a.registry, a.agree)
        else:
            job = TuneJob(pair_files(a.pair, a.target, a.draft, a.registry), a.chosen, a.k_list, a.n_predict, a.ctx_size,
                          a.threads, name, out, a.reps, a.depth, **placed, objective=a.objective)
        with QuietStatus(f"calibrating {job.files.name} ...") as status:
            events = TuneEvents(step=status.update, warn=lambda line: err.print(f"Warning: {line}", markup=False),
                                note=lambda line: err.print(f"Note: {line}", markup=False))
            tuned = run_tune(job, ngl_list, ngld_list, predicted, a.check, events)
    if tuned.top is None:  # twins, and no acceptance measured for the real pair
        return _twin_only(tuned, alphas, a.json_out)
    _show_python(tuned, predicted, alphas, a)


def _show_python(tuned, predicted: list[Strategy], alphas: list[float], a: TuneArgs) -> None:
    """tune --engine python's tables (or JSON), recommendation, deploy line and plot."""
    files, out = tuned.job.files, tuned.job.out
    calibrations, top_cal, top, rec = tuned.calibrations, tuned.top_cal, tuned.top, tuned.rec
    outlooks, cost_top, checked = tuned.outlooks, tuned.cost_top, tuned.checked
    deploy_line, deploy_note = _deploy(tuned, predicted, a.threads)
    if a.json_out:
        doc = as_json(files.name, out, calibrations, predicted, checked, outlooks, tuned.verdict) | {
            "deploy": deploy_line, "deploy_note": deploy_note}
        if tuned.job.real_pair:
            doc |= twin_json(tuned, alphas)
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
    else:
        for cal in calibrations:
            table = prediction_table(cal, predicted, top_cal, top if rec.speculative else None, console.width, rec.guard)
            console.print(fit_title(table, console.width))
            console.print(components_line(cal), markup=False)
            if line := request_line(cal, _fastest_of(cal, predicted)):
                console.print(line, markup=False)
            if cal.fit is not None and abs(cal.fit - 1) > 0.1:
                err.print(f"Warning: {cal.setting}: the calibration's own K={max(cal.ks)} runs took "
                          f"{1 / cal.fit:.2f}x what its decode timings predict: the machine's speed changed while "
                          "calibrating (other work running?); tune again when it is idle", markup=False)
        if tuned.job.real_pair:
            _twin_lines(tuned, alphas)
        for line in cost_outlook_lines(outlooks):
            console.print(line, markup=False)
        if checked is not None:  # what was measured comes before the recommendation it decides
            console.print(fit_title(check_table(checked, _checked_k(tuned.verdict), console.width), console.width))
        console.print(measured_line(tuned.verdict, rec, cost_top) if tuned.verdict else
                      recommendation_line(rec, top_cal, top, cost_top, len(predicted) > 1, (a.ngram_min, a.ngram_max)),
                      markup=False)
        console.print(f"deploy ({deploy_note}):" if deploy_line else f"deploy: {deploy_note}", markup=False)
        if deploy_line:
            console.print(deploy_line, markup=False, soft_wrap=True)
        console.print(f"calibration stored in {out}", markup=False, soft_wrap=True)  # a path is never folded
    if a.plot:
        written = plot_tune(calibrations, predicted, checked, a.plot, outlooks)
        (err if a.json_out else console).print(f"wrote {written}", markup=False)


def _deploy(tuned, predicted: list[Strategy], threads: int | None) -> tuple[str | None, str]:
    """tune's deploy line and what to say of it: --check's measured verdict where it ran, else the prediction."""
    if tuned.job.real_pair:
        return None, (f"twins are not files to deploy: `gguf-bench tune {tuned.job.real_pair}` on the real files prints "
                      "the command line")
    rec, cost = tuned.chosen
    strategies = [*predicted, DEFAULT_STRATEGY] if tuned.measured is not None else predicted  # --check runs the draft
    line, note = deploy.tuned_line(tuned.job.files, strategies, rec, cost, tuned.job.ctx_size, threads)
    if line is not None and tuned.measured is not None:
        note = "measured in the Python loop by --check, not through llama-server: check it with --engine server"
    return line, note


def _checked_k(verdict: dict | None) -> int | None:
    """The K --check's table stars: the verdict's, where it is the draft model's fixed K."""
    return verdict["k"] if verdict and verdict["k"] and verdict["strategy"] == DEFAULT_STRATEGY.name else None


def _twin_only(tuned, alphas: list[float], json_out: bool) -> None:
    """Twins whose pair's acceptance was never measured: tokens/s at the named rates, and how to learn the real one."""
    real = tuned.job.real_pair
    if json_out:
        sys.stdout.write(json.dumps({"pair": tuned.job.files.name, "results": str(tuned.job.out)} | twin_json(tuned, alphas),
                                    default=str) + "\n")
        return
    _twin_lines(tuned, alphas)
    console.print(f"no acceptance of {real} is known (a twin's own is chance): no draft length is recommended; "
                  f"`gguf-bench tune {real}` on the real files measures it, and a later `tune --twin` uses it",
                  markup=False)
    console.print(f"calibration stored in {tuned.job.out}", markup=False, soft_wrap=True)


def _twin_lines(tuned, alphas: list[float]) -> None:
    for cal in tuned.calibrations:
        console.print(fit_title(acceptance_table(cal, alphas, console.width), console.width))
        console.print(components_line(cal), markup=False)
    source = tuned.calibrations[0].acceptance_from
    if tuned.job.agree:
        source = "1 by construction (agreeing twins: every draft accepted; the upper bound of a draft's gain here)"
    console.print(f"twins: timings from twins of {tuned.job.real_pair} (its headers, synthetic weights)"
                  + (f"; acceptance {source}" if source else ""), markup=False)


def _server_options(ngls: str, nglds: str, parallel: int | None, depth: int, k_schedules: str,
                    plot) -> tuple[int | str, int | str]:
    """The one offload setting tune --engine server calibrates; one line for what it cannot do."""
    if depth or k_schedules != "fixed" or plot:
        raise BenchError("tune --engine server calibrates at depth 0 with a fixed K: --depth, --k-schedule and --plot "
                         "are for --engine python")
    ngl, ngld = (options.layer_list(v, flag) for v, flag in ((ngls, "-ngl"), (nglds, "-ngld")))
    if len(ngl) > 1 or len(ngld) > 1:
        raise BenchError("tune --engine server calibrates one offload setting: give one -ngl and one -ngld (sweep "
                         "several with `gguf-bench sweep --engine server`)")
    if parallel is not None and parallel < 1:
        raise BenchError(f"--parallel must be >= 1, got {parallel}")
    return ngl[0], ngld[0]


def _server_files(pair, target, draft, registry, types: list[str], twin: bool, folder: Path) -> PairFiles:
    """The files to calibrate: the pair's (a target alone where no type reads a draft), or twins of them."""
    need_draft = any(Strategy(t).uses_model for t in types)
    if not twin:
        return pair_files(pair, target, draft, registry, need_draft=need_draft)
    if target and not draft and not pair and not need_draft:
        return twin_files(Path(str(target)).name, str(target), None, folder, registry)
    *sources, pair_name = header_sources(pair, target, draft, registry)
    return twin_files(pair_name, sources[0], sources[1] if need_draft else None, folder, registry)


def _show_server(tuned, alphas: list[float] | None, json_out: bool) -> None:
    """tune --engine server's tables, recommendation and deploy line; on twins, tokens/s at the named acceptance rates."""
    ks = list(tuned.job.ks)
    line = None if alphas else deploy.tuned_server_line(replace(tuned, top=tuned.chosen))  # --check's verdict, if run
    if json_out:
        doc = server_tuning.as_json(tuned, twin=bool(alphas)) | {"deploy": line}
        if alphas:
            doc |= {"twin": True, "at_acceptance": server_tuning.acceptance_rows(tuned, alphas)}
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
        return
    for cal in tuned.calibrations:
        table = (server_tuning.acceptance_table(cal, ks, alphas, console.width) if alphas else
                 server_tuning.prediction_table(cal, ks, tuned.top, console.width))
        console.print(fit_title(table, console.width))
    if alphas:
        console.print(f"twins: round times from twins (headers with synthetic weights) of {tuned.job.files.name}; "
                      "the acceptance is the one named, not measured: no draft length is recommended", markup=False)
    else:
        if tuned.checked is not None:  # what was measured comes before the recommendation it decides
            console.print(fit_title(server_tuning.check_table(tuned, console.width), console.width))
        console.print(server_tuning.recommendation_line(tuned), markup=False)
        console.print("deploy (measured by --check):" if tuned.verdict else
                      "deploy (predicted, not measured: --check measures it):", markup=False)
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"calibration runs stored in {tuned.job.out}", markup=False, soft_wrap=True)


SERVER_REPS = 3  # tune --engine server: repetitions of each calibration request (the median is kept)
SERVER_NAMES = {"draft": "draft-simple"}  # the loop's draft model is llama-server's draft-simple
