"""Commands that check quality: eval (multiplication benchmark), check-dist (distribution test), compare (live)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gguf_bench import options
from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.live import SideBySide
from gguf_bench.cli.options import (
    ChatOpt,
    CtxOpt,
    DraftOpt,
    KOpt,
    NgldOpt,
    NglOpt,
    NPredictOpt,
    PairArg,
    RegistryOpt,
    ResultsDirOpt,
    SeedOpt,
    TargetOpt,
    TempOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
    VerifyOpt,
)
from gguf_bench.cli.progress import load_pair
from gguf_bench.decoding.loop import Verify
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.measure.flows.quality import CompareEvents, distribution_check, evaluate, identity_lines
from gguf_bench.measure.flows.quality import compare as compare_both
from gguf_bench.models.pairs import PairChoice
from gguf_bench.results.schema.evaluation import EvalConfig
from gguf_bench.results.schema.records import to_dict
from gguf_bench.results.schema.store import default_name, ensure_results_dir, try_append_record, use_results_dir
from gguf_bench.results.schema.text import fit_title


@command
def eval(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
         nb_prompts: Annotated[int, typer.Option("--nb-prompts", help="number of multiplication prompts")] = 100,
         seed: Annotated[int, typer.Option("--seed", help="seed for the prompts and for sampling")] = 0,
         temp: TempOpt = 0.0, top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, k: KOpt = "4", ngl: NglOpt = "0",
         ngld: NgldOpt = "0", n_predict: NPredictOpt = 12, threads: ThreadsOpt = None, ctx_size: CtxOpt = 512,
         chat: Annotated[bool, typer.Option("--chat", help="ask through the model's chat template (instruct models)")] = False,
         name: Annotated[str | None, typer.Option("--name", help="store in results/NAME.jsonl")] = None,
         json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
         verify: VerifyOpt = Verify.BATCHED, registry: RegistryOpt = None, results_dir_opt: ResultsDirOpt = None) -> None:
    """Multiplication benchmark: regular vs speculative success rates with 95% Wilson intervals."""
    use_results_dir(results_dir_opt)
    config = EvalConfig(nb_prompts=options.nb_prompts(nb_prompts), seed=seed, temperature=options.temperature(temp),
                        top_k=top_k, top_p=top_p, k=options.one_draft_length(k),
                        ngl=options.layers_label(options.layers(ngl)), ngld=options.layers_label(options.layers(ngld)),
                        n_predict=options.n_predict(n_predict), chat=chat, verify=str(verify))
    config.sampling()  # validates top-k and top-p before any work
    out = ensure_results_dir() / f"{options.results_name(name or default_name('eval'))}.jsonl"
    files, loaded = load_pair(PairChoice([pair] if pair else None, target, draft, registry), ngl, ngld, ctx_size, threads, seed)
    with loaded, Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          console=err, transient=True) as bar:
        task = bar.add_task("eval", total=config.nb_prompts)
        res, record = evaluate(loaded, files, config, progress=lambda i: bar.update(task, completed=i))
    unsaved = try_append_record(out, record)  # a failed write still prints the result, then exits 1
    if json_out:
        sys.stdout.write(json.dumps(to_dict(record), default=str) + "\n")
        if unsaved:
            raise unsaved
        return
    table = Table(title=f"multiplication benchmark: {files.name}, {res.n} prompts, T={temp:g}, K={config.k}")
    for col in ("generation", "correct", "success rate", "95% Wilson interval"):
        table.add_column(col, justify="left" if col == "generation" else "right")
    for mode, ok in (("regular (target alone)", res.regular_ok), ("speculative", res.speculative_ok)):
        p, lo, hi = res.interval("regular" if mode.startswith("regular") else "speculative")
        table.add_row(mode, f"{ok}/{res.n}", f"{p:.1%}", f"[{lo:.1%}, {hi:.1%}]")
    console.print(fit_title(table, console.width))
    verdict = "differ significantly" if res.differ else "do not differ significantly"
    console.print(f"success rates {verdict} (two-proportion z-test p = {res.p_value:.3g}); "
                  f"draft acceptance {res.acceptance:.1%}")
    for line, bad in identity_lines(res):
        console.print(line, markup=False, style="bold red" if bad else None)
    if unsaved:
        raise unsaved
    console.print(f"stored in {out}")


@command
def check_dist(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
               prompt: Annotated[str, typer.Option("--prompt", "-p", help="prompt text")] = "Once upon a time",
               m: Annotated[int, typer.Option("-m", help="tokens to sample after the prompt (>= 3)")] = 4,
               samples: Annotated[int, typer.Option("--samples", help="generations per side")] = 200,
               temp: TempOpt = 1.0, top_k: TopKOpt = 0, top_p: TopPOpt = 1.0, k: KOpt = "4", seed: SeedOpt = 0,
               ngl: NglOpt = "0", ngld: NgldOpt = "0", threads: ThreadsOpt = None, ctx_size: CtxOpt = 512,
               registry: RegistryOpt = None) -> None:
    """Sample the next m tokens many times both ways and test that the distributions agree."""
    cfg = SamplingConfig(temp, top_k, top_p, seed)
    k_one = options.one_draft_length(k)
    files, loaded = load_pair(PairChoice([pair] if pair else None, target, draft, registry), ngl, ngld, ctx_size, threads, seed)
    with loaded, console.status(f"sampling {samples} x {m} tokens each way ..."):
        check = distribution_check(loaded, loaded.prompt_tokens(prompt), m, samples, k_one, cfg)
    table = Table(title=f"{files.name}: next {m} tokens, {samples} samples each, T={temp:g}, K={k_one}")
    for col in ("position", "chi-square p", "total variation", "detectable TV"):
        table.add_column(col, justify="right")
    for j, (p, tv, least) in enumerate(zip(check.p_values, check.tv_distance, check.detectable), 1):
        table.add_row(str(j), f"{p:.3g}", f"{tv:.3f}", f"{least:.3f}")
    console.print(fit_title(table, console.width))
    console.print(check.verdict())
    console.print("detectable TV: the smallest total variation the test detects with 80% power at this sample size",
                  markup=False)
    if not check.same:
        raise typer.Exit(2)


@command
def compare(pair: PairArg = None, target: TargetOpt = None, draft: DraftOpt = None,
            prompt: Annotated[str, typer.Option("--prompt", "-p", help="prompt text")] = "def fibonacci(n):",
            chat: ChatOpt = False, n_predict: NPredictOpt = 96, k: KOpt = "4", temp: TempOpt = 0.0, top_k: TopKOpt = 0,
            top_p: TopPOpt = 1.0, seed: SeedOpt = 0, ngl: NglOpt = "0", ngld: NgldOpt = "0", threads: ThreadsOpt = None,
            ctx_size: CtxOpt = 2048, verify: VerifyOpt = Verify.BATCHED, registry: RegistryOpt = None) -> None:
    """Regular and speculative generation of one prompt, live and side by side."""
    cfg = SamplingConfig(temp, top_k, top_p, seed)
    k_one, n_predict = options.one_draft_length(k), options.n_predict(n_predict)
    files, loaded = load_pair(PairChoice([pair] if pair else None, target, draft, registry), ngl, ngld, ctx_size, threads, seed)
    with loaded:
        view = SideBySide(loaded.target.detokenize, f"regular: {files.target.name}",
                          f"speculative K={k_one}: + {files.draft.name}")
        with view.live(console):
            result = compare_both(loaded, loaded.prompt_tokens(prompt, chat), n_predict, k_one, cfg, verify,
                                  CompareEvents(on_round=view.on_round, finish=view.finish))
    console.print()
    console.print(view.summary(result.regular, result.speculative, result.verdict), markup=False)
