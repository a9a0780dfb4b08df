"""This machine's step costs for the cost schedule (`--k-schedule cost`, decoding/schedules.CostK): the
draft's cost per token and the target's verify cost per batch size.

From tune's calibration when one is stored for the same pair, host, offload and placement (`stored_costs`), else
measured at load, in the warm-up (`measure_costs`: a short verify curve, each batch size 1..K+1 timed a
few times, interleaved). Also `DecodeTimer`, which both use.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from gguf_bench.decoding.schedules import Costs
from gguf_bench.errors import ConfigError
from gguf_bench.models.pairs import PairFiles
from gguf_bench.models.parts import model_size
from gguf_bench.options import layers_label
from gguf_bench.placing import Placing, split_label
from gguf_bench.results.predictions.costmodel import relative_scatter
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.store import environment, read_records, results_dir
from gguf_bench.runtimes.llama_cpp import Model

WARM_UP_REPS = 3  # timings per batch size when measured in the warm-up (the median is kept)


def _timed_eval(model: Model, tokens: list[int], n_logits: int) -> tuple[float, float]:
    """(wall seconds, seconds inside llama_decode) of one loop step: eval, then argmax of each row read."""
    clock, t = model.llama_decode_s, time.perf_counter()
    np.argmax(model.eval(tokens, n_logits), axis=1)
    return time.perf_counter() - t, model.llama_decode_s - clock


def _filler(prompts: list[list[int]], n: int) -> list[int]:
    """n tokens from the prompts, repeated: content does not change a decode's cost, position does."""
    pool = [t for p in prompts for t in p] or [0]
    return (pool * (n // len(pool) + 1))[:n]


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    if not samples:
        return 0.0, 0.0
    return statistics.median(w for w, _ in samples), statistics.median(i for _, i in samples)


class DecodeTimer:
    """t_draft, t_draft2 and t_verify(b) for b = 1..k_max+1: median wall seconds of synthetic rounds.

    Taken at the mean prompt length + n_predict/2, the position a generation passes halfway. One
    repetition: the draft decodes 2 tokens (the catch-up after a full round) and is rewound; then for
    each b the draft decodes 1 token and the target b tokens with b logit rows, and both are rewound.
    The models alternate as in the loop (their CPU thread pools share the cores), batch sizes are
    interleaved, and `run` is called between the calibration's generation runs, so that a slow
    spell of the machine spreads over every measurement instead of inflating one.
    Every b is measured, never fitted: the curve need not rise with b. With repacked weights (CPU_REPACK)
    llama.cpp multiplies a batch of 4 rows or more with its gemm kernel, 4 rows at a time, and the rest
    with gemv one row at a time (ggml-cpu/repack.cpp), so 3 tokens can cost more than 4.
    Without a draft model (n-gram drafting) only the target is timed, and the draft's costs are 0.
    """

    def __init__(self, prompts: list[list[int]], n_predict: int, k_max: int):
        self.position = round(statistics.fmean(len(p) for p in prompts)) + n_predict // 2
        fill = _filler(prompts, self.position + max(k_max + 1, 3))
        self.context, self.batch = fill[:self.position], fill[self.position:]
        self.verify: dict[int, list[tuple[float, float]]] = {b: [] for b in range(1, k_max + 2)}
        self.draft1: list[tuple[float, float]] = []
        self.draft2: list[tuple[float, float]] = []

    def run(self, pair: Any, reps: int) -> None:
        """pair: anything with .target and .draft models (measure.pair.LoadedPair); its draft may be None."""
        target, draft, batch, pos = pair.target, pair.draft, self.batch, self.position
        models = [m for m in (target, draft) if m is not None]
        for model in models:
            model.rewind(0)
            model.eval(self.context, 1)
        for _ in range(reps):
            if draft is not None:
                self.draft2.append(_timed_eval(draft, batch[:2], 1))
                draft.rewind(pos)
            for b, samples in self.verify.items():
                if draft is not None:
                    self.draft1.append(_timed_eval(draft, batch[2:3], 1))
                    draft.rewind(pos)
                samples.append(_timed_eval(target, batch[:b], b))
                target.rewind(pos)
        for model in models:
            model.rewind(0)

    def result(self) -> dict:
        t_verify = [_medians(v) for v in self.verify.values()]
        (t_draft, t_draft_in), (t_draft2, _) = _medians(self.draft1), _medians(self.draft2)
        return {"position": self.position, "samples": len(self.verify[1]),
                "target_scatter": relative_scatter([1 / w for w, _ in self.verify[1] if w > 0]),  # tune's noise guard
                "t_verify_s": [w for w, _ in t_verify], "t_draft_s": t_draft, "t_draft2_s": t_draft2,
                "verify_python_s": [max(0.0, w - i) for w, i in t_verify], "draft_python_s": max(0.0, t_draft - t_draft_in)}


def measure_costs(pair: Any, prompt: list[int], n_predict: int, k_max: int, reps: int = WARM_UP_REPS) -> Costs:
    """A short verify curve (batches of 1..k_max+1) and the draft's one-token cost, measured now on `pair`."""
    timer = DecodeTimer([prompt], n_predict, k_max)
    timer.run(pair, reps)
    r = timer.result()
    return Costs(r["t_draft_s"], tuple(r["t_verify_s"]), 0.0, "warm-up", r["t_draft2_s"])


def _same_file(stored, path) -> bool:
    """Whether a stored model is the file at `path`: its name and its size (a split model's: every part's)."""
    return path is None if stored is None else path is not None and stored.file == path.name and stored.size == model_size(path)


def stored_costs(files: PairFiles, ngl: int, ngld: int, threads: int | None, k_max: int,
                 placement: str | None = None) -> Costs | None:
    """The costs of the latest calibration in the results folder for the same target (and draft, when there is
    one), offload, placement (LoadConfig.placement_label: -ncmoe, -ot, -dev and the draft's; None or '': llama.cpp's
    default), threads and host (CPU model and count, GPU), measured up to a batch of k_max + 1; None if none is."""
    folder = results_dir()
    if not folder.is_dir():
        return None
    env, with_draft = environment(), files.draft is not None
    want = (str(layers_label(ngl)), str(layers_label(ngld)) if with_draft else None, threads, env.cpu, env.cpu_count,
            env.gpu, _placed(placement, with_draft))
    found: list[CalibrationRecord] = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            records = read_records(path)
        except (OSError, UnicodeDecodeError):  # unreadable, or not text: not a source of costs (report says why)
            continue
        found += [r for r in records if isinstance(r, CalibrationRecord) and _serves(r, files, k_max, want)]
    if not found:
        return None
    t = max(found, key=lambda r: r.time or "").timings
    return Costs(t.t_draft_s if with_draft else 0.0, tuple(t.t_verify_s[:k_max + 1]), t.round_overhead_s, "calibration",
                 t.t_draft2_s if with_draft else 0.0)


def _serves(r: CalibrationRecord, files: PairFiles, k_max: int, want: tuple) -> bool:
    """Whether calibration `r` measured these files at the setting `want` (stored_costs'), up to a batch of k_max + 1,
    with no depth (costs at depth are not the costs of a run without it)."""
    if r.models.target is None or len(r.timings.t_verify_s) < k_max + 1 or r.config.depth:
        return False
    with_draft, cfg = files.draft is not None, r.config
    have = (str(cfg.ngl), str(cfg.ngld) if with_draft else None, cfg.threads, r.env.cpu, r.env.cpu_count, r.env.gpu,
            _placed(cfg.placement, with_draft))
    same_draft = not with_draft or _same_file(r.models.draft, files.draft)
    return _same_file(r.models.target, files.target) and same_draft and have == want and have[-1] is not None


def _placed(label: str | None, with_draft: bool) -> tuple[Placing, Placing | None] | None:
    """Both models' placement as values (the draft's None without a draft); None for a label this version cannot
    read (a later version's flag), which serves no query."""
    try:
        target, draft = split_label(label)
    except (ConfigError, ValueError):
        return None
    return target, draft if with_draft else None
