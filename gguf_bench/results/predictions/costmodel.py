"""The cost model of `gguf-bench tune`: predicted tokens/s for every draft length and offload setting from a
calibration record (measure/flows/calibrate.py measures one), and the best of them. Pure: loads no model, prints nothing.

Cost model (Leviathan et al. 2023, with a measured instead of an assumed verify cost). One greedy
round with draft length K:

    time(K)   = K * t_draft + t_verify(K + 1) + t_overhead(K)
    tokens(K) = 1 + sum_{i=1..K} prod_{j<=i} a_j

t_draft: the draft's one-token decode; t_verify(b): the target's decode of a batch of b tokens with
b logit rows; a_j: the probability that draft position j is accepted given that it was reached.
After a fully accepted round the draft has not decoded its last draft token yet, so the next round
starts with a 2-token draft decode (t_draft2) instead of a 1-token one: counted, with probability
prod_{j<=K} a_j.

Prediction, greedy: which draft tokens a round accepts depends only on the text. In a greedy run
the draft's j-th proposal is accepted exactly when the draft's greedy next token, given the text
so far, equals the target's. One batched pass of the draft over each calibration text gives that
match flag for every position; a round of any K then accepts the run of matches that follows its
first token, capped at K. So one run gives every K's rounds exactly, per prompt, with the shorter
last round and the end of generation, and without assuming that positions are independent. The
same holds for the heuristic K schedule (K follows the rounds) and for n-gram drafting (its draft
is a function of the history: drafters.NgramDrafter is run on the text). It does not hold for
p-min / n-min stops or the n-gram + model chain (how long the model drafts after its first miss is
not in the text), nor at temperature > 0. The closed form above (`expected_tokens`,
`steady_tokens_per_s`, with the a_j of the K_max runs) is the same model for n_predict -> infinity
and independent positions; it is kept for the arithmetic and for display.

Tokens/s is predicted the way a sweep measures it: per prompt, generated tokens over decode time
(the first token comes with the prompt and costs no decode time), then the mean over prompts.

Request latency (--objective request) is predicted the way a sweep computes it (run_fields.request_latency): the time to
first token plus -n tokens at the predicted decode speed. The time to first token is measured by the calibration per
prompt: the target's evaluation of the prompt, and with a draft model the draft's evaluation of it too (the loop's
drafter starts on the prompt before the first round: llama.cpp's lc#27306 in the Python loop). An n-gram drafter
processes no prompt. The request figure is -n tokens over that latency, so its ratio to the target alone's is the
inverse of the latencies'.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gguf_bench import decode_window
from gguf_bench.decoding.drafters import NgramDrafter
from gguf_bench.decoding.schedules import CostK, Costs, FixedK, HeuristicK
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.results.schema.calibration import CalibrationRecord

DEFAULT_REPS = 6


# --- the noise guard ---------------------------------------------------------------------------------


def relative_scatter(speeds: Sequence[float]) -> float | None:
    """How far repeated speeds lie from their median, relative, at most; None with fewer than two (nothing to tell)."""
    if len(speeds) < 2:
        return None
    mid = statistics.median(speeds)
    return max(abs(v / mid - 1) for v in speeds)


@dataclass(frozen=True)
class ScatterGuard:
    """No predicted gain smaller than the scatter of the target alone's own repeated timings is recommended: a smaller
    one is the machine's own drift as much as the draft's. Off (scatter None) where the target alone was timed once
    (--reps 1): there is nothing to tell a gain from, and the recommendation says so instead of passing silently."""

    scatter: float | None  # relative_scatter of the target alone's repeated timings (the largest over settings)
    timings: str  # what was repeated, for the line: "one-token decode timings", "repetitions of each prompt"

    @property
    def on(self) -> bool:
        return self.scatter is not None

    def passes(self, gain_pct: float) -> bool:
        """Whether a predicted gain may be recommended: above the scatter (above zero with the guard off)."""
        return gain_pct > 100 * (self.scatter or 0.0)

    def line(self) -> str:
        if self.scatter is None:
            return (f"scatter guard off: --reps 1 times the target alone once ({self.timings}), so no predicted gain "
                    "is checked against the machine's own scatter; --reps 2 or more turns it on")
        return (f"scatter guard: no predicted gain under {self.scatter:+.1%} is recommended (the target alone's "
                f"{self.timings} lie within ±{self.scatter:.1%} of their median)")

    def as_json(self) -> dict:
        return {"on": self.on, "target_scatter": self.scatter, "line": self.line()}


DECODE_TIMINGS = "one-token decode timings"  # what the Python engine's guard reads (measure/costs.DecodeTimer)


# --- the model -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """Seconds per step as the loop pays them (wall time: llama_decode plus the Python around it)."""

    t_draft: float  # draft: decode 1 token, read its logits, argmax
    t_draft2: float  # draft: decode 2 tokens (the catch-up after a fully accepted round), argmax
    t_verify: tuple[float, ...]  # t_verify[b-1]: target decodes b tokens with b logit rows, argmax of each row
    round_overhead: float  # per round, besides those steps: rewinds, acceptance bookkeeping, the loop

    @property
    def t_target(self) -> float:
        """What regular generation pays per token: a one-token decode, reading its logits, argmax
        (its own Python overhead, measured apart as regular_overhead_s, is part of it)."""
        return self.t_verify[0]

    @property
    def k_max(self) -> int:
        return len(self.t_verify) - 1

    def verify(self, b: int) -> float:
        if not 1 <= b <= len(self.t_verify):
            raise ConfigError(f"no verify timing for a batch of {b}: calibrate with a K range reaching {b - 1}")
        return self.t_verify[b - 1]

    def draft_cost_ratio(self) -> float:
        """c = t_draft / t_target(1): the draft's cost per token relative to the target's."""
        return self.t_draft / self.t_verify[0]

    def verify_curve(self) -> list[float]:
        """t_verify(b) / t_verify(1) for b = 1..: 1.0 flat would be an ideal (GPU-like) verifier."""
        return [t / self.t_verify[0] for t in self.t_verify]

    def costs(self, with_draft: bool) -> Costs:
        """These timings as the cost schedule reads them (an n-gram draft costs no draft decode)."""
        return Costs(self.t_draft if with_draft else 0.0, self.t_verify, self.round_overhead, "calibration",
                     self.t_draft2 if with_draft else 0.0)

    def round_s(self, drafted: int, catch_up: bool) -> float:
        """One round: `drafted` draft decodes (the first a 2-token one after a full round), one verify."""
        draft = drafted * self.t_draft + (self.t_draft2 - self.t_draft if catch_up and drafted else 0.0)
        return draft + self.verify(drafted + 1) + self.round_overhead


def expected_tokens(a: Sequence[float], k: int) -> float:
    """Tokens one round yields: 1 + sum_{i=1..k} prod_{j<=i} a_j (a[0] is a_1)."""
    if k > len(a):
        raise ConfigError(f"acceptance known for {len(a)} draft positions, not {k}")
    total, reach = 1.0, 1.0
    for i in range(k):
        reach *= a[i]  # probability that draft position i+1 is accepted
        total += reach
    return total


def steady_tokens_per_s(tm: Timings, a: Sequence[float], k: int) -> float:
    """Long-run tokens/s of the closed form: E(k) / (k t_draft + t_verify(k+1) + overhead + catch-up)."""
    p_full = math.prod(a[:k])  # the previous round was fully accepted: this one starts with 2 draft tokens
    time_round = k * tm.t_draft + p_full * (tm.t_draft2 - tm.t_draft) + tm.verify(k + 1) + tm.round_overhead
    return expected_tokens(a, k) / time_round


def at_acceptance(tm: Timings, alpha: float, k: int) -> float:
    """Long-run tokens/s at draft length k when every draft position is accepted with probability alpha (what a
    twin's timings predict for an acceptance the user names: a twin's own acceptance means nothing)."""
    return steady_tokens_per_s(tm, [alpha] * k, k)


def break_even(tm: Timings, k: int, tol: float = 1e-4) -> float | None:
    """The acceptance below which draft length k is slower than the target alone (1 / t_target), by bisection on
    at_acceptance (which grows with alpha); None when even alpha = 1 does not pay."""
    baseline = 1.0 / tm.t_target
    if at_acceptance(tm, 1.0, k) < baseline:
        return None
    if at_acceptance(tm, 0.0, k) >= baseline:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at_acceptance(tm, mid, k) < baseline else (lo, mid)
    return hi


@dataclass(frozen=True)
class Round:
    drafted: int
    accepted: int
    source: str = "model"  # who drafted: "model", "ngram", or "" (no draft: a plain target step)


class ModelProposals:
    """What a greedy draft model proposes along a known text, from its match flags.

    `matches[i]` (i >= 1): the draft's greedy prediction of text token i, given tokens 0..i-1, equals
    token i. A round from token s drafts k tokens (the draft cannot know where it goes wrong) and
    the target accepts the run of matches after s; a draft that proposes the end-of-generation token
    stops there. With `ends_with_eog` the last entry stands for the end-of-generation token.
    """

    def __init__(self, matches: Sequence[bool], ends_with_eog: bool = False):
        self.matches, self.ends_with_eog = matches, ends_with_eog

    def __len__(self) -> int:
        return len(self.matches)

    def round(self, s: int, k: int, schedule=None) -> Round:
        n, acc = len(self.matches), 0
        while acc < k and s + acc + 1 < n and self.matches[s + acc + 1]:
            acc += 1
        drafted = acc if self.ends_with_eog and acc and s + acc == n - 1 else k
        return Round(drafted, acc, "model")


class NgramProposals:
    """What prompt-lookup drafting (drafters.NgramDrafter, the same code) proposes along a known text:
    its draft is a function of the history, so every round of a greedy run is known exactly."""

    def __init__(self, prompt: Sequence[int], tokens: Sequence[int], ends_with_eog: bool, n_min: int, n_max: int):
        self.prompt, self.tokens = list(prompt), list(tokens)
        self.n = len(tokens) + int(ends_with_eog)  # an end-of-generation token is never proposed from history
        self.drafter = NgramDrafter(n_min, n_max)

    def __len__(self) -> int:
        return self.n

    def round(self, s: int, k: int, schedule=None) -> Round:
        """Under a schedule that takes signals (CostK), the scored continuation cut where it says, as
        NgramDrafter.propose does."""
        history = self.prompt + self.tokens[:s + 1]
        if schedule is not None and schedule.signals:
            draft, lengths = self.drafter.scored(history, k)
            draft = draft[:schedule.length("ngram", lengths, 0, len(draft))] if draft else draft
        else:
            draft = self.drafter.lookup(history, k)
        acc = 0
        while acc < len(draft) and s + acc + 1 < len(self.tokens) and draft[acc] == self.tokens[s + acc + 1]:
            acc += 1
        return Round(len(draft), acc, "ngram" if draft else "")


def simulate(proposals: ModelProposals | NgramProposals, schedule, n_predict: int, ends_with_eog: bool = False) -> list[Round]:
    """The rounds a greedy speculative run makes over a known text (that of the target alone).

    Mirrors generate_speculative: a round from token s (x0; s+1 tokens are out) may draft
    min(K, n_predict - (s+1) - 1) tokens, accepts some, the target adds one token of its own, and the
    schedule (schedules.FixedK, HeuristicK, or CostK for n-gram drafts) sets the next K from what was drafted and
    accepted.
    """
    n = min(len(proposals), n_predict + int(ends_with_eog))
    rounds: list[Round] = []
    s = 0  # index of x0, the round's first token (in the output, not yet decoded by the target)
    while s < n - 1:
        r = proposals.round(s, max(0, min(schedule.k, n_predict - s - 2)), schedule)
        rounds.append(r)
        schedule.update(r.drafted, r.accepted)
        s += r.accepted + 1
    return rounds


def simulate_rounds(matches: Sequence[bool], k: int, n_predict: int, ends_with_eog: bool = False) -> list[Round]:
    """The rounds of a greedy run with a draft model and fixed draft length k (see simulate)."""
    return simulate(ModelProposals(matches, ends_with_eog), FixedK(k), n_predict, ends_with_eog)


def modeled(strategy: Strategy) -> None:
    """Raise unless the greedy text simulation covers this strategy exactly."""
    if strategy.spec_type not in ("draft", "ngram") or strategy.p_min > 0 or strategy.n_min > 1:
        raise ConfigError(f"tune predicts --spec-type draft or ngram with a fixed or heuristic K (greedy), not "
                          f"'{strategy.label(1)}': with p-min or n-min, or the ngram,draft chain, the draft's "
                          "length after its first miss is not known from the text; measure those with sweep")
    if strategy.k_schedule == "cost" and strategy.spec_type != "ngram":
        raise ConfigError("tune predicts --k-schedule cost for n-gram drafting only: with a draft model the schedule "
                          "sizes each round from the draft's per-token confidence, which the calibration does not record "
                          "(tune prints what the per-position acceptance alone suggests); measure it with sweep "
                          "--k-schedule cost")


@dataclass(frozen=True)
class Text:
    """One calibration prompt's greedy text: the draft model's match flags (see ModelProposals), and
    the prompt and output tokens (for n-gram drafting, whose proposals come from the history)."""

    prompt_id: str
    matches: tuple[bool, ...]
    n_tokens: int  # tokens output (an end-of-generation token is not one)
    stopped_by_eog: bool
    prompt: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()
    prompt_s: float | None = None  # the target's evaluation of the prompt (None: a record before request predictions)
    draft_prompt_s: float | None = None  # the draft model's evaluation of it (the drafter's start)

    def request_s(self, decode_s: float, n_predict: int, with_draft: bool) -> float | None:
        """The request's latency as a sweep computes it: the prompt's processing (the draft's too where a draft model
        drafts), then n_predict tokens at this run's decode speed; None where the prompt was not timed."""
        if self.prompt_s is None or not decode_window.steps(self.n_tokens) or decode_s <= 0:
            return None
        first = self.prompt_s + ((self.draft_prompt_s or 0.0) if with_draft else 0.0)  # the first token's time
        return first + decode_window.steps(n_predict) * decode_s / decode_window.steps(self.n_tokens)

    def rounds(self, k: int, n_predict: int, strategy: Strategy = DEFAULT_STRATEGY, costs: Costs | None = None
               ) -> list[Round]:
        """costs: the step costs a cost schedule (n-gram only) sizes its rounds by; it starts afresh on each text,
        as it does on each generation."""
        modeled(strategy)
        if strategy.k_schedule == "cost":
            if costs is None:
                raise ConfigError("the cost schedule's rounds depend on the step costs: pass costs")
            schedule = CostK(k, costs)
        else:
            schedule = HeuristicK(k, strategy.k_cap) if strategy.k_schedule == "heuristic" else FixedK(k)
        if strategy.spec_type == "ngram":
            if not self.tokens and self.n_tokens:
                raise BenchError("this calibration record holds no tokens (written by an older tune): calibrate again "
                                 "to predict n-gram drafting")
            proposals = NgramProposals(self.prompt, self.tokens, self.stopped_by_eog, strategy.ngram_min, strategy.ngram_max)
        else:
            proposals = ModelProposals(self.matches, self.stopped_by_eog)
        return simulate(proposals, schedule, n_predict, self.stopped_by_eog)

    def decode_s(self, tm: Timings, k: int, n_predict: int, strategy: Strategy = DEFAULT_STRATEGY) -> tuple[float, list[Round]]:
        """Predicted decode time of a speculative run starting at draft length k, and its rounds."""
        rounds = self.rounds(k, n_predict, strategy, tm.costs(strategy.uses_model))
        total, full = 0.0, False
        for r in rounds:
            if r.source == "model":
                total += tm.round_s(r.drafted, catch_up=full)
                full = r.drafted > 0 and r.accepted == r.drafted
            else:  # n-gram or no draft: the target's verify alone (the lookup is part of the round overhead)
                total += tm.verify(r.drafted + 1) + tm.round_overhead
        return total, rounds

    def regular_decode_s(self, tm: Timings) -> float:
        """Target alone: one decode per token after the first (and one for the EOG token it then sampled)."""
        return (self.n_tokens - 1 + int(self.stopped_by_eog)) * tm.t_target


@dataclass(frozen=True)
class Prediction:
    k: int
    strategy: str  # drafters.Strategy.label: 'draft K=4', 'ngram(1-4) K=8', 'draft heuristic K=4..16'
    tokens_per_s: float  # mean over prompts of tokens / decode time, as a sweep reports it
    baseline_tokens_per_s: float  # the target alone, predicted the same way
    tokens_per_round: float
    round_ms: float
    acceptance: float  # accepted / drafted over the simulated rounds
    # --objective request: n_predict tokens over the request's latency (prompt included), mean over prompts; None
    # where the calibration did not time its prompts (a record of an older tune)
    request_tokens_per_s: float | None = None
    baseline_request_tokens_per_s: float | None = None
    request_s: float | None = None  # the mean predicted latency of one request, and the target alone's
    baseline_request_s: float | None = None
    objective: str = "decode"  # which figure tokens_per_s holds (under): decode tokens/s, or request

    @property
    def gain_pct(self) -> float:
        return 100.0 * (self.tokens_per_s / self.baseline_tokens_per_s - 1.0)

    def under(self, objective: str) -> Prediction:
        """This prediction with tokens_per_s and its baseline holding the objective's figure (decode tokens/s, or
        -n tokens over the request's latency), as the sweep's summary reads runs under --objective."""
        if objective == self.objective:
            return self
        if objective != "request":
            raise ConfigError(f"tune predicts --objective decode or request, not '{objective}'")
        if self.request_tokens_per_s is None or self.baseline_request_tokens_per_s is None:
            raise BenchError("this calibration did not time its prompts (an older tune's record): calibrate again to "
                             "predict request latency")
        return replace(self, tokens_per_s=self.request_tokens_per_s,
                       baseline_tokens_per_s=self.baseline_request_tokens_per_s, objective=objective)


def _rate(n_tokens: int, seconds: float) -> float:
    return decode_window.tokens_per_s(n_tokens, seconds)  # as a run measures it: the tokens after the first


def predict(tm: Timings, texts: Sequence[Text], k: int, n_predict: int, strategy: Strategy = DEFAULT_STRATEGY) -> Prediction:
    """Tokens/s of draft length k (the first K, under a heuristic schedule) over the calibration texts,
    and of the target alone."""
    if not texts:
        raise BenchError("no calibration texts to predict from")
    rates, baselines, all_rounds, total_s, requests, alone = [], [], [], 0.0, [], []
    for text in texts:
        seconds, rounds = text.decode_s(tm, k, n_predict, strategy)
        rates.append(_rate(text.n_tokens, seconds))
        baselines.append(_rate(text.n_tokens, text.regular_decode_s(tm)))
        requests.append(text.request_s(seconds, n_predict, strategy.uses_model))
        alone.append(text.request_s(text.regular_decode_s(tm), n_predict, False))
        all_rounds += rounds
        total_s += seconds
    drafted = sum(r.drafted for r in all_rounds)
    accepted = sum(r.accepted for r in all_rounds)
    n_rounds = max(1, len(all_rounds))
    timed = None not in requests and None not in alone
    return Prediction(k=k, strategy=strategy.label(k), tokens_per_s=statistics.fmean(rates),
                      baseline_tokens_per_s=statistics.fmean(baselines),
                      tokens_per_round=(accepted + len(all_rounds)) / n_rounds, round_ms=1000 * total_s / n_rounds,
                      acceptance=accepted / drafted if drafted else float("nan"),
                      request_tokens_per_s=statistics.fmean(n_predict / s for s in requests) if timed else None,
                      baseline_request_tokens_per_s=statistics.fmean(n_predict / s for s in alone) if timed else None,
                      request_s=statistics.fmean(requests) if timed else None,
                      baseline_request_s=statistics.fmean(alone) if timed else None)


# --- calibration records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """A stored calibration record, read back."""

    pair: str
    ngl: str  # as report.to_frame writes it: "0", "16", "all"
    ngld: str
    n_predict: int
    ks: tuple[int, ...]
    timings: Timings
    texts: tuple[Text, ...]
    a: tuple[float | None, ...]  # a_j measured in the K_max runs (accepted_at / reached_at), for display
    fit: float | None = None  # the K_max runs' decode time as predicted over as measured (1.0: consistent)
    depth: int = 0  # tokens of context before each prompt when it was measured
    twin: bool = False  # measured on twins (models/twin.py): its timings are the model's, its texts and a are not
    agrees: bool = False  # measured on agreeing twins (twin --agree): its texts and a are acceptance 1, by construction
    acceptance_from: str = ""  # where texts and a come from when not from this record (with_acceptance_of)
    placement: str = ""  # both models' placement flags beyond -ngl/-ngld ('-ncmoe 2'); '' for the default
    scatter: float | None = None  # the target's one-token decode timings' relative_scatter, as tune measured them
    # (not stored in the record: None when read back, or with --reps 1)
    objective: str = "decode"  # what predict() puts in tokens_per_s (Prediction.under): decode, or request latency

    @property
    def setting(self) -> str:
        """'-ngl 0 -ngld all', then the placement: the setting a table or a recommendation names."""
        return " ".join(w for w in (f"-ngl {self.ngl} -ngld {self.ngld}", self.placement) if w)

    @classmethod
    def from_record(cls, rec: CalibrationRecord) -> Calibration:
        cfg, tm, acc = rec.config, rec.timings, rec.acceptance
        timings = Timings(t_draft=tm.t_draft_s, t_draft2=tm.t_draft2_s, t_verify=tuple(tm.t_verify_s),
                          round_overhead=tm.round_overhead_s)
        timed = len(tm.prompt_target_s) == len(acc.prompts)  # older records did not time the prompts
        texts = tuple(Text(p.prompt_id, tuple(bool(m) for m in p.matches), p.n_tokens, p.stopped_by_eog,
                           tuple(p.prompt), tuple(p.tokens),
                           tm.prompt_target_s[i] if timed else None,
                           tm.prompt_draft_s[i] if timed and len(tm.prompt_draft_s) == len(acc.prompts) else None)
                      for i, p in enumerate(acc.prompts))
        loop = tm.in_loop
        fit = loop.predicted_decode_s / loop.decode_s if loop.decode_s and loop.predicted_decode_s else None
        twin = rec.models.twin
        return cls(pair=rec.pair, ngl=str(cfg.ngl), ngld=str(cfg.ngld), n_predict=cfg.n_predict,
                   ks=tuple(cfg.ks), timings=timings, texts=texts, a=tuple(acc.a), fit=fit, depth=cfg.depth, twin=twin,
                   agrees=twin and rec.models.agreeing, placement=cfg.placement or "")

    def with_acceptance_of(self, real: Calibration, source: str) -> Calibration:
        """These timings with the texts and acceptance of another calibration (the real pair's, measured by tune on
        the real files): what a twin predicts once the pair's acceptance is known. `source` says where it came from."""
        texts = tuple(replace(t, prompt_s=None, draft_prompt_s=None) for t in real.texts)  # the real files' prompt
        # timings say nothing of the twin's: no request predicted
        return replace(self, texts=texts, a=real.a, n_predict=real.n_predict, fit=None, acceptance_from=source)

    @property
    def acceptance_known(self) -> bool:
        """Whether the texts are a real pair's, or agreeing twins' (acceptance 1 by construction; a twin's own
        acceptance is otherwise chance)."""
        return not self.twin or self.agrees or bool(self.acceptance_from)

    def predict(self, k: int, strategy: Strategy = DEFAULT_STRATEGY) -> Prediction:
        if strategy.max_k(k) > self.timings.k_max:
            raise ConfigError(f"'{strategy.label(k)}' drafts up to {strategy.max_k(k)} tokens but verify costs were "
                              f"measured up to K={self.timings.k_max}: lower --k-cap or calibrate a longer -K range")
        return predict(self.timings, self.texts, k, self.n_predict, strategy).under(self.objective)

    @property
    def prompt_tokens(self) -> float:
        """The calibration prompts' mean length in tokens (what a request prediction holds for)."""
        return statistics.fmean(len(t.prompt) for t in self.texts) if self.texts else 0.0

    def predictions(self, strategies: Sequence[Strategy] = (DEFAULT_STRATEGY,)) -> list[Prediction]:
        """Every calibrated K under each strategy (a heuristic schedule starts at K up to its cap)."""
        return [self.predict(k, st) for st in strategies for k in self.ks
                if st.k_schedule != "heuristic" or k <= st.k_cap]


def best(calibrations: Sequence[Calibration], strategies: Sequence[Strategy] = (DEFAULT_STRATEGY,)
         ) -> tuple[Calibration, Prediction]:
    """The setting, strategy and K with the highest predicted tokens/s."""
    options = [(cal, p) for cal in calibrations for p in cal.predictions(strategies)]
    if not options:
        raise BenchError("nothing calibrated")
    return max(options, key=lambda o: o[1].tokens_per_s)


@dataclass(frozen=True)
class Recommendation:
    """What `tune` recommends: the fastest speculative setting when it is predicted to beat the target alone (the
    fastest target alone over the calibrated settings) by more than the scatter guard's margin, else the target alone:
    never a slowdown, never a gain inside the machine's own scatter. Where --check measured (`measured` set), its
    verdict instead: the fastest measured setting, speculation only where its gain is decided."""

    fastest_cal: Calibration
    fastest: Prediction  # the fastest speculative setting, whether it beats the target alone or not
    baseline_cal: Calibration  # the setting whose target alone is fastest
    baseline_tokens_per_s: float
    scatter: float | None = None  # the guard's: the largest over the calibrated settings (None: off, --reps 1)
    measured: bool | None = None  # --check's verdict: True speculate at `fastest`, False the target alone

    @property
    def guard(self) -> ScatterGuard:
        return ScatterGuard(self.scatter, DECODE_TIMINGS)

    @property
    def gain_pct(self) -> float:
        """The fastest speculative setting's predicted gain over the fastest target alone."""
        return 100.0 * (self.fastest.tokens_per_s / self.baseline_tokens_per_s - 1.0)

    @property
    def speculative(self) -> bool:
        """False: no draft length is predicted to beat the target alone by more than the guard's scatter (or --check
        measured none decidedly faster); run the target alone."""
        return self.guard.passes(self.gain_pct) if self.measured is None else self.measured

    @property
    def within_scatter(self) -> bool:
        """The fastest K is predicted to gain, but less than the target alone's own timings scatter."""
        return self.measured is None and self.gain_pct > 0 and not self.guard.passes(self.gain_pct)

    @property
    def cal(self) -> Calibration:
        return self.fastest_cal if self.speculative else self.baseline_cal

    @property
    def prediction(self) -> Prediction | None:
        """The recommended speculative prediction; None: the target alone."""
        return self.fastest if self.speculative else None


def recommend(calibrations: Sequence[Calibration], strategies: Sequence[Strategy] = (DEFAULT_STRATEGY,)) -> Recommendation:
    cal, top = best(calibrations, strategies)
    baselines = [(c, c.predict(min(c.ks)).baseline_tokens_per_s) for c in calibrations]
    base_cal, base = max(baselines, key=lambda b: b[1])
    return Recommendation(cal, top, base_cal, base, scatter=guard_scatter(calibrations))


def guard_scatter(calibrations: Sequence[Calibration]) -> float | None:
    """The scatter guard's margin: the largest of the settings' target timings' scatters (None where none was timed
    twice)."""
    known = [c.scatter for c in calibrations if c.scatter is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class CostOutlook:
    """What tune says about --k-schedule cost for one kind of drafting (spec: 'draft' or an n-gram's name).

    n-gram: predicted exactly as the other strategies (the schedule itself run over the calibration's greedy texts
    with the calibration's timings as its costs), at the calibrated cap it is fastest with; `prediction` is set.
    Draft model: not predicted (`prediction` None): the schedule sizes each round from the draft's per-token
    confidence, which the calibration does not record. `length` is what the per-position acceptance a_j alone
    suggests (the same every round: the L in 0..K_max with the highest tokens(L) / time(L)), and `approx` that
    fixed K's prediction (None when L is 0: the target alone)."""

    spec: str
    cal: Calibration
    best_fixed_cal: Calibration
    best_fixed: Prediction  # the same drafting with a fixed K, its fastest setting and K
    baseline_tokens_per_s: float  # the fastest target alone over the calibrated settings
    prediction: Prediction | None = None
    length: int | None = None
    approx: Prediction | None = None
    schedule: Strategy | None = None  # the strategy predicted (n-gram with --k-schedule cost), -K its prediction's k

    @property
    def gain_over_fixed_pct(self) -> float | None:
        if self.prediction is None:
            return None
        return 100.0 * (self.prediction.tokens_per_s / self.best_fixed.tokens_per_s - 1.0)

    def beats(self, rec: Recommendation) -> bool:
        """Predicted faster than the best fixed K, than everything `rec` chose from, and than the target alone by more
        than the scatter guard's margin."""
        p = self.prediction
        return (p is not None and p.tokens_per_s > self.best_fixed.tokens_per_s
                and p.tokens_per_s > max(rec.fastest.tokens_per_s, rec.baseline_tokens_per_s)
                and rec.guard.passes(100.0 * (p.tokens_per_s / rec.baseline_tokens_per_s - 1.0)))


def acceptance_length(cal: Calibration, cap: int) -> int:
    """The draft length the cost schedule's formula picks from the calibration's a_j alone (schedules.CostK: tokens(L)
    / (L t_draft + t_verify(L+1) + overhead), L in 0..cap); a position never reached counts as the last one seen."""
    tm, a, last = cal.timings, [], 0.0
    for x in cal.a[:cap]:
        last = last if x is None else x
        a.append(last)
    best_l, best_rate, tokens, reach = 0, -1.0, 1.0, 1.0
    for n in range(min(cap, len(a), tm.k_max) + 1):
        if n:
            reach *= a[n - 1]
            tokens += reach
        rate = tokens / (n * tm.t_draft + tm.verify(n + 1) + tm.round_overhead)
        if rate > best_rate:
            best_l, best_rate = n, rate
    return best_l


def cost_outlook(calibrations: Sequence[Calibration], strategies: Sequence[Strategy] = (DEFAULT_STRATEGY,)
                 ) -> list[CostOutlook]:
    """--k-schedule cost against the best fixed K, once for each kind of drafting among `strategies`."""
    if not calibrations:
        return []
    base = max(c.predict(min(c.ks)).baseline_tokens_per_s for c in calibrations)
    out = []
    for st in dict.fromkeys(replace(s, k_schedule="fixed").canonical() for s in strategies):
        fixed_cal, fixed = best(calibrations, [st])
        if st.spec_type == "ngram":
            cost = replace(st, k_schedule="cost").canonical()
            cal, p = max(((c, c.predict(k, cost)) for c in calibrations for k in c.ks), key=lambda o: o[1].tokens_per_s)
            out.append(CostOutlook(st.name, cal, fixed_cal, fixed, base, prediction=p, schedule=cost))
        else:
            options = []
            for c in calibrations:
                n = acceptance_length(c, max(c.ks))
                p = c.predict(n, st) if n else None
                options.append((p.tokens_per_s if p else c.predict(min(c.ks)).baseline_tokens_per_s, c, n, p))
            _, cal, n, approx = max(options, key=lambda o: o[0])
            out.append(CostOutlook(st.name, cal, fixed_cal, fixed, base, length=n, approx=approx))
    return out
