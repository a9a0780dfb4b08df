#!/usr/bin/env python
"""Check `gguf-bench tune` against the full sweep it replaces (issue 12's targets).

For each pair and each repetition, runs (as subprocesses, alternating which goes first)
    gguf-bench tune  PAIR -K KS -n N --threads T --json
    gguf-bench sweep PAIR -K KS -n N --threads T --no-draft-alone
with the same prompts, and prints per K the predicted and the measured tokens/s, then:
  - the largest |prediction error| over K (target: within 10%),
  - how the recommended K measures against the sweep's best K (target: within 5%),
  - tune's wall time over the sweep's (target: at most 1/3).
The sweep leaves out the draft-alone runs (tune does not measure them either): the stricter ratio.

    python scripts/bench_tune.py [--pairs gemma-270m-f32+q4km qwen-coder-1.5b-f16+q2k] [-K 1-8] [-n 64]
                                 [--threads 2] [--repeat 2] [--prompt-ids ...] [--results DIR] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gguf_bench.results.presentation.summary import summarize, to_frame
from gguf_bench.results.schema.store import read_records


def load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def one_round(pair: str, common: list[str], results: Path, tag: str, tune_first: bool) -> dict:
    env = {**os.environ, "GGUF_BENCH_RESULTS": str(results), "COLUMNS": "200"}
    cli = [sys.executable, "-m", "gguf_bench.cli"]
    tune_cmd = [*cli, "tune", pair, *common, "--json", "--name", f"tune-{tag}"]
    sweep_cmd = [*cli, "sweep", pair, *common, "--no-draft-alone", "--name", f"sweep-{tag}"]
    out: dict = {"load_before": load_avg()}
    for which in (["tune", "sweep"] if tune_first else ["sweep", "tune"]):
        seconds, stdout = timed(tune_cmd if which == "tune" else sweep_cmd, env)
        out[f"{which}_s"] = seconds
        if which == "tune":
            out["tune"] = json.loads(stdout)
    out["load_after"] = load_avg()
    summary = summarize(to_frame(read_records(results / f"sweep-{tag}.jsonl")))
    spec = summary[summary["mode"] == "speculative"]
    out["measured"] = {int(r.k): float(r.tokens_per_s) for r in spec.itertuples()}
    out["measured_baseline"] = float(summary[summary["mode"] == "target"]["tokens_per_s"].iloc[0])
    return out


def analyse(r: dict) -> dict:
    pred = {row["k"]: row["predicted_tokens_per_s"] for row in r["tune"]["rows"]}
    base_pred = r["tune"]["rows"][0]["predicted_baseline_tokens_per_s"]
    errors = {k: 100 * (pred[k] / m - 1) for k, m in r["measured"].items()}
    best_k = max(r["measured"], key=r["measured"].get)
    rec_k = r["tune"]["best"]["k"]
    gains = {row["k"]: row["predicted_gain_pct"] for row in r["tune"]["rows"]}
    gain_errors = {k: gains[k] - 100 * (m / r["measured_baseline"] - 1) for k, m in r["measured"].items()}
    return {"errors": errors, "max_abs_error": max(abs(e) for e in errors.values()),
            "max_abs_gain_error": max(abs(e) for e in gain_errors.values()),
            "baseline_error": 100 * (base_pred / r["measured_baseline"] - 1),
            "best_k": best_k, "recommended_k": rec_k,
            "recommended_vs_best_pct": 100 * (r["measured"][rec_k] / r["measured"][best_k] - 1),
            "time_ratio": r["tune_s"] / r["sweep_s"], "pred": pred, "base_pred": base_pred}


def markdown(pair: str, runs: list[dict], cmd: str) -> str:
    lines = [f"### {pair}", "", f"`{cmd}`", ""]
    head = "| K | " + " | ".join(f"run {i + 1}: predicted / measured tokens/s (error)" for i in range(len(runs))) + " |"
    lines += [head, "|---|" + "---|" * len(runs)]
    base_cells = [f"{a['base_pred']:.2f} / {r['measured_baseline']:.2f} ({a['baseline_error']:+.1f}%)" for r, a in runs]
    lines.append("| target alone | " + " | ".join(base_cells) + " |")
    for k in sorted(runs[0][0]["measured"]):
        cells = []
        for r, a in runs:
            best = " **best**" if k == a["best_k"] else ""
            rec = " (recommended)" if k == a["recommended_k"] else ""
            cells.append(f"{a['pred'][k]:.2f} / {r['measured'][k]:.2f} ({a['errors'][k]:+.1f}%){best}{rec}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("")
    for i, (r, a) in enumerate(runs, 1):
        lines.append(f"- run {i}: max |error| {a['max_abs_error']:.1f}% (target alone {a['baseline_error']:+.1f}%; "
                     f"gain %: predicted - measured within ±{a['max_abs_gain_error']:.1f} points); "
                     f"recommended K={a['recommended_k']}, sweep's best K={a['best_k']}: recommended measures "
                     f"{a['recommended_vs_best_pct']:+.1f}% vs best; tune {r['tune_s']:.0f} s vs sweep {r['sweep_s']:.0f} s "
                     f"(ratio {a['time_ratio']:.2f}); load average {r['load_before']} before, {r['load_after']} after")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", nargs="+", default=["gemma-270m-f32+q4km", "qwen-coder-1.5b-f16+q2k"])
    ap.add_argument("-K", default="1-8")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--prompt-ids", default=None)
    ap.add_argument("--results", type=Path, default=None, help="keep the records here (default: a temporary folder)")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the tables to this file")
    args = ap.parse_args()
    common = ["-K", args.K, "-n", str(args.n), "--threads", str(args.threads)]
    if args.prompt_ids:
        common += ["--prompt-ids", args.prompt_ids]
    results = args.results or Path(tempfile.mkdtemp(prefix="bench-tune-"))
    text = ""
    for pair in args.pairs:
        runs = []
        for i in range(args.repeat):
            stamp = time.strftime("%Y%m%dT%H%M%S")
            r = one_round(pair, common, results, f"{pair.replace('+', '_')}-{stamp}-{i}", tune_first=i % 2 == 0)
            a = analyse(r)
            runs.append((r, a))
            print(f"{pair} run {i + 1}: max |error| {a['max_abs_error']:.1f}%, recommended K={a['recommended_k']} "
                  f"vs best K={a['best_k']} ({a['recommended_vs_best_pct']:+.1f}%), time ratio {a['time_ratio']:.2f}",
                  flush=True)
        section = markdown(pair, runs, f"gguf-bench tune {pair} {' '.join(common)}` vs `gguf-bench sweep {pair} "
                           f"{' '.join(common)} --no-draft-alone")
        print(section, flush=True)
        text += section + "\n"
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    print(f"records in {results}")


if __name__ == "__main__":
    main()
