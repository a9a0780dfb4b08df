#!/usr/bin/env python
"""The Python loop's speculative gain at a known acceptance (1), measured and predicted, on agreeing twins.

An agreeing twin (`gguf-bench twin --agree`, docs/twins.md) has the model's shapes and types, so it decodes as fast as
the model, and every logit 0, so a target and a draft both predict token 0 everywhere: every draft is accepted. This
script writes agreeing twins of a target and a draft (any spelling `twin` takes: a header-only GGUF, a file, a registry
model, a hub file; an agreeing twin is used as it is), then:

1. tune's calibration of the pair at the K's asked (measure/flows/tune.py: the target's step, its verify curve, the
   draft's step, the round's overhead), and its prediction of each K at the twins' own acceptance, 1;
2. a sweep of the same setting (measure/sweep.iter_records, as `sweep` runs it): the target alone and each K, -r
   repetitions, paired within the one load as sweep pairs them;

and prints per K the measured tokens/s, the measured acceptance, the measured gain over the target alone (the
summary's paired gain, as `report` reads it), tune's predicted tokens/s and gain, and the prediction's error
(predicted / measured - 1), then `within 10%: N of M K`. Figures are measured here, on this machine.

    python scripts/bench_known_acceptance.py --target T.gguf --draft D.gguf [-K 1,2,4,8] [-n 64] [-r 3]
        [-ngl all] [-ngld all] [--threads N] [--temp 0] [--tune-reps 2] [--prompt-ids code-short] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench import options
from gguf_bench.errors import BenchError
from gguf_bench.measure.flows.tune import TuneJob, measure_grid, tune
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.models.twin import is_agreeing_file, twin_folder, twin_of
from gguf_bench.results.decision.tune_verdict import check_summary, gain_fields
from gguf_bench.results.predictions.tune_checks import check_rows
from gguf_bench.results.presentation.tuning import tune_strategies
from gguf_bench.results.schema.records import Mode
from gguf_bench.results.schema.store import use_results_dir
from gguf_bench.runtimes.llama_cpp import llama_versions

WITHIN = 10.0  # % the prediction should be within


def agreeing(source: str, folder: Path) -> Path:
    """An agreeing twin of `source` in `folder` (its own subfolder: a pair of one model twice has two files), or the
    file itself where it is one already."""
    if Path(source).is_file() and is_agreeing_file(Path(source)):
        return Path(source)
    folder.mkdir()
    return twin_of(source, folder, agree=True)


def measure(args, folder: Path) -> tuple[list[dict], dict]:
    """The table's rows (K 0 is the target alone) and what the run was: files, seconds."""
    t0 = time.perf_counter()
    target, draft = agreeing(args.target, folder / "target"), agreeing(args.draft, folder / "draft")
    pair = f"{Path(args.target).name.removesuffix('.gguf')}+{Path(args.draft).name.removesuffix('.gguf')}"
    files = PairFiles(target, draft, f"{pair} agreeing twin")
    ks = options.draft_lengths(args.K)
    prompts = builtin(args.prompt_ids.split(","))
    out = folder / "results" / "known-acceptance.jsonl"
    job = TuneJob(files, prompts, ks, args.n, args.ctx, args.threads, "known-acceptance", out, args.tune_reps,
                  real_pair=pair, agree=True)
    ngl, ngld = options.layers(args.ngl), options.layers(args.ngld)
    t_twins = time.perf_counter() - t0
    tuned = tune(job, [ngl], [ngld], tune_strategies("draft", "fixed", 1, 4, None, ks), check=False)
    cal = tuned.calibrations[0]
    t_tune = time.perf_counter() - t0 - t_twins
    # the sweep tune --check runs (job.grid: this setting, the target alone first), every K asked, -r, --temp
    grid = replace(job.grid(cal, ks), repetitions=args.reps, temperatures=[args.temp])
    records = measure_grid(tuned.job, grid, failed="the sweep of the agreeing twins could not measure")
    t_sweep = time.perf_counter() - t0 - t_twins - t_tune
    summary = check_summary(records)
    checked = {row["k"]: row for row in check_rows(cal, records)}  # tune --check's rows: measured, predicted, error
    rows = []
    for k in [0, *ks]:
        if k not in checked:
            rows.append({"k": k, "runs": 0})
            continue
        runs = [r for r in records if not r.error and r.metrics and r.k == k and r.mode == Mode.SPECULATIVE]
        drafted = sum(r.metrics.drafted for r in runs)
        row = checked[k]
        rows.append({"k": k, "runs": row["runs"], "measured": row["measured_tokens_per_s"],
                     "predicted": row["predicted_tokens_per_s"], "error": row["error_pct"],
                     "acceptance": sum(r.metrics.accepted for r in runs) / drafted if drafted else None,
                     "gain": gain_fields(summary, k)["measured_gain_pct"] if k else None,
                     "predicted_gain": cal.predict(k).gain_pct if k else None})
    seen = {"target": target, "draft": draft, "setting": cal.setting, "twins_s": t_twins, "tune_s": t_tune,
            "sweep_s": t_sweep, "t_target_ms": 1000 * cal.timings.t_target, "t_draft_ms": 1000 * cal.timings.t_draft}
    return rows, seen


def cell(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def print_table(rows: list[dict], seen: dict, args) -> None:
    print(f"{platform.processor() or platform.machine()}, llama-cpp-python {llama_versions()['llama_cpp_python']}, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; agreeing twins of {args.target} and {args.draft} (acceptance 1 "
          f"by construction), {seen['setting']}, -n {args.n}, -r {args.reps}, T={args.temp}, threads "
          f"{args.threads or 'default'}, prompts {args.prompt_ids}")
    print(f"tune: target t_verify(1) {seen['t_target_ms']:.2f} ms, draft {seen['t_draft_ms']:.2f} ms; seconds: twins "
          f"{seen['twins_s']:.1f}, tune {seen['tune_s']:.1f}, sweep {seen['sweep_s']:.1f}")
    sep = " | " if args.markdown else "  "
    heads = ["K", "measured t/s", "acceptance", "gain %", "predicted t/s", "pred. gain %", "error %", "runs"]
    widths = [12, 12, 10, 8, 13, 12, 8, 4]
    print(sep.join(h.rjust(w) for h, w in zip(heads, widths)))
    if args.markdown:
        print("|".join(["---"] * len(heads)))
    for r in rows:
        cells = ["target alone" if r["k"] == 0 else str(r["k"]), cell(r.get("measured"), ".2f"),
                 cell(r.get("acceptance"), ".3f"), cell(r.get("gain"), "+.1f"), cell(r.get("predicted"), ".2f"),
                 cell(r.get("predicted_gain"), "+.1f"), cell(r.get("error"), "+.1f"), str(r["runs"])]
        print(sep.join(c.rjust(w) for c, w in zip(cells, widths)))
    spec = [r for r in rows if r["k"] and r["runs"]]
    within = sum(abs(r["error"]) <= WITHIN for r in spec)
    print(f"within {WITHIN:.0f}%: {within} of {len(spec)} K")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="target: a header-only GGUF, a file, a registry model or a hub file")
    ap.add_argument("--draft", required=True, help="draft, spelled as --target")
    ap.add_argument("-K", default="1,2,4,8")
    ap.add_argument("-n", type=int, default=64, help="tokens each run generates (tune calibrates at the same -n)")
    ap.add_argument("-r", "--reps", type=int, default=3, help="repetitions of each sweep cell")
    ap.add_argument("--tune-reps", type=int, default=2, help="tune's repetitions of each timing")
    ap.add_argument("-ngl", default="all")
    ap.add_argument("-ngld", default="all")
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--temp", type=float, default=0.0, help="the sweep's temperature (tune calibrates greedy)")
    ap.add_argument("--prompt-ids", default="code-short")
    ap.add_argument("--keep", type=Path, default=None, help="write the twins and records here (default: a temporary "
                    "folder under the cache, deleted at the end)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    try:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix="known-acceptance-", dir=args.keep))
            use_results_dir(folder / "results")
            rows, seen = measure(args, folder)
        else:
            with twin_folder("known-acceptance-") as tmp:
                use_results_dir(Path(tmp) / "results")
                rows, seen = measure(args, Path(tmp))
    except BenchError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print_table(rows, seen, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
