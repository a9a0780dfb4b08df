"""Sampling transforms, and a Monte Carlo check that the acceptance step reproduces the target
distribution at every position, strict enough to fail on each bug listed in speculative.md."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from gguf_bench.errors import ConfigError
from gguf_bench.sampling import SamplingConfig, accept_greedy, accept_sampled, draw, probabilities

# Target rows q_1..q_4 (K=3 plus the bonus row) and draft rows p_1..p_3 over 6 tokens, chosen
# far apart so rejections are frequent and every position's distribution is distinct.
Q = np.array([[0.40, 0.30, 0.10, 0.10, 0.05, 0.05],
              [0.05, 0.05, 0.40, 0.30, 0.10, 0.10],
              [0.10, 0.40, 0.05, 0.05, 0.30, 0.10],
              [0.02, 0.08, 0.10, 0.20, 0.25, 0.35]])
P = [np.array([0.10, 0.10, 0.40, 0.30, 0.05, 0.05]),
     np.array([0.30, 0.30, 0.10, 0.10, 0.10, 0.10]),
     np.array([0.40, 0.10, 0.10, 0.10, 0.10, 0.20])]
K = 3
N = 30_000


def simulate(accept, p_used=P, seed=1) -> list[np.ndarray]:
    """Histogram of the token emitted at each position 1..K+1 of one round."""
    rng = np.random.default_rng(seed)
    counts = [np.zeros(Q.shape[1]) for _ in range(K + 1)]
    for _ in range(N):
        drafted = [draw(P[i], rng) for i in range(K)]
        n, nxt = accept(Q, p_used, drafted, rng)
        for pos, tok in enumerate(drafted[:n] + [nxt]):
            counts[pos][tok] += 1
    return counts


def min_p_value(counts: list[np.ndarray]) -> float:
    """Smallest chi-square p-value over positions: emitted tokens at position j must follow q_j."""
    return min(chisquare(c, Q[j] * c.sum()).pvalue for j, c in enumerate(counts))


# --- the bugs speculative.md lists, each a small variant of the correct rule ------------------

def replacement_from_target(q, p, drafted, rng):
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] >= q[i, d]:
            return i, draw(q[i], rng)  # BUG: should be the residual max(0, q - p)
    return len(drafted), draw(q[len(drafted)], rng)


def residual_not_renormalized(q, p, drafted, rng):
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] >= q[i, d]:
            residual = np.maximum(q[i] - p[i], 0.0)
            tok = np.searchsorted(np.cumsum(residual), rng.random(), side="right")  # BUG: mass < 1
            return i, int(min(tok, len(residual) - 1))
    return len(drafted), draw(q[len(drafted)], rng)


def bonus_from_wrong_row(q, p, drafted, rng):
    n, tok = accept_sampled(q, p, drafted, rng)
    if n == len(drafted):
        return n, draw(q[n - 1], rng)  # BUG: the bonus comes from q_(K+1)
    return n, tok


def one_uniform_for_both(q, p, drafted, rng):
    for i, d in enumerate(drafted):
        u = rng.random()
        if u * p[i][d] >= q[i, d]:
            residual = np.maximum(q[i] - p[i], 0.0)
            cdf = np.cumsum(residual)
            return i, int(np.searchsorted(cdf, u * cdf[-1], side="right"))  # BUG: reuses u
    return len(drafted), draw(q[len(drafted)], rng)


def test_acceptance_reproduces_target_distribution():
    assert min_p_value(simulate(accept_sampled)) > 1e-3


@pytest.mark.parametrize("buggy", [replacement_from_target, residual_not_renormalized, bonus_from_wrong_row,
                                   one_uniform_for_both])
def test_acceptance_check_catches_bug(buggy):
    assert min_p_value(simulate(buggy)) < 1e-6


def test_acceptance_check_catches_draft_with_other_transform():
    """Draft tokens drawn from P but accepted against another transform of the draft (here: a
    flatter, higher-temperature p), as when draft and target use different settings."""
    flatter = [np.sqrt(p) / np.sqrt(p).sum() for p in P]
    assert min_p_value(simulate(accept_sampled, p_used=flatter)) < 1e-6


def test_greedy_acceptance():
    argmax = np.array([5, 7, 9, 11])
    assert accept_greedy(argmax, [5, 7, 9]) == (3, 11)  # all accepted: bonus from the last row
    assert accept_greedy(argmax, [5, 8, 9]) == (1, 7)  # first mismatch: the target's choice
    assert accept_greedy(argmax, [4, 7, 9]) == (0, 5)
    assert accept_greedy(argmax[:1], []) == (0, 5)


def test_probabilities_transforms():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    np.testing.assert_allclose(probabilities(logits, SamplingConfig(1.0)), [0.5, 0.2, 0.15, 0.1, 0.05], rtol=1e-6)
    top2 = probabilities(logits, SamplingConfig(1.0, top_k=2))
    np.testing.assert_allclose(top2, [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0], rtol=1e-6)
    nucleus = probabilities(logits, SamplingConfig(1.0, top_p=0.8))  # 0.5 + 0.2 < 0.8 <= 0.85
    np.testing.assert_allclose(nucleus, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-6)
    hot = probabilities(logits, SamplingConfig(2.0))
    expected = np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05])
    np.testing.assert_allclose(hot, expected / expected.sum(), rtol=1e-6)
    rows = probabilities(np.stack([logits, logits[::-1]]), SamplingConfig(1.0, top_p=0.8))
    np.testing.assert_allclose(rows[1], nucleus[::-1], rtol=1e-6)


def test_nucleus_on_a_large_vocabulary_matches_a_full_sort():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(50_000).astype(np.float32) * 3
    got = probabilities(logits, SamplingConfig(0.8, top_p=0.9))
    full = probabilities(logits, SamplingConfig(0.8))
    order = np.argsort(-full)
    keep = order[: np.searchsorted(np.cumsum(full[order]), 0.9) + 1]
    want = np.zeros_like(full)
    want[keep] = full[keep] / full[keep].sum()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_draw_follows_the_distribution():
    rng = np.random.default_rng(3)
    p = np.array([0.1, 0.6, 0.3])
    counts = np.bincount([draw(p, rng) for _ in range(20_000)], minlength=3)
    assert chisquare(counts, p * 20_000).pvalue > 1e-3


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0}, {"top_p": 1.5}])
def test_bad_sampling_settings(kwargs):
    with pytest.raises(ConfigError):
        SamplingConfig(**kwargs)
