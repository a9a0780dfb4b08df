"""What the loop talks to: a language model, a drafter and a draft-length schedule.

The loop (loop.py) is written against these three Protocols only, so a fake model runs it in unit tests,
llama.cpp runs it in integration tests, and a new drafter or schedule plugs in without touching the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    from gguf_bench.decoding.sampling import Sampler


class LanguageModel(Protocol):
    """What the loop drives: engines.llama_cpp.Model, or a fake in unit tests."""

    n_vocab: int
    n_past: int
    llama_decode_s: float  # seconds spent inside llama_decode so far (fakes may leave it out)

    def eval(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Append tokens to the KV cache; return logits [n_logits, V] of the last n_logits."""

    def rewind(self, n_past: int) -> None:
        """Drop KV entries at positions >= n_past (never moves forward)."""

    def is_eog(self, token: int) -> bool:
        """Whether token ends generation."""


class Draft(NamedTuple):
    tokens: list[int]
    p_rows: list | None  # the draft's distributions p_1..p_k when sampled; None: point masses onehot(d_i)
    source: str  # "model", "ngram", or "" for no draft


NO_DRAFT = Draft([], None, "")


class Schedule(Protocol):
    """The draft length of the next round, updated after each round from what it drafted and accepted.
    A schedule with `signals` also sizes a round as it is drafted: the drafter reports a signal per
    position (the draft's confidence, an n-gram's match length) and asks `length` (schedules.CostK)."""

    k: int  # the next round's draft length
    max_k: int  # the longest draft it can ever ask for (per-position counts and context checks)
    signals: bool  # whether drafters should report per-position signals and ask `length`
    predicted_tokens_per_s: float | None  # what the schedule predicted for the rounds so far (None: it predicts nothing)

    def length(self, source: str, signals: Sequence[float], decoded: int, k: int, behind: int = 0) -> int:
        """How many draft tokens (at most k) the round should end with, given the signals so far."""

    def update(self, n_drafted: int, n_accepted: int) -> None: ...


class Drafter(Protocol):
    """Proposes a round's draft: `start(prompt)` once, `propose(history, k, sampler, schedule)` each round (up
    to k tokens continuing `history`, which ends with x0; a schedule with signals sizes it as it goes),
    `sync(n_valid)` after each round (positions >= n_valid of the history changed)."""

    models: list[LanguageModel]  # the models it decodes with (their llama_decode time is the draft's)

    def start(self, prompt: Sequence[int]) -> None: ...

    def propose(self, history: list[int], k: int, sampler: Sampler, schedule: Schedule | None = None) -> Draft: ...

    def sync(self, n_valid: int) -> None: ...
