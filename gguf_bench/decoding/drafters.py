"""Drafting strategies: who proposes a round's draft tokens, and how long a round's draft may be.

A drafter has three calls: `start(prompt)` once, `propose(history, k, sampler)` each round (up to k
tokens continuing `history`, which ends with x0), and `sync(n_valid)` after each round (positions
>= n_valid of the history changed). Drafters:
  - ModelDrafter: a draft model, with llama.cpp's p-min and n-min stops;
  - NgramDrafter: prompt lookup, no model: the tokens that followed the most recent earlier
    occurrence of the history's last n tokens, n from n_max down to n_min;
  - ChainDrafter: the first drafter that proposes something (llama.cpp's order: n-gram, then model).

Exactness at temperature > 0. Rejection sampling accepts d_i with probability min(1, q_i(d_i) / p_i(d_i))
and is exact when d_i ~ p_i given everything before it. Two consequences for the rules here:
  - a stop decided before drawing d_i, from the draft's distribution alone (p-min looks at the
    probability of the draft's top token), leaves d_1..d_(i-1) samples of p_1..p_(i-1): exact;
    a stop on the drawn token's own probability would not be (the kept tokens would be samples of p
    restricted to its likely tokens, not of p);
  - a draft that is a function of the history (an n-gram's, or a model's top-1 tokens) is a point
    mass: p_i = onehot(d_i), and rejection sampling reduces to `accept_point_mass`.
n-min throws away drafts by their length, which depends on the drawn tokens, so a model that samples
its draft would be biased by it: with n-min >= 2 at T > 0 the model drafts its top-1 tokens (as
llama.cpp always does) and the round is verified as point masses.

Draft lengths per round are schedules.py's; a strategy as the user sets it is strategy.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gguf_bench.decoding.protocols import NO_DRAFT, Draft, Drafter, LanguageModel, Schedule

if TYPE_CHECKING:
    from gguf_bench.decoding.sampling import Sampler


MATCH_CAP = 64  # n-gram match lengths are measured up to this many tokens


# --- drafters --------------------------------------------------------------------------------

class ModelDrafter:
    """Drafts with a small model. Its KV cache follows the accepted history lazily: it holds a
    prefix of the history, and what it has not seen yet is fed before the next draft.

    p_min: stop before a position whose top token has probability < p_min under llama.cpp's draft
    sampler (softmax over the 10 best logits); 0 = off. n_min: a finished draft shorter than n_min is
    dropped (the round is a plain target step); 0 or 1 = off.
    """

    def __init__(self, model: LanguageModel, p_min: float = 0.0, n_min: int = 0):
        self.model, self.p_min, self.n_min = model, p_min, n_min
        self.models = [model]

    def start(self, prompt: Sequence[int]) -> None:
        self.model.rewind(0)
        self.model.eval(prompt, 1)

    def propose(self, history: list[int], k: int, sampler: Sampler, schedule: Schedule | None = None) -> Draft:
        """Up to k tokens continuing `history`, stopping after an end-of-generation token. A schedule with
        signals is asked before the first decode and after each one, from the confidences seen so far,
        whether to keep that position and go on (schedules.CostK)."""
        point_mass = self.n_min > 1  # see the module's note on n-min at T > 0 (greedy drafts are point masses anyway)
        drafted: list[int] = []
        p_rows: list = []
        sized = schedule is not None and schedule.signals
        confidences: list[float] = []
        feed = history[self.model.n_past:]  # x0, and what earlier rounds did not feed (accepted drafts, n-gram rounds)
        behind = len(feed) - 1  # the first decode's catch-up: a batch (a cost schedule's prediction counts it)
        if sized and schedule.length("model", confidences, 0, k, behind) == 0:
            k = 0  # not worth a draft decode this round
        while len(drafted) < k:
            logits = self.model.eval(feed, 1)[0]
            if self.p_min > 0 or sized:
                confidence = sampler.confidence(logits)
                if confidence < self.p_min:
                    break  # decided from the distribution before drawing: exact (module note)
                if sized:  # keep this position, and go on? decided before drawing it: exact, as p-min
                    confidences.append(confidence)
                    want = schedule.length("model", confidences, len(confidences), k, behind)
                    if want <= len(drafted):
                        break
                    if want == len(drafted) + 1:
                        k = want  # keep this one, then stop
            if point_mass:
                tok = sampler.top1(logits)
            else:
                tok, p = sampler.draft_token(logits)  # p None when the sampler is greedy
                p_rows.append(p)
            drafted.append(tok)
            if self.model.is_eog(tok):
                break
            feed = [tok]
        if not drafted or len(drafted) < self.n_min:
            return NO_DRAFT
        return Draft(drafted, None if point_mass else p_rows, "model")

    def sync(self, n_valid: int) -> None:
        """Positions >= n_valid of the history changed: forget them (a no-op for those not decoded)."""
        self.model.rewind(n_valid)


class NgramDrafter:
    """Prompt lookup decoding: match the history's last n tokens (n = n_max down to n_min) against an
    earlier place in the prompt or the output, most recent first; propose up to k tokens that followed
    it. No match: no draft. Its proposals are functions of the history: point masses at any temperature."""

    models: list[LanguageModel] = []

    def __init__(self, n_min: int = 1, n_max: int = 4):
        self.n_min, self.n_max = n_min, n_max

    def start(self, prompt: Sequence[int]) -> None:
        pass

    def sync(self, n_valid: int) -> None:
        pass

    def propose(self, history: list[int], k: int, sampler: Sampler | None = None, schedule: Schedule | None = None) -> Draft:
        """The lookup's draft; with a schedule that takes signals, the best-scored continuation instead, cut
        where the schedule says (`scored`)."""
        if schedule is not None and schedule.signals:
            tokens, lengths = self.scored(history, k)
            tokens = tokens[:schedule.length("ngram", lengths, 0, len(tokens))] if tokens else tokens
        else:
            tokens = self.lookup(history, k)
        return Draft(tokens, None, "ngram") if tokens else NO_DRAFT

    def scored(self, history: Sequence[int], k: int) -> tuple[list[int], list[int]]:
        """The continuation after the earlier place whose match with the history's end is longest (at least
        n_min tokens; ties: the most recent), up to k tokens and never past the end of the history, and the
        match length behind each of its positions (the match plus the draft tokens before it, should those be
        accepted): what the cost schedule scores it by, so a one-token match drafts little and a long copy far.
        n_max does not cap the match here: a longer match is better evidence of a copy."""
        if k < 1 or len(history) < 2:
            return [], []
        h = np.asarray(history)
        ends = np.flatnonzero(h[:-1] == h[-1])  # earlier places where a match can end
        if not ends.size:
            return [], []
        span = min(MATCH_CAP, len(h) - 1)
        back = ends[:, None] - np.arange(span)  # [places, span]: positions compared with h[-1], h[-2], ...
        same = (back >= 0) & (h[np.maximum(back, 0)] == h[len(h) - 1 - np.arange(span)])
        lengths = np.cumprod(same, axis=1).sum(axis=1)  # each place's match length (capped)
        best = int(np.flatnonzero(lengths == lengths.max())[-1])
        m = int(lengths[best])
        if m < self.n_min:
            return [], []
        start = int(ends[best]) + 1
        tokens = [int(t) for t in h[start:start + k]]
        return tokens, [min(m + i, MATCH_CAP) for i in range(len(tokens))]

    def lookup(self, history: Sequence[int], k: int) -> list[int]:
        if k < 1:
            return []
        h = np.asarray(history)
        for n in range(min(self.n_max, len(h) - 1), self.n_min - 1, -1):
            # windows h[j:j+n] for j = 0 .. len-n-1: every place strictly before the suffix itself
            hits = np.flatnonzero((sliding_window_view(h[:-1], n) == h[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n  # the most recent match; at least one token follows it
                return [int(t) for t in h[start:start + k]]
        return []


class ChainDrafter:
    """The first of several drafters that proposes a non-empty draft (llama.cpp: n-gram types first)."""

    def __init__(self, *drafters: Drafter):
        self.drafters = drafters
        self.models = [m for d in drafters for m in d.models]

    def start(self, prompt: Sequence[int]) -> None:
        for d in self.drafters:
            d.start(prompt)

    def propose(self, history: list[int], k: int, sampler: Sampler, schedule: Schedule | None = None) -> Draft:
        for d in self.drafters:
            draft = d.propose(history, k, sampler, schedule)
            if draft.tokens:
                return draft
        return NO_DRAFT

    def sync(self, n_valid: int) -> None:
        for d in self.drafters:
            d.sync(n_valid)
