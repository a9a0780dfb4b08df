"""The readable reference sampler: the few lines to read beside the papers, and the oracle that the fast
sampler (sampling.py) is tested against. float64 over the whole vocabulary, a full sort for the nucleus:
slow, obviously right, never used by the loop.

Ties at a cut are kept as sampling.py keeps them: every token whose value equals the last kept one's.
"""

from __future__ import annotations

import numpy as np

from gguf_bench.decoding.sampling import SamplingConfig


def probabilities(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """softmax(logits / T) over the top-k tokens, then the smallest set whose mass reaches top_p, renormalized: [V]."""
    z = np.asarray(logits, dtype=np.float64) / cfg.temperature
    if cfg.top_k and cfg.top_k < z.shape[0]:
        kth = np.sort(z)[::-1][cfg.top_k - 1]
        z = np.where(z >= kth, z, -np.inf)  # every token tied with the k-th stays
    p = np.exp(z - z.max())
    p /= p.sum()
    if cfg.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        last = order[int(np.searchsorted(np.cumsum(p[order]), cfg.top_p))]  # the token where the mass reaches top_p
        p = np.where(p >= p[last], p, 0.0)  # ... and every token tied with it
        p /= p.sum()
    return p


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse CDF: the first token whose cumulative mass exceeds a uniform draw."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.shape[0] - 1))


def accept_sampled(q: np.ndarray, p: list[np.ndarray], drafted: list[int], rng: np.random.Generator) -> tuple[int, int]:
    """Rejection sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023). q: [K+1, V] target rows,
    p: K draft rows, drafted: d_i ~ p_i. Returns (accepted drafts, next token)."""
    for i, d in enumerate(drafted):
        if rng.random() < min(1.0, q[i, d] / p[i][d]):  # accept d_i with probability min(1, q_i(d_i) / p_i(d_i))
            continue
        residual = np.maximum(q[i] - p[i], 0.0)  # on rejection: normalize(max(0, q_i - p_i))
        return i, draw(residual if residual.sum() > 0 else q[i], rng)
    return len(drafted), draw(q[len(drafted)], rng)  # all K accepted: a bonus token from q_K
