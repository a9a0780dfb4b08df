#!/usr/bin/env python
"""Benchmark drafting strategies (issue 11) on real models, greedy, through the library (no CLI).

Two experiments, each printing a markdown table of tokens/s (median and range over repetitions),
the gain over the target alone, acceptance, tokens per round and whether the output equals the
target alone's:

  ngram       one model alone (no draft file): the target alone against n-gram drafts at several K
              python scripts/bench_strategies.py ngram --model qwen2.5-coder-1.5b-instruct-q4_k_m \\
                  --prompt-ids code-edit-hints -K 4,8,16,32 -n 160 --repeat 3
  categories  a pair over the built-in categories: fixed K, p-min, the heuristic schedule, n-gram
              drafts; per prompt the best fixed K against the best adaptive setting
              python scripts/bench_strategies.py categories --pair qwen-coder-1.5b-f16+q2k -n 128 --repeat 2
  cost        issue 24: the target alone, fixed K and --k-schedule cost at several caps, per prompt category;
              per prompt each cap against the target alone (target: >= 0.97x) and the best fixed K (within 5%),
              the rounds per draft length and the schedule's predicted tokens/s beside the measured
              python scripts/bench_strategies.py cost --pair qwen-coder-1.5b-f16+q2k -n 128 --repeat 2
              python scripts/bench_strategies.py cost --spec-type ngram --model qwen2.5-coder-1.5b-instruct-q4_k_m

Settings are measured interleaved (every setting once, then again) so that a change in the machine's
load touches all of them alike. Models come from the registry (fetched if missing) or --target/--draft.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.models.registry import load_registry
from gguf_bench.results.presentation.report import rounds_by_length

GREEDY = SamplingConfig()


@dataclass(frozen=True)
class Setting:
    name: str
    k: int = 0  # 0: the target alone
    strategy: Strategy | None = None

    @property
    def alone(self) -> bool:
        return self.strategy is None


def model_path(name: str) -> Path:
    from gguf_bench.models.download import fetch
    from gguf_bench.runtimes.llama_cpp import quantize

    reg = load_registry()
    return fetch(reg.models[name], reg, quantize=quantize).path


def pair_paths(name: str) -> tuple[Path, Path]:
    reg = load_registry()
    pair = reg.pair(name)
    return model_path(pair.target.name), model_path(pair.draft.name)


def measure(pair: LoadedPair, prompt: list[int], settings: list[Setting], n: int, repeat: int) -> dict[str, dict]:
    """Per setting: tokens/s of every repetition, acceptance, tokens per round, identity with the target alone,
    rounds per draft length (summed over repetitions) and a cost schedule's predicted tokens/s."""
    out: dict[str, dict] = {s.name: {"tps": [], "acc": [], "tpr": [], "same": [], "hist": None, "src": None, "pred": []}
                            for s in settings}
    reference = None
    pair.generate("target", prompt, 8, 1, GREEDY)  # warm-up: the first decodes are slow
    for rep in range(repeat):
        for s in settings:
            if s.alone:
                res = pair.generate("target", prompt, n, 1, GREEDY)
                reference = reference or res.tokens
            else:
                res = pair.generate("speculative", prompt, n, s.k, GREEDY, strategy=s.strategy)
            row = out[s.name]
            row["tps"].append(res.tokens_per_s)
            row["acc"].append(res.acceptance if res.drafted else float("nan"))
            row["tpr"].append(res.tokens_per_round if res.rounds else 1.0)
            row["same"].append(reference is None or res.tokens == reference)
            row["hist"] = [a + b for a, b in zip(row["hist"], res.draft_lengths)] if row["hist"] else list(res.draft_lengths)
            row["src"] = res.draft_sources
            if res.predicted_tokens_per_s is not None:
                row["pred"].append(res.predicted_tokens_per_s)
            print(f"  rep {rep + 1} {s.name:32s} {res.tokens_per_s:7.2f} tok/s  ({res.n_tokens} tokens)", file=sys.stderr, flush=True)
    return out


def rng(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def table(title: str, rows: dict[str, dict], baseline: str) -> str:
    base = statistics.median(rows[baseline]["tps"])
    lines = [f"**{title}**", "", "| setting | tokens/s median [range] | gain | acceptance | tokens/round | = target alone |",
             "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        gain = 100 * (statistics.median(r["tps"]) / base - 1)
        acc = statistics.median(r["acc"])
        lines.append(f"| {name} | {rng(r['tps'])} | {gain:+.0f}% | {'-' if acc != acc else f'{acc:.0%}'} | "
                     f"{statistics.median(r['tpr']):.2f} | {sum(r['same'])}/{len(r['same'])} |")
    return "\n".join(lines)


def best(rows: dict[str, dict], names: list[str]) -> tuple[str, float]:
    name = max(names, key=lambda n: statistics.median(rows[n]["tps"]))
    return name, statistics.median(rows[name]["tps"])


def run_ngram(args) -> None:
    target = args.target or model_path(args.model)
    settings = [Setting("target alone")] + [Setting(Strategy("ngram", args.ngram_min, args.ngram_max).label(k), k,
                                                    Strategy("ngram", args.ngram_min, args.ngram_max)) for k in args.k]
    with LoadedPair(PairFiles(target, None, target.name), LoadConfig(n_ctx=args.ctx, threads=args.threads)) as pair:
        for prompt in builtin(args.prompt_ids.split(",")):
            tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
            print(f"{prompt.id}: {len(tokens)} prompt tokens", file=sys.stderr)
            rows = measure(pair, tokens, settings, args.n, args.repeat)
            print(table(f"{target.name} alone, prompt {prompt.id} ({len(tokens)} tokens), greedy, -n {args.n}, "
                        f"{args.threads} threads, {args.repeat} repetitions", rows, "target alone"), "\n", flush=True)


def category_settings(args) -> tuple[list[Setting], list[str], list[str]]:
    fixed = [Setting(Strategy().label(k), k, Strategy()) for k in args.k]
    adaptive = [Setting(Strategy(p_min=p).label(args.p_min_k), args.p_min_k, Strategy(p_min=p)) for p in args.p_min]
    adaptive.append(Setting(Strategy(k_schedule="heuristic", k_cap=args.k_cap).label(args.heuristic_k), args.heuristic_k,
                            Strategy(k_schedule="heuristic", k_cap=args.k_cap)))
    others = [Setting(Strategy(t).label(args.ngram_k), args.ngram_k, Strategy(t)) for t in args.also]
    return [Setting("target alone"), *fixed, *adaptive, *others], [s.name for s in fixed], [s.name for s in adaptive]


def run_categories(args) -> None:
    target, draft = (args.target, args.draft) if args.target else pair_paths(args.pair)
    args.pair = f"{target.name}+{draft.name}" if args.target else args.pair
    settings, fixed, adaptive = category_settings(args)
    summary = ["| prompt (category) | target alone | best fixed K | best adaptive | adaptive vs fixed | best n-gram |",
               "|---|---|---|---|---|---|"]
    with LoadedPair(PairFiles(target, draft, args.pair), LoadConfig(n_ctx=args.ctx, threads=args.threads)) as pair:
        for prompt in builtin(args.prompt_ids.split(",")):
            tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
            print(f"{prompt.id}: {len(tokens)} prompt tokens", file=sys.stderr)
            t0 = time.perf_counter()
            rows = measure(pair, tokens, settings, args.n, args.repeat)
            print(table(f"{args.pair}, prompt {prompt.id} ({prompt.category}, {len(tokens)} tokens), greedy, "
                        f"-n {args.n}, {args.threads} threads, {args.repeat} repetitions ({time.perf_counter() - t0:.0f} s)",
                        rows, "target alone"), "\n", flush=True)
            base = statistics.median(rows["target alone"]["tps"])
            (f_name, f_tps), (a_name, a_tps) = best(rows, fixed), best(rows, adaptive)
            ngram = [s.name for s in settings if s.strategy is not None and s.strategy.uses_ngram]
            ng = f"{best(rows, ngram)[0]}: {best(rows, ngram)[1]:.1f}" if ngram else "-"
            summary.append(f"| {prompt.id} ({prompt.category}) | {base:.1f} | {f_name}: {f_tps:.1f} | {a_name}: {a_tps:.1f} | "
                           f"{100 * (a_tps / f_tps - 1):+.0f}% | {ng} |")
    print("\n".join(summary), flush=True)


def cost_settings(args) -> tuple[list[Setting], list[str], list[str]]:
    base = Strategy(args.spec_type, args.ngram_min, args.ngram_max)
    fixed = [Setting(base.label(k), k, base) for k in args.k]
    cost = Strategy(args.spec_type, args.ngram_min, args.ngram_max, k_schedule="cost")
    capped = [Setting(cost.label(k), k, cost) for k in args.caps]
    return [Setting("target alone"), *fixed, *capped], [s.name for s in fixed], [s.name for s in capped]


def run_cost(args) -> None:
    if args.spec_type == "ngram":
        target, draft = args.target or model_path(args.model), None
        name = target.name
    else:
        target, draft = (args.target, args.draft) if args.target else pair_paths(args.pair)
        name = f"{target.name}+{draft.name}" if args.target else args.pair
    settings, fixed, capped = cost_settings(args)
    summary = ["| prompt (category) | target alone | best fixed K | " + " | ".join(f"cost K={k}" for k in args.caps)
               + " | worst cost / alone | best cost / best fixed |", "|---" * (5 + len(args.caps)) + "|"]
    ratios_alone, ratios_fixed = [], []
    with LoadedPair(PairFiles(target, draft, name), LoadConfig(n_ctx=args.ctx, threads=args.threads)) as pair:
        prompts = builtin(args.prompt_ids.split(","))
        first = pair.prompt_tokens(prompts[0].text, prompts[0].chat and pair.target.has_chat_template())
        t0 = time.perf_counter()
        costs = pair.step_costs(first, args.n, max(args.caps))  # before any timed run, as the sweep's warm-up does
        curve = " ".join(f"{1000 * t:.1f}" for t in costs.t_verify)
        print(f"costs ({costs.source}, {time.perf_counter() - t0:.0f} s): draft {1000 * costs.t_draft:.2f} ms/token; "
              f"verify ms for batches 1..{costs.k_max + 1}: {curve}\n", flush=True)
        for prompt in prompts:
            tokens = pair.prompt_tokens(prompt.text, prompt.chat and pair.target.has_chat_template())
            print(f"{prompt.id}: {len(tokens)} prompt tokens", file=sys.stderr)
            t0 = time.perf_counter()
            rows = measure(pair, tokens, settings, args.n, args.repeat)
            print(table(f"{name}, {args.spec_type}, prompt {prompt.id} ({prompt.category}, {len(tokens)} tokens), greedy, "
                        f"-n {args.n}, {args.threads} threads, {args.repeat} repetitions ({time.perf_counter() - t0:.0f} s)",
                        rows, "target alone"), flush=True)
            print("\n| cost setting | predicted tokens/s | measured | rounds per draft length (all repetitions) |\n|---|---|---|---|")
            for s in capped:
                r = rows[s]
                pred = f"{statistics.median(r['pred']):.1f}" if r["pred"] else "-"
                print(f"| {s} | {pred} | {statistics.median(r['tps']):.1f} | {rounds_by_length(r['hist']) or '-'} |")
            print(flush=True)
            base = statistics.median(rows["target alone"]["tps"])
            f_name, f_tps = best(rows, fixed)
            caps = [statistics.median(rows[s]["tps"]) for s in capped]
            ratios_alone.append(min(caps) / base)
            ratios_fixed.append(max(caps) / f_tps)
            summary.append(f"| {prompt.id} ({prompt.category}) | {base:.1f} | {f_name}: {f_tps:.1f} | "
                           + " | ".join(f"{c:.1f} ({c / base:.2f}x)" for c in caps)
                           + f" | {ratios_alone[-1]:.2f}x | {ratios_fixed[-1]:.2f}x |")
    print("\n".join(summary))
    print(f"\nevery cap >= 0.97x the target alone on {sum(r >= 0.97 for r in ratios_alone)}/{len(ratios_alone)} prompts; "
          f"best cap within 5% of the best fixed K on {sum(r >= 0.95 for r in ratios_fixed)}/{len(ratios_fixed)}", flush=True)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="experiment", required=True)
    for name in ("ngram", "categories", "cost"):
        p = sub.add_parser(name)
        p.add_argument("--target", type=Path)
        p.add_argument("-n", type=int, default=160 if name == "ngram" else 128)
        p.add_argument("--repeat", type=int, default=3 if name == "ngram" else 2)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--ctx", type=int, default=2048)
        p.add_argument("--ngram-min", type=int, default=1)
        p.add_argument("--ngram-max", type=int, default=4)
    ng = sub.choices["ngram"]
    ng.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    ng.add_argument("--prompt-ids", default="code-edit-hints")
    ng.add_argument("-K", dest="k", type=ints, default=[4, 8, 16, 32])
    cat = sub.choices["categories"]
    cat.add_argument("--pair", default="qwen-coder-1.5b-f16+q2k")
    cat.add_argument("--draft", type=Path)
    cat.add_argument("--prompt-ids", default="chat-multiturn,translation,summarization,qa,math,rag,code-edit")
    cat.add_argument("-K", dest="k", type=ints, default=[2, 4, 8], help="fixed draft lengths")
    cat.add_argument("--p-min", type=floats, default=[0.6, 0.8])
    cat.add_argument("--p-min-k", type=int, default=16, help="the K that p-min stops within")
    cat.add_argument("--heuristic-k", type=int, default=4, help="the heuristic schedule's first K")
    cat.add_argument("--k-cap", type=int, default=16)
    cat.add_argument("--also", type=lambda t: t.split(";") if t else [], default=["ngram", "ngram,draft"],
                     help="other spec types, ';'-separated, at --ngram-k")
    cat.add_argument("--ngram-k", type=int, default=16)
    cost = sub.choices["cost"]
    cost.add_argument("--spec-type", default="draft", choices=["draft", "ngram", "ngram,draft"])
    cost.add_argument("--pair", default="qwen-coder-1.5b-f16+q2k", help="with --spec-type draft or ngram,draft")
    cost.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m", help="with --spec-type ngram")
    cost.add_argument("--draft", type=Path)
    cost.add_argument("--prompt-ids", default="chat-multiturn,translation,summarization,qa,math,rag,code-edit")
    cost.add_argument("-K", dest="k", type=ints, default=[2, 4, 8, 16], help="fixed draft lengths")
    cost.add_argument("--caps", type=ints, default=[4, 8, 16, 32], help="the cost schedule's caps (-K)")
    args = ap.parse_args()
    if args.experiment in ("categories", "cost") and args.target and not args.draft and getattr(args, "spec_type", "") != "ngram":
        ap.error(f"--target needs --draft for the {args.experiment} experiment (or --spec-type ngram)")
    {"ngram": run_ngram, "categories": run_categories, "cost": run_cost}[args.experiment](args)


if __name__ == "__main__":
    main()
