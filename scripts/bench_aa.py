#!/usr/bin/env python
"""A/A and power through the real engines: how often does a sweep decide a difference between two arms that are the
same, and how often does it find one that is there?

Each sweep measures two arms as two settings of one real sweep (sweep.run_sweep, in this process): no placement flags,
and `-ot token_embd.weight=CPU`, which puts the token embeddings on the CPU, where llama.cpp keeps them anyway (their
rows are looked up, never multiplied): two settings that run the same code on the same files (llama.cpp refuses an
`-ot` that matches no tensor). `-ngl 0` against `-ngl 99` on a build without a GPU device was tried first and is not an
A/A: the -ngl 0 arm ran 1.2% slower over 1422 pairs (t = -4.3). The arms take turns the way every sweep's settings do
(side by side block by block, or one repetition at a time A B | B A), each arm with its target alone and a speculative
row, in the engine's own order inside a block, with -r auto's passes and its stopping rule. After each sweep, the rows
of one arm are compared with the same rows of the other (summary.compare: paired run by run where the runs took turns,
corrected for the workload's comparisons and looks, the four verdicts at --margin): a sweep that calls any of them
faster or slower decided a difference that is not there.

Power: `--slow 25` makes arm B slower by a known amount: after every token it adds a busy wait of 25% of
the target alone's own time per token (measured once, quietly, before the sweeps), in the Python loop's timed decode
(its on_round callback). Only this script sets it; nothing in gguf-bench can. A sweep finds it when the unslowed arm
is decided faster. llama-server's decode cannot be slowed from outside, so --slow needs --engine python.

    python scripts/bench_aa.py --engine python --sweeps 100                     # A/A, quiet
    python scripts/bench_aa.py --engine python --sweeps 20 --busy               # A/A beside a busy loop on one core
    python scripts/bench_aa.py --engine python --sweeps 30 --slow 25            # power at a 25% slowdown
    python scripts/bench_aa.py --engine server --sweeps 100                     # A/A, two llama-server settings
    python scripts/bench_aa.py --engine endpoint --sweeps 100                   # A/A, two servers by URL

--engine endpoint starts two identical llama-servers (the tiny pair, draft-simple at -K, the same flags) and runs each
sweep as `gguf-bench sweep --engine endpoint --url A --baseline-url B` does, in this process: A's runs are read as the
speculative row, B's as its baseline, paired in the endpoint's alternating order, and a sweep that calls that gain
faster or slower decided a difference that is not there. The endpoint refuses a baseline that drafts (a user's
baseline must not); only this script lifts that check, for its A/A.

Without --target/--draft it makes the tiny pair (gguf-bench make-test-pair, noise 0.05) in a temporary folder. Each
sweep writes its own results file under --out (a temporary folder by default), so every figure can be re-read with
`gguf-bench report`.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from scipy import stats

from gguf_bench.measure import pair as pair_module
from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.pair import PairFiles
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import SweepEvents, run_sweep
from gguf_bench.models.tiny import TinySpec, make_pair
from gguf_bench.placing import Placing
from gguf_bench.results.presentation.summary import MARGIN, compare, summarize, to_frame, workload_family
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.results.schema.store import read_records

ARM_B = Placing(overrides=((r"token_embd\.weight", "CPU"),))  # -ot: the embeddings where they are anyway
ARMS = (Placing().label() or "", ARM_B.label())  # arm A: no placement flags; arm B: that -ot


def spin(seconds: float) -> None:
    """A busy wait: exact to a microsecond or so, where time.sleep overshoots by tens."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@contextmanager
def slowed(delay_s: float):
    """While open, every run of arm B spends `delay_s` more per token inside its timed decode."""
    original = pair_module.LoadedPair.generate

    def generate(self, mode, prompt, n_predict, k, cfg, on_round=None, **kw):
        if self.load.placing != ARM_B or delay_s <= 0:
            return original(self, mode, prompt, n_predict, k, cfg, on_round, **kw)

        def wait(tokens, flags):
            spin(delay_s * len(tokens))
            if on_round:
                on_round(tokens, flags)
        return original(self, mode, prompt, n_predict, k, cfg, wait, **kw)

    pair_module.LoadedPair.generate = generate
    try:
        yield
    finally:
        pair_module.LoadedPair.generate = original


@contextmanager
def busy_loop(on: bool):
    """A process spinning on one core for as long as the block runs (the 'loaded' A/A)."""
    spin_until_orphaned = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"  # dies with this script
    proc = subprocess.Popen([sys.executable, "-c", spin_until_orphaned]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def grid(args, prompts, sweep: int = 0) -> Grid:
    """The sweep's grid; each sweep its own seed (args.seed + sweep), so its block orders and samples are its own."""
    return Grid(ks=[args.k], ngls=[0], nglds=[0], placings=[Placing(), ARM_B], temperatures=[0.0], prompts=prompts,
                n_predict=args.n,
                repetitions=2 if args.max_reps else args.reps, max_reps=args.max_reps, threads=args.threads,
                with_draft_alone=False, engines=(args.engine,),
                engine_options=(ServerOptions(server_bin=args.server_bin),), seed=args.seed + sweep,
                loads=args.loads)


def ms_per_token(files: PairFiles, args, prompts) -> float:
    """The target alone's time per token here, quietly, before any sweep: what --slow's percentage is of."""
    from gguf_bench.decoding.sampling import SamplingConfig
    from gguf_bench.measure.inputs.prepared import PreparedPrompts
    from gguf_bench.measure.pair import LoadedPair

    load = grid(args, prompts).settings()[0]
    loaded = LoadedPair(files, load)
    try:
        tokens = PreparedPrompts.for_target(files.target, prompts, 0).tokens[prompts[0].id]
        times = []
        for _ in range(7):
            res = loaded.generate(Mode.TARGET, tokens, args.n, 0, SamplingConfig())
            times.append(res.decode_s / max(1, res.n_tokens - 1))
        return sorted(times)[len(times) // 2] * 1000
    finally:
        loaded.close()


def one_sweep(i: int, files: PairFiles, args, prompts, out: Path) -> dict:
    """One real sweep of both arms; per row (target alone, K): arm A over arm B, and the sweep's figures."""
    path = out / f"aa-{i:03d}.jsonl"
    run_sweep(f"aa-{i:03d}", files, grid(args, prompts, i), path, False, SweepEvents())
    runs = [r for r in read_records(path) if isinstance(r, RunRecord)]
    frame = to_frame(runs)
    summary = summarize(frame, margin=args.margin)
    ok = frame[frame["error"].isna()]
    verdicts = {}
    for mode in (Mode.TARGET, Mode.SPECULATIVE):
        rows = summary[summary["mode"] == str(mode)]
        a, b = (rows[rows["placement"].fillna("").astype(str) == arm] for arm in ARMS)
        if a.empty or b.empty:
            verdicts[str(mode)] = None
            continue
        verdicts[str(mode)] = compare(a.iloc[0], b.iloc[0], ok, args.margin, workload_family(summary, ok))
    reps = int(ok["repetition"].max()) + 1 if not ok.empty else 0
    spec_a = summary[(summary["mode"] == str(Mode.SPECULATIVE)) & (summary["placement"].fillna("").astype(str) == ARMS[0])]
    deployed = (Mode.SPECULATIVE if not spec_a.empty and spec_a.iloc[0]["verdict"] == "faster" else Mode.TARGET)
    orders = ok.get("settings_design")
    design = (orders.dropna().iloc[0] if orders is not None and orders.notna().any() else "one setting")
    return {"verdicts": verdicts, "answer": verdicts[str(deployed)], "reps": reps, "runs": len(ok), "design": design,
            "family": workload_family(summary, ok)}


def binomial(k: int, n: int) -> str:
    """'5/100 = 5.0% [1.6,11.3]': a share with its exact (Clopper-Pearson) 95% interval."""
    if n == 0:
        return "0/0"
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{k}/{n} = {100 * k / n:.1f}% [{100 * lo:.1f},{100 * hi:.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["python", "server", "endpoint"], default="python")
    ap.add_argument("--sweeps", type=int, default=100)
    ap.add_argument("--slow", type=float, default=0.0, help="%% more time per token in arm B (python only)")
    ap.add_argument("--busy", action="store_true", help="a busy loop on one core through every sweep")
    ap.add_argument("--width", type=int, default=TinySpec.width, help="the tiny pair's width (default %(default)s)")
    ap.add_argument("--layers", type=int, default=TinySpec.n_layers, help="the tiny pair's layers (default %(default)s)")
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("-K", dest="k", type=int, default=4)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", dest="reps", type=int, default=2, help="repetitions where --max-reps is 0")
    ap.add_argument("--max-reps", type=int, default=8, help="-r auto up to this many repetitions (0: a fixed -r)")
    ap.add_argument("--margin", type=float, default=MARGIN)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt-ids", default="code-short,chat-short")
    ap.add_argument("--server-bin", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0, help="the first sweep's seed; sweep i uses seed + i")
    ap.add_argument("--loads", choices=["each", "once"], default="each", help="sweep's --loads")
    ap.add_argument("--out", type=Path, default=None, help="folder for the sweeps' results files")
    args = ap.parse_args()
    if args.engine == "endpoint" and args.max_reps == 8:
        args.max_reps = 5  # as the server A/A
    if args.slow and args.engine != "python":
        raise SystemExit("--slow slows the Python loop's decode; llama-server's cannot be slowed from outside")
    args.max_reps = args.max_reps or None
    prompts = builtin(args.prompt_ids.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench_aa-"))
    out = args.out or work / "results"
    out.mkdir(parents=True, exist_ok=True)
    if args.target is None:
        spec = TinySpec(n_layers=args.layers, width=args.width, ff=2 * args.width)
        target, draft = make_pair(work / "tiny", noise=0.05, seed=0, spec=spec)
    else:
        target, draft = args.target, args.draft
    files = PairFiles(target, draft, "aa")
    delay_s = 0.0
    if args.slow:
        base = ms_per_token(files, args, prompts)
        delay_s = base * args.slow / 100 / 1000
        print(f"target alone here: {base:.3f} ms/token (median of 7 quiet runs); arm B waits "
              f"{1000 * delay_s:.3f} ms more per token (+{args.slow:g}% time, {100 / (1 + args.slow / 100) - 100:+.1f}% "
              "tokens/s)")
    how = f"-r auto up to {args.max_reps}" if args.max_reps else f"-r {args.reps}"
    arms = ("two identical llama-servers by URL, draft-simple at -K" if args.engine == "endpoint" else
            f"arm A: no placement flags, arm B: {ARMS[1]} (the same)")
    print(f"{args.sweeps} sweeps, engine {args.engine}, {arms}, -K {args.k} -n {args.n}, prompts {args.prompt_ids}, "
          f"{how}, margin {args.margin:g}%"
          f"{', a busy loop on one core' if args.busy else ''}; results in {out}")
    results, started = [], time.monotonic()
    if args.engine == "endpoint":
        with two_servers(files, args), busy_loop(args.busy), baseline_may_draft():
            urls = SERVERS
            for i in range(args.sweeps):
                results.append(endpoint_sweep(i, urls, args, out))
    else:
        with slowed(delay_s), busy_loop(args.busy):
            for i in range(args.sweeps):
                results.append(one_sweep(i, files, args, prompts, out))
    report(results, args, time.monotonic() - started)


SERVERS: list[str] = []  # the two servers' URLs while two_servers is open


@contextmanager
def two_servers(files: PairFiles, args):
    """Two identical llama-servers of the pair, draft-simple at -K: the endpoint's two URLs."""
    from contextlib import ExitStack

    from gguf_bench.runtimes.llama_server import Launch, Server, Speculation
    from gguf_bench.runtimes.server_build import find_server

    binary, env = find_server(args.server_bin)
    with ExitStack() as stack:
        SERVERS[:] = [stack.enter_context(Server(Launch(binary, files.target, files.draft,
                                                        Speculation("draft-simple", args.k), "0", "0", 512, 1), env)).base
                      for _ in range(2)]
        yield


@contextmanager
def baseline_may_draft():
    """The endpoint's pair check without its refusal of a baseline that drafts (this script's A/A only)."""
    from gguf_bench.measure.engines import endpoint

    original = endpoint.check_pair

    def check(spec, base, prompt, timeout_s):
        return original(spec, replace(base, speculative=False), prompt, timeout_s)
    endpoint.check_pair = check
    try:
        yield
    finally:
        endpoint.check_pair = original


def endpoint_sweep(i: int, urls: list[str], args, out: Path) -> dict:
    """One `gguf-bench sweep --engine endpoint` in this process, as a user runs it; its gain row's verdict."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from gguf_bench.cli import app  # the Typer app, every command registered

    name = f"aa-{i:03d}"
    auto = ["-r", "auto", "--max-reps", str(args.max_reps)] if args.max_reps else ["-r", str(args.reps)]
    result = CliRunner().invoke(app, ["sweep", "--engine", "endpoint", "--url", urls[0], "--baseline-url", urls[1],
                                          "--prompt-ids", args.prompt_ids, "-n", str(args.n), *auto, "--name", name,
                                          "--seed", str(args.seed + i), "--margin", f"{args.margin:g}",
                                          "--results-dir", str(out)])
    if result.exit_code:
        raise SystemExit(f"sweep {name} failed: {(result.output.strip().splitlines() or ['?'])[-1]}")
    runs = [r for r in read_records(out / f"{name}.jsonl") if isinstance(r, RunRecord)]
    frame = to_frame(runs)
    summary = summarize(frame, margin=args.margin)
    row = summary[summary["mode"] == str(Mode.SPECULATIVE)]
    verdict = (SimpleNamespace(verdict=str(row.iloc[0]["verdict"]), pct=float(row.iloc[0]["gain_pct"]))
               if not row.empty else None)
    ok = frame[frame["error"].isna()]
    return {"verdicts": {str(Mode.TARGET): None, str(Mode.SPECULATIVE): verdict}, "answer": verdict,
            "reps": int(ok["repetition"].max()) + 1 if not ok.empty else 0, "runs": len(ok), "design": "alternate"}


def report(results: list[dict], args, seconds: float) -> None:
    n = len(results)
    reps = Counter(r["reps"] for r in results)
    print(f"took {seconds:.0f} s; repetitions reached: {dict(sorted(reps.items()))}; settings took turns as "
          f"{', '.join(sorted({r['design'] for r in results}))}")
    for mode in (str(Mode.TARGET), str(Mode.SPECULATIVE)):
        told = Counter(r["verdicts"][mode].verdict if r["verdicts"][mode] else "missing" for r in results)
        label = "target alone" if mode == str(Mode.TARGET) else f"K={args.k}"
        print(f"  {label}, arm A over arm B: " + ", ".join(f"{v} {told[v]}" for v in ("faster", "slower", "same",
                                                                                     "undecided", "missing") if told[v]))
    decided = sum(any(v is not None and v.verdict in ("faster", "slower") for v in r["verdicts"].values())
                  for r in results)
    same = sum(all(v is None or v.verdict == "same" for v in r["verdicts"].values())
               and any(v is not None for v in r["verdicts"].values()) for r in results)
    if args.slow:
        found = sum(all(v is not None and v.verdict == "faster" for v in r["verdicts"].values()) for r in results)
        some = sum(any(v is not None and v.verdict == "faster" for v in r["verdicts"].values()) for r in results)
        wrong = sum(any(v is not None and v.verdict == "slower" for v in r["verdicts"].values()) for r in results)
        print(f"power at +{args.slow:g}% time per token: the unslowed arm decided faster on both rows in "
              f"{binomial(found, n)}, on at least one in {binomial(some, n)}; the wrong way in {binomial(wrong, n)}")
        gains = [r["verdicts"][str(Mode.TARGET)].pct for r in results if r["verdicts"][str(Mode.TARGET)]]
        gains = [g for g in gains if not math.isnan(g)]
        if gains:
            print(f"  the target alone's measured advantage: median {sorted(gains)[len(gains) // 2]:+.1f}%")
    else:
        answered = sum(r["answer"] is not None and r["answer"].verdict == "same" for r in results)
        compared = [v for r in results for v in r["verdicts"].values() if v is not None]
        wrong = sum(v.verdict in ("faster", "slower") for v in compared)
        m = max((r.get("family") or 1) for r in results)
        print(f"per comparison: decided in {binomial(wrong, len(compared))}, against a nominal level of 5% for one "
              f"comparison (m = 1) and {5 / m:.2f}% for each of the m = {m} the verdicts were corrected for")
        print(f"A/A: a difference decided (faster or slower, any row) in {binomial(decided, n)} of the sweeps; "
              f"'the same' on every row in {binomial(same, n)}; on the row the answer rests on (arm A's deployed row "
              f"against arm B's: the target alone where K={args.k} is not faster) in {binomial(answered, n)}")


if __name__ == "__main__":
    main()
