#!/usr/bin/env python
"""Per-row cost of sampling at temperature > 0: gguf_bench.decoding.sampling against the implementation it replaced
(float64 over the whole vocabulary, sort-based nucleus; copied below as the reference).

For each vocabulary size and sampling setting, in ms:
  row     probabilities + draw on one logits row (a draft token, or a token of regular generation)
  accept  probabilities of a [K+1, V] target batch + accept_sampled against K draft rows (one K=4 round;
          the new code transforms target rows only as far as the round gets, as the loop does)
Each figure is the mean over rows (or rounds) of each one's fastest of --reps runs: the run least
disturbed by other work on the machine. Still, run it when `uptime` shows low load, and repeat the run.
Before each timed call the row is copied into one logits buffer, untimed, as llama.cpp writes it just
before the loop reads it: the row is then in cache, as in the loop.

Logit rows, in order of preference:
  --model FILE.gguf  real rows: the built-in prompts decoded with sampling at T=0.7 (needs llama_cpp);
  --logits FILE.npy  rows saved before ([R, V] float32; --save FILE.npy writes the rows used);
  neither            synthetic rows shaped like a language model's (a few strong tokens, a long tail).
A vocabulary smaller than the rows' keeps each row's 1,024 largest logits and a random sample of the rest,
in vocabulary order. Draft rows for the accept step are the target rows plus Gaussian noise (sd 1).

    python scripts/bench_sampling.py [--model F.gguf | --logits F.npy] [--vocab 32000,128256,151936,262144]
                                     [--rows 32] [--reps 5] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gguf_bench.decoding import sampling as new
from gguf_bench.decoding.sampling import SamplingConfig

SETTINGS = [("T=0.7", SamplingConfig(0.7)), ("T=0.7 top-p 0.95", SamplingConfig(0.7, top_p=0.95)),
            ("T=0.7 top-k 40", SamplingConfig(0.7, top_k=40)),
            ("T=1 top-k 40 top-p 0.95", SamplingConfig(1.0, top_k=40, top_p=0.95)), ("T=0.2", SamplingConfig(0.2))]
VOCABS = "32000,128256,151936,262144"  # Llama 2, Llama 3, Qwen 2.5, Gemma 3
K = 4
KEEP_TOP = 1024  # logits of a row always kept when it is cut down to a smaller vocabulary


# --- the previous implementation, as it was (reference) -------------------------------------

def old_probabilities(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / cfg.temperature
    if cfg.top_k and cfg.top_k < z.shape[-1]:
        kth = -np.partition(-z, cfg.top_k - 1, axis=-1)[..., cfg.top_k - 1 : cfg.top_k]
        z[z < kth] = -np.inf
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    if cfg.top_p < 1.0:
        z = np.apply_along_axis(_old_nucleus, -1, z, cfg.top_p) if z.ndim > 1 else _old_nucleus(z, cfg.top_p)
    return z


def _old_nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    n = p.shape[0]
    k = 64
    while True:
        k = min(k, n)
        top = np.argpartition(-p, k - 1)[:k]
        order = top[np.argsort(-p[top], kind="stable")]
        cum = np.cumsum(p[order])
        if cum[-1] >= top_p or k == n:
            keep = order[: int(np.searchsorted(cum, top_p)) + 1]
            break
        k *= 4
    mass = p[keep].sum()
    kept = p[keep] / mass
    p[:] = 0.0
    p[keep] = kept
    return p


def old_draw(p: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.shape[0] - 1))


def old_accept_sampled(q: np.ndarray, p: list[np.ndarray], drafted: list[int], rng: np.random.Generator) -> tuple[int, int]:
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] < q[i, d]:
            continue
        residual = np.maximum(q[i] - p[i], 0.0)
        if residual.sum() <= 0:
            residual = q[i]
        return i, old_draw(residual, rng)
    return len(drafted), old_draw(q[len(drafted)], rng)


IMPLEMENTATIONS = {"old": (old_probabilities, old_draw, old_accept_sampled),
                   "new": (new.probabilities, new.draw, new.accept_sampled)}
TARGET_ROWS = {"old": old_probabilities, "new": new.RowDists}  # the batch as the loop hands it to acceptance


# --- logit rows ------------------------------------------------------------------------------

def synthetic_rows(n: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Rows like gemma-3-270m's: a tail around -13 (sd 5), a head of 64 tokens falling from a max of
    12..25 by gaps whose mean varies per row (0.2: a flat head, 3: one sure token)."""
    rows = rng.normal(-13.0, 5.0, (n, vocab)).astype(np.float32)
    for row in rows:
        head = rng.choice(vocab, 64, replace=False)
        row[head] = rng.uniform(12, 25) - np.cumsum(rng.exponential(rng.uniform(0.2, 3.0), 64))
    return rows


def model_rows(path: Path, n: int) -> np.ndarray:
    """Real rows: the built-in prompts, each continued with sampling at T=0.7, logits copied per token."""
    from gguf_bench.measure.inputs.prompts import BUILTIN
    from gguf_bench.runtimes.llama_cpp import Model

    rng = np.random.default_rng(0)
    cfg = SamplingConfig(0.7)
    rows: list[np.ndarray] = []
    with Model(path, n_ctx=1024) as model:
        for prompt in BUILTIN:
            model.rewind(0)
            text = model.chat_prompt(prompt.text) if prompt.chat and model.has_chat_template() else prompt.text
            logits = model.eval(model.tokenize(text), 1)
            for _ in range(max(1, n // len(BUILTIN))):
                rows.append(logits[0].copy())
                tok = new.draw(new.probabilities(logits[0], cfg), rng)
                if model.is_eog(tok) or len(rows) >= n:
                    break
                logits = model.eval([tok], 1)
    return np.stack(rows)


def cut_to(rows: np.ndarray, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of a smaller vocabulary: each row's KEEP_TOP largest logits and a random sample of the rest."""
    if vocab == rows.shape[1]:
        return rows
    if vocab > rows.shape[1]:
        raise SystemExit(f"--vocab {vocab} is larger than the rows' vocabulary ({rows.shape[1]})")
    out = np.empty((rows.shape[0], vocab), dtype=np.float32)
    for row, dest in zip(rows, out):
        top = np.argpartition(row, -KEEP_TOP)[-KEEP_TOP:]
        rest = np.setdiff1d(np.arange(row.shape[0]), top, assume_unique=True)
        dest[:] = row[np.sort(np.concatenate([top, rng.choice(rest, vocab - KEEP_TOP, replace=False)]))]
    return out


# --- timing ----------------------------------------------------------------------------------

def best_pass(make_work: Callable[[], Callable[[int], Callable[[], object]]], n: int, reps: int) -> float:
    """ms per item: each item's fastest of reps runs, averaged over the n items.

    make_work() gives work for one run (reseeded, so that every run repeats the same draws); work(i)
    prepares item i untimed and returns the call to time.
    """
    best = np.full(n, np.inf)
    for _ in range(reps):
        work = make_work()
        for i in range(n):
            call = work(i)
            t0 = time.perf_counter()
            call()
            best[i] = min(best[i], time.perf_counter() - t0)
    return 1000 * float(best.mean())


def fresh_logits(rows: np.ndarray) -> Callable[[int], np.ndarray]:
    """rows[i] written into one buffer, as llama.cpp writes each row into its logits buffer before it
    is read: in cache, as in the loop (a row read cold from a large array costs one pass from memory)."""
    buf = np.empty_like(rows[0])

    def fill(i: int) -> np.ndarray:
        buf[...] = rows[i]
        return buf

    return fill


def time_row(impl: str, rows: np.ndarray, cfg: SamplingConfig, reps: int) -> float:
    probabilities, draw, _ = IMPLEMENTATIONS[impl]

    def make_work() -> Callable[[int], Callable[[], int]]:
        rng, fill = np.random.default_rng(1), fresh_logits(rows)

        def work(i: int) -> Callable[[], int]:
            logits = fill(i)
            return lambda: draw(probabilities(logits, cfg), rng)

        return work

    return best_pass(make_work, rows.shape[0], reps)


def time_argmax(rows: np.ndarray, reps: int) -> float:
    def make_work() -> Callable[[int], Callable[[], int]]:
        fill = fresh_logits(rows)

        def work(i: int) -> Callable[[], int]:
            logits = fill(i)
            return lambda: int(np.argmax(logits))

        return work

    return best_pass(make_work, rows.shape[0], reps)


def time_accept(impl: str, rows: np.ndarray, cfg: SamplingConfig, reps: int) -> tuple[float, float]:
    """ms per K=4 round (target batch transform + acceptance), and the fraction of drafts accepted."""
    probabilities, draw, accept_sampled = IMPLEMENTATIONS[impl]
    target_rows = TARGET_ROWS[impl]
    rng = np.random.default_rng(2)
    noise = np.random.default_rng(3)
    rounds = []
    for start in range(0, rows.shape[0] - K, K + 1):
        target = rows[start : start + K + 1]
        p_rows = [probabilities(row + noise.normal(0.0, 1.0, row.shape).astype(np.float32), cfg) for row in target[:K]]
        rounds.append((target, p_rows, [draw(p, rng) for p in p_rows]))
    batches = np.stack([target for target, _, _ in rounds])  # [rounds, K+1, V]
    accepted: list[int] = []

    def make_work() -> Callable[[int], Callable[[], None]]:
        rng, fill = np.random.default_rng(5), fresh_logits(batches)
        accepted.clear()

        def work(i: int) -> Callable[[], None]:
            q_logits, (_, p_rows, drafted) = fill(i), rounds[i]
            return lambda: accepted.append(accept_sampled(target_rows(q_logits, cfg), p_rows, drafted, rng)[0])

        return work

    ms = best_pass(make_work, len(rounds), reps)
    return ms, sum(accepted) / (K * len(accepted))


# --- report ----------------------------------------------------------------------------------

def measure(source: np.ndarray, vocabs: list[int], reps: int) -> list[dict]:
    rng = np.random.default_rng(4)
    out = []
    for vocab in vocabs:
        rows = cut_to(source, vocab, rng)
        argmax_ms = time_argmax(rows, reps)
        out.append({"vocab": vocab, "setting": "argmax (greedy)", "old_row": argmax_ms, "new_row": argmax_ms})
        for name, cfg in SETTINGS:
            rec = {"vocab": vocab, "setting": name}
            for impl in IMPLEMENTATIONS:
                rec[f"{impl}_row"] = time_row(impl, rows, cfg, reps)
                rec[f"{impl}_accept"], rec["acceptance"] = time_accept(impl, rows, cfg, reps)
            out.append(rec)
    return out


COLUMNS = [("vocab", "vocab", "{:,}"), ("setting", "sampling", "{}"), ("old_row", "old row ms", "{:.3f}"),
           ("new_row", "new row ms", "{:.3f}"), ("row_x", "row speed-up", "{:.0f}x"),
           ("old_accept", "old accept ms", "{:.3f}"), ("new_accept", "new accept ms", "{:.3f}"),
           ("accept_x", "accept speed-up", "{:.0f}x"), ("acceptance", "accepted", "{:.0%}")]


def cells(rec: dict) -> list[str]:
    rec = dict(rec)
    if "new_accept" in rec:
        rec["row_x"] = rec["old_row"] / rec["new_row"]
        rec["accept_x"] = rec["old_accept"] / rec["new_accept"]
    return [fmt.format(rec[key]) if key in rec else "" for key, _, fmt in COLUMNS]


def render(records: list[dict], markdown: bool) -> str:
    heads = [head for _, head, _ in COLUMNS]
    body = [cells(rec) for rec in records]
    if markdown:
        lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(heads)]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*heads)] + [fmt.format(*row) for row in body])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", type=Path, help="GGUF file to take real logit rows from")
    src.add_argument("--logits", type=Path, help=".npy file of logit rows [R, V]")
    ap.add_argument("--save", type=Path, help="write the rows used to this .npy file")
    ap.add_argument("--vocab", default=VOCABS, help=f"comma-separated vocabulary sizes (default {VOCABS})")
    ap.add_argument("--rows", type=int, default=32, help="logit rows per figure (default 32)")
    ap.add_argument("--reps", type=int, default=5, help="passes per figure; the fastest counts (default 5)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args()
    vocabs = [int(v) for v in args.vocab.split(",")]
    if args.model:
        source, what = model_rows(args.model, args.rows), f"real rows from {args.model.name}"
    elif args.logits:
        source, what = np.load(args.logits)[: args.rows].astype(np.float32), f"rows from {args.logits}"
    else:
        source, what = synthetic_rows(args.rows, max(vocabs), np.random.default_rng(0)), "synthetic rows"
    if args.save:
        np.save(args.save, source)
    load = os.getloadavg()[0]
    records = measure(source, vocabs, args.reps)
    print(f"{what} ({source.shape[0]} rows of {source.shape[1]:,}); numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} cores; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"fastest of {args.reps} runs per row\n")
    print(render(records, args.markdown))


if __name__ == "__main__":
    main()
