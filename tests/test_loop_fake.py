"""The speculative loop's bookkeeping against a fake model that records its calls."""

from __future__ import annotations

import numpy as np
import pytest

from gguf_bench.decoding.drafters import ModelDrafter
from gguf_bench.decoding.loop import Verify, generate_regular, generate_speculative
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.schedules import FixedK
from gguf_bench.errors import ConfigError

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
    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, 20, FixedK(4), GREEDY)
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
    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, 40, FixedK(4), GREEDY)
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
    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, n_predict, FixedK(k), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, n_predict, GREEDY).tokens
    assert spec.n_tokens == n_predict
    # no round drafts more tokens than are still wanted
    assert all(len(c[1]) <= n_predict for c in target.calls if c[0] == "eval" and c[1] != tuple(PROMPT))


def test_end_of_sequence_inside_a_draft():
    stop = len(PROMPT) + 6  # EOS is the 7th generated token
    target, draft = FakeLM(eos_after=stop), FakeLM(eos_after=stop)
    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, 50, FixedK(4), GREEDY)
    regular = generate_regular(FakeLM(eos_after=stop), PROMPT, 50, GREEDY)
    assert spec.tokens == regular.tokens and spec.n_tokens == 6
    assert spec.stopped_by_eog and regular.stopped_by_eog
    # the draft stopped drafting at its EOS: no draft eval was fed EOS
    assert all(EOS not in c[1] for c in draft.calls if c[0] == "eval")


def test_bad_settings():
    with pytest.raises(ConfigError, match="draft-max"):
        generate_speculative(FakeLM(), ModelDrafter(FakeLM()), PROMPT, 10, FixedK(0), GREEDY)
    with pytest.raises(ConfigError, match="n-predict"):
        generate_regular(FakeLM(), PROMPT, 0, GREEDY)


def test_per_position_counts_by_hand():
    """Rounds of K=4 drafting (drafted, accepted): position i is reached when drafts 1..i-1 were accepted."""
    from gguf_bench.decoding.loop import GenerationResult, _count_round

    res = GenerationResult(k=4, reached_at=[0] * 4, accepted_at=[0] * 4)
    for n_drafted, n_acc in [(4, 0), (4, 2), (4, 4), (2, 1), (0, 0), (3, 3)]:
        _count_round(res, n_drafted, n_acc)
    assert res.reached_at == [5, 4, 3, 1]
    assert res.accepted_at == [4, 3, 2, 1]
    assert (res.rounds, res.drafted, res.accepted) == (6, 17, 10)


def test_draft_cache_holds_only_accepted_history():
    """After every round the draft's cache is a prefix of prompt + output: no rejected token stays."""
    wrong = lambda pos: pos % 4 == 1  # noqa: E731
    target, draft = FakeLM(), FakeLM(wrong)
    seen = []

    def check(tokens, flags):
        seen.extend(tokens)
        history = PROMPT + seen
        assert draft.context == history[: len(draft.context)]

    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, 60, FixedK(5), GREEDY, on_round=check)
    assert 0 < spec.acceptance < 1 and spec.n_tokens == 60


def test_timing_split_adds_up():
    target, draft = FakeLM(), FakeLM(lambda pos: pos % 3 == 0)
    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, 30, FixedK(4), GREEDY)
    assert spec.sample_s > 0 and spec.target_decode_s == spec.draft_decode_s == 0  # fakes have no llama_decode
    assert spec.sample_s + spec.other_s == pytest.approx(spec.decode_s)


class BatchDiffersLM(FakeLM):
    """A fake whose batched evals (several logit rows) choose another token at one position, as a
    batch kernel that rounds differently would; its one-token evals are those of FakeLM."""

    def __init__(self, position: int):
        super().__init__()
        self.position = position

    def eval(self, tokens, n_logits=1):
        start = len(self.context) + len(tokens) - n_logits
        rows = super().eval(tokens, n_logits)
        r = self.position - start
        if n_logits > 1 and 0 <= r < n_logits:
            rows[r] = np.roll(rows[r], 1)
        return rows


def test_sequential_verification_reads_only_one_token_decodes():
    position = len(PROMPT) + 7
    regular = generate_regular(BatchDiffersLM(position), PROMPT, 30, GREEDY)
    batched = generate_speculative(BatchDiffersLM(position), ModelDrafter(FakeLM()), PROMPT, 30, FixedK(4), GREEDY)
    exact = generate_speculative(BatchDiffersLM(position), ModelDrafter(FakeLM()), PROMPT, 30, FixedK(4), GREEDY,
                                 verify=Verify.SEQUENTIAL)
    assert batched.tokens != regular.tokens  # the batch kernel's difference shows in the batched path
    assert exact.tokens == regular.tokens


@pytest.mark.parametrize("cfg", [GREEDY, SamplingConfig(temperature=0.7, seed=3)], ids=["greedy", "sampled"])
def test_sequential_verification_decodes_no_position_past_the_first_rejection(cfg):
    """--verify sequential reads the target one token at a time and stops where regular generation would: a draft wrong
    at every third position makes rounds rejected early, and the target decodes only x0 and the accepted drafts (and
    the rejected one's row is the next token's), never the positions after a rejection; batched reads all K+1."""
    target = FakeLM()
    drafter = ModelDrafter(FakeLM(wrong=lambda pos: pos % 3 == 0))
    exact = generate_speculative(target, drafter, PROMPT, 30, FixedK(4), cfg, verify=Verify.SEQUENTIAL)
    decodes = [c for c in target.calls if c[0] == "eval"][1:]  # after the prompt's
    assert all(len(tokens) == 1 for _, tokens, _ in decodes)
    # one decode per position a round read: x0, then each accepted draft; a rejection ends the round there
    read = sum(1 + min(n_acc, len(batch) - 1) for n_acc, (_, batch) in zip(_accepted(exact), exact.verify_log))
    assert len(decodes) == read < sum(len(batch) for _, batch in exact.verify_log)
    assert exact.rounds > 3 and exact.accepted < exact.drafted
    regular = generate_regular(FakeLM(), PROMPT, 30, cfg)
    if cfg.greedy:
        assert exact.tokens == regular.tokens


def _accepted(res) -> list[int]:
    """Each round's accepted drafts, from its logged batch against the output that followed."""
    out, counts = res.tokens, []
    for base, batch in res.verify_log:
        start = base - len(PROMPT)
        n = 0
        while n < len(batch) - 1 and start + 1 + n < len(out) and out[start + 1 + n] == batch[1 + n]:
            n += 1
        counts.append(n)
    return counts
