"""Sampling: the logit transform, token draws, and the speculative acceptance rules.

The transform is softmax(logits / T), restricted to the top-k tokens, then to the top-p nucleus,
renormalized. Its result is a `Dist`: dense (a weight per vocabulary entry) when nothing is cut, sparse
(the kept token ids and their weights) when top-k or top-p cut. Draft and target rows go through the
same `probabilities`, which exact rejection sampling requires.

Cost on a row of V float32 logits (read in place, never written; nothing loops over V in Python):
  - no truncation: max, min, scale, exp2 and column sums: five vectorized passes into one float32 row
    (six at low temperature, where a clamp keeps exp2 off its slow subnormal path: see _Exp2);
  - top-k: column maxima (one pass) bound the k-th largest logit from below; only the few columns that
    can hold a top-k token are read again, and softmax runs on the survivors alone;
  - top-p alone: column maxima again; the nucleus is grown from the best columns and sorted there,
    never over V. Its cut needs the normalizer over all V: the column maxima bracket it, and only
    where the bracket cannot decide the cut is it computed (min, scale, exp2, column sums: four passes).
The vocabulary is viewed as a [rows, V // rows] grid (plus a tail of V % rows tokens; rows = 64 for a
vocabulary of 262,144, fewer for smaller ones): a "column" is a strided group of tokens, so that column
maxima and sums are reductions over whole rows, which numpy vectorizes (reductions over short contiguous
blocks it does not). Dense rows are reused across calls once nothing refers to them (`_new_array`).

Ties: a cut keeps every token whose logit equals that of the last token it keeps. Top-k keeps all
tokens tied with the k-th largest logit (so it can keep more than k; llama.cpp keeps exactly k), and
the nucleus keeps all tokens tied with its last token. The kept sets depend on logit values only,
never on token order or on how a partition happened to split, so draft and target cut the same way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gguf_bench.errors import ConfigError

COLUMN_ROWS = 64  # at most this many tokens per column of the grid whose maxima guide the searches,
COLUMNS = 4096  # and at least this many columns where the vocabulary allows
CELL_ROWS = 64  # tokens per column of the grid whose sums make totals and dense draws
DIRECT_DRAW = 1024  # a dense row shorter than this is drawn from by one cumulative sum
FIRST_NUCLEUS_COLUMNS = 64  # columns the nucleus search reads first, with a bracket on the normalizer
SAMPLE_STRIDE = 16  # every 16th logit guesses floors for nuclei wider than the columns can
LOG2_E = float(np.log2(np.e))
EXP2_SAFE = 86.0  # 2^(x log2(e) / T) needs no shift while its largest exponent is in [0, 86]: V 2^86 fits float32
EXP2_LOWEST = -125.0  # exponents are raised to this: numpy's float32 exp2 below -126 (subnormal results) runs
# 25-200x slower (measured: 0.13 ms for a 262,144-entry row in [-126, 0], 3.5-28 ms for one below -126)


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


# --- row buffers -----------------------------------------------------------------------------

POOL_ROWS = 32  # rows of one length kept for reuse (a K=8 round keeps about 2K+2 alive)
POOL_MIN = 1 << 16  # shorter arrays are allocated afresh
_pool: dict[tuple[int, np.dtype], list[np.ndarray]] = {}


def _new_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized array; a long row is reused once nothing refers to it any more.

    A fresh allocation of a few hundred KB comes from the kernel with its pages unmapped, and glibc
    gives the memory back when several such rows are freed at once (as after a speculative round):
    touching new pages then costs as much as the sampling (measured on gemma rows at T=0.7: a K=4
    round's transform and acceptance took 5.9 ms with fresh rows, 3.1 ms with reused ones).
    A pooled row is free when only the pool refers to it: no Dist, no view of it (a view holds a
    reference to its base), no caller.
    """
    if len(shape) != 1 or shape[0] < POOL_MIN:
        return np.empty(shape, dtype=dtype)
    rows = _pool.setdefault((shape[0], np.dtype(dtype)), [])
    for row in rows:
        if sys.getrefcount(row) <= 3:  # the pool's list, this loop's name, getrefcount's argument
            return row
    row = np.empty(shape, dtype=dtype)
    if len(rows) < POOL_ROWS:
        rows.append(row)
    return row


# --- the distribution object -------------------------------------------------------------------

def _grid(a: np.ndarray, rows: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """a [V] as a [rows, V // rows] view (column j: tokens j, j + cols, ...) and the tail left over.

    rows defaults to the search grid's: COLUMN_ROWS, fewer where V has less than COLUMN_ROWS * COLUMNS.
    """
    rows = rows or max(1, min(COLUMN_ROWS, a.shape[0] // COLUMNS))
    cols = a.shape[0] // rows
    return a[: rows * cols].reshape(rows, cols), a[rows * cols:]


@dataclass(frozen=True, eq=False)
class Dist:
    """A distribution over n tokens: token ids[j] has probability weight[j] / total, every other token 0.

    Dense when ids is None: weight is then [n] (unnormalized, float32 from logits) and, from DIRECT_DRAW
    entries on, `cell_cum` holds the cumulative sums (float64) of its column sums followed by the tail's
    weights, so that a draw reads O(n / CELL_ROWS + CELL_ROWS) entries instead of a cumulative sum over n
    (exact to float32 rounding).
    Sparse otherwise: ids ascending, weight float64. `p[token]` is the probability of token.
    """

    n: int
    ids: np.ndarray | None
    weight: np.ndarray
    total: float
    cell_cum: np.ndarray | None = None

    @classmethod
    def from_weights(cls, weight: np.ndarray) -> Dist:
        """A dense distribution proportional to weight [n] (kept, not copied)."""
        if weight.shape[0] < DIRECT_DRAW:
            return cls(weight.shape[0], None, weight, float(weight.sum()))
        cum = _cumulative_cells(weight)
        return cls(weight.shape[0], None, weight, float(cum[-1]), cum)

    @classmethod
    def on_support(cls, n: int, ids: np.ndarray, weight: np.ndarray) -> Dist:
        """A sparse distribution proportional to weight on the ascending token ids."""
        return cls(n, ids, weight, float(weight.sum()))

    def __getitem__(self, token: int) -> float:
        return self.prob(token)

    def prob(self, token: int) -> float:
        if self.ids is None:
            return float(self.weight[token]) / self.total
        j = int(np.searchsorted(self.ids, token))
        return float(self.weight[j]) / self.total if j < self.ids.shape[0] and self.ids[j] == token else 0.0

    def probs_at(self, ids: np.ndarray | None) -> np.ndarray:
        """Probabilities (float64) of the ascending token ids, or of every token when ids is None."""
        if ids is None:
            return self.dense()
        if self.ids is None:
            return self.weight[ids].astype(np.float64) / self.total
        j = np.minimum(np.searchsorted(self.ids, ids), self.ids.shape[0] - 1)
        return np.where(self.ids[j] == ids, self.weight[j] / self.total, 0.0)

    def dense(self) -> np.ndarray:
        """All n probabilities as a float64 array."""
        if self.ids is None:
            return self.weight.astype(np.float64) / self.total
        out = np.zeros(self.n)
        out[self.ids] = self.weight / self.total
        return out

    def sample(self, u: float) -> int:
        """The token at position u * total of the cumulative distribution (u uniform in [0, 1))."""
        if self.ids is not None:
            return int(self.ids[_pick(self.weight, u)])
        if self.cell_cum is None:
            return _pick(self.weight, u)
        cols, cum = self.n // CELL_ROWS, self.cell_cum
        cell = _pick(None, u, cum)
        if cell >= cols:  # a tail token is its own cell
            return CELL_ROWS * cols + cell - cols
        below = cum[cell - 1] if cell else 0.0
        in_cell = (u * cum[-1] - below) / (cum[cell] - below)  # where u falls inside this cell, in [0, 1)
        column = _grid(self.weight, CELL_ROWS)[0][:, cell].astype(np.float64)
        return int(_pick(column, min(max(in_cell, 0.0), 1.0)) * cols + cell)


def _cumulative_cells(weight: np.ndarray) -> np.ndarray:
    """Cumulative sums (float64) of the column sums of weight [n], then of its tail: one vectorized pass
    over n (numpy's own sum of a float32 row is twice as slow, and four times as slow in float64)."""
    grid, tail = _grid(weight, CELL_ROWS)
    sums = grid.sum(axis=0)
    return np.cumsum(np.concatenate([sums, tail]) if tail.shape[0] else sums, dtype=np.float64)


def _pick(weight: np.ndarray | None, u: float, cum: np.ndarray | None = None) -> int:
    """Index of the first cumulative weight above u * total, which is never an index of weight 0.

    cum: the cumulative sums of weight, where the caller has them (weight may then be None)."""
    cum = np.cumsum(weight, dtype=np.float64) if cum is None else cum
    j = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if j >= cum.shape[0]:  # u * total rounded up to the total: the last index of positive weight
        j = int(np.flatnonzero(np.diff(cum, prepend=0.0) > 0)[-1])
    return j


def _as_dist(p: Dist | np.ndarray) -> Dist:
    """Accept a plain probability row [V] where a Dist is expected."""
    return p if isinstance(p, Dist) else Dist.from_weights(np.asarray(p, dtype=np.float64))


# --- the transform -----------------------------------------------------------------------------

def probabilities(logits: np.ndarray, cfg: SamplingConfig) -> Dist | list[Dist]:
    """Softmax(logits / T) restricted to top-k, then to the top-p nucleus, renormalized.

    logits: [V] (a Dist back) or [R, V] (a list of R Dists); never written. Draft and target go
    through this same function, which exact rejection sampling requires.
    """
    logits = np.asarray(logits)
    if logits.ndim > 1:
        return [_row_distribution(row, cfg) for row in logits]
    return _row_distribution(logits, cfg)


class RowDists:
    """The Dists of the rows of logits [R, V], each computed when first asked for: acceptance reads the
    target's rows only as far as a round gets, so a round that rejects at position i never transforms
    rows i+1..K (with acceptance a, a K=4 round needs 1 + a + ... + a^4 of its 5 rows)."""

    def __init__(self, logits: np.ndarray, cfg: SamplingConfig):
        self.logits, self.cfg = logits, cfg
        self._done: dict[int, Dist] = {}

    def __len__(self) -> int:
        return len(self.logits)

    def __getitem__(self, i: int) -> Dist:
        if i not in self._done:
            self._done[i] = _row_distribution(np.asarray(self.logits[i]), self.cfg)
        return self._done[i]


def _row_distribution(x: np.ndarray, cfg: SamplingConfig) -> Dist:
    if 0 < cfg.top_k < x.shape[0]:
        return _top_k(x, cfg.top_k, cfg.temperature, cfg.top_p)
    if cfg.top_p < 1.0:
        return _nucleus_of_all(x, cfg.temperature, cfg.top_p)
    weigh = _Exp2.for_row(float(x.max()), cfg.temperature, float(x.min()))
    return Dist.from_weights(weigh(x))  # max, min, scale, exp2, column sums: five passes, one new row


@dataclass(frozen=True)
class _Exp2:
    """Softmax weights e^(x / T) up to a factor, as 2^(max(x, low) * scale - shift) in float32.

    exp2 because numpy's float32 exp2 is about twice as fast as its exp, at the same accuracy (1 ulp).
    The shift is 0 (a pass less) while 2^(max(x) * scale) stays far inside float32, else max(x) * scale.
    Logits whose exponent would fall below EXP2_LOWEST are raised to `low` (an extra pass, only in rows
    that hold such logits: at low temperature), so that exp2 never takes its slow subnormal path; such a
    token weighs 2^-125 instead of less, at most V 2^-125 < 1e-32 of a total that is >= 1.
    A row's weights all come from one _Exp2, so that sums over parts of the row add up exactly.
    """

    scale: float
    shift: float
    low: float | None  # None: no logit of the row is below the clamp

    @classmethod
    def for_row(cls, x_max: float, temperature: float, x_min: float | None = None) -> _Exp2:
        """x_min: the row's lowest logit, where known (None: clamp whatever is passed)."""
        scale = LOG2_E / temperature
        shift = 0.0 if 0.0 <= x_max * scale <= EXP2_SAFE else x_max * scale
        low = (shift + EXP2_LOWEST) / scale
        return cls(scale, shift, None if x_min is not None and x_min >= low else low)

    def knowing_min(self, x_min: float) -> _Exp2:
        """The same weights, without the clamp's pass where x_min shows that no logit needs it."""
        return self if self.low is None or x_min < self.low else _Exp2(self.scale, self.shift, None)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        w = _new_array(x.shape, np.result_type(x.dtype, np.float32))
        if self.low is not None:
            x = np.maximum(x, self.low, out=w)
        np.multiply(x, self.scale, out=w)
        if self.shift:
            np.subtract(w, self.shift, out=w)
        return np.exp2(w, out=w)

    def total(self, x: np.ndarray) -> float:
        """The weights' sum (float64); a long row by column sums, as `_cumulative_cells` adds it up."""
        w = self(x)
        if w.shape[0] < DIRECT_DRAW:
            return float(w.sum(dtype=np.float64))
        grid, tail = _grid(w, CELL_ROWS)
        return float(grid.sum(axis=0).sum(dtype=np.float64) + tail.sum(dtype=np.float64))


def _at_least(x: np.ndarray, col_max: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ascending ids of every token with logit >= floor, reading only the columns whose max reaches floor.

    Also returns those columns' logits [rows, n] and the mask of the ones >= floor.
    """
    grid, tail = _grid(x)
    cols = np.flatnonzero(col_max >= floor)
    block = grid[:, cols]
    above = block >= floor
    rows, at = np.divmod(np.flatnonzero(above), cols.shape[0])  # row-major order: ids come out ascending
    ids = np.concatenate([rows * grid.shape[1] + cols[at], grid.size + np.flatnonzero(tail >= floor)])
    return ids, block, above


def _kth_largest(a: np.ndarray, k: int) -> float:
    return float(np.partition(a, a.shape[0] - k)[a.shape[0] - k])


def _top_k(x: np.ndarray, k: int, temperature: float, top_p: float) -> Dist:
    """Softmax over the tokens whose logit is >= the k-th largest (ties at the boundary all kept), then
    the top-p nucleus among them."""
    col_max = _grid(x)[0].max(axis=0)  # one vectorized pass
    if 4 * k > col_max.shape[0]:  # k near the column count: partition the whole row
        ids = np.flatnonzero(x >= _kth_largest(x, k))
    else:
        # The k best columns hold k distinct tokens >= their k-th best maximum, so the k-th largest
        # logit is >= that floor, and every token above the floor sits in a column whose max reaches it.
        ids = _at_least(x, col_max, _kth_largest(col_max, k))[0]
        ids = ids[x[ids] >= _kth_largest(x[ids], k)]
    values = x[ids]
    weigh = _Exp2.for_row(float(values.max()), temperature, float(values.min()))
    cut = -np.inf if top_p >= 1.0 else _nucleus_cut(values, weigh, top_p, (0.0, 0.0))
    return _on_cut(x, ids, cut, weigh)


def _nucleus_cut(values: np.ndarray, weigh: _Exp2, top_p: float, rest: tuple[float, float]) -> float | None:
    """The logit of the nucleus's last token, or None where the candidates cannot tell.

    values: logits of every token >= some floor (the candidates); rest: bounds on the weight of all
    other tokens. The nucleus is the smallest best-first prefix whose weight reaches top_p of the
    normalizer Z = (candidates' weight) + rest. The answer is exact where both bounds give the same cut
    within the candidates. Sorting values (numpy's vectorized float sort) is all the ordering it needs:
    the nucleus is every token with logit >= the answer, ties included.
    """
    best_first = np.sort(values)[::-1]
    cum = np.cumsum(weigh(best_first), dtype=np.float64)
    cut_lo, cut_hi = (int(np.searchsorted(cum, top_p * (cum[-1] + r))) for r in rest)
    return float(best_first[cut_hi]) if cut_lo == cut_hi < cum.shape[0] else None


def _on_cut(x: np.ndarray, ids: np.ndarray, cut: float, weigh: _Exp2) -> Dist:
    """The candidate ids with logit >= cut, as a sparse distribution."""
    kept = ids[x[ids] >= cut]
    return Dist.on_support(x.shape[0], kept, weigh(x[kept]).astype(np.float64))


def _nucleus_of_all(x: np.ndarray, temperature: float, top_p: float) -> Dist:
    """The top-p nucleus of softmax(x / T) over all V tokens, exponentiating and sorting candidates only.

    Candidates are all tokens with logit >= a floor: a prefix of the best-first order, so once their
    weight reaches top_p of the normalizer Z, the smallest prefix that does lies among them.
      1. The best FIRST_NUCLEUS_COLUMNS columns' tokens above their lowest maximum, with Z bracketed from
         the column maxima (`_candidates`): enough for the usual peaked row, in one pass over V.
      2. Otherwise Z exactly (min, scale, exp2, sum: four passes): the same candidates, then 8x more
         each time, until they reach top_p of it.
    """
    grid, tail = _grid(x)
    col_max = grid.max(axis=0)  # the one pass over V that the usual case makes
    weigh = _Exp2.for_row(float(max(col_max.max(initial=-np.inf), tail.max(initial=-np.inf))), temperature)
    n, ids = FIRST_NUCLEUS_COLUMNS, None
    if n <= col_max.shape[0] // 4:
        ids, rest = _candidates(x, col_max, _kth_largest(col_max, n), weigh)
        cut = _nucleus_cut(x[ids], weigh, top_p, rest)
        if cut is not None:
            return _on_cut(x, ids, cut, weigh)
    weigh = weigh.knowing_min(float(x.min()))  # a pass, which saves the clamp's where the row needs none
    total = weigh.total(x)
    while True:
        ids = _at_least_about(x, col_max, n) if ids is None else ids
        rest = 0.0 if ids.shape[0] == x.shape[0] else max(total - weigh.total(x[ids]), 0.0)
        cut = _nucleus_cut(x[ids], weigh, top_p, (rest, rest))
        if cut is not None:
            return _on_cut(x, ids, cut, weigh)
        n, ids = 8 * n, None


def _at_least_about(x: np.ndarray, col_max: np.ndarray, n: int) -> np.ndarray:
    """Ascending ids of every token >= a floor that about n tokens reach (at least n where the columns
    give the floor); every token from n >= V / 4 on."""
    if n >= x.shape[0] // 4:
        return np.arange(x.shape[0])
    if n <= col_max.shape[0] // 8:  # the n best columns hold n tokens >= their lowest max
        return _at_least(x, col_max, _kth_largest(col_max, n))[0]
    sample = x[::SAMPLE_STRIDE]  # the (n / stride)-th best of every stride-th token: about n tokens reach it
    return np.flatnonzero(x >= _kth_largest(sample, max(1, n // SAMPLE_STRIDE)))


def _candidates(x: np.ndarray, col_max: np.ndarray, floor: float, weigh: _Exp2) -> tuple[np.ndarray, tuple[float, float]]:
    """Ascending ids of every token with logit >= floor, and bounds on the weight of all the others.

    The columns read (those whose max reaches floor) and the tail are weighed exactly. A column whose max
    is below floor holds that max and rows - 1 tokens no larger: its weight lies between its max's and
    rows times that.
    """
    ids, block, above = _at_least(x, col_max, floor)
    tail = _grid(x)[1]
    w = weigh(block)
    w[above] = 0.0
    exact = float(w.sum(dtype=np.float64)) + (weigh.total(tail[tail < floor]) if tail.shape[0] else 0.0)
    best = weigh.total(col_max[col_max < floor])
    return ids, (exact + best, exact + block.shape[0] * best)


# --- draws and acceptance ----------------------------------------------------------------------

def draw(p: Dist | np.ndarray, rng: np.random.Generator) -> int:
    """One token from p (a Dist, or a probability row [V]): inverse CDF with a fresh uniform."""
    if isinstance(p, Dist):
        return p.sample(rng.random())
    return _pick(np.asarray(p, dtype=np.float64), rng.random())


def accept_greedy_rows(row: Callable[[int], np.ndarray], drafted: list[int]) -> tuple[int, int]:
    """Greedy verification reading the target's rows one position at a time, `row(i)` asked for only as far as the
    round gets (rows decoded as they are read: loop.OneByOne). Returns (n_accepted, next_token), as accept_greedy."""
    for i, d in enumerate(drafted):
        top = int(np.argmax(row(i)))
        if top != d:
            return i, top
    return len(drafted), int(np.argmax(row(len(drafted))))


def accept_greedy(target_argmax: np.ndarray, drafted: list[int]) -> tuple[int, int]:
    """Greedy verification. target_argmax: [K+1]; drafted: K tokens.

    Accept while the target's choice equals the draft's; the next token is the target's choice
    at the first mismatch, or its bonus choice after all K. Returns (n_accepted, next_token).
    """
    k = len(drafted)
    mismatch = np.flatnonzero(target_argmax[:k] != np.asarray(drafted, dtype=target_argmax.dtype))
    n = int(mismatch[0]) if mismatch.size else k
    return n, int(target_argmax[n])


def residual(q: Dist, p: Dist) -> Dist:
    """normalize(max(0, q - p)): on q's support, since q - p <= 0 outside it. Returns q itself where
    the residual is empty (q == p, up to rounding), which is then exact."""
    if q.ids is None and p.ids is None:  # both dense: work in p's weight units, float32, three passes
        r = np.multiply(q.weight, p.total / q.total, out=_new_array(q.weight.shape, np.result_type(q.weight, p.weight)))
        np.subtract(r, p.weight, out=r)
        np.maximum(r, 0.0, out=r)
        out = Dist.from_weights(r)
    else:
        r = np.maximum(q.probs_at(q.ids) - p.probs_at(q.ids), 0.0)
        out = Dist.from_weights(r) if q.ids is None else Dist.on_support(q.n, q.ids, r)
    return out if out.total > 0 else q


def accept_sampled(q: list[Dist] | np.ndarray, p: list[Dist] | list[np.ndarray], drafted: list[int],
                   rng: np.random.Generator) -> tuple[int, int]:
    """Exact rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

    q: K+1 target distributions (Dists, a RowDists, or probability rows [K+1, V]), read only as far as
    the round gets; p: K draft distributions;
    drafted: K tokens, d_i ~ p_i. Accept d_i with probability min(1, q_i(d_i) / p_i(d_i)). At the
    first rejection draw the replacement from normalize(max(0, q_i - p_i)); after K acceptances draw a
    bonus token from q_K. The result is distributed exactly as sampling from q alone.
    """
    for i, d in enumerate(drafted):
        q_i, p_i = _as_dist(q[i]), _as_dist(p[i])
        if rng.random() * p_i.prob(d) < q_i.prob(d):  # u < q/p without dividing; p_i(d) > 0 since d ~ p_i
            continue
        return i, residual(q_i, p_i).sample(rng.random())
    return len(drafted), draw(q[len(drafted)], rng)


def accept_point_mass(q_row: Callable[[int], object], drafted: list[int], rng: np.random.Generator) -> tuple[int, int]:
    """Rejection sampling with p_i = onehot(d_i): (accepted drafts, next token).

    q_row(i): the target's distribution at position i (a sampling.Dist or a probability row), asked for
    only as far as the round gets. With p_i(d_i) = 1 the rule accepts d_i with probability q_i(d_i) and
    on rejection draws from normalize(max(0, q_i - onehot(d_i))) = q_i with d_i's mass removed.
    Drawing x ~ q_i and accepting when x == d_i is that very rule: P(x == d_i) = q_i(d_i), and x given
    x != d_i is distributed as q_i without d_i. One draw per position; after len(drafted) acceptances
    the bonus token is drawn from q_K.
    """
    for i, d in enumerate(drafted):
        x = draw(q_row(i), rng)
        if x != d:
            return i, x
    return len(drafted), draw(q_row(len(drafted)), rng)


# --- the sampler: greedy or sampled, decided once ----------------------------------------------

# llama.cpp's draft sampler (top-k 10, then a distribution at temperature 1): p-min reads its top token's probability
CONFIDENCE = SamplingConfig(temperature=1.0, top_k=10)


class Sampler:
    """Turns logit rows into tokens under one SamplingConfig and one random stream, and keeps the time it
    spends doing so (sampling and acceptance) apart from the models' time. Built by `sampler_for`, which
    is where greedy and sampled part: the loop and the drafters call the same methods either way
    (as llama.cpp's loop calls common_sampler_sample_and_accept_n)."""

    def __init__(self, cfg: SamplingConfig):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.seconds = 0.0

    def top1(self, logits: np.ndarray) -> int:
        """The most likely token (a draft that is a point mass)."""
        t = time.perf_counter()
        tok = int(np.argmax(logits))
        self.seconds += time.perf_counter() - t
        return tok

    def confidence(self, logits: np.ndarray) -> float:
        """Probability of the most likely token under CONFIDENCE (what p-min compares): a function of the
        logits alone, never of a draw."""
        t = time.perf_counter()
        conf = probabilities(logits, CONFIDENCE)[int(np.argmax(logits))]
        self.seconds += time.perf_counter() - t
        return float(conf)


class GreedySampler(Sampler):
    """Temperature 0: every token is the row's argmax; drafts are accepted while they equal the target's."""

    def token(self, logits: np.ndarray) -> int:
        """The next token from one row [V]."""
        return self.top1(logits)

    def draft_token(self, logits: np.ndarray) -> tuple[int, None]:
        """A draft token, and None for its distribution (a point mass)."""
        return self.top1(logits), None

    def accept(self, q_logits: np.ndarray, p_rows: list | None, drafted: list[int]) -> tuple[int, int]:
        """(accepted drafts, next token) from the target's rows q_logits [k+1, V]: an array (one batched decode), or
        rows decoded as they are read (loop.OneByOne), read position by position up to the first mismatch."""
        t = time.perf_counter()
        if isinstance(q_logits, np.ndarray):
            out = accept_greedy(np.argmax(q_logits, axis=1), drafted)
        else:
            out = accept_greedy_rows(q_logits.__getitem__, drafted)
        self.seconds += time.perf_counter() - t
        return out


class RandomSampler(Sampler):
    """Temperature > 0: tokens are drawn from `probabilities`; drafts pass exact rejection sampling."""

    def token(self, logits: np.ndarray) -> int:
        t = time.perf_counter()
        tok = draw(probabilities(logits, self.cfg), self.rng)
        self.seconds += time.perf_counter() - t
        return tok

    def draft_token(self, logits: np.ndarray) -> tuple[int, Dist]:
        """A draft token and the distribution it was drawn from."""
        t = time.perf_counter()
        p = probabilities(logits, self.cfg)
        tok = draw(p, self.rng)
        self.seconds += time.perf_counter() - t
        return tok, p

    def accept(self, q_logits: np.ndarray, p_rows: list | None, drafted: list[int]) -> tuple[int, int]:
        """(accepted drafts, next token) from the target's rows q_logits [k+1, V]; p_rows None: point-mass drafts."""
        t = time.perf_counter()
        if p_rows is None:
            out = accept_point_mass(RowDists(q_logits, self.cfg).__getitem__, drafted, self.rng)
        else:
            out = accept_sampled(RowDists(q_logits, self.cfg), p_rows, drafted, self.rng)
        self.seconds += time.perf_counter() - t
        return out


def sampler_for(cfg: SamplingConfig) -> GreedySampler | RandomSampler:
    """The one place where greedy and sampled generation part."""
    return GreedySampler(cfg) if cfg.greedy else RandomSampler(cfg)
