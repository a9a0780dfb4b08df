"""Pure numpy sampling: the logit transform, token draws, and the speculative acceptance rules.

Shapes: a logits or probability row is [V] (V = vocabulary size); a verify batch is [K+1, V].
Nothing here loops over the vocabulary in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gguf_bench.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"--temp must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"--top-k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probabilities(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """Softmax(logits / T) restricted to top-k, then to the top-p nucleus, renormalized.

    logits: [V] or [R, V]; returns a new float64 array of the same shape. Draft and target go
    through this same function, which exact rejection sampling requires.
    """
    z = np.asarray(logits, dtype=np.float64) / cfg.temperature  # the one copy; we own it from here
    if cfg.top_k and cfg.top_k < z.shape[-1]:
        kth = -np.partition(-z, cfg.top_k - 1, axis=-1)[..., cfg.top_k - 1 : cfg.top_k]
        z[z < kth] = -np.inf
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    if cfg.top_p < 1.0:
        z = np.apply_along_axis(_nucleus, -1, z, cfg.top_p) if z.ndim > 1 else _nucleus(z, cfg.top_p)
    return z


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (p is modified).

    Finds the set with argpartition on a growing candidate count instead of sorting all V.
    """
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


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from probability row p: inverse CDF with a fresh uniform."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.shape[0] - 1))


def accept_greedy(target_argmax: np.ndarray, drafted: list[int]) -> tuple[int, int]:
    """Greedy verification. target_argmax: [K+1]; drafted: K tokens.

    Accept while the target's choice equals the draft's; the next token is the target's choice
    at the first mismatch, or its bonus choice after all K. Returns (n_accepted, next_token).
    """
    k = len(drafted)
    mismatch = np.flatnonzero(target_argmax[:k] != np.asarray(drafted, dtype=target_argmax.dtype))
    n = int(mismatch[0]) if mismatch.size else k
    return n, int(target_argmax[n])


def accept_sampled(q: np.ndarray, p: list[np.ndarray], drafted: list[int],
                   rng: np.random.Generator) -> tuple[int, int]:
    """Exact rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

    q: [K+1, V] target probabilities; p: K draft probability rows; drafted: K tokens, d_i ~ p_i.
    Accept d_i with probability min(1, q_i(d_i) / p_i(d_i)). At the first rejection draw the
    replacement from normalize(max(0, q_i - p_i)); after K acceptances draw a bonus token from
    q_K. The result is distributed exactly as sampling from q alone.
    """
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] < q[i, d]:  # u < q/p without dividing; p_i(d) > 0 since d ~ p_i
            continue
        residual = np.maximum(q[i] - p[i], 0.0)
        if residual.sum() <= 0:  # q_i == p_i: the residual is empty, q_i itself is exact
            residual = q[i]
        return i, draw(residual, rng)
    return len(drafted), draw(q[len(drafted)], rng)
