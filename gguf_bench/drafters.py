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

Draft length: `FixedK` (every round drafts up to K) or `HeuristicK` (Hugging Face's "heuristic"
schedule: K += 2 after a round whose every draft token was accepted, K -= 1 otherwise, within
[1, k_cap]; reset at the start of every generation, which HF calls "heuristic_transient").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gguf_bench.errors import ConfigError
from gguf_bench.sampling import draw

if TYPE_CHECKING:
    from gguf_bench.speculative import LanguageModel, Sampler

SPEC_TYPES = ("draft", "ngram", "ngram,draft")
SPEC_ALIASES = {"ngram+draft": "ngram,draft"}  # the chain's name inside comma-separated sweep lists
K_SCHEDULES = ("fixed", "heuristic")


class Draft(NamedTuple):
    tokens: list[int]
    p_rows: list | None  # the draft's distributions p_1..p_k when sampled; None: point masses onehot(d_i)
    source: str  # "model", "ngram", or "" for no draft


NO_DRAFT = Draft([], None, "")


class Drafter(Protocol):
    models: list[LanguageModel]  # the models it decodes with (their llama_decode time is the draft's)

    def start(self, prompt: Sequence[int]) -> None: ...

    def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft: ...

    def sync(self, n_valid: int) -> None: ...


# --- acceptance of point-mass drafts ---------------------------------------------------------

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

    def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft:
        """Up to k tokens continuing `history`, stopping after an end-of-generation token."""
        top1 = sampler.cfg.greedy or self.n_min > 1  # see the module's note on n-min at T > 0
        drafted: list[int] = []
        p_rows: list = []
        feed = history[self.model.n_past:]  # x0, and what earlier rounds did not feed (accepted drafts, n-gram rounds)
        for _ in range(k):
            logits = self.model.eval(feed, 1)[0]
            if self.p_min > 0 and sampler.confidence(logits) < self.p_min:
                break  # decided from the distribution before drawing: exact (module note)
            if top1:
                tok = sampler.top1(logits)
            else:
                tok, p = sampler.draft_token(logits)
                p_rows.append(p)
            drafted.append(tok)
            if self.model.is_eog(tok):
                break
            feed = [tok]
        if not drafted or len(drafted) < self.n_min:
            return NO_DRAFT
        return Draft(drafted, None if top1 else p_rows, "model")

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

    def propose(self, history: list[int], k: int, sampler: Sampler | None = None) -> Draft:
        tokens = self.lookup(history, k)
        return Draft(tokens, None, "ngram") if tokens else NO_DRAFT

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

    def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft:
        for d in self.drafters:
            draft = d.propose(history, k, sampler)
            if draft.tokens:
                return draft
        return NO_DRAFT

    def sync(self, n_valid: int) -> None:
        for d in self.drafters:
            d.sync(n_valid)


# --- draft length per round ------------------------------------------------------------------

class FixedK:
    """Every round drafts up to k tokens."""

    def __init__(self, k: int):
        self.k = self.max_k = k

    def update(self, n_drafted: int, n_accepted: int) -> None:
        pass


class HeuristicK:
    """Hugging Face's heuristic: +2 after a round that accepted its whole (non-empty) draft, -1 after one
    that did not; between 1 and cap. Rounds without a draft leave K alone."""

    def __init__(self, k: int, cap: int):
        self.k, self.max_k = min(k, cap), cap

    def update(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted:
            self.k = min(self.k + 2, self.max_k) if n_accepted == n_drafted else max(1, self.k - 1)


# --- a strategy as the user sets it ----------------------------------------------------------

def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Strategy:
    """--spec-type, --ngram-min/--ngram-max, --draft-p-min, --draft-min, --k-schedule, --k-cap."""

    spec_type: str = "draft"
    ngram_min: int = 1
    ngram_max: int = 4
    p_min: float = 0.0
    n_min: int = 0
    k_schedule: str = "fixed"
    k_cap: int = 16

    def __post_init__(self) -> None:
        spec = SPEC_ALIASES.get(self.spec_type, self.spec_type)
        if spec not in SPEC_TYPES:
            raise ConfigError(f"unknown --spec-type '{self.spec_type}'; choose from {', '.join(SPEC_TYPES)} "
                              "(in sweep lists write the chain as ngram+draft)")
        object.__setattr__(self, "spec_type", spec)
        if self.ngram_min < 1:
            raise ConfigError(f"--ngram-min must be >= 1, got {self.ngram_min}")
        if self.ngram_min > self.ngram_max:
            raise ConfigError(f"--ngram-min ({self.ngram_min}) must not exceed --ngram-max ({self.ngram_max})")
        if not 0.0 <= self.p_min < 1.0:
            raise ConfigError(f"--draft-p-min must be in [0, 1) (0 = off), got {_fmt(self.p_min)}")
        if self.n_min < 0:
            raise ConfigError(f"--draft-min must be >= 0, got {self.n_min}")
        if self.k_schedule not in K_SCHEDULES:
            raise ConfigError(f"unknown --k-schedule '{self.k_schedule}'; choose from {', '.join(K_SCHEDULES)}")
        if self.k_cap < 1:
            raise ConfigError(f"--k-cap must be >= 1, got {self.k_cap}")

    @property
    def uses_model(self) -> bool:
        return "draft" in self.spec_type.split(",")

    @property
    def uses_ngram(self) -> bool:
        return "ngram" in self.spec_type.split(",")

    def canonical(self) -> Strategy:
        """The same strategy with the settings it does not use at their defaults (so sweeps can dedupe)."""
        base = Strategy()
        return Strategy(self.spec_type,
                        self.ngram_min if self.uses_ngram else base.ngram_min,
                        self.ngram_max if self.uses_ngram else base.ngram_max,
                        self.p_min if self.uses_model else 0.0,
                        self.n_min if self.uses_model else 0,
                        self.k_schedule,
                        self.k_cap if self.k_schedule == "heuristic" else base.k_cap)

    def check(self, k: int, has_draft_model: bool) -> None:
        """Errors that need the run's K and pair."""
        if self.uses_model and not has_draft_model:
            raise ConfigError(f"--spec-type {self.spec_type} needs a draft model (--draft FILE, or a pair); "
                              "--spec-type ngram drafts without one")
        if self.k_schedule == "heuristic" and k > self.k_cap:
            raise ConfigError(f"the heuristic schedule starts at K={k}, above --k-cap {self.k_cap}; lower -K or raise --k-cap")

    def max_k(self, k: int) -> int:
        """The longest draft a round may make (for context checks and per-position counts)."""
        return self.k_cap if self.k_schedule == "heuristic" else k

    def drafter(self, model: LanguageModel | None) -> Drafter:
        ngram = NgramDrafter(self.ngram_min, self.ngram_max)
        if self.spec_type == "ngram":
            return ngram
        if model is None:
            self.check(1, False)
        drafter = ModelDrafter(model, self.p_min, self.n_min)
        return ChainDrafter(ngram, drafter) if self.uses_ngram else drafter

    def schedule(self, k: int) -> FixedK | HeuristicK:
        return HeuristicK(k, self.k_cap) if self.k_schedule == "heuristic" else FixedK(k)

    @property
    def name(self) -> str:
        """The strategy without its K: 'draft', 'ngram(1-4)', 'ngram(1-4)+draft', 'draft p-min 0.8', 'draft heuristic'."""
        parts = []
        if self.uses_ngram:
            parts.append(f"ngram({self.ngram_min}-{self.ngram_max})")
        if self.uses_model:
            parts.append("draft")
        words = ["+".join(parts)]
        if self.uses_model and self.p_min > 0:
            words.append(f"p-min {_fmt(self.p_min)}")
        if self.uses_model and self.n_min > 1:
            words.append(f"n-min {self.n_min}")
        if self.k_schedule == "heuristic":
            words.append("heuristic")
        return " ".join(words)

    def label(self, k: int) -> str:
        """A report row's name: 'draft K=8', 'ngram(1-4) K=16', 'draft p-min 0.8 K=16', 'draft heuristic K=4..16'."""
        if self.k_schedule == "heuristic":
            return f"{self.name} K={min(k, self.k_cap)}..{self.k_cap}"
        return f"{self.name} K={k}"

    @classmethod
    def from_params(cls, params: dict | None) -> Strategy:
        """The strategy a record's config stores (None: the default, as records made before strategies)."""
        return cls(**{f: v for f, v in (params or {}).items() if f in cls.__dataclass_fields__})

    def params(self) -> dict:
        """What a record stores about the strategy."""
        return asdict(self.canonical())


DEFAULT_STRATEGY = Strategy()


def parse_spec_types(text: str) -> list[str]:
    """A run's --spec-type ('draft', 'ngram', 'ngram,draft') or a sweep's list ('draft,ngram,ngram+draft')."""
    text = str(text).replace(" ", "")
    if text in SPEC_TYPES:
        return [text]
    return [Strategy(spec_type=s).spec_type for s in dict.fromkeys(text.split(","))]
