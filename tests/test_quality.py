"""Quality evidence: Wilson intervals, the distribution check's power, eval prompts and answers, the distribution check."""

from __future__ import annotations

import pytest

import gguf_bench.decoding.sampling as speculative
from gguf_bench.decoding.sampling import SamplingConfig, draw
from gguf_bench.errors import ConfigError
from gguf_bench.measure.flows.quality import (
    compare_samples,
    detectable_tv,
    distribution_check,
    mul_prompts,
    parse_answer,
    run_eval,
    two_proportion_p_value,
    wilson_interval,
)
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles


def test_wilson_interval_against_hand_computed_values():
    # p = 0.8, n = 100, z^2 = 3.8415: centre (0.8 + 0.019208) / 1.038415 = 0.78890,
    # half 1.96 * sqrt(0.0016 + 0.000096) / 1.038415 = 0.07773
    p, lo, hi = wilson_interval(80, 100)
    assert p == 0.8 and lo == pytest.approx(0.71117, abs=1e-5) and hi == pytest.approx(0.86663, abs=1e-5)
    # at the edges Wald collapses to [0, 0] and [1, 1]; Wilson gives z^2 / (n + z^2) of room: 3.8415 / 8.8415 at n = 5
    assert wilson_interval(0, 5) == pytest.approx((0.0, 0.0, 0.43448), abs=1e-5)
    assert wilson_interval(5, 5) == pytest.approx((1.0, 0.56552, 1.0), abs=1e-5)
    assert wilson_interval(1, 10)[1] > 0  # Wald's 0.1 - 0.186 is clipped to 0; Wilson stays above it


def test_detectable_tv_is_detected_with_80_percent_power():
    """The least favourable difference for the chi-square test (|p_i - q_i| proportional to p_i + q_i) at the total
    variation detectable_tv names is detected in about 80% of trials; half of it far less often."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, trials = 200, 300
    tv = detectable_tv(n, 3, 0.01)  # 4 categories, one position (no Bonferroni)

    def rate(t: float) -> float:
        d = np.array([1, 1, -1, -1]) * t / 4  # p - q = +-t/2 on 4 cells of mass 1/4 each: total variation t
        p, q = 0.25 + d, 0.25 - d
        hits = 0
        for _ in range(trials):
            a, b = rng.choice(4, n, p=p).tolist(), rng.choice(4, n, p=q).tolist()
            hits += compare_samples([a], [b]).p_values[0] < 0.01
        return hits / trials

    assert 0.7 <= rate(tv) <= 0.92
    assert rate(tv / 2) < 0.35


def test_two_proportion_test():
    assert two_proportion_p_value(50, 100, 50, 100) == pytest.approx(1.0)
    # 60/100 vs 40/100: z = 0.2 / sqrt(0.5 * 0.5 * 0.02) = 2.828 -> p = 0.00468
    assert two_proportion_p_value(60, 100, 40, 100) == pytest.approx(0.004678, abs=1e-5)
    assert two_proportion_p_value(0, 10, 0, 10) == 1.0


def test_eval_prompts_are_deterministic_for_a_seed():
    a, b, c = mul_prompts(50, seed=1), mul_prompts(50, seed=1), mul_prompts(50, seed=2)
    assert a == b and a != c
    assert all(1 <= p.a <= 99 and 1 <= p.b <= 99 for p in a)
    assert f"What is {a[0].a} times {a[0].b}?" in a[0].text
    with pytest.raises(ConfigError):
        mul_prompts(0)


@pytest.mark.parametrize("text, value", [
    ("1081", 1081), (" 1081", 1081), (" = 1,081.", 1081), ("The answer is 1081.", 1081),
    ("**1081**", 1081), ("1081\nExplanation: 23 * 47", 1081), ("12,3 and more", 12), ("-5", -5),
])
def test_answer_parser_reads_usual_forms(text, value):
    assert parse_answer(text) == value


@pytest.mark.parametrize("text", ["", "I don't know", "one thousand"])
def test_answer_parser_rejects_non_answers(text):
    assert parse_answer(text) is None


def test_answer_parser_does_not_accept_wrong_numbers():
    assert parse_answer("108") != 1081 and parse_answer("10810") != 1081


def replacement_from_target(q, p, drafted, rng):
    """The classic bug: on rejection, sample the replacement from q instead of max(0, q - p)."""
    for i, d in enumerate(drafted):
        if rng.random() * p[i][d] >= q[i][d]:
            return i, draw(q[i], rng)
    return len(drafted), draw(q[len(drafted)], rng)


@pytest.fixture(scope="module")
def low_pair(tiny_pairs):
    with LoadedPair(PairFiles(*tiny_pairs["low"], "low"), LoadConfig(n_ctx=256, threads=1)) as pair:
        yield pair


# top-k 5 keeps the categories few enough for 2000 samples to see the bug's effect; m = 4 with K = 3
# lets the draft propose tokens 2 and 3 in the first round (token 1 always comes from the target).
CHECK = {"m": 4, "samples": 2000, "k": 3, "cfg": SamplingConfig(1.0, top_k=5, seed=3)}


def test_distribution_check_passes_on_the_correct_loop(low_pair):
    check = distribution_check(low_pair, low_pair.prompt_tokens("Hi"), **CHECK)
    assert check.same, check.p_values
    assert "no evidence of a difference" in check.verdict()


def test_distribution_check_fails_on_a_broken_sampler(low_pair, monkeypatch):
    monkeypatch.setattr(speculative, "accept_sampled", replacement_from_target)
    check = distribution_check(low_pair, low_pair.prompt_tokens("Hi"), **CHECK)
    assert not check.same, check.p_values
    assert "does NOT reproduce" in check.verdict()


def test_distribution_check_needs_sampling(low_pair):
    with pytest.raises(ConfigError, match="--temp > 0"):
        distribution_check(low_pair, [1, 2], 4, 100, 3, SamplingConfig(0.0))
    with pytest.raises(ConfigError, match="-m >= 3"):
        distribution_check(low_pair, [1, 2], 2, 100, 3, SamplingConfig(1.0))


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_eval_on_the_real_pair_never_reports_a_loop_error(gemma_q4_q2, threads):
    """Q4_K_M target, Q2_K draft: batched verification may part from the target alone where this CPU's
    batch kernels round otherwise (on an AVX-512 machine at 1 thread they do); every such difference
    must replay as batch numerics, and sequential verification must be identical throughout."""
    from gguf_bench.decoding.loop import Verify

    prompts = mul_prompts(6, seed=0)
    with LoadedPair(PairFiles(*gemma_q4_q2, "gemma"), LoadConfig(n_ctx=512, threads=threads)) as pair:
        batched = run_eval(pair, prompts, 4, SamplingConfig(), n_predict=16)
        exact = run_eval(pair, prompts, 4, SamplingConfig(), n_predict=16, verify=Verify.SEQUENTIAL)
    assert batched.loop_errors == 0 and batched.identical + batched.batch_numerics == batched.n, batched.rows
    assert exact.identical == exact.n
