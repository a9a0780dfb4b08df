"""`gguf-bench tune`'s measurements: one calibration record per offload setting, and the --check runs.

Calibration measures, per offload setting: t_draft, t_draft2 and t_verify(b) for b = 1..K_max+1
(median of a few repetitions, at the context position a generation passes through halfway), the
time the loop spends outside those decodes, one greedy speculative run at K_max per prompt, and each
prompt's evaluation by the target and by the draft (the request's first-token term).

What the record predicts is results/predictions/costmodel.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gguf_bench.decoding.loop import GenerationResult
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.errors import ConfigError
from gguf_bench.measure.costs import DecodeTimer
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.options import layers_label
from gguf_bench.results.predictions.costmodel import (
    DEFAULT_REPS,
    Text,
    Timings,
    simulate_rounds,
)
from gguf_bench.results.schema.calibration import (
    CalibrationAcceptance,
    CalibrationConfig,
    CalibrationRecord,
    CalibrationTimings,
    InLoop,
    PromptText,
)
from gguf_bench.results.schema.records import Mode
from gguf_bench.results.schema.store import environment, models_record, now_iso
from gguf_bench.runtimes.llama_cpp import Model

# --- calibration (measures; loads models) -----------------------------------------------------------


def check_k_range(ks: Sequence[int]) -> None:
    if not ks:
        raise ConfigError("no draft lengths given (-K)")
    if min(ks) < 1:
        raise ConfigError("draft lengths (-K) must be >= 1")


def _spread(total: int, parts: int) -> list[int]:
    """`total` repetitions over `parts` slots, as evenly as possible: 5 over 4 -> [2, 1, 1, 1]."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def match_flags(draft: Model, prompt: list[int], res: GenerationResult) -> list[bool]:
    """Per output token i >= 1: whether the draft's greedy token after prompt + tokens[:i] is tokens[i];
    after an end-of-generation stop, one more flag: whether the draft would end there too.

    Where the speculative run `res` (greedy) drafted a position with the text so far as its history,
    its own draft token decides: that is the draft as the loop runs it, one token at a time. The
    rest (the target's bonus token after a fully accepted round) comes from one batched pass of the
    draft over the text, which can round differently from one-token decodes and so flip a near-tie.
    """
    flags = _batched_flags(draft, prompt, res)
    for base, batch in res.verify_log:  # (position of x0, [x0, d1..dk]) per round
        s = base - len(prompt)  # x0 is output token s
        for j, tok in enumerate(batch[1:], 1):
            i = s + j
            if i >= len(flags):
                break
            flags[i] = tok == res.tokens[i] if i < len(res.tokens) else draft.is_eog(tok)
            if not flags[i]:
                break  # the draft's later tokens continued a history that is not the text
    return flags


def _batched_flags(draft: Model, prompt: list[int], res: GenerationResult) -> list[bool]:
    tokens = res.tokens
    draft.rewind(0)
    draft.eval(prompt, 1)
    preds: list[int] = []
    feed = tokens if res.stopped_by_eog else tokens[:-1]  # row r predicts token r+1
    for start in range(0, len(feed), draft.n_batch):
        chunk = feed[start:start + draft.n_batch]
        preds += np.argmax(draft.eval(chunk, len(chunk)), axis=1).tolist()
    draft.rewind(0)
    if not tokens:
        return [False]  # the very first token ended generation: no rounds
    flags = [False] + [p == t for p, t in zip(preds, tokens[1:])]
    if res.stopped_by_eog:
        flags.append(draft.is_eog(preds[-1]))
    return flags


def _round_overhead(runs: list[GenerationResult], texts: list[Text], decodes: dict, k_max: int, n_predict: int) -> float:
    """Per-round time of the K_max runs outside llama_decode and outside the decode steps' own Python.

    The runs' time outside llama_decode (sampling/acceptance + the rest: sample_s + other_s) holds
    the Python around each eval and the argmax of its rows, which the decode timings already
    include (measured apart as *_python_s); what remains per round is the round overhead.
    """
    outside = sum(r.sample_s + r.other_s for r in runs)
    rounds = [rd for t in texts for rd in simulate_rounds(t.matches, k_max, n_predict, t.stopped_by_eog)]
    in_steps = sum(rd.drafted * decodes["draft_python_s"] + decodes["verify_python_s"][rd.drafted] for rd in rounds)
    return (outside - in_steps) / len(rounds) if rounds else 0.0


def _in_loop(runs: list[GenerationResult], predicted_decode_s: float) -> InLoop:
    """What the K_max runs measured directly (kept for diagnosis; the prediction uses the timings)."""
    rounds = sum(r.rounds for r in runs)
    drafted = sum(r.drafted for r in runs)
    return InLoop(rounds=rounds, drafted=drafted, accepted=sum(r.accepted for r in runs),
                  decode_s=sum(r.decode_s for r in runs), target_decode_s=sum(r.target_decode_s for r in runs),
                  draft_decode_s=sum(r.draft_decode_s for r in runs), sample_s=sum(r.sample_s for r in runs),
                  other_s=sum(r.other_s for r in runs),
                  overhead_s_per_round=sum(r.sample_s + r.other_s for r in runs) / rounds if rounds else None,
                  draft_decode_s_per_token=sum(r.draft_decode_s for r in runs) / drafted if drafted else None,
                  target_decode_s_per_round=sum(r.target_decode_s for r in runs) / rounds if rounds else None,
                  tokens_per_s=[r.tokens_per_s for r in runs], predicted_decode_s=predicted_decode_s)


PROMPT_REPS = 3  # timings of each prompt's evaluation per model (the median is kept)


def time_prompts(pair: LoadedPair, tokens: Sequence[list[int]], reps: int = PROMPT_REPS
                 ) -> tuple[list[float], list[float]]:
    """Per prompt, the target's and the draft's evaluation of it as the loop starts a run (the prompt in one call,
    the last row's logits; after the depth's filler where there is one), median of `reps`: the request's first-token
    term (costmodel.Text.request_s)."""
    def median_s(model, toks: list[int]) -> float:
        times = []
        for _ in range(reps):
            model.rewind(0)
            t0 = time.perf_counter()
            model.eval(toks, 1)
            times.append(time.perf_counter() - t0)
        model.rewind(0)
        return float(np.median(times))
    target = [median_s(pair.target, t) for t in tokens]
    draft = [median_s(pair.draft, t) for t in tokens] if pair.draft is not None else []
    return target, draft


@dataclass
class CalibrationEvents:
    """Progress callbacks (the CLI's status line); calibration itself prints nothing."""

    step: Callable[[str], None] = lambda what: None
    # the decode timings as measured (DecodeTimer.result), beside the record: tune reads the target's scatter from it
    timed: Callable[[dict], None] = lambda decodes: None


def calibrate(files: PairFiles, load: LoadConfig, prompts: Sequence[Prompt], n_predict: int, ks: Sequence[int],
              reps: int = DEFAULT_REPS, events: CalibrationEvents = CalibrationEvents(), depth: int = 0) -> CalibrationRecord:
    """Measure one offload setting (at `depth` tokens of filler before each prompt: measure/inputs/depth.py); return the
    calibration record (not stored here; its `tune` name is the caller's to set)."""
    check_k_range(ks)
    if reps < 1:
        raise ConfigError(f"--reps must be >= 1, got {reps}")
    if n_predict < 2:
        raise ConfigError(f"--n-predict must be >= 2 to tune (one token comes with the prompt), got {n_predict}")
    k_max = max(ks)
    greedy = SamplingConfig()
    started = time.perf_counter()
    with LoadedPair(files, load) as pair:
        prepared = PreparedPrompts.prepare(pair.target, prompts, depth)
        if depth:
            events.step(f"filling {depth} tokens of context")
            pair.at_depth(prepared.filler_at(depth))  # every run and decode timing after it, as sweep -d runs them
        tokens = [prepared.after(p.id, depth) for p in prompts]
        for t in tokens:
            pair.check_fits(depth + len(t), n_predict, k_max)
        events.step("warm-up")
        pair.generate(Mode.SPECULATIVE, tokens[0], min(16, n_predict), k_max, greedy)
        runs, texts = [], []
        timer = DecodeTimer(tokens, n_predict, k_max)
        for prompt, toks, share in zip(prompts, tokens, _spread(reps, len(prompts))):
            events.step(f"speculative run K={k_max} on {prompt.id}")
            res = pair.generate(Mode.SPECULATIVE, toks, n_predict, k_max, greedy)
            runs.append(res)
            texts.append(Text(prompt.id, tuple(match_flags(pair.draft, toks, res)), res.n_tokens, res.stopped_by_eog,
                              tuple(toks), tuple(res.tokens)))
            if share:
                events.step(f"timing decodes of 1..{k_max + 1} tokens")
                timer.run(pair, share)  # `reps` in all, spread between the runs
        decodes = timer.result()
        events.timed(decodes)
        events.step("timing the prompts' evaluation")
        prompt_target_s, prompt_draft_s = time_prompts(pair, tokens, min(PROMPT_REPS, reps))
        offload = pair.offload()
    round_overhead = _round_overhead(runs, texts, decodes, k_max, n_predict)
    timings = Timings(decodes["t_draft_s"], decodes["t_draft2_s"], tuple(decodes["t_verify_s"]), max(0.0, round_overhead))
    predicted_s = sum(t.decode_s(timings, k_max, n_predict)[0] for t in texts)
    reached = [sum(r.reached_at[j] for r in runs) for j in range(k_max)]
    accepted = [sum(r.accepted_at[j] for r in runs) for j in range(k_max)]
    return CalibrationRecord(
        time=now_iso(), tune=None, pair=files.name, offload=offload,
        config=CalibrationConfig(ngl=layers_label(load.ngl), ngld=layers_label(load.ngld), n_ctx=load.n_ctx,
                                 threads=load.threads, seed=load.seed, temperature=0.0, prompts=[p.id for p in prompts],
                                 n_predict=n_predict, ks=list(ks), k_max=k_max, reps=decodes["samples"],
                                 position=decodes["position"], depth=depth,
                                 placement=load.placement_label or None),
        timings=CalibrationTimings(
            t_draft_s=timings.t_draft, t_draft2_s=timings.t_draft2, t_verify_s=list(timings.t_verify),
            round_overhead_s=timings.round_overhead, round_overhead_raw_s=round_overhead,
            regular_overhead_s=decodes["verify_python_s"][0], draft_python_s=decodes["draft_python_s"],
            verify_python_s=decodes["verify_python_s"],
            in_loop=_in_loop(runs, predicted_s),  # the K_max runs themselves, and what the timings predict for them
            prompt_target_s=prompt_target_s, prompt_draft_s=prompt_draft_s),
        acceptance=CalibrationAcceptance(
            a=[acc / rea if rea else None for acc, rea in zip(accepted, reached)], reached_at=reached, accepted_at=accepted,
            prompts=[PromptText(prompt_id=t.prompt_id, n_tokens=t.n_tokens, stopped_by_eog=t.stopped_by_eog,
                                matches=[int(m) for m in t.matches], prompt=list(t.prompt), tokens=list(t.tokens))
                     for t in texts]),
        calibration_s=time.perf_counter() - started, env=environment(), models=models_record(files.target, files.draft))
