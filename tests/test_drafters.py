"""Drafting strategies (drafters.py): n-gram lookup, the model drafter's p-min and n-min stops, the
chain, the heuristic K schedule; the point-mass acceptance rule by Monte Carlo; greedy identity with
sequential verification and the distribution check at T > 0 for every strategy, on tiny real pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import assert_user_error, invoke, stored
from scipy.stats import chisquare
from test_loop_fake import PROMPT, FakeLM

import gguf_bench.decoding.drafters as drafters
from gguf_bench.decoding.drafters import ModelDrafter, NgramDrafter
from gguf_bench.decoding.loop import Verify, generate_regular, generate_speculative
from gguf_bench.decoding.sampling import SamplingConfig, accept_point_mass, draw
from gguf_bench.decoding.schedules import FixedK, HeuristicK
from gguf_bench.decoding.strategy import Strategy, parse_spec_types
from gguf_bench.errors import ConfigError
from gguf_bench.measure.flows.quality import compare_samples, sample_positions
from gguf_bench.measure.inputs.prompts import ALL_PROMPTS, BUILTIN, CATEGORIES, builtin
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles

GREEDY = SamplingConfig()
EXACT = Verify.SEQUENTIAL
REPETITIVE = "abc abc abc abc abc abc abc abc"  # the n-gram finds matches from the first round on

STRATEGIES = {
    "ngram": Strategy("ngram"),
    "ngram,draft": Strategy("ngram,draft"),
    "p-min": Strategy(p_min=0.5),
    "heuristic": Strategy(k_schedule="heuristic", k_cap=8),
}


# --- n-gram lookup ---------------------------------------------------------------------------

def test_ngram_takes_the_most_recent_longest_match():
    ngram = NgramDrafter(1, 3)
    #          0  1  2  3  4  5  6  7  8  9
    history = [5, 6, 7, 1, 5, 6, 8, 2, 5, 6]
    # the last 3 tokens (2, 5, 6) occur nowhere else; (5, 6) does, most recently at 4: 8 follows
    assert ngram.lookup(history, 3) == [8, 2, 5]
    assert ngram.lookup(history, 1) == [8]
    assert NgramDrafter(3, 3).lookup(history, 4) == []  # no 3-token match: no draft
    assert ngram.lookup(history, 0) == []


def test_ngram_continuation_may_run_into_the_suffix_and_stops_at_the_end():
    ngram = NgramDrafter(2, 2)
    assert ngram.lookup([1, 2, 1, 2], 8) == [1, 2]  # matched at 0; what follows is the suffix itself
    assert ngram.lookup([4, 4, 4], 5) == [4]  # (4, 4) at 0: one token follows before the end
    assert ngram.lookup([9], 5) == [] and ngram.lookup([], 5) == []


def test_ngram_prefers_longer_matches_over_recent_short_ones():
    history = [1, 2, 3, 9, 7, 3, 8, 1, 2, 3]
    assert NgramDrafter(1, 3).lookup(history, 2) == [9, 7]  # (1, 2, 3) at 0, though 3 alone matches at 5
    assert NgramDrafter(1, 1).lookup(history, 2) == [8, 1]  # 3 alone: most recent at 5


# --- point-mass acceptance (Monte Carlo, as tests/test_sampling.py does for accept_sampled) ------

Q = np.array([[0.40, 0.30, 0.10, 0.10, 0.05, 0.05],
              [0.05, 0.05, 0.40, 0.30, 0.10, 0.10],
              [0.10, 0.40, 0.05, 0.05, 0.30, 0.10],
              [0.02, 0.08, 0.10, 0.20, 0.25, 0.35]])
N = 30_000


def emitted(accept, drafts, seed=3) -> list[np.ndarray]:
    """Histogram of the token emitted at each position 1..K+1 of a round whose drafts come from `drafts(rng)`."""
    rng = np.random.default_rng(seed)
    counts = [np.zeros(Q.shape[1]) for _ in range(Q.shape[0])]
    for _ in range(N):
        drafted = drafts(rng)
        n, nxt = accept(lambda i: Q[i], drafted, rng)
        for pos, tok in enumerate(drafted[:n] + [nxt]):
            counts[pos][tok] += 1
    return counts


def min_p_value(counts: list[np.ndarray]) -> float:
    return min(chisquare(c, Q[j] * c.sum()).pvalue for j, c in enumerate(counts))


def accept_always(q_row, drafted, rng):  # BUG: a draft taken without looking at the target
    return len(drafted), draw(q_row(len(drafted)), rng)


def replacement_keeps_the_draft(q_row, drafted, rng):
    for i, d in enumerate(drafted):
        if rng.random() >= q_row(i)[d]:
            return i, draw(q_row(i), rng)  # BUG: the residual is q without d, not q
    return len(drafted), draw(q_row(len(drafted)), rng)


FIXED_DRAFT = lambda rng: [0, 3, 4]  # noqa: E731  likely, middling and unlikely tokens
ANY_DRAFT = lambda rng: [int(t) for t in rng.integers(0, 6, 3)]  # noqa: E731  drafts that vary (chosen before the round)


@pytest.mark.parametrize("drafts", [FIXED_DRAFT, ANY_DRAFT])
def test_point_mass_acceptance_reproduces_the_target(drafts):
    assert min_p_value(emitted(accept_point_mass, drafts)) > 1e-3


@pytest.mark.parametrize("buggy", [accept_always, replacement_keeps_the_draft])
def test_point_mass_check_catches_bugs(buggy):
    assert min_p_value(emitted(buggy, FIXED_DRAFT)) < 1e-6


# --- the K schedule and the strategy settings ------------------------------------------------

def test_heuristic_schedule_by_hand():
    s = HeuristicK(4, cap=9)
    seen = []
    for drafted, accepted in [(4, 4), (6, 6), (8, 8), (9, 3), (8, 0), (0, 0), (7, 7), (1, 0), (2, 0), (1, 0), (1, 0)]:
        s.update(drafted, accepted)
        seen.append(s.k)
    assert seen == [6, 8, 9, 8, 7, 7, 9, 8, 7, 6, 5]
    low = HeuristicK(1, cap=4)
    low.update(1, 0)
    assert low.k == 1 and HeuristicK(20, cap=16).k == 16


@pytest.mark.parametrize("kwargs, message", [
    ({"spec_type": "lookahead"}, "unknown --spec-type 'lookahead'"),
    ({"ngram_min": 4, "ngram_max": 2}, r"--ngram-min \(4\) must not exceed --ngram-max \(2\)"),
    ({"ngram_min": 0}, "--ngram-min must be >= 1"),
    ({"p_min": 1.0}, r"--draft-p-min must be in \[0, 1\)"),
    ({"p_min": -0.1}, r"--draft-p-min must be in \[0, 1\)"),
    ({"n_min": -1}, "--draft-min must be >= 0"),
    ({"k_schedule": "dynamic"}, "unknown --k-schedule 'dynamic'"),
    ({"k_cap": 0}, "--k-cap must be >= 1"),
])
def test_bad_settings_say_what_is_wrong(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Strategy(**kwargs)


def test_checks_that_need_the_pair_and_k():
    with pytest.raises(ConfigError, match="--spec-type draft needs a draft model"):
        Strategy("draft").check(4, has_draft_model=False)
    with pytest.raises(ConfigError, match="--spec-type ngram,draft needs a draft model"):
        Strategy("ngram,draft").check(4, has_draft_model=False)
    Strategy("ngram").check(4, has_draft_model=False)
    with pytest.raises(ConfigError, match="above --k-cap 8"):
        Strategy(k_schedule="heuristic", k_cap=8).check(10, has_draft_model=True)


def test_labels_params_and_lists():
    assert Strategy().label(8) == "draft K=8"
    assert Strategy("ngram").label(16) == "ngram(1-4) K=16"
    assert Strategy("ngram+draft", ngram_min=2, ngram_max=3).label(4) == "ngram(2-3)+draft K=4"
    assert Strategy(p_min=0.8).label(16) == "draft p-min 0.8 K=16"
    assert Strategy(k_schedule="heuristic").label(4) == "draft heuristic K=4..16"
    assert Strategy(n_min=4, p_min=0.6).label(16) == "draft p-min 0.6 n-min 4 K=16"
    # settings a strategy does not use are dropped, so a sweep's grid has no duplicate cells
    assert Strategy("ngram", p_min=0.8, n_min=3).canonical() == Strategy("ngram")
    assert Strategy("draft", ngram_max=8).canonical() == Strategy("draft")
    assert Strategy("ngram", k_cap=4).params() == Strategy("ngram").params()
    assert parse_spec_types("ngram,draft") == ["ngram,draft"]
    assert parse_spec_types("draft,ngram,ngram+draft") == ["draft", "ngram", "ngram,draft"]
    with pytest.raises(ConfigError, match="unknown --spec-type 'eagle'"):
        parse_spec_types("draft,eagle")


# --- the loop with drafters, on fakes --------------------------------------------------------

class UnsureLM(FakeLM):
    """A FakeLM whose rows are flat (the best token's top-10 probability e/(e+9), about 0.23)
    wherever `unsure(position)` holds, confident (about 1) elsewhere."""

    def __init__(self, unsure):
        super().__init__()
        self.unsure = unsure

    def eval(self, tokens, n_logits=1):
        rows = super().eval(tokens, n_logits)
        first = len(self.context) - n_logits + 1  # context length behind the first row
        for r in range(n_logits):
            if self.unsure(first + r):
                rows[r] = np.where(rows[r] > 0, 1.0, 0.0)
        return rows


def test_ngram_on_fakes_is_exact_and_needs_no_model():
    target = FakeLM()
    prompt = PROMPT * 4
    spec = generate_speculative(target, NgramDrafter(1, 3), prompt, 40, FixedK(4), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), prompt, 40, GREEDY).tokens
    assert spec.draft_sources.get("ngram", 0) > 0 and spec.draft_decode_s == 0
    assert sum(spec.draft_lengths) == spec.rounds and len(spec.draft_lengths) == 5


def test_p_min_stops_before_an_unsure_position():
    unsure = lambda pos: pos % 5 == 0  # noqa: E731
    drafter = ModelDrafter(UnsureLM(unsure), p_min=0.5)
    spec = generate_speculative(FakeLM(), drafter, PROMPT, 60, FixedK(8), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, 60, GREEDY).tokens
    assert max(n for n, rounds in enumerate(spec.draft_lengths) if rounds) <= 4  # never past the next unsure position
    assert spec.acceptance == 1.0  # the draft is the target where it is sure
    for base, batch in spec.verify_log:  # a draft token decided at an unsure position never appears
        assert not any(unsure(base + 1 + i) for i in range(len(batch) - 1))


def test_n_min_drops_short_drafts():
    unsure = lambda pos: pos % 4 == 0  # noqa: E731  drafts of 0 to 3 tokens before an unsure position
    spec = generate_speculative(FakeLM(), ModelDrafter(UnsureLM(unsure), p_min=0.5, n_min=3), PROMPT, 60, FixedK(8), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, 60, GREEDY).tokens
    assert spec.draft_lengths[1] == spec.draft_lengths[2] == 0 and spec.draft_lengths[3] > 0
    assert spec.draft_lengths[0] > 0  # the dropped ones: plain target steps


def test_chain_falls_back_to_the_model_when_the_ngram_finds_nothing():
    target, draft = FakeLM(), FakeLM()
    chain = Strategy("ngram,draft", ngram_min=3, ngram_max=3).drafter(draft)
    spec = generate_speculative(target, chain, [1, 2, 3, 4, 5, 6, 7, 1, 2, 3], 40, FixedK(4), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), [1, 2, 3, 4, 5, 6, 7, 1, 2, 3], 40, GREEDY).tokens
    assert spec.draft_sources["ngram"] >= 1 and spec.draft_sources["model"] >= 1
    # the model caught up with the tokens of the n-gram rounds it did not see: its cache is a prefix of the history
    history = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3] + spec.tokens
    assert draft.context == history[: len(draft.context)]


def test_heuristic_schedule_sizes_the_counts_to_the_cap():
    spec = generate_speculative(FakeLM(), ModelDrafter(FakeLM()), PROMPT, 60, HeuristicK(2, 8), GREEDY)
    assert len(spec.reached_at) == len(spec.accepted_at) == 8 and len(spec.draft_lengths) == 9
    assert spec.draft_lengths[8] > 0  # all accepted: K grew 2, 4, 6, 8 and stayed
    assert spec.k == 2


# --- tiny real pairs -------------------------------------------------------------------------

def load(files, with_draft: bool = True) -> LoadedPair:
    return LoadedPair(PairFiles(files[0], files[1] if with_draft else None, "tiny"), LoadConfig(n_ctx=1024, threads=1))


@pytest.fixture(scope="module")
def middle(tiny_pairs):
    with load(tiny_pairs["middle"]) as pair:
        yield pair


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("text", [REPETITIVE, "Once upon a time"])
def test_greedy_identity_for_every_strategy(middle, name, text):
    strategy = STRATEGIES[name]
    prompt = middle.prompt_tokens(text)
    regular = middle.generate("target", prompt, 80, 4, GREEDY)
    spec = middle.generate("speculative", prompt, 80, 4, GREEDY, verify=EXACT, strategy=strategy)
    assert spec.tokens == regular.tokens
    assert spec.strategy == strategy.label(4) and sum(spec.draft_lengths) == spec.rounds
    if strategy.uses_ngram and text == REPETITIVE:
        assert spec.draft_sources.get("ngram", 0) >= 3  # the n-gram did draft
    if name == "p-min":
        assert spec.draft_lengths[0] > 0 and sum(spec.draft_lengths[1:]) > 0  # it stopped, and it drafted
    if name == "heuristic":
        assert sum(spec.draft_lengths[5:]) > 0 or spec.draft_lengths[1] > 0  # K moved away from 4


def test_target_alone_runs_ngram_without_a_draft_file(tiny_pairs):
    with load(tiny_pairs["middle"], with_draft=False) as pair:
        assert pair.draft is None and pair.offload_label("draft") == "-"
        prompt = pair.prompt_tokens(REPETITIVE)
        regular = pair.generate("target", prompt, 60, 8, GREEDY)
        spec = pair.generate("speculative", prompt, 60, 8, GREEDY, verify=EXACT, strategy=Strategy("ngram"))
        assert spec.tokens == regular.tokens and spec.draft_sources["ngram"] > 0
        with pytest.raises(ConfigError, match="needs a draft model"):
            pair.generate("speculative", prompt, 60, 8, GREEDY, strategy=Strategy("draft"))
        with pytest.raises(ConfigError, match="draft alone needs a draft model"):
            pair.generate("draft", prompt, 60, 8, GREEDY)


@pytest.fixture(scope="module")
def cyclic(middle) -> list[int]:
    """A prompt whose end the target's samples at T = 0.7 often continue as it did before (a random tiny
    model's greedy text falls into cycles): the n-gram drafts in most rounds of a sampled run, and the
    target accepts a good part of them."""
    start = middle.prompt_tokens("Once upon a time")
    return start + middle.generate("target", start, 100, 4, GREEDY).tokens


def strategy_check(pair: LoadedPair, prompt: list[int], strategy: Strategy, m: int = 5, samples: int = 600,
                   sources: dict | None = None):
    """quality.distribution_check with a strategy: regular vs speculative tokens at positions 1..m, T = 0.7, K = 4.
    sources: adds up the speculative runs' draft_sources."""

    def run(mode: str):
        offset = 0 if mode == "target" else 500_009

        def generate(seed: int) -> list[int]:
            res = pair.generate(mode, prompt, m, 4, SamplingConfig(0.7, seed=seed + offset), strategy=strategy)
            for source, n in res.draft_sources.items():
                if sources is not None:
                    sources[source] = sources.get(source, 0) + n
            return res.tokens

        return generate

    return compare_samples(sample_positions(run("target"), m, samples), sample_positions(run("speculative"), m, samples))


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_sampled_generation_matches_the_target_for_every_strategy(middle, cyclic, name):
    strategy, sources = STRATEGIES[name], {}
    check = strategy_check(middle, cyclic if strategy.uses_ngram else middle.prompt_tokens("Once upon a time"), strategy,
                           sources=sources)
    assert check.same, (check.p_values, check.tv_distance)
    # rounds each source drafted over the 600 runs (measured: ngram about 600; ngram,draft about 90 and 850)
    least = {"ngram": (300, 0), "ngram,draft": (50, 300)}.get(name, (0, 300))
    assert sources.get("ngram", 0) >= least[0] and sources.get("model", 0) >= least[1], sources


def test_n_min_at_temperature_keeps_the_target_distribution(middle):
    """n-min at T > 0 drafts the model's top-1 tokens (point masses), so dropping short drafts stays exact."""
    check = strategy_check(middle, middle.prompt_tokens("Once upon a time"), Strategy(p_min=0.4, n_min=2))
    assert check.same, (check.p_values, check.tv_distance)


def test_distribution_check_catches_an_ngram_draft_taken_unchecked(middle, cyclic, monkeypatch):
    """Power of the check on n-gram drafts: accepting them without the target (a bug) must show."""
    monkeypatch.setattr("gguf_bench.decoding.sampling.accept_point_mass", accept_always)
    check = strategy_check(middle, cyclic, Strategy("ngram"))
    assert not check.same, check.p_values


def test_distribution_check_catches_a_stop_on_the_drawn_tokens_probability(middle, monkeypatch):
    """Why p-min looks at the distribution before drawing: stopping on the drawn token's own probability
    keeps only likely draft tokens, which are then no sample of p, and the output drifts from the target."""

    def biased_propose(self, history, k, sampler, schedule=None):
        drafted, p_rows = [], []
        feed = history[self.model.n_past:]
        for _ in range(k):
            tok, p = sampler.draft_token(self.model.eval(feed, 1)[0])
            if p[tok] < self.p_min:
                break  # BUG: decided after the draw, on the drawn token
            drafted.append(tok)
            p_rows.append(p)
            feed = [tok]
        return drafters.Draft(drafted, p_rows, "model") if drafted else drafters.NO_DRAFT

    monkeypatch.setattr(ModelDrafter, "propose", biased_propose)
    check = strategy_check(middle, middle.prompt_tokens("Once upon a time"), Strategy(p_min=0.5), samples=1500)
    assert not check.same, check.p_values


# --- prompts ---------------------------------------------------------------------------------

def test_prompts_by_id_and_category():
    assert builtin() == list(BUILTIN) and [p.id for p in BUILTIN] == ["code-short", "chat-short", "code-long", "chat-long"]
    assert {"chat", "translation", "summarization", "qa", "math", "rag", "code-edit", "code"} <= set(CATEGORIES)
    assert [p.id for p in builtin(["code-edit"])] == ["code-edit-hints"]
    chat = builtin(["chat", "chat-short"])
    assert [p.id for p in chat] == ["chat-short", "chat-long", "chat-multiturn"]  # a category, then an id already in it
    assert builtin(["all"]) == list(ALL_PROMPTS) and len({p.id for p in ALL_PROMPTS}) == len(ALL_PROMPTS)
    with pytest.raises(ConfigError, match="unknown built-in prompt 'poetry'"):
        builtin(["poetry"])


# --- the CLI: run and sweep with strategies, records, report rows ------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--spec-type", "lookahead"], "unknown --spec-type 'lookahead'"),
    (["--spec-type", "ngram", "--ngram-min", "5", "--ngram-max", "3"], "--ngram-min (5) must not exceed --ngram-max (3)"),
    (["--draft-p-min", "1"], "--draft-p-min must be in [0, 1)"),
    (["--draft-p-min", "-0.2"], "--draft-p-min must be in [0, 1)"),
    (["--spec-type", "draft"], "--spec-type draft needs a draft model"),
    (["--spec-type", "ngram,draft"], "--spec-type draft needs a draft model"),
    (["--k-schedule", "heuristic", "-K", "20"], "above --k-cap 16"),
])
def test_bad_strategy_input_is_one_line(tiny_pairs, args, needle):
    result = invoke("run", "--target", str(tiny_pairs["middle"][0]), "-n", "4", *args)
    assert_user_error(result, needle)


def test_run_ngram_on_the_target_alone(tiny_pairs, isolated):
    result = invoke("run", "--target", str(tiny_pairs["middle"][0]), "--spec-type", "ngram", "-K", "8", "-n", "40",
                 "-p", REPETITIVE, "--verify", "sequential", "--json", "--name", "ng")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["mode"] for r in records] == ["target", "speculative"]  # no draft model: no draft-alone run
    spec = records[1]
    assert spec["config"]["strategy"]["spec_type"] == "ngram" and spec["metrics"]["strategy"] == "ngram(1-4) K=8"
    assert spec["metrics"]["draft_sources"]["ngram"] > 0 and spec["metrics"]["identity"]["identical"] is True
    assert spec["models"]["draft"] is None and spec["metrics"]["draft_decode_s"] == 0
    table = invoke("report", str(isolated / "results" / "ng.jsonl"))
    assert table.exit_code == 0 and "ngram(1-4) K=8" in table.output


def test_sweep_of_strategies_stores_and_reports_each(tiny_pairs, isolated):
    from gguf_bench.results.schema.records import parse
    from gguf_bench.results.schema.run_fields import run_row

    files = tiny_pairs["middle"]
    args = ["sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", "st", "-n", "24", "-K", "2,4",
            "--prompt-ids", "code-edit", "--spec-type", "draft,ngram", "--draft-p-min", "0,0.6",
            "--k-schedule", "fixed,heuristic", "--no-draft-alone"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    records = stored(isolated / "results" / "st.jsonl")
    names = sorted({run_row(parse(r))["strategy"] for r in records if r["mode"] == "speculative"})
    # p-min means nothing to the n-gram: draft x {p-min 0, 0.6} x {fixed, heuristic} + ngram x {fixed, heuristic}
    assert names == ["draft", "draft heuristic", "draft p-min 0.6", "draft p-min 0.6 heuristic", "ngram(1-4)",
                     "ngram(1-4) heuristic"]
    assert len(records) == 1 + 6 * 2 and all(r["config"]["category"] == "code-edit" for r in records)
    spec = [r for r in records if r["mode"] == "speculative"]
    assert all(sum(r["metrics"]["draft_lengths"]) == r["metrics"]["rounds"] for r in spec)
    heuristic = [r for r in spec if "heuristic" in r["metrics"]["strategy"]]
    assert all(len(r["metrics"]["reached_at"]) == 16 and len(r["metrics"]["draft_lengths"]) == 17 for r in heuristic)
    # the default strategy stays out of config (and out of cell keys, so sweeps made before strategies resume as they were)
    assert all((r["config"]["strategy"] is not None) != r["metrics"]["strategy"].startswith("draft K=") for r in spec)
    for row in ("K=2", "draft p-min 0.6 K=4", "draft heuristic K=2", "ngram(1-4) K=4"):
        assert row in first.output, row
    # one run per prompt: no interval, so no K is starred and the caption says why (a busy machine stars none either)
    assert "★" not in first.output and ("fewer than 2 runs" in first.output or "! unreliable" in first.output)
    again = invoke(*args, "--resume")
    assert again.exit_code == 0 and "13 cells already done, 0 to go" in again.output


def test_records_without_a_strategy_read_as_the_draft_model():
    from gguf_bench.results.schema.records import parse
    from gguf_bench.results.schema.run_fields import run_row

    old = {"pair": "p", "mode": "speculative", "config": {"k": 4}, "metrics": {"tokens_per_s": 1.0}}
    assert run_row(parse(old))["strategy"] == "draft"
    assert run_row(parse({**old, "mode": "target"}))["strategy"] == ""
