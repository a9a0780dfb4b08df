"""`gguf-bench tune`: the command, its tables and its plot. The model and the calibration live in
gguf_bench.tune; cli.py registers `tune` with its `_command` wrapper (BenchError -> one `Error:` line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gguf_bench.errors import BenchError, ModelError
from gguf_bench.options import number_text, speed_text


def tune(pair: Annotated[str | None, typer.Argument(help="pair name from the registry (default: its default pair)")] = None,
         target: Annotated[Path | None, typer.Option("--target", help="target GGUF file (instead of a pair name)")] = None,
         draft: Annotated[Path | None, typer.Option("--draft", help="draft GGUF file (with --target)")] = None,
         ks: Annotated[str, typer.Option("--draft-max", "-K", help="draft lengths to predict: 1-16, 1,2,4,8, 1-16+2")] = "1-16",
         ngls: Annotated[str, typer.Option("--gpu-layers", "-ngl", help="target GPU layers: list/range/'all'")] = "0",
         nglds: Annotated[str, typer.Option("--gpu-layers-draft", "-ngld", help="draft GPU layers")] = "0",
         prompt_ids: Annotated[str | None, typer.Option("--prompt-ids", help="built-in prompts to calibrate on "
                               "(code-short, chat-short, code-long, chat-long; default all)")] = None,
         prompts_file: Annotated[Path | None, typer.Option("--prompts", help="JSONL prompts: {\"id\", \"prompt\", \"chat\"}")] = None,
         n_predict: Annotated[int, typer.Option("--n-predict", "-n", help="tokens to generate per prompt")] = 64,
         threads: Annotated[int | None, typer.Option("--threads", "-t", help="CPU threads (default: all cores)")] = None,
         ctx_size: Annotated[int, typer.Option("--ctx-size", "-c", help="context size of each model")] = 2048,
         reps: Annotated[int, typer.Option("--reps", help="repetitions of each decode timing, spread between "
                                                       "the prompts' runs (the median is kept)")] = 6,
         check: Annotated[bool, typer.Option("--check", help="then measure the recommended K and its neighbours "
                          "the way `sweep` does, and print them next to the prediction")] = False,
         json_out: Annotated[bool, typer.Option("--json", help="print the predictions as JSON")] = False,
         name: Annotated[str | None, typer.Option("--name", help="store in results/NAME.jsonl")] = None,
         plot: Annotated[Path | None, typer.Option("--plot", help="write a PNG: verify cost curve and predicted tokens/s")] = None,
         spec_types: Annotated[str, typer.Option("--spec-type", help="drafting to predict, a list: draft (the draft "
                               "model), ngram (prompt lookup)")] = "draft",
         k_schedules: Annotated[str, typer.Option("--k-schedule", help="fixed, heuristic, or both: fixed,heuristic "
                                "(heuristic: K is where each generation starts)")] = "fixed",
         ngram_min: Annotated[int, typer.Option("--ngram-min", help="shortest n-gram to match")] = 1,
         ngram_max: Annotated[int, typer.Option("--ngram-max", help="longest n-gram to match")] = 4,
         k_cap: Annotated[int | None, typer.Option("--k-cap", help="the heuristic schedule's largest K "
                          "(default: the largest -K)")] = None,
         registry: Annotated[Path | None, typer.Option("--registry", help="models.yaml to use")] = None) -> None:
    """Predict tokens/s for every draft length and offload setting from a short calibration, and
    recommend the fastest, without a full sweep (greedy)."""
    from gguf_bench import cli, options, prompts
    from gguf_bench import tune as tn
    from gguf_bench.results import default_name, ensure_results_dir

    chosen = prompts.choose(prompt_ids, prompts_file)
    k_list = options.draft_lengths(ks)
    strategies = tn.strategies(spec_types, k_schedules, ngram_min, ngram_max, k_cap, k_list)
    ngl_list, ngld_list = options.layer_list(ngls, "-ngl"), options.layer_list(nglds, "-ngld")
    if n_predict < 2 or reps < 1:
        raise BenchError(f"--n-predict must be >= 2 and --reps >= 1 (got {n_predict} and {reps})")
    name = options.results_name(name or default_name("tune"))
    out = ensure_results_dir() / f"{name}.jsonl"  # appended to: tune into a sweep's file to report both together
    files = cli._files(pair, target, draft, registry)
    files.check_compatible()
    calibrations = _calibrate_all(files, k_list, ngl_list, ngld_list, chosen, n_predict, ctx_size, threads, reps, name, out)
    top_cal, top = tn.best(calibrations, strategies)
    checked = None
    if check:  # sweep measures the draft model with a fixed K: check the best of those
        check_cal, check_top = tn.best(calibrations)
        if check_top != top:
            cli.err.print(f"Note: --check measures the best draft-model fixed-K setting ({check_top.strategy}); "
                          f"sweep cannot run {top.strategy}", markup=False)
        checked = _run_check(files, check_cal, check_top.k, chosen, n_predict, ctx_size, threads, name, out)
    if json_out:
        sys.stdout.write(json.dumps(_json(files.name, out, calibrations, strategies, checked), default=str) + "\n")
    else:
        for cal in calibrations:
            cli.console.print(prediction_table(cal, strategies, top_cal, top))
            cli.console.print(components_line(cal), markup=False)
            if cal.fit is not None and abs(cal.fit - 1) > 0.1:
                cli.err.print(f"Warning: -ngl {cal.ngl} -ngld {cal.ngld}: the calibration's own K={max(cal.ks)} runs took "
                              f"{1 / cal.fit:.2f}x what its decode timings predict: the machine's speed changed while "
                              "calibrating (other work running?); tune again when it is idle", markup=False)
        how = "" if len(strategies) == 1 else f" ({top.strategy})"
        cli.console.print(f"recommended: -K {top.k} -ngl {top_cal.ngl} -ngld {top_cal.ngld}{how}: predicted "
                          f"{top.tokens_per_s:.2f} tokens/s, {top.gain_pct:+.1f}% over the target alone "
                          f"({top.baseline_tokens_per_s:.2f}); calibration stored in {out}", markup=False)
        if checked is not None:
            cli.console.print(check_table(checked, check_top.k))
    if plot:
        written = plot_tune(calibrations, strategies, checked, plot)
        (cli.err if json_out else cli.console).print(f"wrote {written}", markup=False)


def _calibrate_all(files, k_list, ngl_list, ngld_list, prompts, n_predict, ctx_size, threads, reps, name, out) -> list:
    """Calibrate each offload setting this build can run; a setting that fails to load is skipped
    with a warning while another one loads, and is the error when none does."""
    from gguf_bench import cli
    from gguf_bench import tune as tn
    from gguf_bench.backend import gpu_offload_supported
    from gguf_bench.bench import LoadConfig
    from gguf_bench.ggufinfo import read_info
    from gguf_bench.options import layers_label
    from gguf_bench.results import append_record

    settings, warnings = tn.effective_settings(ngl_list, ngld_list, gpu_offload_supported(),
                                               read_info(files.target).n_layers, read_info(files.draft).n_layers)
    for w in warnings:
        cli.err.print(f"Warning: {w}", markup=False)
    calibrations, failures = [], []
    for ngl, ngld in settings:
        label = f"-ngl {layers_label(ngl)} -ngld {layers_label(ngld)}"
        load = LoadConfig(ngl, ngld, ctx_size, threads)
        with cli.err.status(f"calibrating {files.name} {label} ...") as status:
            events = tn.CalibrationEvents(step=lambda what, at=f"{files.name} {label}": status.update(f"calibrating {at}: {what}"))
            try:
                record = tn.calibrate(files, load, prompts, n_predict, k_list, reps, name, events)
            except (ModelError, MemoryError) as exc:
                if len(settings) == 1:
                    raise
                failures.append(f"{label}: {exc}")
                cli.err.print(f"Warning: {label} could not be calibrated, skipped: {exc}", markup=False)
                continue
        append_record(out, record)
        calibrations.append(tn.Calibration.from_record(record))
    if not calibrations:
        raise ModelError(f"no offload setting could be loaded ({failures[0]})")
    return calibrations


def _run_check(files, cal, k: int, prompts, n_predict: int, ctx_size: int, threads, name: str, out: Path) -> list[dict]:
    """Measure K-1, K, K+1 and the target alone as `sweep` does (same cells, same records, stored)."""
    from gguf_bench import cli, options
    from gguf_bench import tune as tn
    from gguf_bench.results import append_record
    from gguf_bench.sweep import Grid, iter_records

    grid = Grid(ks=tn.check_ks(cal, k), ngls=[options.layers(cal.ngl)], nglds=[options.layers(cal.ngld)], temperatures=[0.0],
                prompts=list(prompts), n_predict=n_predict, n_ctx=ctx_size, threads=threads, with_draft_alone=False)
    records = []
    with cli.err.status(f"checking K={', '.join(map(str, grid.ks))} as sweep measures them ...") as status:
        for record in iter_records(name, files, grid):
            append_record(out, record)
            records.append(record)
            c = record["config"]
            status.update(f"checking: measured {record['mode']} K={c['k']} on {c['prompt_id']}")
    failed = [r for r in records if r["error"]]
    if len(failed) == len(records):
        raise BenchError(f"--check could not measure: {failed[0]['error']}")
    return tn.check_rows(cal, records)


def prediction_table(cal, strategies: list, top_cal, top) -> Table:
    """One row per K: why it is fast or slow (acceptance, draft and verify cost) and the prediction of
    each strategy (with one strategy, its tokens per round and round time too)."""
    tm = cal.timings
    base = cal.predict(min(cal.ks)).baseline_tokens_per_s
    table = Table(title=f"tune {cal.pair}, -ngl {cal.ngl} -ngld {cal.ngld}: predicted tokens/s (greedy, n={cal.n_predict}, "
                        f"{len(cal.texts)} prompt{'s' if len(cal.texts) > 1 else ''}; target alone {speed_text(base)})",
                  caption="a_K: acceptance of draft position K once reached; K·c: a round's draft cost in target "
                          "decodes; verify ×: t_verify(K+1)/t_verify(1)" + _strategies_caption(strategies))
    one = len(strategies) == 1
    for col in ("K", "a_K", "K·c", "verify ×") + (("tok/round", "ms/round", "tokens/s", "gain %") if one else ()):
        table.add_column(col, justify="right")
    if not one:
        for st in strategies:
            table.add_column(_strategy_name(st), justify="right")
    by_k: dict[int, list] = {}
    for p in cal.predictions(strategies):
        by_k.setdefault(p.k, []).append(p)
    for k, preds in by_k.items():
        labels = {p.strategy: p for p in preds}
        row_best = cal is top_cal and top in preds
        cells = []
        for st in strategies:
            p = labels.get(st.label(k))
            star = " ★" if p is not None and p == top and cal is top_cal else ""
            if p is None:
                cells.append("–")
            elif one:
                cells += [number_text(p.tokens_per_round), number_text(p.round_ms, "{:.1f}"), speed_text(p.tokens_per_s) + star,
                          number_text(p.gain_pct, "{:+.1f}")]
            else:
                cells.append(f"{speed_text(p.tokens_per_s)} ({number_text(p.gain_pct, '{:+.0f}')}%){star}")
        a_k = cal.a[k - 1] if k <= len(cal.a) else None
        table.add_row(str(k), number_text(a_k, "{:.0%}"), number_text(k * tm.draft_cost_ratio()),
                      number_text(tm.verify_curve()[k]), *cells, style="bold" if row_best else None)
    return table


def _strategies_caption(strategies: list) -> str:
    if len(strategies) == 1:
        return ""
    ngram = next((st for st in strategies if st.spec_type == "ngram"), None)
    return ("; cells: tokens/s (gain %); h<=C: heuristic K from K up to C"
            + (f"; ngram: lookup of {ngram.ngram_min}-{ngram.ngram_max} tokens" if ngram else ""))


def _strategy_name(st) -> str:
    """A column heading: the strategy without its K ('draft', 'ngram h<=16')."""
    return st.spec_type + (f" h<={st.k_cap}" if st.k_schedule == "heuristic" else "")


def components_line(cal) -> str:
    """The measured parts the prediction is built from."""
    tm = cal.timings
    return (f"measured: target t_verify(1) {1000 * tm.t_target:.2f} ms, draft {1000 * tm.t_draft:.2f} ms "
            f"(c = {tm.draft_cost_ratio():.3f}; 2-token catch-up {1000 * tm.t_draft2:.2f} ms), round overhead "
            f"{1000 * tm.round_overhead:.2f} ms")


def check_table(rows: list[dict], top_k: int) -> Table:
    table = Table(title="--check: predicted against measured (mean over prompts, as sweep measures)")
    for col in ("K", "predicted tokens/s", "measured tokens/s", "error %", "measured gain %", "runs"):
        table.add_column(col, justify="right")
    for r in rows:
        label = "target alone" if r["k"] == 0 else f"{r['k']}" + (" ★" if r["k"] == top_k else "")
        table.add_row(label, number_text(r["predicted_tokens_per_s"]), number_text(r["measured_tokens_per_s"]),
                      number_text(r["error_pct"], "{:+.1f}"), number_text(r["measured_gain_pct"], "{:+.1f}"), str(r["runs"]))
    return table


def _json(pair: str, out: Path, calibrations: list, strategies: list, checked: list[dict] | None) -> dict:
    from gguf_bench import tune as tn

    rows = tn.prediction_rows(calibrations, strategies)
    top = next(r for r in rows if r["best"])
    doc = {"pair": pair, "results": str(out),
           "settings": [{"ngl": c.ngl, "ngld": c.ngld, "t_target_s": c.timings.t_target, "t_draft_s": c.timings.t_draft,
                         "t_draft2_s": c.timings.t_draft2, "draft_cost_ratio": c.timings.draft_cost_ratio(),
                         "verify_curve": c.timings.verify_curve(), "round_overhead_s": c.timings.round_overhead,
                         "a": list(c.a)} for c in calibrations],
           "rows": rows,
           "best": {key: top[key] for key in ("k", "ngl", "ngld", "strategy", "predicted_tokens_per_s", "predicted_gain_pct")}}
    if checked is not None:
        doc["check"] = checked
    return doc


def plot_tune(calibrations: list, strategies: list, checked: list[dict] | None, path: Path) -> Path:
    """Left: verify cost t_verify(b)/t_verify(1) against b. Right: predicted tokens/s against K (dashed:
    the target alone), with the --check measurements as crosses."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("plotting needs matplotlib: pip install 'gguf-bench[plot]'") from None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for cal in calibrations:
        label = f"-ngl {cal.ngl} -ngld {cal.ngld}"
        curve = cal.timings.verify_curve()
        left.plot(range(1, len(curve) + 1), curve, marker="o", label=label)
        colors = []
        for st in strategies:
            preds = cal.predictions([st])
            what = "" if len(strategies) == 1 else f" {_strategy_name(st)}"
            line, = right.plot([p.k for p in preds], [p.tokens_per_s for p in preds], marker="o",
                               label=f"predicted{what} {label}")
            colors.append(line.get_color())
        right.axhline(preds[0].baseline_tokens_per_s, color=colors[0], linestyle="--", linewidth=1)
    if checked:
        spec = [r for r in checked if r["k"]]
        right.scatter([r["k"] for r in spec], [r["measured_tokens_per_s"] for r in spec], marker="x", s=60, color="black",
                      zorder=3, label="measured (--check)")
    left.plot([1, len(curve)], [1, 1], color="grey", linestyle=":", linewidth=1)
    left.set_xlabel("batch size b (= K + 1 when verifying K draft tokens)")
    left.set_ylabel("t_verify(b) / t_verify(1)")
    left.set_title("verify cost: flat = free verification (GPU-like)")
    right.set_xlabel("draft length K")
    right.set_ylabel("tokens/s (dashed: target alone)")
    right.set_title(f"{calibrations[0].pair}: predicted tokens/s")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise BenchError(f"could not write the plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
