"""Divergences of batched greedy runs are explained by replaying them, not by a margin threshold.

A real kernel difference between batched and one-token decodes shows up only on some CPUs, so these
tests make one that every machine has: a target whose batched decodes pick the second-best token at
one position (as a batch kernel that rounds the other way at a near tie would). The replay must call
that batch numerics; a loop that rewinds its target wrongly must be called a loop error.
"""

from __future__ import annotations

import numpy as np
import pytest

import gguf_bench.measure.pair as bench
from gguf_bench.decoding.divergence import BATCH_NUMERICS, LOOP_ERROR, Identity, compare_greedy, describe
from gguf_bench.decoding.drafters import ModelDrafter
from gguf_bench.decoding.loop import Verify, generate_regular, generate_speculative
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.schedules import FixedK
from gguf_bench.measure.flows.quality import identity_lines, mul_prompts, run_eval
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles

GREEDY = SamplingConfig()


class BatchRoundsOtherWay:
    """A target whose batched decodes (several logit rows) swap the two best logits at one position:
    `offset` tokens after the end of the prompt."""

    def __init__(self, model, offset: int):
        self.model, self.offset, self.prompt_len = model, offset, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def eval(self, tokens, n_logits=1):
        if self.model.n_past == 0:
            self.prompt_len = len(tokens)
        start = self.model.n_past + len(tokens) - n_logits  # position of the first row returned
        rows = self.model.eval(tokens, n_logits)
        r = self.prompt_len + self.offset - start
        if n_logits > 1 and 0 <= r < n_logits:
            rows = np.array(rows)
            top2 = np.argsort(rows[r])[-2:]
            rows[r, top2] = rows[r, top2[::-1]]
        return rows


class RewindsOneShort:
    """A loop bug: the target keeps one rejected token in its cache after every rejection."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def rewind(self, n_past):
        self.model.rewind(n_past + 1 if 0 < n_past < self.model.n_past else n_past)


@pytest.fixture(scope="module")
def high(tiny_pairs):
    with LoadedPair(PairFiles(*tiny_pairs["high"], "high"), LoadConfig(n_ctx=512, threads=1)) as pair:
        yield pair


@pytest.fixture(scope="module")
def middle(tiny_pairs):
    with LoadedPair(PairFiles(*tiny_pairs["middle"], "middle"), LoadConfig(n_ctx=512, threads=1)) as pair:
        yield pair


def test_identical_outputs_need_no_explanation(high):
    prompt = high.prompt_tokens("Hello there")
    regular = high.generate("target", prompt, 40, 4, GREEDY)
    spec = high.generate("speculative", prompt, 40, 4, GREEDY, verify=Verify.SEQUENTIAL)
    assert compare_greedy(high.target, prompt, regular.tokens, spec) == Identity(identical=True)


def test_a_batch_kernel_difference_is_batch_numerics(high):
    prompt = high.prompt_tokens("Hello there")
    target = BatchRoundsOtherWay(high.target, offset=5)
    regular = generate_regular(target, prompt, 40, GREEDY)
    spec = generate_speculative(target, ModelDrafter(high.draft), prompt, 40, FixedK(4), GREEDY)
    identity = compare_greedy(target, prompt, regular.tokens, spec)
    assert not identity.identical and identity.position == 6, identity
    assert identity.cause == BATCH_NUMERICS, identity
    assert identity.replayed_choice == spec.tokens[6] and identity.one_token_choice == regular.tokens[6]
    assert "batch numerics" in describe(identity)


def test_a_wrong_rewind_is_a_loop_error(middle):
    prompt = middle.prompt_tokens("Hello there")
    regular = middle.generate("target", prompt, 60, 4, GREEDY)
    spec = generate_speculative(RewindsOneShort(middle.target), ModelDrafter(middle.draft), prompt, 60, FixedK(4), GREEDY)
    identity = compare_greedy(middle.target, prompt, regular.tokens, spec)
    assert not identity.identical and identity.cause == LOOP_ERROR, identity


def test_a_wrong_rewind_is_a_loop_error_with_a_batch_difference_too(middle):
    """Even when batch numerics are about, a broken loop is not excused by them."""
    prompt = middle.prompt_tokens("Hello there")
    target = BatchRoundsOtherWay(middle.target, offset=30)
    regular = generate_regular(target, prompt, 60, GREEDY)
    spec = generate_speculative(RewindsOneShort(target), ModelDrafter(middle.draft), prompt, 60, FixedK(4), GREEDY)
    identity = compare_greedy(target, prompt, regular.tokens, spec)
    assert identity.cause == LOOP_ERROR, identity


def test_eval_reports_batch_numerics(high):
    prompts = mul_prompts(4, seed=1)
    real_target = high.target
    high.target = BatchRoundsOtherWay(real_target, offset=2)  # batch numerics at generated token 3 of each prompt
    try:
        res = run_eval(high, prompts, 4, GREEDY, n_predict=8)
    finally:
        high.target = real_target
    assert res.identical == 0 and res.batch_numerics == 4 and res.loop_errors == 0
    assert not any(bad for _, bad in identity_lines(res))
    assert "4 differ by batch numerics" in identity_lines(res)[1][0]


def test_eval_flags_a_broken_loop(middle, monkeypatch):
    broken = lambda target, *a, **kw: generate_speculative(RewindsOneShort(target), *a, **kw)  # noqa: E731
    monkeypatch.setattr(bench, "generate_speculative", broken)
    res = run_eval(middle, mul_prompts(8, seed=3), 4, GREEDY, n_predict=24)
    assert res.loop_errors > 0 and res.batch_numerics == 0
    assert any(bad for _, bad in identity_lines(res))
