"""The speculative loop's bookkeeping against a fake model that records its calls."""

from __future__ import annotations

import numpy as np
import pytest

from gguf_bench.errors import ConfigError
from gguf_bench.sampling import SamplingConfig
from gguf_bench.speculative import generate_regular, generate_speculative

V = 16
EOS = 15


class FakeLM:
    """Next token = (sum of context) mod 13, or +1 where `wrong(position)` holds (a draft that errs).

    Keeps its context like a KV cache: eval appends, rewind truncates. Records every call.
    """

    def __init__(self, wrong=lambda pos: False, eos_after: int | None = None):
        self.n_vocab = V
        self.context: list[int] = []
        self.calls: list[tuple[str, tuple, int]] = []
        self.wrong = wrong
        self.eos_after = eos_after  # emit EOS once the context is this long

    @property
    def n_past(self) -> int:
        return len(self.context)

    def next_token(self, ctx_len: int) -> int:
        if self.eos_after is not None and ctx_len >= self.eos_after:
            return EOS
        tok = sum(self.context[:ctx_len]) % 13
        return (tok + 1) % 13 if self.wrong(ctx_len) else tok

    def eval(self, tokens, n_logits=1):
        self.calls.append(("eval", tuple(tokens), n_logits))
        start = len(self.context)
        self.context += list(tokens)
        rows = np.full((n_logits, V), -10.0, dtype=np.float32)
        for r, end in enumerate(range(start + len(tokens) - n_logits + 1, start + len(tokens) + 1)):
            rows[r, self.next_token(end)] = 10.0
        return rows

    def rewind(self, n_past):
        self.calls.append(("rewind", (n_past,), 0))
        del self.context[n_past:]

    def is_eog(self, token):
        return token == EOS


PROMPT = [3, 1, 4, 1, 5]
GREEDY = SamplingConfig()


def test_identical_draft_accepts_everything_and_prompt_is_evaluated_once():
    target, draft = FakeLM(), FakeLM()
    spec = generate_speculative(target, draft, PROMPT, 20, 4, GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, 20, GREEDY).tokens
    assert spec.acceptance == 1.0
    prompt_evals = [c for c in target.calls if c[0] == "eval" and c[1] == tuple(PROMPT)]
    assert len(prompt_evals) == 1
    # every target eval after the prompt verifies x0 + K drafts and asks logits for all of them
    verify = [c for c in target.calls if c[0] == "eval"][1:]
    assert all(c[2] == len(c[1]) <= 5 for c in verify)
    assert spec.rounds == len(verify)
    assert spec.tokens_per_round == pytest.approx((spec.accepted + spec.rounds) / spec.rounds)


def test_draft_that_errs_every_third_position():
    wrong = lambda pos: pos % 3 == 0  # noqa: E731
    target, draft = FakeLM(), FakeLM(wrong)
    spec = generate_speculative(target, draft, PROMPT, 40, 4, GREEDY)
    regular = generate_regular(FakeLM(), PROMPT, 40, GREEDY)
    assert spec.tokens == regular.tokens
    assert 0 < spec.acceptance < 1
    assert spec.accepted == sum(spec.from_draft)
    assert spec.accepted_at[0] >= spec.accepted_at[1] >= spec.accepted_at[3]
    assert all(a <= r for a, r in zip(spec.accepted_at, spec.reached_at))
    assert spec.rounds - 1 <= spec.reached_at[0] <= spec.rounds  # position 1 is reached every round (bar a last K=0 one)
    # both caches end holding the prompt and every token but the last
    assert target.context == PROMPT + spec.tokens[:-1]
    assert draft.context[: len(PROMPT) + len(spec.tokens) - 2] == (PROMPT + spec.tokens)[: len(PROMPT) + len(spec.tokens) - 2]


@pytest.mark.parametrize("n_predict, k", [(1, 4), (2, 4), (3, 8), (7, 1), (9, 100)])
def test_never_more_tokens_than_asked(n_predict, k):
    target, draft = FakeLM(), FakeLM(lambda pos: pos % 2 == 0)
    spec = generate_speculative(target, draft, PROMPT, n_predict, k, GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, n_predict, GREEDY).tokens
    assert spec.n_tokens == n_predict
    # no round drafts more tokens than are still wanted
    assert all(len(c[1]) <= n_predict for c in target.calls if c[0] == "eval" and c[1] != tuple(PROMPT))


def test_end_of_sequence_inside_a_draft():
    stop = len(PROMPT) + 6  # EOS is the 7th generated token
    target, draft = FakeLM(eos_after=stop), FakeLM(eos_after=stop)
    spec = generate_speculative(target, draft, PROMPT, 50, 4, GREEDY)
    regular = generate_regular(FakeLM(eos_after=stop), PROMPT, 50, GREEDY)
    assert spec.tokens == regular.tokens and spec.n_tokens == 6
    assert spec.stopped_by_eog and regular.stopped_by_eog
    # the draft stopped drafting at its EOS: no draft eval was fed EOS
    assert all(EOS not in c[1] for c in draft.calls if c[0] == "eval")


def test_bad_settings():
    with pytest.raises(ConfigError, match="draft-max"):
        generate_speculative(FakeLM(), FakeLM(), PROMPT, 10, 0, GREEDY)
    with pytest.raises(ConfigError, match="n-predict"):
        generate_regular(FakeLM(), PROMPT, 0, GREEDY)
