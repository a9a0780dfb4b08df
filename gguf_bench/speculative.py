"""Regular and speculative generation, written against a small Protocol.

Speculative round (draft p, target q, draft length K), starting from x0: the last accepted
token, whose KV entry is not written yet in either model.
  1. draft decodes x0, d1, ..., d(K-1) one at a time, drawing d1..dK   (K draft evals)
  2. target decodes [x0, d1..dK] in one batch -> K+1 logit rows        (1 target eval)
  3. accept a prefix of d1..dK, then one more token from the target
  4. rewind both KV caches to just after the last accepted token
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gguf_bench.errors import ConfigError
from gguf_bench.sampling import SamplingConfig, accept_greedy, accept_sampled, draw, probabilities


class LanguageModel(Protocol):
    """What the loop drives: backend.Model, or a fake in unit tests."""

    n_vocab: int
    n_past: int

    def eval(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Append tokens to the KV cache; return logits [n_logits, V] of the last n_logits."""

    def rewind(self, n_past: int) -> None:
        """Drop KV entries at positions >= n_past."""

    def is_eog(self, token: int) -> bool:
        """Whether token ends generation."""


# on_round(new_tokens, from_draft) is called after each step with the tokens it added
OnRound = Callable[[list[int], list[bool]], None]


@dataclass
class GenerationResult:
    tokens: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)  # token i was a draft token the target accepted
    prompt_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0  # first token after the prompt to the last token
    target_s: float = 0.0  # inside target eval during decode
    draft_s: float = 0.0  # inside draft eval during decode
    stopped_by_eog: bool = False
    k: int = 0  # draft length; 0 for regular generation
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    reached_at: list[int] = field(default_factory=list)  # rounds that reached draft position i
    accepted_at: list[int] = field(default_factory=list)  # rounds that accepted draft position i

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.decode_s if self.decode_s > 0 else float("nan")

    @property
    def ms_per_token(self) -> float:
        return 1000 * self.decode_s / self.n_tokens if self.n_tokens else float("nan")

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_round(self) -> float:
        """Mean tokens a round produced (accepted drafts + the target's own token)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else float("nan")

    @property
    def python_s(self) -> float:
        """Decode time spent outside the models' eval calls."""
        return self.decode_s - self.target_s - self.draft_s


def _check(n_predict: int, k: int | None = None) -> None:
    if n_predict < 1:
        raise ConfigError(f"--n-predict must be >= 1, got {n_predict}")
    if k is not None and k < 1:
        raise ConfigError(f"--draft-max must be >= 1, got {k}")


class _Sampler:
    """Turns a logits row into a token under one SamplingConfig and one random stream."""

    def __init__(self, cfg: SamplingConfig):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)

    def token(self, logits: np.ndarray) -> int:
        if self.cfg.greedy:
            return int(np.argmax(logits))
        return draw(probabilities(logits, self.cfg), self.rng)


def generate_regular(model: LanguageModel, prompt: Sequence[int], n_predict: int, cfg: SamplingConfig,
                     on_round: OnRound | None = None) -> GenerationResult:
    """Plain autoregressive generation: the baseline (target alone) or the draft alone."""
    _check(n_predict)
    res = GenerationResult(prompt_tokens=len(prompt))
    sampler = _Sampler(cfg)
    model.rewind(0)
    t0 = time.perf_counter()
    logits = model.eval(prompt, 1)
    t1 = time.perf_counter()
    res.prompt_s = t1 - t0
    while True:
        tok = sampler.token(logits[0])
        if model.is_eog(tok):
            res.stopped_by_eog = True
            break
        res.tokens.append(tok)
        res.from_draft.append(False)
        if on_round:
            on_round([tok], [False])
        if len(res.tokens) >= n_predict:
            break
        t = time.perf_counter()
        logits = model.eval([tok], 1)
        res.target_s += time.perf_counter() - t
    res.decode_s = time.perf_counter() - t1
    return res


def generate_speculative(target: LanguageModel, draft: LanguageModel, prompt: Sequence[int], n_predict: int,
                         k: int, cfg: SamplingConfig, on_round: OnRound | None = None) -> GenerationResult:
    """Speculative generation: same output distribution as `generate_regular(target, ...)`."""
    _check(n_predict, k)
    res = GenerationResult(prompt_tokens=len(prompt), k=k, reached_at=[0] * k, accepted_at=[0] * k)
    sampler = _Sampler(cfg)
    target.rewind(0)
    draft.rewind(0)
    t0 = time.perf_counter()
    x0 = sampler.token(target.eval(prompt, 1)[0])
    draft.eval(prompt, 1)
    t1 = time.perf_counter()
    res.prompt_s = t1 - t0
    pending: list[int] = []  # tokens the draft has not seen yet, besides x0
    done = _append(res, [x0], [False], target, n_predict, on_round)
    while not done:
        base = target.n_past  # position of x0
        # A round yields at most k_round + 1 tokens: draft no more than are still wanted.
        k_round = min(k, n_predict - len(res.tokens) - 1)
        drafted, p_rows = _draft(draft, pending + [x0], k_round, sampler, res)
        t = time.perf_counter()
        q_logits = target.eval([x0, *drafted], len(drafted) + 1)  # [k+1, V] view
        if sampler.cfg.greedy:
            n_acc, nxt = accept_greedy(np.argmax(q_logits, axis=1), drafted)
        else:
            n_acc, nxt = accept_sampled(probabilities(q_logits, sampler.cfg), p_rows, drafted, sampler.rng)
        res.target_s += time.perf_counter() - t
        _count_round(res, len(drafted), n_acc)
        # KV: keep x0 and the accepted drafts. The draft never decoded its last token d_k:
        # after a full acceptance it is fed at the start of the next round.
        target.rewind(base + 1 + n_acc)
        if n_acc < len(drafted) or not drafted:
            draft.rewind(base + 1 + n_acc)
            pending = []
        else:
            pending = [drafted[-1]]
        new = drafted[:n_acc] + [nxt]
        done = _append(res, new, [True] * n_acc + [False], target, n_predict, on_round)
        x0 = nxt
    res.decode_s = time.perf_counter() - t1
    return res


def _draft(draft: LanguageModel, feed: list[int], k: int, sampler: _Sampler,
           res: GenerationResult) -> tuple[list[int], list[np.ndarray]]:
    """Draw up to k tokens from the draft, stopping after an end-of-generation token.

    Returns the tokens and (when sampling) the draft's probability rows p_1..p_k.
    """
    drafted: list[int] = []
    p_rows: list[np.ndarray] = []
    t = time.perf_counter()
    for _ in range(k):
        logits = draft.eval(feed, 1)[0]
        if sampler.cfg.greedy:
            tok = int(np.argmax(logits))
        else:
            p = probabilities(logits, sampler.cfg)
            p_rows.append(p)
            tok = draw(p, sampler.rng)
        drafted.append(tok)
        if draft.is_eog(tok):
            break
        feed = [tok]
    res.draft_s += time.perf_counter() - t
    return drafted, p_rows


def _count_round(res: GenerationResult, n_drafted: int, n_acc: int) -> None:
    res.rounds += 1
    res.drafted += n_drafted
    res.accepted += n_acc
    for i in range(min(n_acc + 1, n_drafted)):
        res.reached_at[i] += 1
    for i in range(n_acc):
        res.accepted_at[i] += 1


def _append(res: GenerationResult, new: list[int], flags: list[bool], target: LanguageModel,
            n_predict: int, on_round: OnRound | None) -> bool:
    """Add a round's tokens, stopping at end of generation or n_predict. True when done."""
    added, added_flags = [], []
    done = False
    for tok, flag in zip(new, flags):
        if target.is_eog(tok):
            res.stopped_by_eog = done = True
            break
        added.append(tok)
        added_flags.append(flag)
        if len(res.tokens) + len(added) >= n_predict:
            done = True
            break
    res.tokens += added
    res.from_draft += added_flags
    if on_round and added:
        on_round(added, added_flags)
    return done
