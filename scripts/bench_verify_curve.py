#!/usr/bin/env python
"""The verify curve of single models: the time to decode a batch of k tokens after a prompt, over one token's.

A speculative round verifies K drafted tokens and the one before them in one batch of K+1; what that costs over one
token decides what a draft can gain. For a dense model a small batch costs barely more than one token (the weights
are read once for every row). A mixture of experts routes each token of the batch to its own experts, so a batch of k
tokens reads up to k times one token's expert bytes: published measurements show a 2-token batch slower than one
token on CUDA for some MoE models. This script measures the curve of each MODEL in turn, a MoE twin beside a dense
one, with gguf-bench's own code: each model loaded once as the loop loads it (measure.pair.LoadedPair, no draft),
then `measure.costs.DecodeTimer`, tune's timer: after the prompt, batches of 1..max(--tokens) tokens asking for
one logit row each (as the loop's verify step does, argmax included), each rewound to the same position afterwards
(the KV cache rolled back, as on a rejection), batch sizes interleaved, median of --reps after one untimed pass.

The batch's tokens are all different, drawn at random from the first 4,096 ids: a twin's random embedding rows
(models/twin.py; all of a MoE twin's rows are random), so that the tokens of one batch route to different experts as
a real batch's do; the same ids for every model whose vocabulary holds them.

Printed per model: its header line, a table `k | ms | × one token | decode ms | decode ×` (ms: the loop's verify step,
the argmax of every row included; decode: the time inside llama_decode alone), then `<model>: 2 tokens cost X.XX× one
token (Y.YY× inside llama_decode)`; with several models, a last table of every model's `×` side by side.

    python scripts/bench_verify_curve.py MODEL [MODEL ...] [-ngl all] [--tokens 1-9] [--reps 10] [--threads N]
        [--ctx 2048] [--prompt 256]

MODEL: a GGUF file (a twin: `gguf-bench twin HEADER -o TWIN`; headers at real shapes: models/shapes.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_bench import options
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.measure.costs import DecodeTimer
from gguf_bench.measure.pair import LoadConfig, LoadedPair
from gguf_bench.models.pairs import PairFiles
from gguf_bench.models.parts import tensor_table
from gguf_bench.models.twin import TOKEN_BAND

SEED = 0


@dataclass(frozen=True)
class Curve:
    name: str
    kind: str  # 'qwen3moe, 128 experts (8 used per token)' | 'llama, dense'
    layers: str  # layers on the device as llama.cpp reported them ('49/49')
    position: int  # tokens in the cache before each batch
    batch: tuple[int, ...]  # the token ids of the largest batch (each smaller batch is its first k)
    band: int  # they were drawn from ids below this
    reps: int
    ms: dict[int, float]  # k -> median milliseconds of a batch of k tokens, as the loop's verify step (argmax included)
    decode_ms: dict[int, float]  # k -> the median of the same steps' time inside llama_decode (and its synchronize)

    @property
    def moe(self) -> bool:
        return "experts" in self.kind

    def times(self, k: int) -> float:
        """A batch of k tokens over one token."""
        return self.ms[k] / self.ms[1]

    def decode_times(self, k: int) -> float:
        return self.decode_ms[k] / self.decode_ms[1]


def model_name(path: Path) -> str:
    return path.name.removesuffix(".gguf").removesuffix(".twin")


def model_kind(path: Path) -> str:
    meta = tensor_table(path)[0]
    arch = meta.get("general.architecture", "?")
    experts = meta.get(f"{arch}.expert_count") or 0
    if not experts:
        return f"{arch}, dense"
    return f"{arch}, {experts} experts ({meta.get(f'{arch}.expert_used_count', '?')} used per token)"


def token_ids(n_vocab: int, n: int, rng: np.random.Generator, avoid: tuple[int, ...] = ()) -> list[int]:
    """n different ids drawn from the first TOKEN_BAND of the vocabulary (fewer than n there: repeats), none of `avoid`."""
    pool = np.setdiff1d(np.arange(min(TOKEN_BAND, n_vocab)), np.array(avoid, dtype=np.int64))
    return rng.choice(pool, size=n, replace=n > len(pool)).tolist()


def verify_curve(path: Path, load: LoadConfig, ks: list[int], reps: int, prompt_len: int) -> Curve:
    """Load `path` once (no draft) and time batches of 1..max(ks) tokens after a prompt of `prompt_len` tokens."""
    k_top = max(ks)
    rng = np.random.default_rng(SEED)
    with LoadedPair(PairFiles(path, None, model_name(path)), load) as pair:
        if k_top > load.n_batch:
            raise ConfigError(f"a batch of {k_top} tokens is more than -b {load.n_batch}; lower --tokens")
        if prompt_len + k_top > pair.target.n_ctx:
            raise ConfigError(f"the prompt ({prompt_len} tokens) and a batch of {k_top} do not fit in --ctx "
                              f"{pair.target.n_ctx}; raise --ctx or lower --prompt")
        batch = token_ids(pair.target.n_vocab, k_top, rng)
        prompt = token_ids(pair.target.n_vocab, prompt_len, rng, avoid=tuple(batch))
        timers = [DecodeTimer([prompt], 0, k_top - 1) for _ in range(2)]  # the first: one untimed pass (warm-up)
        for timer, n in zip(timers, (1, reps)):
            timer.batch = batch  # the batch: k different tokens (DecodeTimer's own repeats the prompt's)
            timer.run(pair, n)
        result = timers[1].result()
        layers, pair_vocab = pair.offload_label("target"), pair.target.n_vocab
    ms = {k: 1000 * s for k, s in enumerate(result["t_verify_s"], 1)}
    decode_ms = {k: ms[k] - 1000 * s for k, s in enumerate(result["verify_python_s"], 1)}
    band = min(TOKEN_BAND, pair_vocab)
    return Curve(model_name(path), model_kind(path), layers, result["position"], tuple(timers[1].batch), band,
                 result["samples"], ms, decode_ms)


def curve_table(curve: Curve, ks: list[int]) -> list[str]:
    routed = ", so that each token routes to its own experts" if curve.moe else ""
    head = (f"{curve.name} ({curve.kind}): layers on the device {curve.layers}, batches after {curve.position} "
            f"tokens, median of {curve.reps} reps; the batch: {len(curve.batch)} different token ids drawn at random "
            f"from ids < {curve.band} (a twin's random embedding rows){routed}")
    rows = [f"| {k} | {curve.ms[k]:.3f} | {curve.times(k):.2f} | {curve.decode_ms[k]:.3f} | {curve.decode_times(k):.2f} |"
            for k in sorted({1, *ks})]
    lines = [head, "", "| k | ms | × one token | decode ms | decode × |", "| --- | --- | --- | --- | --- |", *rows, ""]
    if 2 in curve.ms:
        lines.append(f"{curve.name}: 2 tokens cost {curve.times(2):.2f}× one token ({curve.decode_times(2):.2f}× "
                     "inside llama_decode)")
    return lines


def side_by_side(curves: list[Curve], ks: list[int]) -> list[str]:
    names = " | ".join(f"{c.name} ×" for c in curves)
    rows = [f"| {k} | " + " | ".join(f"{c.times(k):.2f}" for c in curves) + " |" for k in sorted({1, *ks})]
    return ["| k | " + names + " |", "| --- |" + " --- |" * len(curves), *rows]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path, metavar="MODEL")
    ap.add_argument("-ngl", "--n-gpu-layers", default="0", help="layers on the GPU: a number or 'all' (default 0)")
    ap.add_argument("--tokens", default="1-9", help="batch sizes to print, e.g. 1-9 or 1,2,4,8 (every size up to the "
                    "largest is timed, interleaved)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--prompt", type=int, default=256, help="tokens in the cache before each batch")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    try:
        ks = options.int_list(a.tokens, "--tokens")
        if min(ks) < 1:
            raise ConfigError("--tokens must be batch sizes >= 1")
        if a.reps < 1 or a.prompt < 1:
            raise ConfigError(f"--reps and --prompt must be >= 1, got {a.reps} and {a.prompt}")
        load = LoadConfig(ngl=options.layers(a.n_gpu_layers), n_ctx=a.ctx, threads=a.threads)
        curves = []
        for path in a.models:
            curves.append(verify_curve(path, load, ks, a.reps, a.prompt))
            print("\n".join(curve_table(curves[-1], ks)) + "\n", flush=True)
    except BenchError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if len(curves) > 1:
        print("\n".join(side_by_side(curves, ks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
