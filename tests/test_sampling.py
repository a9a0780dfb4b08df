"""Sampling transforms, and a Monte Carlo check that the acceptance step reproduces the target
distribution at every position, strict enough to fail on each bug listed in speculative.md.

The transform is checked against the package's readable reference sampler (decoding/reference.py:
float64 over the whole vocabulary, a full sort), and its candidate-set search (column maxima, a growing nucleus,
a bracket on the normalizer) on rows built to take each of its paths."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from gguf_bench.decoding import reference, sampling
from gguf_bench.decoding.sampling import (
    CELL_ROWS,
    FIRST_NUCLEUS_COLUMNS,
    Dist,
    RowDists,
    SamplingConfig,
    accept_greedy,
    accept_sampled,
    draw,
    probabilities,
    residual,
)
from gguf_bench.errors import ConfigError

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


def simulate(accept, p_used=None, seed=1, q=Q, p=P) -> list[np.ndarray]:
    """Histogram of the token emitted at each position 1..K+1 of one round: drafts drawn from p,
    accepted by `accept` against q and p_used (default: p)."""
    rng = np.random.default_rng(seed)
    p_used = p if p_used is None else p_used
    counts = [np.zeros(len(dense(q[0]))) for _ in range(K + 1)]
    for _ in range(N):
        drafted = [draw(p[i], rng) for i in range(K)]
        n, nxt = accept(q, p_used, drafted, rng)
        for pos, tok in enumerate(drafted[:n] + [nxt]):
            counts[pos][tok] += 1
    return counts


def dense(row) -> np.ndarray:
    return row.dense() if isinstance(row, Dist) else np.asarray(row)


def min_p_value(counts: list[np.ndarray], q=Q) -> float:
    """Smallest chi-square p-value over positions: emitted tokens at position j must follow q_j
    (over q_j's support; a token outside it gives 0)."""
    values = []
    for j, c in enumerate(counts):
        want = dense(q[j]).astype(np.float64)
        support = want > 0
        expected = want[support] / want[support].sum() * c.sum()  # float32 rows sum to 1 within 1e-7 only
        values.append(chisquare(c[support], expected).pvalue if c[~support].sum() == 0 else 0.0)
    return min(values)


# --- the bugs speculative.md lists, each a small variant of the correct rule ------------------

def replacement_from_target(q, p, drafted, rng):
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] >= q[i][d]:
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


@pytest.mark.parametrize("accept", [accept_sampled, reference.accept_sampled], ids=["fast", "reference"])
def test_acceptance_reproduces_target_distribution(accept):
    assert min_p_value(simulate(accept)) > 1e-3


@pytest.mark.parametrize("buggy", [replacement_from_target, residual_not_renormalized, bonus_from_wrong_row,
                                   one_uniform_for_both])
def test_acceptance_check_catches_bug(buggy):
    assert min_p_value(simulate(buggy)) < 1e-6


def test_acceptance_check_catches_draft_with_other_transform():
    """Draft tokens drawn from P but accepted against another transform of the draft (here: a
    flatter, higher-temperature p), as when draft and target use different settings."""
    flatter = [np.sqrt(p) / np.sqrt(p).sum() for p in P]
    assert min_p_value(simulate(accept_sampled, p_used=flatter)) < 1e-6


# --- the acceptance step on the transform's own distributions ---------------------------------

def grid_shape(vocab: int) -> tuple[int, int]:
    """(rows, columns) of the grid the candidate searches view a vocabulary as; the rest is its tail."""
    return sampling._grid(np.empty(vocab, dtype=np.float32))[0].shape


V_MC = 4096 * 3 + 7  # a grid of 3 rows of 4,098 columns and a tail of 1: top-k 6 goes through the column search
POOL = [5, 41, 70, 300, 1000, 4097, 5000, 9000, 12200, V_MC - 1]  # strong tokens: many columns, and the tail


def strong_rows(picks: list[list[int]], seed: int) -> np.ndarray:
    """Logit rows over V_MC: the POOL tokens at the given positions strong (8 down to 6), the rest far below."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(-10.0, 1.0, (len(picks), V_MC)).astype(np.float32)
    for row, pick in zip(rows, picks):
        row[[POOL[i] for i in pick]] = np.linspace(8.0, 6.0, len(pick)) + rng.normal(0.0, 0.3, len(pick))
    return rows


# Target and draft rows whose supports after top-k 6 and top-p 0.9 differ: the residual must cover
# target tokens the draft never proposes.
TARGET_LOGITS = strong_rows([[0, 1, 2, 3, 4, 5, 6], [9, 8, 7, 6, 5, 4, 3], [2, 4, 6, 8, 0, 1, 3], [1, 3, 5, 7, 9, 0, 2]], 20)
DRAFT_LOGITS = strong_rows([[3, 4, 5, 6, 7, 8, 9], [5, 4, 3, 0, 1, 2, 9], [0, 2, 4, 6, 8, 9, 7]], 21)
TRUNCATED = SamplingConfig(1.0, top_k=6, top_p=0.9)


def residual_on_draft_support(q, p, drafted, rng):
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] >= q[i][d]:
            ids = p[i].ids  # BUG: the target's tokens outside the draft's support are lost
            r = np.maximum(q[i].probs_at(ids) - p[i].probs_at(ids), 0.0)
            return i, int(ids[draw(r, rng)]) if r.sum() > 0 else draw(q[i], rng)
    return len(drafted), draw(q[len(drafted)], rng)


def truncated_rows():
    q, p = probabilities(TARGET_LOGITS, TRUNCATED), probabilities(DRAFT_LOGITS, TRUNCATED)
    assert all(qi.ids is not None and not np.array_equal(qi.ids, pi.ids) for qi, pi in zip(q, p))
    return q, p


def test_acceptance_on_truncated_distributions_reproduces_the_target():
    q, p = truncated_rows()
    assert min_p_value(simulate(accept_sampled, q=q, p=p), q=q) > 1e-3


@pytest.mark.parametrize("buggy", [replacement_from_target, bonus_from_wrong_row, residual_on_draft_support])
def test_acceptance_check_on_truncated_distributions_catches_bug(buggy):
    q, p = truncated_rows()
    assert min_p_value(simulate(buggy, q=q, p=p), q=q) < 1e-6


V_DENSE = CELL_ROWS * 20 + 5  # dense rows long enough to be drawn from by columns


def dense_rows(picks: list[list[int]], seed: int) -> np.ndarray:
    """Logit rows over V_DENSE: 6 tokens (in several columns and the tail) finite, the rest -inf."""
    where = [3, 30, 150, 700, 1281, 1283]
    rng = np.random.default_rng(seed)
    rows = np.full((len(picks), V_DENSE), -np.inf, dtype=np.float32)
    for row, pick in zip(rows, picks):
        row[where] = rng.normal(0.0, 1.0, 6).astype(np.float32)
        row[where[pick[0]]] += 2.0
    return rows


def test_acceptance_on_dense_distributions_reproduces_the_target():
    q = probabilities(dense_rows([[0], [1], [2], [5]], 22), SamplingConfig(1.0))
    p = probabilities(dense_rows([[4], [3], [0]], 23), SamplingConfig(1.0))
    assert all(qi.ids is None and qi.cell_cum is not None for qi in q)
    assert min_p_value(simulate(accept_sampled, q=q, p=p), q=q) > 1e-3
    assert min_p_value(simulate(replacement_from_target, q=q, p=p), q=q) < 1e-6


def test_draw_from_a_dense_row_by_columns():
    weight = np.zeros(V_DENSE, dtype=np.float32)
    where = [0, 19, 20, 21 * 20 + 7, 63 * 20 + 19, V_DENSE - 1]  # first and last rows and columns, the tail
    weight[where] = [1, 2, 3, 4, 5, 6]
    d = Dist.from_weights(weight)
    assert d.cell_cum is not None
    rng = np.random.default_rng(4)
    counts = np.bincount([draw(d, rng) for _ in range(21_000)], minlength=V_DENSE)
    assert counts.sum() == counts[where].sum()  # never a token of weight 0
    assert chisquare(counts[where], np.array([1, 2, 3, 4, 5, 6]) * 1000).pvalue > 1e-3


def test_residual_lives_on_the_targets_support():
    q = Dist.on_support(10, np.array([1, 2, 3]), np.array([0.5, 0.3, 0.2]))
    p = Dist.on_support(10, np.array([2, 3, 4]), np.array([0.1, 0.3, 0.6]))
    np.testing.assert_allclose(residual(q, p).dense(), np.array([0, 0.5, 0.2, 0, 0, 0, 0, 0, 0, 0]) / 0.7)
    assert residual(q, q) is q  # empty residual: q itself
    rng = np.random.default_rng(6)
    qw, pw = rng.random(3000).astype(np.float32), rng.random(3000).astype(np.float32)
    want = np.maximum(qw / qw.sum(dtype=np.float64) - pw / pw.sum(dtype=np.float64), 0)
    got = residual(Dist.from_weights(qw), Dist.from_weights(pw))
    np.testing.assert_allclose(got.dense(), want / want.sum(), rtol=1e-4, atol=1e-9)


def test_greedy_acceptance():
    argmax = np.array([5, 7, 9, 11])
    assert accept_greedy(argmax, [5, 7, 9]) == (3, 11)  # all accepted: bonus from the last row
    assert accept_greedy(argmax, [5, 8, 9]) == (1, 7)  # first mismatch: the target's choice
    assert accept_greedy(argmax, [4, 7, 9]) == (0, 5)
    assert accept_greedy(argmax[:1], []) == (0, 5)


def test_probabilities_transforms():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    np.testing.assert_allclose(probabilities(logits, SamplingConfig(1.0)).dense(), [0.5, 0.2, 0.15, 0.1, 0.05],
                               rtol=1e-6)
    top2 = probabilities(logits, SamplingConfig(1.0, top_k=2)).dense()
    np.testing.assert_allclose(top2, [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0], rtol=1e-6)
    nucleus = probabilities(logits, SamplingConfig(1.0, top_p=0.8)).dense()  # 0.5 + 0.2 < 0.8 <= 0.85
    np.testing.assert_allclose(nucleus, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-6)
    hot = probabilities(logits, SamplingConfig(2.0)).dense()
    expected = np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05])
    np.testing.assert_allclose(hot, expected / expected.sum(), rtol=1e-6)
    rows = probabilities(np.stack([logits, logits[::-1]]), SamplingConfig(1.0, top_p=0.8))
    np.testing.assert_allclose(rows[1].dense(), nucleus[::-1], rtol=1e-6)


def full_sort_nucleus(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """The nucleus the slow way: the package's readable reference sampler (float64, a full sort)."""
    return reference.probabilities(logits, SamplingConfig(temperature, top_p=top_p))


def test_nucleus_on_a_large_vocabulary_matches_a_full_sort():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(50_000).astype(np.float32) * 3
    got = probabilities(logits, SamplingConfig(0.8, top_p=0.9)).dense()
    np.testing.assert_allclose(got, full_sort_nucleus(logits, 0.8, 0.9), rtol=1e-5, atol=1e-12)


# --- the transform against the implementation it replaced ------------------------------------

old_probabilities = reference.probabilities  # the readable reference sampler is the oracle


def lm_like_row(rng: np.random.Generator, vocab: int, gap: float) -> np.ndarray:
    """A tail around -13 and a head of 64 tokens falling from the max by gaps of mean `gap`."""
    row = rng.normal(-13.0, 5.0, vocab).astype(np.float32)
    head = rng.choice(vocab, min(64, vocab), replace=False)
    row[head] = rng.uniform(12, 25) - np.cumsum(rng.exponential(gap, head.shape[0]))
    return row


SETTINGS = [SamplingConfig(0.7), SamplingConfig(0.7, top_p=0.95), SamplingConfig(0.7, top_k=40),
            SamplingConfig(1.0, top_k=40, top_p=0.95), SamplingConfig(1.5, top_p=0.5),
            SamplingConfig(0.3, top_k=2000, top_p=0.99), SamplingConfig(1.0, top_k=1), SamplingConfig(0.1),
            SamplingConfig(0.25, top_p=0.9)]


@pytest.mark.parametrize("cfg", SETTINGS, ids=lambda c: f"T{c.temperature}-k{c.top_k}-p{c.top_p}")
@pytest.mark.parametrize("vocab", [5, 1000, 50_257, 262_144])
def test_probabilities_equal_the_previous_implementation(cfg, vocab):
    rng = np.random.default_rng(vocab)
    rows = [lm_like_row(rng, vocab, gap) for gap in (0.2, 1.0, 3.0)]
    rows.append((rng.standard_normal(vocab) * 2).astype(np.float32))  # flat: a wide nucleus
    for row in rows:
        want = old_probabilities(row, cfg)
        got = probabilities(row, cfg)
        if got.ids is not None:  # a cut: the same tokens kept
            np.testing.assert_array_equal(got.ids, np.flatnonzero(want))
        np.testing.assert_allclose(got.dense(), want, rtol=2e-5, atol=1e-12)


LOW_TEMPERATURES = [SamplingConfig(0.1), SamplingConfig(0.3), SamplingConfig(0.1, top_p=0.95),
                    SamplingConfig(0.2, top_p=0.5), SamplingConfig(0.1, top_k=40)]


@pytest.mark.parametrize("cfg", LOW_TEMPERATURES, ids=lambda c: f"T{c.temperature}-k{c.top_k}-p{c.top_p}")
def test_exp2_never_gets_an_exponent_below_the_normal_range(cfg, monkeypatch):
    """numpy's float32 exp2 runs 25-200x slower where exponents fall below -126 (subnormal results): at
    low temperature a row's tail reaches them, and the transform must raise them first."""
    rng = np.random.default_rng(11)
    rows = [lm_like_row(rng, 262_144, gap) for gap in (0.2, 3.0)]
    assert all(sampling.LOG2_E / cfg.temperature * float(row.max() - row.min()) > 86 + 126 for row in rows)  # a tail to clamp
    lowest, exp2 = [], np.exp2

    def spy(x, *args, **kwargs):
        if np.size(x):
            lowest.append(float(np.min(x)))
        return exp2(x, *args, **kwargs)

    monkeypatch.setattr(np, "exp2", spy)
    for row in rows:
        draw(probabilities(row, cfg), rng)
    assert lowest and min(lowest) >= -126


def test_acceptance_transforms_target_rows_only_as_far_as_the_round_gets():
    rng = np.random.default_rng(9)
    cfg = SamplingConfig(1.0, top_k=3)
    q_logits = rng.normal(0.0, 1.0, (4, 5000)).astype(np.float32)
    drafted = [int(np.argmin(row)) for row in q_logits[:3]]  # outside every target row's top 3: q(d) = 0
    p = [Dist.on_support(5000, np.array([d]), np.array([1.0])) for d in drafted]
    rows = RowDists(q_logits, cfg)
    n, tok = accept_sampled(rows, p, drafted, rng)
    assert n == 0 and sorted(rows._done) == [0] and tok in set(probabilities(q_logits[0], cfg).ids)
    same = RowDists(q_logits, cfg)  # the draft drew from the target's own rows: every draft accepted
    drafted = [draw(same[i], rng) for i in range(3)]
    n, _ = accept_sampled(same, [same[i] for i in range(3)], drafted, rng)
    assert n == 3 and sorted(same._done) == [0, 1, 2, 3]


def test_probabilities_read_the_logits_without_writing():
    rng = np.random.default_rng(5)
    row = lm_like_row(rng, 64 * 100 + 3, 1.0)
    row.setflags(write=False)  # as a view into llama.cpp's buffer must be treated
    batch = np.stack([row, row])
    batch.setflags(write=False)
    for cfg in SETTINGS:
        one = probabilities(row, cfg)
        both = probabilities(batch, cfg)
        assert len(both) == 2
        for d in both:
            np.testing.assert_array_equal(d.dense(), one.dense())


def test_reused_rows_are_never_shared():
    """Dense weights live in rows reused across calls: a row is reused only once nothing refers to it."""
    rng = np.random.default_rng(7)
    vocab = sampling.POOL_MIN + 3
    logits = [rng.normal(0.0, 2.0, vocab).astype(np.float32) for _ in range(6)]
    cfg = SamplingConfig(0.8)
    first = [probabilities(row, cfg) for row in logits[:3]]
    want = [d.dense() for d in first]
    kept_view = first.pop().weight[5:]  # only a view of the third row's weights survives its Dist
    view_want = kept_view.copy()
    later = [probabilities(row, cfg) for row in logits[3:]]
    q = [probabilities(row, cfg) for row in logits[:2]]
    residual(q[0], q[1])
    for d, w in zip(first, want):
        np.testing.assert_array_equal(d.dense(), w)
    np.testing.assert_array_equal(kept_view, view_want)
    assert len({id(d.weight) for d in first + later + q}) == len(first + later + q)


# --- ties and the candidate search -----------------------------------------------------------

V_TAIL = 4096 * 5 + 17
ROWS, COLS = grid_shape(V_TAIL)  # 5 rows of 4,099 columns, a tail of 2 tokens


def column_of(token: int) -> int:
    return token % COLS if token < ROWS * COLS else -1


def tied_row(rng: np.random.Generator, n_above: int, tied_ids: np.ndarray) -> np.ndarray:
    """n_above distinct strong tokens (6.00, 6.01, ...), tokens tied at 5.0 at tied_ids, a tail below 4."""
    row = (rng.standard_normal(V_TAIL) - 3.0).clip(max=4.0).astype(np.float32)
    free = np.setdiff1d(np.arange(V_TAIL), tied_ids)
    row[rng.choice(free, n_above, replace=False)] = 6.0 + np.arange(n_above, dtype=np.float32) * 0.01
    row[tied_ids] = 5.0
    return row


@pytest.mark.parametrize("where", ["other columns and the tail", "one column"])
@pytest.mark.parametrize("top_p", [1.0, 0.999])
def test_top_k_keeps_every_token_tied_at_the_boundary(where, top_p):
    rng = np.random.default_rng(11)
    if where == "one column":
        tied = np.array([7, 7 + COLS, 7 + 2 * COLS, 7 + 4 * COLS])
    else:
        tied = np.array([3, 1000, 3000, ROWS * COLS, ROWS * COLS + 1])
    row = tied_row(rng, 38, tied)  # 38 above, so the 40th largest is tied with every tied token
    assert {column_of(t) for t in tied} == ({7} if where == "one column" else {3, 1000, 3000, -1})  # -1: the tail
    cfg = SamplingConfig(1.0, top_k=40, top_p=top_p)
    got = probabilities(row, cfg)
    np.testing.assert_array_equal(got.ids, np.flatnonzero(row >= 5.0))  # 38 + all tied, more than 40
    probs = got.dense()[tied]
    np.testing.assert_allclose(probs, probs[0])  # no tied token preferred
    # The kept set follows the values, not the positions: permuting the row permutes the result.
    perm = rng.permutation(V_TAIL)
    np.testing.assert_allclose(probabilities(row[perm], cfg).dense(), got.dense()[perm], rtol=1e-12)


def test_top_k_without_ties_keeps_exactly_k():
    rng = np.random.default_rng(12)
    row = rng.standard_normal(V_TAIL).astype(np.float32)
    got = probabilities(row, SamplingConfig(1.0, top_k=40))
    np.testing.assert_array_equal(got.ids, np.sort(np.argsort(-row)[:40]))


def test_nucleus_keeps_every_token_tied_with_its_last():
    rng = np.random.default_rng(13)
    tied = np.array([10, 20, 30, ROWS * COLS + 1])
    row = tied_row(rng, 2, tied)
    row[row < 5.0] -= 30.0  # the strong and tied tokens hold all the mass
    # weights e^6.01, e^6, then 4 x e^5: top_p just above the first two's mass needs one tied token
    w = np.exp(np.array([6.01, 6.0, 5.0, 5.0, 5.0, 5.0]))
    top_p = (w[:2].sum() + 0.5 * w[2]) / w.sum()
    got = probabilities(row, SamplingConfig(1.0, top_p=top_p))
    np.testing.assert_array_equal(got.ids, np.flatnonzero(row >= 5.0))


class SearchSpy:
    """Records the nucleus search's steps: the first candidates (with a bracket on the normalizer), the
    exact normalizers computed over the row, and the wider candidate sets read after them."""

    def __init__(self, monkeypatch, row: np.ndarray):
        self.first, self.exact_totals, self.grown = [], 0, []
        candidates, total, at_least_about = sampling._candidates, sampling._Exp2.total, sampling._at_least_about

        def spy_candidates(*args):
            out = candidates(*args)
            self.first.append(out[0].shape[0])
            return out

        def spy_total(weigh, x):
            self.exact_totals += x is row
            return total(weigh, x)

        def spy_at_least_about(*args):
            out = at_least_about(*args)
            self.grown.append(out.shape[0])
            return out

        monkeypatch.setattr(sampling, "_candidates", spy_candidates)
        monkeypatch.setattr(sampling._Exp2, "total", spy_total)
        monkeypatch.setattr(sampling, "_at_least_about", spy_at_least_about)


def nucleus_rows(rng: np.random.Generator, vocab: int) -> dict[str, np.ndarray]:
    """Rows that drive the nucleus search down each of its paths (see the test)."""
    peaked = rng.normal(-13.0, 5.0, vocab).astype(np.float32)
    peaked[rng.choice(vocab, 3, replace=False)] = [20.0, 19.0, 18.0]
    wide_head = rng.normal(-13.0, 5.0, vocab).astype(np.float32)  # 6,000 near-equal strong tokens
    wide_head[rng.choice(vocab, 6000, replace=False)] = rng.normal(10.0, 0.1, 6000)
    heavy_tail = rng.normal(-3.9, 1.0, vocab).astype(np.float32)  # 20 strong tokens, a tail with 2% of the mass
    heavy_tail[rng.choice(vocab, 20, replace=False)] = 10.0 + rng.normal(0.0, 0.3, 20)
    flat = rng.normal(0.0, 0.5, vocab).astype(np.float32)
    return {"peaked": peaked, "wide head": wide_head, "heavy tail": heavy_tail, "flat": flat}


@pytest.mark.parametrize("kind, path", [
    ("peaked", "the first candidates and the bracket decide"),
    ("heavy tail", "the first candidates decide with the exact normalizer"),
    ("wide head", "more candidates than the first"),
    ("flat", "every token"),
])
def test_nucleus_search_matches_a_full_sort_on_each_path(kind, path, monkeypatch):
    vocab = 262_144
    row = nucleus_rows(np.random.default_rng(14), vocab)[kind]
    spy = SearchSpy(monkeypatch, row)
    got = probabilities(row, SamplingConfig(1.0, top_p=0.95))
    np.testing.assert_allclose(got.dense(), full_sort_nucleus(row, 1.0, 0.95), rtol=2e-5, atol=1e-12)
    assert len(spy.first) == 1 and spy.first[0] >= FIRST_NUCLEUS_COLUMNS
    if path == "the first candidates and the bracket decide":
        assert spy.exact_totals == 0 and spy.grown == []
    elif path == "the first candidates decide with the exact normalizer":
        assert spy.exact_totals == 1 and spy.grown == []
    elif path == "more candidates than the first":
        assert spy.exact_totals == 1 and got.ids.shape[0] > spy.first[0] and 0 < spy.grown[-1] < vocab
    else:
        assert spy.grown[-1] == vocab and got.ids.shape[0] > vocab // 2


def test_draw_follows_the_distribution():
    rng = np.random.default_rng(3)
    p = np.array([0.1, 0.6, 0.3])
    counts = np.bincount([draw(p, rng) for _ in range(20_000)], minlength=3)
    assert chisquare(counts, p * 20_000).pvalue > 1e-3


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0}, {"top_p": 1.5}])
def test_bad_sampling_settings(kwargs):
    with pytest.raises(ConfigError):
        SamplingConfig(**kwargs)
