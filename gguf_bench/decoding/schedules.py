"""Draft length per round: `FixedK` (every round drafts up to K), `HeuristicK` (Hugging Face's
"heuristic" schedule: K += 2 after a round whose every draft token was accepted, K -= 1 otherwise, within
[1, k_cap]; reset at the start of every generation, which HF calls "heuristic_transient"), and `CostK`
(each round's length chosen, token by token, to maximize expected tokens per second on this machine).

Cost schedule (`--k-schedule cost`, cap K). One round that keeps L draft tokens:

    tokens(L) = 1 + sum_{i=1..L} prod_{j<=i} a_j          a_j: P(position j accepted | reached)
    time(L)   = max(L, decoded) * t_draft + t_verify(L + 1) + round_overhead

t_draft and t_verify(b) are measured on this machine (`Costs`: tune's calibration, or the warm-up's);
t_draft is 0 for an n-gram draft, and `decoded` counts draft decodes already paid for this round. The
round keeps the L in 0..K with the highest tokens(L) / time(L). L = 0 is a plain target step at the
target alone's cost, so a round is never predicted slower than the target alone.

The draft model's cache follows the history lazily: a round's first draft decode also feeds the
`behind` tokens it has not seen (those of rounds that drafted nothing), one batch. The prediction
counts that batch (t_catch_up(b), linear through the measured t_draft and t_draft2: 1 and 2 tokens);
the choice does not: those tokens would be fed by whichever later round drafts, so they are not this
round's to weigh, and weighing them locks the schedule out (each round without a draft makes the next
draft dearer: on Qwen F16 + Q2_K chat-multiturn it then drafted in 7 rounds of 42 and ran at 0.90x the
target alone, against 1.17x without).

a_j comes from a signal the drafter reports per position, mapped through hit rates learned from this
run's rounds (`HitRates`: per signal bin, a Beta prior centred on the signal's own guess, updated with
every position a round reached):
  - draft model: the draft's top-token probability (llama.cpp's draft sampler, the p-min signal), read
    before the token is drawn; its guess is the probability calibrated on all of this run's verified
    positions (`ConfidenceCalibration`: one logit shift, so an under-confident draft is seen to be right at every
    confidence at once, not bin by bin). The drafter asks after every draft decode whether to keep that position
    and go on; positions not decoded yet are assumed like the last one seen (before the first decode:
    the run's hit rate at position 1). The first round, and while the schedule keeps choosing no draft
    a round after 4, then 8, 16, ... 64 more such rounds, explores: it drafts and verifies at least one
    token whatever the estimates say, so a pessimistic estimate can recover (a position dropped is never
    verified, so an under-confident draft, whose confidence bins start low, would otherwise never be
    seen to be right: gemma's draft on qa drafted 1 round in 16); the interval goes back to 4 only when
    the schedule drafts of its own accord (each exploring round costs a catch-up batch);
  - n-gram: the length of the match behind the position (the match found plus the draft tokens before
    it), so a one-token match drafts little and a long copy drafts far.
The schedule changes only how many tokens are drafted, never which are accepted: the model's stop is
decided from distributions before each draw (exact at T > 0, as p-min), an n-gram draft is a function
of the history.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gguf_bench.errors import ConfigError
from gguf_bench.options import draft_length


class FixedK:
    """Every round drafts up to k tokens."""

    signals = False  # drafters report no per-position signals to it
    predicted_tokens_per_s = None

    def __init__(self, k: int):
        self.k = self.max_k = draft_length(k)

    def length(self, source: str, signals: Sequence[float], decoded: int, k: int, behind: int = 0) -> int:
        return k

    def update(self, n_drafted: int, n_accepted: int) -> None:
        pass


class HeuristicK(FixedK):
    """Hugging Face's heuristic: +2 after a round that accepted its whole (non-empty) draft, -1 after one
    that did not; between 1 and cap. Rounds without a draft leave K alone."""

    def __init__(self, k: int, cap: int):
        self.k, self.max_k = min(draft_length(k), cap), cap

    def update(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted:
            self.k = min(self.k + 2, self.max_k) if n_accepted == n_drafted else max(1, self.k - 1)


@dataclass(frozen=True)
class Costs:
    """Seconds one round's steps take on this machine: t_draft per draft-model token, t_verify[b-1] for the
    target's decode of b tokens with b logit rows (measured for each b: the curve need not rise with b),
    round_overhead per round besides them. source: 'calibration' (tune's) or 'warm-up' (measured at load)."""

    t_draft: float
    t_verify: tuple[float, ...]
    round_overhead: float = 0.0
    source: str = ""
    t_draft2: float = 0.0  # the draft's decode of 2 tokens; 0: unknown, catch-up batches cost t_draft

    @property
    def k_max(self) -> int:
        return len(self.t_verify) - 1

    def catch_up(self, b: int) -> float:
        """Seconds of one draft decode of b tokens: linear through t_draft (b = 1) and t_draft2 (b = 2)."""
        return self.t_draft + (b - 1) * max(0.0, self.t_draft2 - self.t_draft)


class HitRates:
    """P(accepted | reached) per key: a Beta prior of `weight` observations centred on the signal's own guess,
    plus what the rounds observed."""

    def __init__(self, weight: float = 2.0):
        self.weight = weight
        self.counts: dict[tuple, list[int]] = {}  # key -> [accepted, reached]

    def estimate(self, key: tuple, prior: float) -> float:
        acc, n = self.counts.get(key, (0, 0))
        return (acc + self.weight * prior) / (n + self.weight)

    def observe(self, key: tuple, accepted: bool) -> None:
        c = self.counts.setdefault(key, [0, 0])
        c[0] += accepted
        c[1] += 1


class ConfidenceCalibration:
    """A draft model's confidence c as a chance of acceptance: logit(P) = logit(c) + shift, one shift per run (Platt
    scaling with the slope fixed at 1), fitted by Newton's method to every verified position so far, with a N(0, 1)
    prior on the shift. A draft right more (or less) often than its confidence says learns it from all its positions
    at once; a confidence bin learns only from its own (gemma-3-270m's draft on code-edit is right at every position
    whatever its confidence, 0.2 to 1: with only per-bin learning its rounds kept stopping after one token)."""

    CLIP = 1e-3

    def __init__(self):
        self.logits: list[float] = []
        self.hits: list[float] = []
        self.shift = 0.0

    @classmethod
    def logit(cls, c: float) -> float:
        c = min(max(c, cls.CLIP), 1.0 - cls.CLIP)
        return math.log(c / (1.0 - c))

    def __call__(self, c: float) -> float:
        return 1.0 / (1.0 + math.exp(-(self.logit(c) + self.shift)))

    def observe(self, c: float, accepted: bool) -> None:
        self.logits.append(self.logit(c))
        self.hits.append(float(accepted))

    def fit(self) -> None:
        x, y, b = np.asarray(self.logits), np.asarray(self.hits), self.shift
        for _ in range(4):  # maximize sum log-likelihood - b^2 / 2: concave, converges in a few steps
            p = 1.0 / (1.0 + np.exp(-(x + b)))
            b -= (float((p - y).sum()) + b) / (float((p * (1.0 - p)).sum()) + 1.0)
        self.shift = b


def _signal_key(source: str, signal: float) -> tuple[tuple, float]:
    """(hit-rate key, prior) of one position's signal: a confidence in [0, 1] (model) or a match length (n-gram)."""
    if source == "ngram":
        m = int(signal)
        return ("ngram", m if m <= 4 else 3 + min(int(math.log2(m)), 6)), m / (m + 2.0)
    return ("model", min(int(signal * 10), 9)), float(signal)


POSITION_CAP = 8  # positions from the 8th on share one hit rate
PROBE_FIRST, PROBE_LAST = 4, 64  # rounds without a draft before the model drafts one anyway: 4, 8, ... 64


class CostK:
    """Each round keeps the draft length in 0..cap with the highest expected tokens per second (module note)."""

    signals = True  # drafters report per-position signals and ask `length` as they go

    def __init__(self, cap: int, costs: Costs):
        self.k = self.max_k = draft_length(cap)
        if costs.k_max < cap:
            raise ConfigError(f"the cost schedule needs verify costs up to a batch of {cap + 1}; they were measured "
                              f"up to {costs.k_max + 1}")
        self.costs, self.rates, self.calibration = costs, HitRates(), ConfidenceCalibration()
        self.tokens = self.seconds = 0.0  # the chosen rounds' predicted tokens and seconds, summed
        self._probe, self._skipped = PROBE_FIRST, 0
        self._explore = True  # this round verifies a draft token whatever the estimates say (the first, and probes)
        self._round: tuple = ("", [], 0)  # the last `length` call: (source, signals, decoded)
        self._plan: tuple = ([], None, 0.0, 0, 0)  # (a known, a assumed beyond, t_draft, decoded, behind)

    @property
    def predicted_tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def _rate(self, a: Sequence[float], beyond: float | None, t_draft: float, decoded: int, lo: int, hi: int,
              behind: int = 0) -> tuple[int, float, float]:
        """(L, tokens(L), time(L)) of the best L in lo..hi; position j > len(a) is accepted with `beyond`."""
        tv, over = self.costs.t_verify, self.costs.round_overhead
        first = self.costs.catch_up(behind + 1) if t_draft else 0.0  # the round's first draft decode (module note)
        best, tokens, reach = (lo, 0.0, 1.0), 1.0, 1.0
        best_rate = -1.0
        for n in range(hi + 1):
            if n:
                reach *= a[n - 1] if n <= len(a) else beyond
                tokens += reach
            if n >= lo:
                decodes = max(n, decoded)
                seconds = (first + (decodes - 1) * t_draft if decodes else 0.0) + tv[n] + over
                if tokens / seconds > best_rate:
                    best, best_rate = (n, tokens, seconds), tokens / seconds
        return best

    def length(self, source: str, signals: Sequence[float], decoded: int, k: int, behind: int = 0) -> int:
        """The draft length to aim for, at most k, given the signals of the positions drafted so far.

        A draft model calls it before its first decode (no signals) and after each decode (decoded = the
        signals' count): the answer is then len(signals) - 1 (drop the position just seen and stop),
        len(signals) (keep it and stop) or more (go on). behind: the tokens its first decode feeds besides
        x0 (its catch-up; counted in the prediction only). An n-gram calls it once with its whole draft:
        the answer is how many of its tokens to keep."""
        keyed = [_signal_key(source, s) for s in signals]
        if source == "model":  # each bin's prior: the confidence as calibrated on this run's positions so far
            keyed = [(key, self.calibration(prior)) for key, prior in keyed]
        a = [self.rates.estimate(key, prior) for key, prior in keyed]
        k = min(k, self.costs.k_max)
        if source == "model":
            t_draft, lo, hi = self.costs.t_draft, max(0, len(a) - 1), k
            if self._explore and a:
                lo = max(lo, 1)  # an exploring round verifies its first position, whatever its confidence
            if not a:  # before the first decode: each position's own hit rate, given the one before was accepted
                a = self._positions(k)
            beyond = a[-1] if a else None
        else:
            t_draft, lo, hi, beyond = 0.0, 0, min(k, len(a)), None
        n = self._rate(a, beyond, t_draft, decoded, lo, hi)[0]  # chosen at the marginal cost: no catch-up
        if source == "model" and not signals and k > 0:
            if n:  # drafting of its own accord: look often again once it stops
                self._skipped, self._probe = 0, PROBE_FIRST
            else:
                self._skipped += 1
                if self._skipped >= self._probe or self._explore:  # explore again, less often each time
                    self._skipped, self._probe, n = 0, min(2 * self._probe, PROBE_LAST), 1
                    self._explore = True
        self._round = (source, list(signals), decoded)
        self._plan = (a, beyond, t_draft, decoded, behind)
        return n

    def _positions(self, k: int) -> list[float]:
        """P(position j accepted | reached) for j = 1..k, learned from this run's rounds: acceptance runs in streaks
        (a draft that got position 1 right is more often right at 2), so later positions need not be like the first.
        Each position's prior is the estimate of the one before it (no data: all like position 1)."""
        rates = [self.rates.estimate(("model", "first"), 0.5)]
        for j in range(2, k + 1):
            rates.append(self.rates.estimate(("model", "position", min(j, POSITION_CAP)), rates[-1]))
        return rates

    def update(self, n_drafted: int, n_accepted: int) -> None:
        """Learn from the round (positions 1..n_accepted accepted, the next one rejected), and add its prediction."""
        source, signals, decoded = self._round
        for i, signal in enumerate(signals[:min(n_drafted, n_accepted + 1)]):  # the positions it reached
            self.rates.observe(_signal_key(source, signal)[0], i < n_accepted)
            if source == "model":
                self.calibration.observe(signal, i < n_accepted)
        if n_drafted and source == "model":
            self.calibration.fit()
            self.rates.observe(("model", "first"), n_accepted > 0)
            for j in range(2, min(n_drafted, n_accepted + 1) + 1):  # the positions after the first that it reached
                self.rates.observe(("model", "position", min(j, POSITION_CAP)), j <= n_accepted)
        elif decoded and source == "model":  # decoded the draft to see its confidence, then drafted nothing:
            self.rates.observe(("model", "first"), False)  # the look did not pay, so look less before deciding
        a, beyond, t_draft, decoded, behind = self._plan  # the decodes a dropped position cost are counted too
        _, tokens, seconds = self._rate(a, beyond or 0.0, t_draft, decoded, n_drafted, n_drafted, behind)
        self.tokens += tokens
        self.seconds += seconds
        self._round, self._plan, self._explore = ("", [], 0), ([], None, 0.0, 0, 0), False
