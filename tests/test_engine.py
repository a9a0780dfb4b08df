"""The loop over real GGUF files through llama-cpp-python: tiny generated pairs, and the real
gemma-3-270m pair (slow) whose sliding-window cache must survive rewinds.

Greedy identity ("speculative output == the target alone's, token for token") is asserted with
sequential verification, which computes every logit the loop reads with the same one-token decode
regular generation uses: it holds on any CPU and thread count, so a difference is a loop error.
Batched verification rounds differently on some CPUs (AVX-512 vs AVX2, thread count, batch size);
its tests assert what is true everywhere: identical, or parted by batch numerics as the replay shows.
"""

from __future__ import annotations

import pytest

from gguf_bench.decoding.divergence import BATCH_NUMERICS, compare_greedy
from gguf_bench.decoding.loop import Verify, generate_regular
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.measure.flows.quality import compare_samples, distribution_check, sample_positions
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.models.tiny import make_pair

GREEDY = SamplingConfig()
EXACT = Verify.SEQUENTIAL


def load(files: tuple, n_ctx: int = 1024, threads: int = 1) -> LoadedPair:
    return LoadedPair(PairFiles(files[0], files[1], "tiny"), LoadConfig(n_ctx=n_ctx, threads=threads))


def assert_batched_greedy_is_right(pair: LoadedPair, prompt: list[int], n: int, k: int) -> None:
    """Batched verification: identical to the target alone, or parted by batch numerics (never a loop error)."""
    regular = pair.generate("target", prompt, n, k, GREEDY)
    spec = pair.generate("speculative", prompt, n, k, GREEDY)
    identity = compare_greedy(pair.target, prompt, regular.tokens, spec)
    assert identity.identical or identity.cause == BATCH_NUMERICS, identity


@pytest.fixture(scope="module")
def loaded(tiny_pairs):
    pairs = {level: load(files) for level, files in tiny_pairs.items()}
    yield pairs
    for p in pairs.values():
        p.close()


@pytest.mark.parametrize("level", ["high", "middle", "low"])
@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_greedy_speculative_equals_greedy_regular(loaded, level, k):
    pair = loaded[level]
    prompt = pair.prompt_tokens("The quick brown fox jumps over the lazy dog.")
    regular = pair.generate("target", prompt, 80, k, GREEDY)
    spec = pair.generate("speculative", prompt, 80, k, GREEDY, verify=EXACT)
    assert spec.tokens == regular.tokens
    assert spec.n_tokens == 80
    assert_batched_greedy_is_right(pair, prompt, 80, k)


@pytest.mark.parametrize("threads", [1, 2])
def test_sequential_verification_is_exact_at_any_thread_count(tiny_pairs, threads):
    with load(tiny_pairs["middle"], threads=threads) as pair:
        prompt = pair.prompt_tokens("Some text to continue, " * 8)
        regular = pair.generate("target", prompt, 120, 6, GREEDY)
        spec = pair.generate("speculative", prompt, 120, 6, GREEDY, verify=EXACT)
        assert spec.tokens == regular.tokens and 0 < spec.acceptance < 1
        assert spec.verify == "sequential" and len(spec.verify_log) == spec.rounds


def test_acceptance_levels_are_high_middle_low(loaded):
    rates = {}
    for level, pair in loaded.items():
        prompt = pair.prompt_tokens("Once upon a time")
        rates[level] = pair.generate("speculative", prompt, 200, 4, GREEDY).acceptance
    assert rates["high"] == 1.0
    assert 0.3 <= rates["middle"] <= 0.8, rates
    assert rates["low"] <= 0.2, rates


def test_many_rejected_rounds_keep_the_caches_right(loaded):
    pair = loaded["low"]
    prompt = pair.prompt_tokens("abc")
    spec = pair.generate("speculative", prompt, 300, 8, GREEDY, verify=EXACT)
    assert spec.rounds > 150 and spec.acceptance < 0.2
    assert spec.tokens == pair.generate("target", prompt, 300, 8, GREEDY).tokens
    assert pair.target.n_past == len(prompt) + len(spec.tokens) - 1
    # the draft holds a prefix of the history (never a rejected token), at most one token behind
    assert len(prompt) + len(spec.tokens) - 2 <= pair.draft.n_past <= len(prompt) + len(spec.tokens) - 1
    assert_batched_greedy_is_right(pair, prompt, 300, 8)


@pytest.mark.parametrize("n_predict, k", [(1, 8), (3, 8), (5, 4)])
def test_draft_longer_than_tokens_left(loaded, n_predict, k):
    pair = loaded["high"]
    prompt = pair.prompt_tokens("x")
    spec = pair.generate("speculative", prompt, n_predict, k, GREEDY, verify=EXACT)
    assert spec.tokens == pair.generate("target", prompt, n_predict, k, GREEDY).tokens
    assert spec.n_tokens == n_predict and spec.drafted <= n_predict - 1


def test_end_of_sequence_inside_a_draft(tmp_path, tiny_pairs):
    """Rewrite the identical-draft pair with EOS set to the 7th greedy token: generation must
    stop there, in the middle of a 4-token draft, both ways."""
    with load(tiny_pairs["high"]) as pair:
        prompt = pair.prompt_tokens("Hello")
        free = pair.generate("target", prompt, 30, 4, GREEDY).tokens
    stop_token = free[6]
    first = free.index(stop_token)
    files = make_pair(tmp_path, noise=0.0, seed=0, eos_id=stop_token)
    with load(files) as pair:
        regular = pair.generate("target", prompt, 30, 4, GREEDY)
        spec = pair.generate("speculative", prompt, 30, 4, GREEDY, verify=EXACT)
    assert regular.stopped_by_eog and spec.stopped_by_eog
    assert spec.tokens == regular.tokens == free[:first]
    assert first % 5 != 0  # the stop falls inside a round of x0 + 4 drafts, not at its start


def test_sampled_generation_matches_target_distribution(loaded):
    """End to end at temperature 1: token distributions at positions 1..5 agree."""
    pair = loaded["middle"]
    prompt = pair.prompt_tokens("Hi")
    check = distribution_check(pair, prompt, m=5, samples=600, k=3, cfg=SamplingConfig(1.0, seed=7))
    assert check.same, (check.p_values, check.tv_distance)


def test_distribution_check_catches_a_broken_sampler(loaded):
    """The check must tell a sampler that draws from the draft (a typical bug's effect) from the target."""
    pair = loaded["middle"]
    prompt = pair.prompt_tokens("Hi")

    def run(model):
        return lambda seed: generate_regular(model, prompt, 3, SamplingConfig(1.0, seed=seed)).tokens

    broken = compare_samples(sample_positions(run(pair.target), 4, 600), sample_positions(run(pair.draft), 4, 600))
    assert not broken.same, broken.p_values


def test_context_overflow_is_a_clear_error(loaded):
    from gguf_bench.errors import ConfigError

    pair = loaded["high"]
    with pytest.raises(ConfigError, match="ctx-size"):
        pair.check_fits(1000, 100, 4)


@pytest.mark.slow
@pytest.mark.parametrize("k", [3, 8])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemma_sliding_window_rewinds(gemma_q4_q2, k, threads):
    """gemma-3-270m has a sliding-window cache. A prompt longer than the window plus many
    rejected rounds (a Q2_K draft of the Q4_K_M target) must still give the greedy output."""
    with load(gemma_q4_q2, n_ctx=2048, threads=threads) as pair:
        text = " ".join(f"item {i} costs {i * 7 % 13} coins;" for i in range(140))
        prompt = pair.prompt_tokens(text + " The total of all items is")
        assert len(prompt) > 1024
        regular = pair.generate("target", prompt, 64, k, GREEDY)
        spec = pair.generate("speculative", prompt, 64, k, GREEDY, verify=EXACT)
        assert spec.tokens == regular.tokens
        assert spec.rounds >= 10 and spec.accepted < spec.drafted - 10
        assert_batched_greedy_is_right(pair, prompt, 64, k)


@pytest.mark.slow
def test_default_pair_greedy_identity(gemma_pair):
    with load(gemma_pair) as pair:
        prompt = pair.prompt_tokens("def fibonacci(n):")
        assert (pair.generate("speculative", prompt, 48, 4, GREEDY, verify=EXACT).tokens
                == pair.generate("target", prompt, 48, 4, GREEDY).tokens)
        assert_batched_greedy_is_right(pair, prompt, 48, 4)


def test_round_without_draft_leaves_the_draft_cache_alone(loaded):
    """With one token left a round drafts nothing; the draft's cache must still hold just what it decoded."""
    pair = loaded["low"]
    prompt = pair.prompt_tokens("ab")
    spec = pair.generate("speculative", prompt, 2, 4, GREEDY)
    assert spec.drafted == 0 and spec.n_tokens == 2
    assert pair.draft.n_past == len(prompt)
