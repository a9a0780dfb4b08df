"""The cost schedule (--k-schedule cost, schedules.CostK): its choices by hand and on fake models, n-gram drafts
scored by their match, greedy identity and the distribution check on a tiny real pair, costs from a stored
calibration or measured at load."""

from __future__ import annotations

import pytest
from cli_helpers import stored
from test_drafters import EXACT, REPETITIVE, UnsureLM, load, strategy_check
from test_loop_fake import PROMPT, FakeLM

from gguf_bench.decoding.drafters import ModelDrafter, NgramDrafter
from gguf_bench.decoding.loop import generate_regular, generate_speculative
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.schedules import ConfidenceCalibration, CostK, Costs, FixedK
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import ConfigError

GREEDY = SamplingConfig()
K = 8
LINEAR = Costs(t_draft=0.5, t_verify=tuple(float(b) for b in range(1, K + 2)))  # a batch costs its tokens
FREE = Costs(t_draft=0.01, t_verify=(1.0,) * (K + 1))  # a batch of K+1 costs what one token does


# --- choices by hand -------------------------------------------------------------------------------

def test_no_draft_when_a_batch_costs_its_tokens():
    s = CostK(K, LINEAR)
    assert s.length("model", [], 0, K) == 1  # the first round explores: one token, whatever the estimates
    s.update(1, 0)
    assert s.length("model", [], 0, K) == 0  # before any decode: drafting cannot pay
    assert s.length("ngram", [64, 65, 66], 0, 3) == 0  # even a long copy: tokens(L) <= L + 1 at (L + 1) times the cost
    assert s.length("model", [0.999], 1, K) == 1  # the decode is paid: a sure token is worth keeping


def test_a_free_verify_and_a_sure_draft_go_to_the_cap():
    s = CostK(K, FREE)
    assert s.length("model", [0.99], 1, K) == K
    assert s.length("ngram", [30 + i for i in range(K)], 0, K) == K


def test_drafts_stop_at_an_unsure_position_and_weak_matches_draft_little():
    costs = Costs(0.05, (1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8, 3.1, 3.4))  # each extra row +30%
    s = CostK(K, costs)
    assert s.length("model", [0.95, 0.95, 0.1], 3, K) == 2  # drop the unsure third position
    assert s.length("model", [0.95, 0.95], 2, K) > 2  # sure so far: go on
    weak = s.length("ngram", [1, 2, 3, 4, 5, 6, 7, 8], 0, 8)  # a one-token match
    strong = s.length("ngram", [40 + i for i in range(8)], 0, 8)
    assert weak <= 2 < strong


def test_the_non_monotone_verify_curve_is_used_as_measured():
    # 3 rows cost more than 4 (llama.cpp's repacked gemm starts at 4 rows): with sure tokens, 3 drafts beat 2
    costs = Costs(0.0, (1.0, 1.99, 3.0, 2.0, 4.5))
    s = CostK(4, costs)
    assert s.length("ngram", [60, 61, 62, 63], 0, 4) == 3
    assert s.length("ngram", [60, 61], 0, 2) == 0  # 1 or 2 drafts would lose, and 3 are not there to be had


def test_hit_rates_learn_from_the_rounds():
    s = CostK(K, Costs(0.05, (1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8, 3.1, 3.4)))
    before = s.length("ngram", [2] * 8, 0, 8)  # a 2-token match: prior 1/2 per position
    for _ in range(20):  # such drafts were accepted whole, every time
        s.length("ngram", [2] * 8, 0, 8)
        s.update(8, 8)
    assert s.length("ngram", [2] * 8, 0, 8) > before
    assert s.predicted_tokens_per_s is not None and s.predicted_tokens_per_s > 1.0


def test_looks_that_draft_nothing_teach_it_not_to_look():
    """A draft decoded only to see an unsure first token (then dropped) costs a draft decode and drafts nothing:
    after a few such rounds the schedule stops decoding the draft before deciding (the qa prompt on Qwen F16 + Q2_K
    paid that look in 57 of 69 rounds and ran at 0.88x the target alone)."""
    costs = Costs(t_draft=0.1, t_verify=tuple(1.0 + 0.05 * b for b in range(K + 1)))
    s = CostK(K, costs)
    assert s.length("model", [], 0, K) > 0  # the prior says a look may pay
    looks = explored = 0
    for _ in range(30):
        if s.length("model", [], 0, K) == 0:
            s.update(0, 0)  # decided before any decode: no look
            continue
        looks += 1
        kept = s.length("model", [0.01], 1, K)  # an unsure first token: dropped, unless the round explores
        explored += kept
        s.update(kept, 0)
    assert looks <= 10  # a few looks to learn, then one now and then (4, 8, 16 rounds apart); it used to be all 30
    assert explored <= 4  # the first round and the probes verify their token


def test_an_under_confident_draft_is_seen_to_be_right():
    """A draft whose tokens are right though its confidence says 0.2: a dropped position is never verified, so only
    the exploring rounds (the first, then probes) can show it; then it drafts every round (gemma's draft on qa drafted
    in 6 rounds of 119 without them, 0.98x the target alone; with them 1.39x)."""
    s = CostK(K, Costs(t_draft=0.1, t_verify=tuple(1.0 + 0.5 * b for b in range(K + 1))))
    drafted = []
    for _ in range(60):
        if s.length("model", [], 0, K) == 0:
            s.update(0, 0)
            drafted.append(0)
            continue
        kept = min(1, s.length("model", [0.2], 1, K))
        s.update(kept, kept)  # verified: right
        drafted.append(kept)
    assert all(drafted[-20:]), drafted


def drafted_rounds(s: CostK, confidences: list[float], rounds: int) -> list[int]:
    """Rounds whose every drafted token is right, the draft's confidence cycling through `confidences`: positions kept."""
    conf = iter(confidences * 1000)
    out = []
    for _ in range(rounds):
        n = drafted_round(s, next(conf))
        s.update(n, n)
        out.append(n)
    return out


def drafted_round(s: CostK, confidence: float, k: int = K) -> int:
    """One round as ModelDrafter asks the schedule, every decoded position at `confidence`: the positions kept."""
    if s.length("model", [], 0, k) == 0:
        return 0
    seen: list[float] = []
    kept = 0
    while kept < k:
        seen.append(confidence)
        want = s.length("model", seen, len(seen), k)
        if want <= kept:
            break
        if want == kept + 1:
            k = want
        kept += 1
    return kept


def test_calibration_learns_from_all_positions_at_once():
    right, wrong = ConfidenceCalibration(), ConfidenceCalibration()
    for c in (0.2, 0.3, 0.45, 0.25, 0.35) * 3:
        right.observe(c, True)  # under-confident: right whatever it says
        wrong.observe(c + 0.5, False)  # over-confident
    right.fit()
    wrong.fit()
    assert right(0.3) > 0.6 and right(0.9) > right(0.3)  # a confidence never seen is raised too
    assert wrong(0.9) < 0.5 and wrong(0.3) < 0.3


def test_an_under_confident_draft_soon_drafts_long(monkeypatch):
    """A draft right at every position while its confidence says 0.2 to 0.45 (gemma-3-270m's draft on code-edit): the
    calibration learns it from all positions at once, and rounds go long within a few. A confidence bin that learns
    only from its own positions took longer (its rounds kept stopping after one token: 0.91x the best fixed K)."""
    costs = Costs(t_draft=0.45, t_verify=tuple(1.0 + 0.06 * b for b in range(K + 1)))
    under = [0.22, 0.34, 0.43, 0.27, 0.38]
    assert min(drafted_rounds(CostK(K, costs), under, 12)[-4:]) >= 4
    monkeypatch.setattr(ConfidenceCalibration, "fit", lambda self: None)  # bins alone
    assert min(drafted_rounds(CostK(K, costs), under, 12)[-4:]) < 4


def test_before_the_first_decode_each_position_has_its_own_hit_rate():
    """Acceptance runs in streaks: with position 1 right half the time and every later position right whenever it was
    reached, a round is worth starting for a long draft; where position 2 always failed, for one token at most."""
    costs = Costs(t_draft=0.25, t_verify=tuple(1.0 + 0.1 * b for b in range(K + 1)))
    streaks, singles = CostK(K, costs), CostK(K, costs)
    for i in range(20):
        for s, accepted in ((streaks, 4 if i % 2 else 0), (singles, 1 if i % 2 else 0)):
            s.length("model", [], 0, K)
            s.update(4, accepted)
    assert streaks.length("model", [], 0, K) >= 3
    assert singles.length("model", [], 0, K) <= 1


def test_the_catch_up_batch_is_predicted_but_not_weighed():
    """The draft's first decode of a round also feeds the tokens it missed (one batch, priced linear through t_draft and
    t_draft2). The prediction counts it; the choice does not (those tokens are fed by whichever round drafts next:
    weighing them would make every round without a draft push the next draft further away)."""
    costs = Costs(t_draft=0.1, t_verify=tuple(1.0 + 0.05 * b for b in range(K + 1)), t_draft2=0.15)
    assert costs.catch_up(1) == pytest.approx(0.1) and costs.catch_up(41) == pytest.approx(2.1)
    near, far = CostK(K, costs), CostK(K, costs)
    assert near.length("model", [], 0, K, behind=0) == far.length("model", [], 0, K, behind=40) > 0
    for s, behind in ((near, 0), (far, 40)):
        assert s.length("model", [0.99], 1, K, behind=behind) >= 1
        s.update(1, 1)
    assert far.seconds == pytest.approx(near.seconds + 2.0)  # 40 more tokens in the batch, 0.05 s each
    assert far.tokens == near.tokens


def test_looks_that_hit_at_a_losing_rate_come_less_and_less_often():
    """Looks forced while the schedule would not draft come after 4, 8, 16, ... rounds; a look that was accepted but
    leaves drafting not worth it does not shorten the interval again (on Qwen F16 + Q2_K qa such looks came every 4
    rounds, each paying a catch-up batch); drafting of its own accord does."""
    costs = Costs(t_draft=0.5, t_verify=tuple(1.0 + 0.5 * b for b in range(K + 1)), t_draft2=0.6)
    s = CostK(K, costs)
    looks = []
    for i in range(130):
        if s.length("model", [], 0, K) == 0:
            s.update(0, 0)
            continue
        looks.append(i)
        keep = s.length("model", [0.5], 1, K)
        s.update(keep, keep)  # kept or not, the token it drafted was accepted
    assert len(looks) <= 6 and all(b - a >= 4 for a, b in zip(looks, looks[1:]))
    sure = CostK(K, Costs(0.01, (1.0,) * (K + 1)))  # drafting pays: it drafts every round, no forced looks needed
    assert all(sure.length("model", [], 0, K) > 0 for _ in range(10))


def test_needs_costs_up_to_the_cap():
    with pytest.raises(ConfigError, match="batch of 9"):
        CostK(8, Costs(0.1, (1.0, 1.5)))
    with pytest.raises(ConfigError, match="needs this machine's verify costs"):
        Strategy(k_schedule="cost").schedule(8)
    assert Strategy(k_schedule="cost").label(16) == "draft cost K=16"
    assert Strategy("ngram", k_schedule="cost", k_cap=4).canonical() == Strategy("ngram", k_schedule="cost")


# --- on fake models ---------------------------------------------------------------------------------

def test_on_fakes_it_drafts_nothing_when_verify_costs_its_tokens():
    target, draft = FakeLM(), FakeLM(lambda pos: pos % 2 == 0)  # a draft that is wrong half the time
    spec = generate_speculative(target, ModelDrafter(draft), PROMPT, 80, CostK(K, LINEAR), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, 80, GREEDY).tokens
    assert spec.draft_lengths[0] >= 0.85 * spec.rounds  # a few probes at most
    assert sum(spec.draft_lengths[2:]) == 0
    assert spec.predicted_tokens_per_s is not None


def test_on_fakes_it_drafts_to_the_cap_with_a_free_verify_and_a_sure_draft():
    spec = generate_speculative(FakeLM(), ModelDrafter(FakeLM()), PROMPT, 90, CostK(K, FREE), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, 90, GREEDY).tokens
    assert spec.draft_lengths[K] >= spec.rounds - 3  # all but the first round (prior) and the short last ones
    assert spec.acceptance == 1.0


def test_on_fakes_it_learns_to_stop_before_unsure_positions():
    """A draft unsure (top-token probability about 0.23) and wrong at every 5th position: an unsure token is kept only
    while its confidence bin rests on few rounds (the optimistic choice tries it and the verification shows it wrong),
    then no more."""
    unsure = lambda pos: pos % 5 == 0  # noqa: E731
    draft = UnsureLM(unsure)
    draft.wrong = unsure
    costs = Costs(0.05, tuple(1.0 + 0.1 * b for b in range(K + 1)))
    spec = generate_speculative(FakeLM(), ModelDrafter(draft), PROMPT, 120, CostK(K, costs), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), PROMPT, 120, GREEDY).tokens
    kept = [r for r, (base, batch) in enumerate(spec.verify_log) if any(unsure(base + 1 + i) for i in range(len(batch) - 1))]
    assert len(kept) <= 3 and all(r < len(spec.verify_log) // 2 for r in kept), kept
    assert sum(spec.draft_lengths[2:]) > 0


def test_ngram_on_fakes_drafts_what_it_found():
    prompt = PROMPT * 4
    spec = generate_speculative(FakeLM(), NgramDrafter(1, 3), prompt, 40, CostK(K, FREE), GREEDY)
    assert spec.tokens == generate_regular(FakeLM(), prompt, 40, GREEDY).tokens
    assert spec.draft_sources.get("ngram", 0) > 0


def test_ngram_scored_takes_the_longest_match_and_stops_at_the_end():
    ngram = NgramDrafter(1, 2)
    #          0  1  2  3  4  5  6  7  8  9
    history = [7, 5, 6, 1, 3, 5, 6, 2, 7, 5, 6]
    # (5, 6) ends at 2 and at 6; at 2 the match goes on back to 7: length 3, so 1, 3, 5, ... follow
    assert ngram.scored(history, 3) == ([1, 3, 5], [3, 4, 5])
    assert ngram.lookup(history, 3) == [2, 7, 5]  # the lookup: the most recent match of up to n_max tokens
    assert ngram.scored([4, 4, 4], 5) == ([4], [2])  # the match at 1: one token follows before the end
    assert NgramDrafter(3, 4).scored(history, 3) == ([1, 3, 5], [3, 4, 5])
    assert NgramDrafter(4, 4).scored(history, 3) == ([], [])  # no match of n_min tokens
    assert ngram.scored([9], 5) == ([], []) and ngram.scored([1, 2, 3], 0) == ([], [])


def test_fixed_schedules_take_no_signals():
    assert FixedK(4).signals is False and FixedK(4).length("model", [0.1], 1, 4) == 4


# --- tiny real pair ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def middle(tiny_pairs):
    with load(tiny_pairs["middle"]) as pair:
        yield pair


@pytest.mark.parametrize("spec_type", ["draft", "ngram", "ngram,draft"])
@pytest.mark.parametrize("text", [REPETITIVE, "Once upon a time"])
def test_greedy_identity_with_the_cost_schedule(middle, spec_type, text):
    strategy = Strategy(spec_type, k_schedule="cost")
    prompt = middle.prompt_tokens(text)
    regular = middle.generate("target", prompt, 60, 8, GREEDY)
    spec = middle.generate("speculative", prompt, 60, 8, GREEDY, verify=EXACT, strategy=strategy)
    assert spec.tokens == regular.tokens
    assert spec.strategy == strategy.label(8) and sum(spec.draft_lengths) == spec.rounds
    assert spec.predicted_tokens_per_s is not None and middle.costs.source == "warm-up"
    assert middle.costs.k_max >= 8 and all(t > 0 for t in middle.costs.t_verify)


def test_sampled_generation_matches_the_target_with_the_cost_schedule(middle):
    # a free verify makes the schedule draft: the check then tests its stops, decided before each draw
    saved, middle.costs = middle.costs, Costs(1e-4, (1e-3,) * 9, 0.0, "test")
    try:
        sources: dict = {}
        check = strategy_check(middle, middle.prompt_tokens("Once upon a time"), Strategy(k_schedule="cost"), sources=sources)
    finally:
        middle.costs = saved
    assert check.same, (check.p_values, check.tv_distance)
    assert sources.get("model", 0) >= 300, sources


# --- costs from a stored calibration; sweep, records and report --------------------------------------

def test_costs_come_from_a_stored_calibration_of_the_same_setting(tiny_pairs, isolated):
    from gguf_bench.measure.costs import stored_costs
    from gguf_bench.models.pairs import PairFiles
    from gguf_bench.results.schema.calibration import CalibrationConfig, CalibrationRecord, CalibrationTimings
    from gguf_bench.results.schema.store import append_record, environment, models_record

    target, draft = tiny_pairs["middle"]
    files = PairFiles(target, draft, "tiny")
    record = CalibrationRecord(pair="tiny", config=CalibrationConfig(ngl=0, ngld=0, threads=1, ks=[8], k_max=8),
                               timings=CalibrationTimings(t_draft_s=0.5, t_verify_s=[1.0 + b for b in range(9)],
                                                          round_overhead_s=0.01),
                               time="2026-01-01T00:00:00+00:00", env=environment(), models=models_record(target, draft))
    (isolated / "results").mkdir(exist_ok=True)
    append_record(isolated / "results" / "tune-x.jsonl", record)
    costs = stored_costs(files, 0, 0, 1, 8)
    assert costs is not None and costs.source == "calibration" and costs.t_draft == 0.5 and costs.k_max == 8
    assert stored_costs(files, 0, 0, 1, 16) is None  # measured up to a batch of 9 only
    assert stored_costs(files, 0, 0, 2, 8) is None  # other threads
    assert stored_costs(PairFiles(target, target, "tiny"), 0, 0, 1, 8) is None  # another draft file
    with load(tiny_pairs["middle"]) as pair:  # a loaded pair takes them instead of measuring
        spec = pair.generate("speculative", pair.prompt_tokens("Once upon a time"), 20, 8, GREEDY,
                             strategy=Strategy(k_schedule="cost"))
        assert pair.costs == costs and spec.costs_source == "calibration"
        assert spec.draft_lengths[0] >= spec.rounds - 3  # its costs: a batch costs its tokens; no draft (a probe or two)


def _calibration(files, placement: str | None, t_draft: float):
    """A calibration record of `files` (a MoE pair) at -ngl 0 -ngld 0, 1 thread, at `placement` (its label)."""
    from gguf_bench.results.schema.calibration import CalibrationConfig, CalibrationRecord, CalibrationTimings
    from gguf_bench.results.schema.store import environment, models_record

    return CalibrationRecord(pair="moe", config=CalibrationConfig(ngl=0, ngld=0, threads=1, ks=[8], k_max=8,
                                                                  placement=placement),
                             timings=CalibrationTimings(t_draft_s=t_draft, t_verify_s=[1.0 + b for b in range(9)]),
                             time="2026-01-01T00:00:00+00:00", env=environment(), models=models_record(*files))


def test_stored_costs_serve_only_the_placement_they_were_measured_at(moe_pair, isolated):
    """A -cmoe verify curve (experts on the CPU) is not the default placement's, nor the other way round (issue 48);
    a results file that cannot be read as text is no source, and nothing else is silenced."""
    from gguf_bench.measure.costs import stored_costs
    from gguf_bench.measure.pair import LoadConfig, LoadedPair
    from gguf_bench.models.pairs import PairFiles
    from gguf_bench.options import ALL_LAYERS
    from gguf_bench.placing import Placing
    from gguf_bench.results.schema.store import append_record

    files = PairFiles(*moe_pair, "moe")
    (isolated / "results").mkdir(exist_ok=True)
    (isolated / "results" / "binary.jsonl").write_bytes(b"\xff\xfe\x00 not text")
    append_record(isolated / "results" / "tune-cmoe.jsonl", _calibration(moe_pair, "-cmoe", 0.25))
    assert stored_costs(files, 0, 0, 1, 8) is None  # the default placement: no calibration of its own
    cmoe = stored_costs(files, 0, 0, 1, 8, "-cmoe")
    assert cmoe is not None and cmoe.t_draft == 0.25 and cmoe.source == "calibration"
    assert stored_costs(files, 0, 0, 1, 8, "-ncmoe 2") is None  # experts of 2 layers on the CPU: another placement
    assert stored_costs(files, 0, 0, 1, 8, "-cmoed") is None  # the draft's experts, not the target's
    assert stored_costs(PairFiles(moe_pair[0], None, "moe"), 0, 0, 1, 8, "-cmoe").t_draft == 0.0  # n-gram: no draft
    append_record(isolated / "results" / "tune-default.jsonl", _calibration(moe_pair, None, 0.5))
    assert stored_costs(files, 0, 0, 1, 8).t_draft == 0.5
    assert stored_costs(files, 0, 0, 1, 8, "-cmoe").t_draft == 0.25  # still its own
    prompt_text, strategy = "Once upon a time", Strategy(k_schedule="cost")
    for placing, want in ((Placing(n_cpu_moe=ALL_LAYERS), cmoe), (Placing(n_cpu_moe=2), None)):
        with LoadedPair(files, LoadConfig(n_ctx=1024, threads=1, placing=placing)) as pair:  # a loaded pair asks too
            spec = pair.generate("speculative", pair.prompt_tokens(prompt_text), 8, 8, GREEDY, strategy=strategy)
            assert spec.costs_source == ("calibration" if want else "warm-up"), placing
            assert want is None or pair.costs == want


def test_sweep_stores_the_prediction_and_report_shows_it(tiny_pairs, isolated):
    from cli_helpers import invoke as cli

    from gguf_bench.results.schema.records import parse

    files = tiny_pairs["middle"]
    result = cli("sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", "cs", "-n", "24", "-K", "4",
                 "--prompt-ids", "code-edit", "--spec-type", "draft,ngram", "--k-schedule", "fixed,cost", "--no-draft-alone")
    assert result.exit_code == 0, result.output
    runs = [parse(r) for r in stored(isolated / "results" / "cs.jsonl")]
    cost = [r for r in runs if r.strategy is not None and r.strategy.k_schedule == "cost"]
    assert {r.label for r in cost} == {"draft cost K=4", "ngram(1-4) cost K=4"}
    assert all(r.metrics.predicted_tokens_per_s > 0 and r.metrics.costs_source == "warm-up" for r in cost)
    assert all(sum(r.metrics.draft_lengths) == r.metrics.rounds and len(r.metrics.draft_lengths) == 5 for r in cost)
    fixed = [r for r in runs if r.strategy is not None and r.strategy.k_schedule == "fixed"]
    assert fixed and all(r.metrics.predicted_tokens_per_s is None for r in fixed)
    table = cli("report", str(isolated / "results" / "cs.jsonl"))
    assert table.exit_code == 0 and "draft cost K=4" in table.output and "pred." in table.output
    assert "what the cost schedule predicted" in table.output
    for label in ("draft cost K=4", "ngram(1-4) cost K=4"):  # and how many rounds drafted how many tokens, summed
        summed = [sum(c) for c in zip(*(r.metrics.draft_lengths for r in cost if r.label == label))]
        assert f"{label}: " + " ".join(f"{n}:{c}" for n, c in enumerate(summed) if c) in table.output
