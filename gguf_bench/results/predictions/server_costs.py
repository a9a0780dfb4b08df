"""`tune --engine server`'s cost model: llama-server's own figures for every draft length, from a short calibration of
its server records (measure/flows/server_tune.py runs it). Pure: reads run records, starts nothing.

llama-server fixes its draft length when it starts and times no single step, so the model is written in what its
requests report (`timings.predicted_ms`, `/metrics`' verification rounds and accepted tokens per draft position):

    round(K)  = seconds per verification round at draft length K: the draft's steps and the target's batch,
                measured at the calibrated K's, with round(0) = the target alone's seconds per token, and linear between
    d(K)      = the share of generation steps that drafted (a verification round) rather than decoded one plain token:
                rounds / (rounds + plain steps), measured at the calibrated K's, linear between (the nearest beyond them)
    a_j       = the acceptance of draft position j given that it was reached: llama-server's per-position counters at
                the largest K (accepted at j over accepted at j-1, rounds for j = 1); where a concurrent round gives
                only totals, the one a for which sum_{i<=K} a^i is the accepted tokens per round
    tokens(K) = 1 + sum_{i<=K} prod_{j<=i} a_j   (costmodel.expected_tokens)
    tokens/s  = (d tokens(K) + (1 - d)) / (d round(K) + (1 - d) round(0)), against 1 / round(0) for the target alone

Seconds per round come from the requests at that K: their decode time, less their plain steps (tokens that came from
no round: generated = 1 + rounds + accepted + plain) at the target alone's seconds per token, over their rounds, pooled.
A round verifies at least one token with the target, so a round time shorter than the target alone's token is no
measurement (the plain steps' scatter took it), and rounds that /metrics did not count (a server without the
speculative counters: RunMetrics.rounds None) are not measured, which is not "no drafts".
With N slots it is one slot's figure: each request's own decode time over its share of the round's verifications, so
the prediction is the per-request tokens/s (`req t/s`) at that slot count. Where a type drafted so seldom that its
rounds drown in the plain steps' scatter (no time left once they are taken out), that K's round is linear between its
neighbours and the table says so; at the largest K it is an error (the acceptance is read there).

d is what lets one model cover every type: a draft model, MTP heads or a sidecar draft at nearly every step (d close
to 1; a --draft-p-min stop makes plain steps), an n-gram type only where the text repeats (ngram-mod, ngram-map-k,
...: d is the text's, and its drafts may be shorter than K, which the per-position counters take in).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gguf_bench import decode_window, engine_registry
from gguf_bench.decoding.strategy import SERVER_SPEC_TYPES, server_parts
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.results.predictions.costmodel import Prediction, ScatterGuard, expected_tokens, relative_scatter
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.runtimes.llama_server import NGRAM_CACHE_K

REPETITIONS = "repetitions of each prompt"  # what the server engine's scatter guard reads (ScatterGuard)
NGRAM_TYPES = tuple(t for t in SERVER_SPEC_TYPES if t.startswith("ngram"))  # draft only where the text repeats


def check_predictable(spec_type: str, twin: bool = False) -> None:
    """One of llama-server's types, and on twins one that drafts at every step (a twin's text repeats by chance)."""
    if len(server_parts(spec_type)) > 1:
        raise ConfigError(f"tune --engine server calibrates one type at a time: the chain {spec_type}'s drafters share "
                          f"one set of counters; tune {' and '.join(server_parts(spec_type))} apart, and measure the "
                          f"chain with `gguf-bench sweep --engine server --spec-type {spec_type}`")
    if spec_type not in SERVER_SPEC_TYPES:
        raise ConfigError(f"tune --engine server takes llama-server's types ({', '.join(SERVER_SPEC_TYPES)}), "
                          f"not {spec_type}")
    if spec_type == "ngram-cache":
        raise ConfigError(f"ngram-cache drafts at most {NGRAM_CACHE_K} tokens whatever -K says, so there is no draft "
                          f"length to predict: measure its one setting with `gguf-bench sweep --engine server "
                          f"--spec-type ngram-cache`")
    if twin and spec_type in NGRAM_TYPES:
        raise ConfigError(f"{spec_type} drafts where the text repeats, and a twin's text (synthetic weights) repeats by "
                          f"chance: tune it on the real files, without --twin")


@dataclass(frozen=True)
class Slot:
    """One request's (one slot's) figures: tokens generated, decode seconds, and its verification rounds."""

    n_tokens: float
    decode_s: float
    rounds: float = 0.0
    accepted: float = 0.0


def slots(record: RunRecord) -> list[Slot]:
    """A record's requests as slots: one request, or each request of a concurrent round (the round's rounds and
    accepted tokens shared out by each request's drafted tokens)."""
    m = record.metrics
    if not m.requests:
        return [Slot(m.n_tokens, m.decode_s, m.rounds or 0, m.accepted or 0)]
    done = [q for q in m.requests if not q.get("error") and q.get("predicted_ms")]
    drafted = sum(q.get("draft_n", 0) for q in done)
    return [Slot(q["predicted_n"], q["predicted_ms"] / 1000.0,
                 (m.rounds or 0) * q.get("draft_n", 0) / drafted if drafted else 0.0, q.get("draft_n_accepted", 0))
            for q in done]


def plain_steps(slot: Slot) -> float:
    """The tokens of one slot that came from no verification round (the first token is the prompt's)."""
    return max(0.0, slot.n_tokens - 1 - slot.rounds - slot.accepted)


def pooled_round_s(slots_: Sequence[Slot], t_target: float) -> float | None:
    """Seconds per verification round over slots: their decode time less their plain steps, over their rounds (pooled,
    so a request with one round weighs as one round, not as a whole request); None without a round."""
    drafting = [s for s in slots_ if s.rounds > 0]
    if not drafting:
        return None
    return sum(s.decode_s - plain_steps(s) * t_target for s in drafting) / sum(s.rounds for s in drafting)


def per_position(records: Sequence[RunRecord], k: int) -> tuple[tuple[float, ...], str]:
    """a_1..a_K from the records at draft length k: the per-position counters where they were read (one request at a
    time), else one a from the accepted tokens per round."""
    rounds = sum(r.metrics.rounds or 0 for r in records)
    if rounds == 0:
        raise BenchError(f"llama-server made no draft at K={k} in the calibration: nothing to predict from (its "
                         "records say 'no drafts' and why)")
    counts = [r.metrics.accepted_at for r in records if r.metrics.accepted_at]
    if len(counts) == len(records):
        at = [sum(c[j] if j < len(c) else 0 for c in counts) for j in range(k)]
        reached = [rounds, *at[:-1]]
        return tuple(a / n if n else 0.0 for a, n in zip(at, reached)), "per position"
    mean = sum(r.metrics.accepted or 0 for r in records) / rounds
    return (_constant_a(mean, k),) * k, "one a from the accepted tokens per round"


def _constant_a(mean: float, k: int) -> float:
    """The a in [0, 1] for which sum_{i<=k} a^i equals `mean` (by bisection: the sum grows with a)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(1, k + 1)) < mean else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class ServerCalibration:
    """One speculative type at one slot count, read from its calibration records."""

    pair: str
    spec_type: str
    parallel: int | None  # None: one request at a time
    t_target: float  # the target alone's seconds per token (per request, at this slot count)
    rounds_s: tuple[tuple[int, float], ...]  # (K, seconds per round) at each calibrated K, by K
    a: tuple[float, ...]  # acceptance at draft positions 1..K_max given reached
    a_from: str  # 'per position', or how a was found where the counters are totals
    drafting: tuple[tuple[int, float], ...] = ()  # (K, share of steps that drafted) at each calibrated K; () = all
    scatter: float | None = None  # the target alone's repetitions: largest relative distance from their prompt's median
    untimed: tuple[tuple[int, float, float], ...] = ()  # (K, rounds, steps) whose rounds could not be timed

    @property
    def k_max(self) -> int:
        return self.rounds_s[-1][0]

    @property
    def guard(self) -> ScatterGuard:
        """No predicted gain inside the target alone's own scatter between repetitions (off with --reps 1)."""
        return ScatterGuard(self.scatter, REPETITIONS)

    def round_from(self, k: int) -> str:
        """Where round(k) comes from: 'measured' (a calibrated K, its rounds timed), 'interpolated' (a calibrated K
        whose rounds could not be timed, or that made none: linear between its neighbours) or 'not calibrated' (a K the
        calibration did not run: linear between the calibrated K's)."""
        if k in dict(self.rounds_s):
            return "measured"
        return "interpolated" if k in dict(self.drafting) else "not calibrated"

    def round_at(self, k: int) -> float:
        """Seconds per round at draft length k: measured at a calibrated K, linear between (K=0: the target alone)."""
        if not 1 <= k <= self.k_max:
            raise ConfigError(f"draft length {k} is outside the calibrated 1..{self.k_max}: calibrate a -K range "
                              f"reaching it")
        return _between([(0, self.t_target), *self.rounds_s], k)

    def drafting_at(self, k: int) -> float:
        """The share of steps that drafted at draft length k: measured, linear between, the nearest beyond."""
        return _between(self.drafting, k) if self.drafting else 1.0

    def predict(self, k: int) -> Prediction:
        seconds, d = self.round_at(k), self.drafting_at(k)
        tokens = expected_tokens(self.a, k)
        per_step_s = d * seconds + (1 - d) * self.t_target
        return Prediction(k=k, strategy=f"{self.spec_type} K={k}", tokens_per_s=(d * tokens + 1 - d) / per_step_s,
                          baseline_tokens_per_s=1.0 / self.t_target, tokens_per_round=tokens, round_ms=1000 * seconds,
                          acceptance=(tokens - 1) / k)

    def at_acceptance(self, alpha: float, k: int) -> Prediction:
        """Tokens/s at draft length k were every position accepted with probability alpha: what a twin's round times
        predict for an acceptance the user names (a twin's own acceptance is chance)."""
        seconds = self.round_at(k)
        tokens = expected_tokens([alpha] * k, k)
        return Prediction(k=k, strategy=f"{self.spec_type} K={k}", tokens_per_s=tokens / seconds,
                          baseline_tokens_per_s=1.0 / self.t_target, tokens_per_round=tokens, round_ms=1000 * seconds,
                          acceptance=alpha)

    def predictions(self, ks: Sequence[int]) -> list[Prediction]:
        return [self.predict(k) for k in ks]


def _between(points: Sequence[tuple[int, float]], k: int) -> float:
    """The value at k, linear between the two (K, value) points around it (points sorted by K), the nearest beyond."""
    if k <= points[0][0]:
        return points[0][1]
    for (k0, v0), (k1, v1) in zip(points, points[1:]):
        if k <= k1:
            return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
    return points[-1][1]


def calibrations(records: Sequence[RunRecord]) -> list[ServerCalibration]:
    """One calibration per (speculative type, slot count) of a server calibration's records (each with its target
    alone at the same slot count)."""
    ok = [r for r in records if r.error is None and r.metrics and engine_registry.of(r.config.engine).server_process]
    out = []
    for parallel in dict.fromkeys(r.config.parallel for r in ok):
        here = [r for r in ok if r.config.parallel == parallel]
        alone = [s for r in here if r.mode == Mode.TARGET for s in slots(r)]
        if not alone:
            raise BenchError("the calibration has no target-alone run at this slot count: nothing to compare with")
        t_target = statistics.median(s.decode_s / decode_window.steps(s.n_tokens) for s in alone
                                     if decode_window.steps(s.n_tokens))
        noise = scatter([r for r in here if r.mode == Mode.TARGET])
        spec = [r for r in here if r.mode == Mode.SPECULATIVE]
        for spec_type in dict.fromkeys(r.strategy.spec_type for r in spec):
            of_type = [r for r in spec if r.strategy.spec_type == spec_type]
            out.append(replace(_calibration(of_type, t_target, parallel), scatter=noise))
    return out


def scatter(runs: Sequence[RunRecord]) -> float | None:
    """How far the target alone's repetitions of one prompt lie from their median, relative, at most: what a predicted
    gain must pass to be more than the machine's own drift. None with one repetition per prompt (nothing to tell)."""
    by_prompt: dict[str | None, list[float]] = {}
    for r in runs:
        by_prompt.setdefault(r.config.prompt_id, []).append(r.metrics.tokens_per_s)
    spreads = [x for x in map(relative_scatter, by_prompt.values()) if x is not None]
    return max(spreads) if spreads else None


def check_counted(records: Sequence[RunRecord]) -> None:
    """Every speculative record has its rounds counted: where llama-server's /metrics lacked the speculative counters
    they are None, not measured, and nothing can be predicted from them (0 would read as 'no drafts')."""
    missing = sorted({r.k for r in records if r.metrics.rounds is None})
    if missing:
        raise BenchError(f"llama-server's /metrics gave no speculative counters (spec_decode_num_drafts_total) at "
                         f"K={','.join(map(str, missing))}: its rounds were not measured, so nothing can be predicted; "
                         "use a llama-server that counts them (`gguf-bench build-server`)")


def _calibration(records: list[RunRecord], t_target: float, parallel: int | None) -> ServerCalibration:
    check_counted(records)
    ks = sorted({r.k for r in records})
    rounds, drafting, untimed = [], [], []
    for k in ks:
        here = [s for r in records if r.k == k for s in slots(r)]
        n_rounds, steps = sum(s.rounds for s in here), sum(s.rounds + plain_steps(s) for s in here)
        drafting.append((k, n_rounds / steps if steps else 0.0))
        seconds = pooled_round_s(here, t_target)
        if seconds is not None and seconds >= t_target:
            rounds.append((k, seconds))
        elif seconds is not None:  # shorter than a target step: its few rounds drowned in the plain steps' scatter,
            untimed.append((k, n_rounds, steps))  # so linear between its neighbours
    a, a_from = per_position([r for r in records if r.k == ks[-1]], ks[-1])
    if untimed and untimed[-1][0] == ks[-1]:
        k, n_rounds, steps = untimed[-1]
        raise BenchError(f"the verification rounds at K={k} could not be timed apart from the plain steps around them "
                         f"({n_rounds:g} rounds among {steps:g} steps), and a round takes at least one target step: "
                         f"calibrate where it drafts more (more -n, prompts "
                         f"it can copy from such as --prompt-ids code-edit) or with more --reps")
    if not rounds or rounds[-1][0] != ks[-1]:
        raise BenchError(f"llama-server made no draft at K={ks[-1]} in the calibration: nothing to predict from")
    first = records[0]
    return ServerCalibration(first.pair, first.strategy.spec_type, parallel, t_target, tuple(rounds), a, a_from,
                             tuple(drafting), untimed=tuple(untimed))
