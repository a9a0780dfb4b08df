#!/usr/bin/env python
"""What to deploy: llama-server's speculative types side by side, and speculation against the target alone as users
grow, measured through gguf-bench's server engine on real pairs. Greedy, one machine, nothing else running.

1. Types: every --spec-type that needs no special model (draft-simple, ngram-simple, ngram-map-k, ngram-map-k4v,
   ngram-mod, ngram-cache), each at the sizes of -K (ngram-cache at its fixed 8), the n-gram types cold per prompt; per
   type its best size: tokens/s, acceptance, tokens per round, gain over the target alone (one request at a time).
2. Concurrency: draft-simple at the best K of part 1 against the target alone with --parallel 1,2,4 and as many
   clients: aggregate tokens/s, per-request tokens/s, p95 end-to-end latency, gain.
3. Checks: (a) an independent client (plain urllib, streaming, its own clock and the server's /metrics counters)
   against the engine's per-request figures on one round of 2 clients; (b) the deploy line `report` prints for part 1,
   started from its text, against the record's tokens/s.

Every measured run is stored in results/bench-deploy-<pair>.jsonl (report reads it back).

    python scripts/bench_deploy.py [--pair NAME ...] [-K 2,4,8] [-n 64] [--threads 2] [--prompt-ids qa,code-edit] [-r 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

from gguf_bench.decoding.strategy import Strategy
from gguf_bench.measure import deploy
from gguf_bench.measure.inputs.prompts import choose
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models.pairs import resolve
from gguf_bench.results.presentation import report as rep
from gguf_bench.results.presentation import summary as summ
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import append_record, read_records
from gguf_bench.runtimes.llama_cpp import Vocabulary, quantize
from gguf_bench.runtimes.llama_server import Launch, Server, Speculation, free_port, wait_healthy
from gguf_bench.runtimes.server_build import find_server

TYPES = ["draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


def measure(name: str, files, out: Path, **grid) -> list[RunRecord]:
    records = []
    for record in iter_records(name, files, Grid(engines=("server",), ngls=[0], nglds=[0], temperatures=[0.0], **grid)):
        append_record(out, record)
        records.append(record)
        print(f"  {record.label:<24} {record.config.prompt_id:<16} np={record.config.parallel or 1} "
              + (f"{record.metrics.tokens_per_s:8.2f} tokens/s" if record.metrics and not record.error else f"error: {record.error}"),
              flush=True)
    return records


def types_table(records: list[RunRecord]) -> tuple[str, dict]:
    """Per type, its best size over the prompts: tokens/s, acceptance, tokens per round, gain; and that size's gain on
    each prompt (which type suits which workload)."""
    df = summ.to_frame(records)
    summary, by_prompt = summ.summarize(df), summ.summarize(df, by_prompt=True)
    spec = summary[summary["mode"] == "speculative"]
    prompt_ids = list(dict.fromkeys(df["prompt_id"]))
    base = summary[summary["mode"] == "target"]["tokens_per_s"].iloc[0]
    lines = [f"target alone: {base:.2f} tokens/s (mean over the prompts)", "",
             "| --spec-type | best size | tokens/s | acceptance | tokens/round | gain | "
             + " | ".join(f"gain {p}" for p in prompt_ids) + " |", "|---|---:|---:|---:|---:|---:|" + "---:|" * len(prompt_ids)]
    best = {}
    for spec_type in TYPES:
        rows = spec[spec["strategy"].map(_type_of) == spec_type]
        if rows.empty:
            continue
        r = rows.loc[rows["tokens_per_s"].idxmax()]
        best[spec_type] = int(r["k"])
        mine = by_prompt[(by_prompt["strategy"] == r["strategy"]) & (by_prompt["k"] == r["k"])].set_index("prompt_id")
        gains = [f"{mine.loc[p, 'gain_pct']:+.1f}%" if p in mine.index else "–" for p in prompt_ids]
        lines.append(f"| {spec_type} | K={int(r['k'])} | {r['tokens_per_s']:.2f} | {_pct(r['acceptance'])} | "
                     f"{r['tokens_per_round']:.2f} | {r['gain_pct']:+.1f}% | " + " | ".join(gains) + " |")
    return "\n".join(lines), best


def _type_of(strategy: str) -> str:
    """'ngram-simple(4)' -> 'ngram-simple'; 'draft-simple p-min 0.5' -> 'draft-simple'."""
    return str(strategy).split("(")[0].split(" ")[0]


def concurrency_table(records: list[RunRecord]) -> str:
    summary = summ.summarize(summ.to_frame(records))
    lines = ["| clients = slots | run | aggregate tokens/s | per-request tokens/s | p95 latency s | acceptance | gain |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for _, r in summary.sort_values(["parallel", "mode"], ascending=[True, False]).iterrows():
        gain = "" if r["mode"] == "target" else f"{r['gain_pct']:+.1f}%"
        lines.append(f"| {int(r['parallel'])} | {rep.row_label(r)} | {r['tokens_per_s']:.2f} | "
                     f"{r['per_request_tokens_per_s']:.2f} | {r['latency_p95_s']:.2f} | {_pct(r['acceptance'])} | {gain} |")
    return "\n".join(lines + [""] + rep.concurrency_lines(summary))


def _pct(x) -> str:
    return "–" if x is None or x != x else f"{x:.1%}"


def independent_client(files, k: int, prompts: list, threads: int, n: int) -> str:
    """One round of 2 clients on 2 slots, sent by a client that shares no code with the engine (plain urllib): each
    request's tokens/s as the engine takes it (the server's timings) against the client's own clock, and the round's
    acceptance from the timings (as the engine sums them) against the server's /metrics counters."""
    binary, env = find_server(None)
    launch = Launch(binary, files.target, files.draft, Speculation("draft-simple", k), "0", "0", 2048, threads, parallel=2)
    with Server(launch, env) as server:
        server.complete(prompts[0][1], 16)
        before = server.metrics()
        seen = _plain_round(server.base, prompts, n)
        after = server.metrics()
    accepted = after["spec_decode_num_accepted_tokens_total"] - before["spec_decode_num_accepted_tokens_total"]
    drafted = after["spec_decode_num_draft_tokens_total"] - before["spec_decode_num_draft_tokens_total"]
    lines = ["| client | server timings tokens/s (what the engine stores) | the client's clock tokens/s | ratio |",
             "|---:|---:|---:|---:|"]
    for i, (clock, timings) in enumerate(seen):
        stored = 1000.0 * timings["predicted_n"] / timings["predicted_ms"]
        lines.append(f"| {i} | {stored:.2f} | {clock:.2f} | {stored / clock:.3f} |")
    summed = sum(t.get("draft_n_accepted", 0) for _, t in seen) / max(1, sum(t.get("draft_n", 0) for _, t in seen))
    lines.append(f"\nacceptance: {summed:.1%} from the requests' timings (as the engine sums them), "
                 f"{accepted / drafted:.1%} from /metrics over the round")
    return "\n".join(lines)


def _plain_round(base: str, prompts: list, n: int) -> list[tuple[float, dict]]:
    """Streaming requests at once with nothing but urllib and threads: (tokens over the time from the first token's
    arrival to the last's, which is the server's predicted_n / predicted_ms by its own clock; the final timings)."""
    import threading

    out: list = [None] * len(prompts)

    def go(i: int, tokens: list[int]) -> None:
        body = {"prompt": tokens, "n_predict": n, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                "samplers": ["top_k", "temperature", "top_p"], "cache_prompt": False, "stream": True,
                "return_tokens": True}
        req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
        first = last = None
        count, timings = 0, {}
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                if line.startswith(b"data: "):
                    chunk = json.loads(line[6:])
                    if chunk.get("tokens"):
                        count += len(chunk["tokens"])
                        last = time.perf_counter()
                        first = first or last
                    timings = chunk.get("timings") or timings
        out[i] = (count / (last - first), timings)

    threads = [threading.Thread(target=go, args=(i, t)) for i, (_, t) in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _serve_once(line: str, tokens: list[int], n: int) -> float:
    """Start the printed line as pasted (environment first), one greedy request, its tokens/s; then stop it."""
    words = shlex.split(line)
    env = {}
    while "=" in words[0] and not words[0].startswith("/"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    port = free_port()
    words[words.index("--port") + 1] = str(port)
    proc = subprocess.Popen(words, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, 60, lambda: proc.poll() is None)
        body = {"prompt": tokens, "n_predict": n, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                "samplers": ["top_k", "temperature", "top_p"], "cache_prompt": False}
        req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            t = json.loads(r.read())["timings"]
        return 1000.0 * t["predicted_n"] / t["predicted_ms"]
    finally:
        proc.terminate()
        proc.wait()


def deploy_check(out: Path, tokens: dict, n: int) -> str:
    """report's deploy line started from its text; each prompt once; tokens/s against the record's."""
    runs = [r for r in read_records(out) if isinstance(r, RunRecord) and r.config.parallel is None]
    df = summ.to_frame(runs)
    summary = deploy.with_deploy(summ.summarize(df), df, runs)
    best = summary[summary["deploy"].notna()].iloc[0]
    line = best["deploy"]
    speeds = [_serve_once(line, toks, n) for toks in tokens.values()]  # a new process per prompt, as the record's
    mine = statistics.fmean(speeds)
    return (f"deploy line ({rep.row_label(best)}): `{line}`\n\nstarted by hand, a new process per prompt (the "
            f"record's runs were cold too): {mine:.2f} tokens/s over {len(speeds)} prompts; the record: "
            f"{best['tokens_per_s']:.2f}; ratio {mine / best['tokens_per_s']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", action="append", default=None)
    ap.add_argument("-K", default="2,4,8")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-ids", default="qa,code-edit")
    ap.add_argument("-r", type=int, default=1)
    ap.add_argument("--parts", default="types,concurrency,checks")
    ap.add_argument("--tables-only", action="store_true", help="print the tables of the stored results again")
    args = ap.parse_args()
    ks = [int(k) for k in args.K.split(",")]
    prompts = choose(args.prompt_ids, None)
    for pair in args.pair or ["gemma-270m-f32+q4km"]:
        files = resolve(pair, None, None, None, quantize=quantize)
        out = Path("results") / f"bench-deploy-{pair}.jsonl"
        if args.tables_only:
            stored = [r for r in read_records(out) if isinstance(r, RunRecord)]
            print(types_table([r for r in stored if r.config.parallel is None])[0] + "\n")
            print(concurrency_table([r for r in stored if r.config.parallel is not None]) + "\n")
            continue
        out.parent.mkdir(exist_ok=True)
        if "types" in args.parts:
            out.unlink(missing_ok=True)  # this run's records only
        print(f"## {pair}: {files.target.name} + {files.draft.name}, greedy, n={args.n}, {args.threads} threads, "
              f"prompts {', '.join(p.id for p in prompts)}\n", flush=True)
        common = {"prompts": prompts, "n_predict": args.n, "threads": args.threads, "repetitions": args.r}
        k_best = max(ks)
        if "types" in args.parts:
            records = measure(pair, files, out, ks=ks, strategies=[Strategy(t) for t in TYPES], **common)
            table, best = types_table(records)
            k_best = best.get("draft-simple", k_best)
            print("\n" + table + "\n", flush=True)
        if "concurrency" in args.parts:
            records = measure(pair, files, out, ks=[k_best], strategies=[Strategy("draft-simple")], parallels=[1, 2, 4],
                              **{**common, "repetitions": max(2, args.r)})
            print("\n" + concurrency_table(records) + "\n", flush=True)
        if "checks" in args.parts:
            with Vocabulary(files.target) as vocab:
                chat_ok = vocab.has_chat_template()
                tokens = {p.id: vocab.tokenize(vocab.chat_prompt(p.text) if p.chat and chat_ok else p.text) for p in prompts}
            print(independent_client(files, k_best, list(tokens.items())[:2], args.threads, args.n) + "\n", flush=True)
            if out.is_file():
                print(deploy_check(out, tokens, args.n) + "\n", flush=True)


if __name__ == "__main__":
    main()
