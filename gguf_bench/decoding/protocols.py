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


class Drafter(Protocol):
    """Proposes a round's draft: `start(prompt)` once, `propose(history, k, sampler)` each round (up to k
    tokens continuing `history`, which ends with x0), `sync(n_valid)` after each round (positions >= n_valid
    of the history changed)."""

    models: list[LanguageModel]  # the models it decodes with (their llama_decode time is the draft's)

    def start(self, prompt: Sequence[int]) -> None: ...

    def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft: ...

    def sync(self, n_valid: int) -> None: ...


class Schedule(Protocol):
    """The draft length of the next round, updated after each round from what it drafted and accepted."""

    k: int  # the next round's draft length
    max_k: int  # the longest draft it can ever ask for (per-position counts and context checks)

    def update(self, n_drafted: int, n_accepted: int) -> None: ...
