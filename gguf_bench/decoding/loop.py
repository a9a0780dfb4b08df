"""Regular and speculative generation, written against a small Protocol.

Speculative round (draft p, target q, draft length K), starting from x0: the last accepted
token, whose KV entry is not written yet in the target.
  1. the drafter proposes up to K tokens d1..dk (a draft model decodes x0, d1, ..., d(k-1) one at a
     time; an n-gram looks them up in the history; see drafters.py), k = 0 making a plain target step
  2. target decodes [x0, d1..dk] -> k+1 logit rows                     (1 target eval)
  3. accept a prefix of d1..dk, then one more token from the target
  4. rewind the target's KV cache to just after the last accepted token; the drafter follows
  5. the K schedule sees (k, accepted) and sets the next round's K (schedules.py); a cost schedule
     also sizes the draft in step 1, token by token, from measured costs and the draft's confidence

Verification comes in two modes. `batched` decodes the K+1 tokens in one llama_decode: what is
benchmarked. `sequential` decodes them one at a time and copies each row, so every logit the
loop reads is computed exactly as regular generation computes it (same one-token kernel, same
cache contents): greedy speculative output then equals greedy regular output bit for bit on any
CPU and thread count, which makes it the test of the loop's bookkeeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from gguf_bench import decode_window
from gguf_bench.decoding.protocols import Drafter, LanguageModel, Schedule
from gguf_bench.decoding.sampling import Sampler, SamplingConfig, sampler_for
from gguf_bench.errors import ConfigError


class Verify(StrEnum):
    BATCHED = "batched"  # [x0, d1..dK] in one decode: the fast path, what is benchmarked
    SEQUENTIAL = "sequential"  # one decode per token, up to the first rejection: bit-identical to regular generation


# on_round(new_tokens, from_draft) is called after each step with the tokens it added
OnRound = Callable[[list[int], list[bool]], None]


@dataclass
class GenerationResult:
    tokens: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)  # token i was a draft token the target accepted
    prompt_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0  # wall time from the first token after the prompt to the last token
    target_decode_s: float = 0.0  # inside the target's llama_decode during decode
    draft_decode_s: float = 0.0  # inside the draft's llama_decode during decode
    sample_s: float = 0.0  # sampling and acceptance (argmax, softmax, draws, rejection tests)
    stopped_by_eog: bool = False
    k: int = 0  # draft length (the first round's under a schedule); 0 for regular generation
    strategy: str = ""  # strategy.Strategy.label of a speculative run, when one was given
    verify: str = ""  # Verify mode of a speculative run
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    reached_at: list[int] = field(default_factory=list)  # rounds that reached draft position i (i < the largest K)
    accepted_at: list[int] = field(default_factory=list)  # rounds that accepted draft position i
    draft_lengths: list[int] = field(default_factory=list)  # draft_lengths[n]: rounds that drafted n tokens
    draft_sources: dict[str, int] = field(default_factory=dict)  # rounds drafted by each source ("model", "ngram")
    verify_log: list[tuple[int, list[int]]] = field(default_factory=list)  # per round: (position of x0, [x0, d1..dk])
    predicted_tokens_per_s: float | None = None  # a cost schedule's prediction for its rounds (schedules.CostK)
    costs_source: str = ""  # where that schedule's step costs came from ('calibration', 'warm-up')

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def tokens_per_s(self) -> float:
        """The decode window's tokens (all but the first, which the prompt's logits gave) over its time."""
        return decode_window.tokens_per_s(self.n_tokens, self.decode_s)

    @property
    def ms_per_token(self) -> float:
        return decode_window.ms_per_token(self.n_tokens, self.decode_s)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_round(self) -> float:
        """Mean tokens a round produced (accepted drafts + the target's own token)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else float("nan")

    @property
    def llama_s(self) -> float:
        """Decode time inside llama_decode, target and draft."""
        return self.target_decode_s + self.draft_decode_s

    @property
    def overhead_s(self) -> float:
        """Decode time outside llama_decode: sampling, acceptance, reading logits, the loop itself."""
        return self.decode_s - self.llama_s

    @property
    def other_s(self) -> float:
        """Overhead that is neither sampling nor acceptance: the loop's own work and logit reads."""
        return self.overhead_s - self.sample_s

    @property
    def overhead_pct(self) -> float:
        """Time outside llama_decode as a percentage of the time inside it."""
        return 100.0 * self.overhead_s / self.llama_s if self.llama_s > 0 else float("nan")


def _check(n_predict: int) -> None:
    if n_predict < 1:
        raise ConfigError(f"--n-predict must be >= 1, got {n_predict}")


def _decode_clock(*models: LanguageModel) -> list[float]:
    return [getattr(m, "llama_decode_s", 0.0) for m in models]


def _finish(res: GenerationResult, t1: float, sampler: Sampler, clock0: list[float], *models: LanguageModel) -> None:
    res.decode_s = time.perf_counter() - t1
    res.sample_s = sampler.seconds
    spent = [b - a for a, b in zip(clock0, _decode_clock(*models))]
    res.target_decode_s = spent[0]
    res.draft_decode_s = sum(spent[1:])  # every model the drafter decodes with (none for an n-gram)


def generate_regular(model: LanguageModel, prompt: Sequence[int], n_predict: int, cfg: SamplingConfig,
                     on_round: OnRound | None = None) -> GenerationResult:
    """Plain autoregressive generation: the baseline (target alone) or the draft alone."""
    _check(n_predict)
    res = GenerationResult(prompt_tokens=len(prompt))
    sampler = sampler_for(cfg)
    model.rewind(0)
    t0 = time.perf_counter()
    logits = model.eval(prompt, 1)
    t1 = time.perf_counter()
    res.prompt_s = t1 - t0
    clock0 = _decode_clock(model)
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
        logits = model.eval([tok], 1)
    _finish(res, t1, sampler, clock0, model)
    return res


class OneByOne:
    """Verify.SEQUENTIAL's rows: the target reads a round's tokens one decode each (the very call regular generation
    makes), each when acceptance first asks for its row, so a round rejected at draft i decodes x0..d_i and no further,
    as the target alone would have. Each row is copied (the next decode overwrites llama.cpp's buffer); `seconds` is
    the time its decodes took, spent inside the sampler's acceptance but the target's."""

    def __init__(self, target: LanguageModel, tokens: list[int]):
        self.target, self.tokens = target, tokens
        self.rows: list[np.ndarray] = []
        self.seconds = 0.0

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> np.ndarray:
        while len(self.rows) <= i:
            t = time.perf_counter()
            self.rows.append(np.array(self.target.eval([self.tokens[len(self.rows)]], 1)[0]))
            self.seconds += time.perf_counter() - t
        return self.rows[i]


def verify_logits(target: LanguageModel, tokens: list[int], verify: Verify) -> np.ndarray | OneByOne:
    """The target's logit rows [len(tokens), V] for `tokens` appended at its current position: one batched decode (a
    view into llama.cpp's buffer), or rows decoded one token at a time as they are read (OneByOne)."""
    if verify == Verify.BATCHED:
        return target.eval(tokens, len(tokens))
    return OneByOne(target, tokens)


def generate_speculative(target: LanguageModel, drafter: Drafter, prompt: Sequence[int], n_predict: int,
                         schedule: Schedule, cfg: SamplingConfig, on_round: OnRound | None = None,
                         verify: Verify = Verify.BATCHED) -> GenerationResult:
    """Speculative generation: same output distribution as `generate_regular(target, ...)`.

    drafter: who proposes each round's tokens (drafters.py); schedule: how many, round by round (schedules.py).
    """
    _check(n_predict)
    res = GenerationResult(prompt_tokens=len(prompt), k=schedule.k, verify=str(verify), reached_at=[0] * schedule.max_k,
                           accepted_at=[0] * schedule.max_k, draft_lengths=[0] * (schedule.max_k + 1))
    sampler = sampler_for(cfg)
    target.rewind(0)
    t0 = time.perf_counter()
    x0 = sampler.token(target.eval(prompt, 1)[0])
    drafter.start(prompt)
    t1 = time.perf_counter()
    res.prompt_s = t1 - t0
    clock0 = _decode_clock(target, *drafter.models)
    history = list(prompt)  # prompt + generated tokens; ends with x0, whose KV entry is not written yet
    done = _append(res, history, [x0], [False], target, n_predict, on_round)
    while not done:
        base = len(history) - 1  # position of x0
        # A round yields at most k_round + 1 tokens: draft no more than are still wanted.
        k_round = min(schedule.k, n_predict - len(res.tokens) - 1)
        drafted, p_rows, source = drafter.propose(history, k_round, sampler, schedule)  # a cost schedule sizes it here
        batch = [x0, *drafted]
        res.verify_log.append((base, batch))
        rows = verify_logits(target, batch, verify)  # [k+1, V]
        n_acc, nxt = sampler.accept(rows, p_rows, drafted)
        if isinstance(rows, OneByOne):
            sampler.seconds -= rows.seconds  # its decodes ran inside acceptance: the target's time, not sampling's
        _count_round(res, len(drafted), n_acc, source)
        schedule.update(len(drafted), n_acc)
        target.rewind(base + 1 + n_acc)  # keep x0 and the accepted drafts
        drafter.sync(base + 1 + n_acc)
        done = _append(res, history, drafted[:n_acc] + [nxt], [True] * n_acc + [False], target, n_predict, on_round)
        x0 = nxt
    _finish(res, t1, sampler, clock0, target, *drafter.models)
    res.predicted_tokens_per_s = schedule.predicted_tokens_per_s
    return res


def _count_round(res: GenerationResult, n_drafted: int, n_acc: int, source: str = "") -> None:
    """Position i (0-based) is reached when the i drafts before it were accepted."""
    res.rounds += 1
    res.drafted += n_drafted
    res.accepted += n_acc
    if res.draft_lengths:
        res.draft_lengths[n_drafted] += 1
    if source:
        res.draft_sources[source] = res.draft_sources.get(source, 0) + 1
    for i in range(min(n_acc + 1, n_drafted)):
        res.reached_at[i] += 1
    for i in range(n_acc):
        res.accepted_at[i] += 1


def _append(res: GenerationResult, history: list[int], new: list[int], flags: list[bool], target: LanguageModel,
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
    history += added
    if on_round and added:
        on_round(added, added_flags)
    return done
