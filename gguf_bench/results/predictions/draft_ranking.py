"""Drafts ranked before any download (`gguf-bench drafts`): the cost model of results/predictions/costmodel.py fed with a draft's
cost ratio (from the bytes each model reads per token, or measured), its break-even acceptance, and its predicted gain
at a few acceptance rates; whether it fits beside the target (the offload planner). Pure: reads no file.

From sizes alone, decode is taken as memory-bound: a token costs the bytes of weights it reads (MoE experts by their
routed share), so c = draft bytes / target bytes, and the target verifies a batch of K+1 tokens in the time of one (the
GPU case; a CPU verify costs more: measure it with `tune`). Twins (`--twins`) replace c by measured speeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench import options
from gguf_bench.models.candidates import Candidate, Header
from gguf_bench.models.offload_plan import fits
from gguf_bench.results.predictions.costmodel import Timings, at_acceptance, break_even

ALPHAS = (0.5, 0.7, 0.9)
K_MAX = 8


@dataclass
class Ranked:
    candidate: Candidate
    cost_ratio: float | None  # draft time per token / target's
    ratio_from: str = "sizes"  # or "twins"
    fits: bool | None = None  # None: no --vram, or a header the planner cannot read
    fit_note: str = ""
    break_even: float | None = None  # the lowest acceptance at which some K gains
    gains: dict[float, tuple[float, int]] = field(default_factory=dict)  # alpha -> (best gain %, its K)

    def gain(self, alpha: float) -> float:
        return self.gains.get(alpha, (float("-inf"), 0))[0]


def timings(cost_ratio: float, k_max: int = K_MAX, verify: tuple[float, ...] | None = None) -> Timings:
    """Timings in units of the target's token time: a flat verify (the memory-bound case), or the verify curve
    t(K+1)/t(1) measured (on twins)."""
    curve = verify[:k_max + 1] if verify else (1.0,) * (k_max + 1)
    return Timings(t_draft=cost_ratio, t_draft2=cost_ratio, t_verify=curve, round_overhead=0.0)


def outlook(cost_ratio: float, alphas=ALPHAS, k_max: int = K_MAX,
            verify: tuple[float, ...] | None = None) -> tuple[float | None, dict[float, tuple[float, int]]]:
    """(break-even acceptance over every K up to k_max, {alpha: (best gain %, K)}) for a draft of this cost ratio."""
    k_max = min(k_max, len(verify) - 1) if verify else k_max
    tm = timings(cost_ratio, k_max, verify)
    evens = [b for k in range(1, k_max + 1) if (b := break_even(tm, k)) is not None]
    gains = {}
    for a in alphas:
        best = max(range(1, k_max + 1), key=lambda k: at_acceptance(tm, a, k))
        gains[a] = ((at_acceptance(tm, a, best) * tm.t_target - 1.0) * 100.0, best)
    return (min(evens) if evens else None), gains


def rank(target: Header, candidates: list[Candidate], budget: int | None = None, n_ctx: int = 4096,
         measured: dict[str, float] | None = None, verify: tuple[float, ...] | None = None) -> list[Ranked]:
    """The compatible candidates that need a file, best first: those that fit (or are not checked) by their gain at
    the middle acceptance rate, then those that do not fit. measured: cost ratios by name and verify: the target's
    t(K+1)/t(1), both measured on twins (--twins)."""
    measured = measured or {}
    t_shape = target.planner_shape()
    rows = []
    for c in candidates:
        if c.status != "compatible" or not c.needs_file or c.header is None:
            continue
        ratio, source = measured.get(c.name), "twins"
        if ratio is None:
            ratio, source = (c.header.bytes_per_token / target.bytes_per_token if target.bytes_per_token else None,
                             "sizes")
        r = Ranked(c, ratio, source)
        if ratio is not None:
            r.break_even, r.gains = outlook(ratio, verify=verify if source == "twins" else None)
        d_shape = c.header.planner_shape()
        if budget is not None and t_shape and d_shape:
            why = fits(t_shape, d_shape, options.ALL_LAYERS, options.ALL_LAYERS, n_ctx, budget)
            r.fits, r.fit_note = why is None, why or ""
        rows.append(r)
    mid = ALPHAS[len(ALPHAS) // 2]
    return sorted(rows, key=lambda r: (r.fits is False, -r.gain(mid), r.candidate.name))


def to_json(rows: list[Ranked]) -> list[dict]:
    return [{"name": r.candidate.name, "origin": r.candidate.origin, "type": r.candidate.kind,
             "file_size": r.candidate.header.file_size, "params": r.candidate.header.n_params,
             "active_params": r.candidate.header.active_params, "bytes_per_token": r.candidate.header.bytes_per_token,
             "cost_ratio": r.cost_ratio, "cost_ratio_from": r.ratio_from, "fits": r.fits, "fit_note": r.fit_note,
             "break_even": r.break_even,
             "gain_pct": {str(a): {"gain": round(g, 1), "k": k} for a, (g, k) in r.gains.items()}} for r in rows]
