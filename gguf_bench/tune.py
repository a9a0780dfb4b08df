"""`gguf-bench tune`: predict tokens/s for every draft length and offload setting from a few
measurements, and pick the best without running every cell of a sweep. Holds no printing.

Cost model (Leviathan et al. 2023, with a measured instead of an assumed verify cost). One greedy
round with draft length K:

    time(K)   = K * t_draft + t_verify(K + 1) + t_overhead(K)
    tokens(K) = 1 + sum_{i=1..K} prod_{j<=i} a_j

t_draft: the draft's one-token decode; t_verify(b): the target's decode of a batch of b tokens with
b logit rows; a_j: the probability that draft position j is accepted given that it was reached.
After a fully accepted round the draft has not decoded its last draft token yet, so the next round
starts with a 2-token draft decode (t_draft2) instead of a 1-token one: counted, with probability
prod_{j<=K} a_j.

Calibration measures, per offload setting: t_draft, t_draft2 and t_verify(b) for b = 1..K_max+1
(median of a few repetitions, at the context position a generation passes through halfway), the
time the loop spends outside those decodes, and one greedy speculative run at K_max per prompt.

Prediction, greedy: which draft tokens a round accepts depends only on the text. In a greedy run
the draft's j-th proposal is accepted exactly when the draft's greedy next token, given the text
so far, equals the target's. One batched pass of the draft over each calibration text gives that
match flag for every position; a round of any K then accepts the run of matches that follows its
first token, capped at K. So one run gives every K's rounds exactly, end of generation and the
shorter last round included, and no per-position independence has to be assumed (rounds of a
long K start right after rejections, where acceptance is lower than on average: a_j measured at
K_max would understate a_1 for short K). The closed form above (`expected_tokens`,
`steady_tokens_per_s`) is the same model for n_predict -> infinity and independent a_j.

Tokens/s is predicted the way a sweep measures it: per prompt, generated tokens over decode time
(the first token comes with the prompt and costs no decode time), then the mean over prompts.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gguf_bench.backend import ALL_LAYERS, Model
from gguf_bench.bench import LoadConfig, LoadedPair, PairFiles, load_config_dict
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.prompts import Prompt
from gguf_bench.results import environment, models_record, now_iso
from gguf_bench.sampling import SamplingConfig
from gguf_bench.speculative import GenerationResult

KIND = "calibration"
DEFAULT_REPS = 5


# --- the model -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """Seconds per step as the loop pays them (wall time: llama_decode plus the Python around it)."""

    t_draft: float  # draft: decode 1 token, read its logits, argmax
    t_draft2: float  # draft: decode 2 tokens (the catch-up after a fully accepted round), argmax
    t_verify: tuple[float, ...]  # t_verify[b-1]: target decodes b tokens with b logit rows, argmax of each row
    round_overhead: float  # per round, besides those steps: rewinds, acceptance bookkeeping, the loop

    @property
    def t_target(self) -> float:
        """What regular generation pays per token: a one-token decode, reading its logits, argmax
        (its own Python overhead, measured apart as regular_overhead_s, is part of it)."""
        return self.t_verify[0]

    @property
    def k_max(self) -> int:
        return len(self.t_verify) - 1

    def verify(self, b: int) -> float:
        if not 1 <= b <= len(self.t_verify):
            raise ConfigError(f"no verify timing for a batch of {b}: calibrate with a K range reaching {b - 1}")
        return self.t_verify[b - 1]

    def draft_cost_ratio(self) -> float:
        """c = t_draft / t_target(1): the draft's cost per token relative to the target's."""
        return self.t_draft / self.t_verify[0]

    def verify_curve(self) -> list[float]:
        """t_verify(b) / t_verify(1) for b = 1..: 1.0 flat would be an ideal (GPU-like) verifier."""
        return [t / self.t_verify[0] for t in self.t_verify]

    def round_s(self, drafted: int, catch_up: bool) -> float:
        """One round: `drafted` draft decodes (the first a 2-token one after a full round), one verify."""
        draft = drafted * self.t_draft + (self.t_draft2 - self.t_draft if catch_up and drafted else 0.0)
        return draft + self.verify(drafted + 1) + self.round_overhead


def expected_tokens(a: Sequence[float], k: int) -> float:
    """Tokens one round yields: 1 + sum_{i=1..k} prod_{j<=i} a_j (a[0] is a_1)."""
    if k > len(a):
        raise ConfigError(f"acceptance known for {len(a)} draft positions, not {k}")
    total, reach = 1.0, 1.0
    for i in range(k):
        reach *= a[i]  # probability that draft position i+1 is accepted
        total += reach
    return total


def steady_tokens_per_s(tm: Timings, a: Sequence[float], k: int) -> float:
    """Long-run tokens/s of the closed form: E(k) / (k t_draft + t_verify(k+1) + overhead + catch-up)."""
    p_full = math.prod(a[:k])  # the previous round was fully accepted: this one starts with 2 draft tokens
    time_round = k * tm.t_draft + p_full * (tm.t_draft2 - tm.t_draft) + tm.verify(k + 1) + tm.round_overhead
    return expected_tokens(a, k) / time_round


@dataclass(frozen=True)
class Round:
    drafted: int
    accepted: int


def simulate_rounds(matches: Sequence[bool], k: int, n_predict: int, ends_with_eog: bool = False) -> list[Round]:
    """The rounds a greedy speculative run with draft length k makes over a known text.

    `matches[i]` (i >= 1): the draft's greedy prediction of text token i, given tokens 0..i-1, equals
    token i. The text is what the target generated; token 0 comes from the prompt's decode. With
    `ends_with_eog` its last entry is the end-of-generation token the target produced (not output).
    Mirrors generate_speculative: a round from token s drafts min(k, n_predict - (s+1) - 1) tokens,
    accepts the run of matches after s, and the target adds one token of its own; a draft that
    proposes the end-of-generation token stops there.
    """
    n = min(len(matches), n_predict + int(ends_with_eog))
    rounds: list[Round] = []
    s = 0  # index of x0, the round's first token (in the output, not yet decoded by the target)
    while s < n - 1:
        k_round = max(0, min(k, n_predict - s - 2))
        acc = 0
        while acc < k_round and s + acc + 1 < n and matches[s + acc + 1]:
            acc += 1
        drafted = acc if ends_with_eog and s + acc == n - 1 and acc else k_round  # the draft stops after EOG
        rounds.append(Round(drafted, acc))
        s += acc + 1
    return rounds


@dataclass(frozen=True)
class Text:
    """One calibration prompt's greedy text as match flags (see simulate_rounds)."""

    prompt_id: str
    matches: tuple[bool, ...]
    n_tokens: int  # tokens output (an end-of-generation token is not one)
    stopped_by_eog: bool

    def decode_s(self, tm: Timings, k: int, n_predict: int) -> tuple[float, list[Round]]:
        """Predicted decode time of a speculative run with draft length k, and its rounds."""
        rounds = simulate_rounds(self.matches, k, n_predict, self.stopped_by_eog)
        total, full = 0.0, False
        for r in rounds:
            total += tm.round_s(r.drafted, catch_up=full)
            full = r.drafted > 0 and r.accepted == r.drafted
        return total, rounds

    def regular_decode_s(self, tm: Timings) -> float:
        """Target alone: one decode per token after the first (and one for the EOG token it then sampled)."""
        return (self.n_tokens - 1 + int(self.stopped_by_eog)) * tm.t_target


@dataclass(frozen=True)
class Prediction:
    k: int
    tokens_per_s: float  # mean over prompts of tokens / decode time, as a sweep reports it
    baseline_tokens_per_s: float  # the target alone, predicted the same way
    tokens_per_round: float
    round_ms: float
    acceptance: float  # accepted / drafted over the simulated rounds

    @property
    def gain_pct(self) -> float:
        return 100.0 * (self.tokens_per_s / self.baseline_tokens_per_s - 1.0)


def _rate(n_tokens: int, seconds: float) -> float:
    return n_tokens / seconds if seconds > 0 else float("nan")


def predict(tm: Timings, texts: Sequence[Text], k: int, n_predict: int) -> Prediction:
    """Tokens/s of draft length k over the calibration texts, and of the target alone."""
    if not texts:
        raise BenchError("no calibration texts to predict from")
    rates, baselines, all_rounds, total_s = [], [], [], 0.0
    for text in texts:
        seconds, rounds = text.decode_s(tm, k, n_predict)
        rates.append(_rate(text.n_tokens, seconds))
        baselines.append(_rate(text.n_tokens, text.regular_decode_s(tm)))
        all_rounds += rounds
        total_s += seconds
    drafted = sum(r.drafted for r in all_rounds)
    accepted = sum(r.accepted for r in all_rounds)
    n_rounds = max(1, len(all_rounds))
    return Prediction(k=k, tokens_per_s=statistics.fmean(rates), baseline_tokens_per_s=statistics.fmean(baselines),
                      tokens_per_round=(accepted + len(all_rounds)) / n_rounds, round_ms=1000 * total_s / n_rounds,
                      acceptance=accepted / drafted if drafted else float("nan"))


# --- calibration records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """A stored calibration record, read back."""

    pair: str
    ngl: str  # as report.to_frame writes it: "0", "16", "all"
    ngld: str
    n_predict: int
    ks: tuple[int, ...]
    timings: Timings
    texts: tuple[Text, ...]
    a: tuple[float, ...]  # a_j measured in the K_max runs (accepted_at / reached_at), for display

    @classmethod
    def from_record(cls, rec: dict) -> Calibration:
        if rec.get("kind") != KIND:
            raise BenchError("not a calibration record")
        cfg, tm, acc = rec["config"], rec["timings"], rec["acceptance"]
        timings = Timings(t_draft=tm["t_draft_s"], t_draft2=tm["t_draft2_s"], t_verify=tuple(tm["t_verify_s"]),
                          round_overhead=tm["round_overhead_s"])
        texts = tuple(Text(p["prompt_id"], tuple(bool(m) for m in p["matches"]), p["n_tokens"], p["stopped_by_eog"])
                      for p in acc["prompts"])
        return cls(pair=rec["pair"], ngl=str(cfg["ngl"]), ngld=str(cfg["ngld"]), n_predict=cfg["n_predict"],
                   ks=tuple(cfg["ks"]), timings=timings, texts=texts, a=tuple(acc["a"]))

    def predict(self, k: int) -> Prediction:
        return predict(self.timings, self.texts, k, self.n_predict)

    def predictions(self, ks: Sequence[int] | None = None) -> list[Prediction]:
        return [self.predict(k) for k in (ks or self.ks)]


def best(calibrations: Sequence[Calibration]) -> tuple[Calibration, Prediction]:
    """The setting and K with the highest predicted tokens/s."""
    options = [(cal, p) for cal in calibrations for p in cal.predictions()]
    if not options:
        raise BenchError("nothing calibrated")
    return max(options, key=lambda o: o[1].tokens_per_s)


def prediction_rows(calibrations: Sequence[Calibration]) -> list[dict]:
    """Flat rows (what `tune --json` prints), the best one marked."""
    top = best(calibrations) if calibrations else None
    rows = []
    for cal in calibrations:
        for p in cal.predictions():
            rows.append({"pair": cal.pair, "ngl": cal.ngl, "ngld": cal.ngld, "k": p.k,
                         "predicted_tokens_per_s": p.tokens_per_s, "predicted_gain_pct": p.gain_pct,
                         "predicted_baseline_tokens_per_s": p.baseline_tokens_per_s,
                         "tokens_per_round": p.tokens_per_round, "round_ms": p.round_ms,
                         "draft_cost": p.k * cal.timings.draft_cost_ratio(),
                         "verify_ratio": cal.timings.verify_curve()[p.k],
                         "best": top is not None and top[0] is cal and top[1].k == p.k})
    return rows


def predicted_frame(records: Sequence[dict]):
    """Predictions from every calibration record among `records`, one row per (setting, K), in the
    columns report uses: pair, ngl, ngld, temperature, n_predict, k, predicted_tokens_per_s,
    predicted_gain_pct, predicted_baseline_tokens_per_s, predicted_best. The latest record of a
    (pair, ngl, ngld, n_predict) wins."""
    import pandas as pd

    latest: dict[tuple, Calibration] = {}
    for rec in sorted((r for r in records if r.get("kind") == KIND), key=lambda r: r.get("time") or ""):
        cal = Calibration.from_record(rec)
        latest[(cal.pair, cal.ngl, cal.ngld, cal.n_predict)] = cal
    rows = []
    for cal in latest.values():
        preds = cal.predictions()
        top = max(p.tokens_per_s for p in preds)
        rows += [{"pair": cal.pair, "ngl": cal.ngl, "ngld": cal.ngld, "temperature": 0.0, "n_predict": cal.n_predict,
                  "k": p.k, "predicted_tokens_per_s": p.tokens_per_s, "predicted_gain_pct": p.gain_pct,
                  "predicted_baseline_tokens_per_s": p.baseline_tokens_per_s, "predicted_best": p.tokens_per_s == top}
                 for p in preds]
    columns = ["pair", "ngl", "ngld", "temperature", "n_predict", "k", "predicted_tokens_per_s", "predicted_gain_pct",
               "predicted_baseline_tokens_per_s", "predicted_best"]
    return pd.DataFrame(rows, columns=columns)


# --- offload settings --------------------------------------------------------------------------------


def layer_label(n: int) -> str:
    return "all" if n == ALL_LAYERS else str(n)


def effective_settings(ngls: Sequence[int], nglds: Sequence[int], gpu: bool, target_layers: int,
                       draft_layers: int) -> tuple[list[tuple[int, int]], list[str]]:
    """The (ngl, ngld) pairs that differ on this build, and a warning for each request folded away.

    Without GPU offload every request runs on the CPU: only (0, 0) is calibrated. With it, a value
    above a model's layer count (+1 for the output layer, as llama.cpp counts) is the same as 'all'.
    """
    warnings: list[str] = []
    if not gpu:
        if any(ngls) or any(nglds):
            asked = ", ".join(f"-ngl {layer_label(a)} -ngld {layer_label(b)}" for a in ngls for b in nglds if a or b)
            warnings.append(f"this llama-cpp-python build cannot offload to a GPU: calibrating -ngl 0 -ngld 0 only "
                            f"(not {asked}); reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\" to tune offload")
        return [(0, 0)], warnings

    def fold(values: Sequence[int], n_layers: int, flag: str) -> list[int]:
        out: list[int] = []
        for v in values:
            eff = ALL_LAYERS if v >= n_layers + 1 else v  # llama.cpp counts the output layer too
            if eff in out:
                warnings.append(f"{flag} {layer_label(v)} offloads the same layers as an earlier value: calibrated once")
            else:
                out.append(eff)
        return out

    return [(a, b) for a in fold(ngls, target_layers, "-ngl") for b in fold(nglds, draft_layers, "-ngld")], warnings


# --- calibration (measures; loads models) -----------------------------------------------------------


def check_k_range(ks: Sequence[int]) -> None:
    if not ks:
        raise ConfigError("no draft lengths given (-K)")
    if min(ks) < 1:
        raise ConfigError("draft lengths (-K) must be >= 1")


def _timed_eval(model: Model, tokens: list[int], n_logits: int) -> tuple[float, float]:
    """(wall seconds, seconds inside llama_decode) of one loop step: eval, then argmax of each row read."""
    clock, t = model.llama_decode_s, time.perf_counter()
    np.argmax(model.eval(tokens, n_logits), axis=1)
    return time.perf_counter() - t, model.llama_decode_s - clock


def _filler(prompts: list[list[int]], n: int) -> list[int]:
    """n tokens from the prompts, repeated: content does not change a decode's cost, position does."""
    pool = [t for p in prompts for t in p]
    return (pool * (n // len(pool) + 1))[:n]


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in samples), statistics.median(i for _, i in samples)


def measure_decodes(pair: LoadedPair, prompts: list[list[int]], n_predict: int, k_max: int, reps: int) -> dict:
    """t_draft, t_draft2 and t_verify(b) for b = 1..k_max+1, median wall seconds of `reps` synthetic rounds.

    Taken at the mean prompt length + n_predict/2, the position a generation passes halfway. Each
    synthetic round is a loop round without the sampling: the draft decodes 2 tokens (the catch-up
    after a full round) and then 1, the target decodes b tokens with b logit rows, and both caches
    are rewound. The models alternate as in the loop (their CPU thread pools share the cores), and
    batch sizes are interleaved so that a slow spell of the machine spreads over all of them.
    """
    position = round(statistics.fmean(len(p) for p in prompts)) + n_predict // 2
    fill = _filler(prompts, position + k_max + 1)
    context, batch = fill[:position], fill[position:]
    target, draft = pair.target, pair.draft
    for model in (target, draft):
        model.rewind(0)
        model.eval(context, 1)
    verify: dict[int, list[tuple[float, float]]] = {b: [] for b in range(1, k_max + 2)}
    draft1: list[tuple[float, float]] = []
    draft2: list[tuple[float, float]] = []
    for _ in range(reps):
        for b in verify:
            draft2.append(_timed_eval(draft, batch[:2], 1))
            draft1.append(_timed_eval(draft, batch[2:3] or batch[:1], 1))
            draft.rewind(position)
            verify[b].append(_timed_eval(target, batch[:b], b))
            target.rewind(position)
    for model in (target, draft):
        model.rewind(0)
    t_verify = [_medians(verify[b]) for b in verify]
    (t_draft, t_draft_in), (t_draft2, _) = _medians(draft1), _medians(draft2)
    return {"position": position, "t_verify_s": [w for w, _ in t_verify], "t_draft_s": t_draft, "t_draft2_s": t_draft2,
            "verify_python_s": [max(0.0, w - i) for w, i in t_verify], "draft_python_s": max(0.0, t_draft - t_draft_in)}


def match_flags(draft: Model, prompt: list[int], res: GenerationResult) -> list[bool]:
    """Per output token i >= 1: whether the draft's greedy token after prompt + tokens[:i] is tokens[i];
    after an end-of-generation stop, one more flag: whether the draft would end there too."""
    tokens = res.tokens
    draft.rewind(0)
    draft.eval(prompt, 1)
    preds: list[int] = []
    feed = tokens if res.stopped_by_eog else tokens[:-1]  # row r predicts token r+1
    for start in range(0, len(feed), draft.n_batch):
        chunk = feed[start:start + draft.n_batch]
        preds += np.argmax(draft.eval(chunk, len(chunk)), axis=1).tolist()
    draft.rewind(0)
    flags = [False] + [p == t for p, t in zip(preds, tokens[1:])]
    if res.stopped_by_eog and tokens:
        flags.append(draft.is_eog(preds[-1]))
    elif res.stopped_by_eog:
        flags = [False]  # the very first token ended generation: no rounds
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


def _in_loop(runs: list[GenerationResult]) -> dict:
    """What the K_max runs measured directly (kept for diagnosis; the prediction uses the timings)."""
    rounds = sum(r.rounds for r in runs)
    drafted = sum(r.drafted for r in runs)
    return {"rounds": rounds, "drafted": drafted, "accepted": sum(r.accepted for r in runs),
            "decode_s": sum(r.decode_s for r in runs), "target_decode_s": sum(r.target_decode_s for r in runs),
            "draft_decode_s": sum(r.draft_decode_s for r in runs), "sample_s": sum(r.sample_s for r in runs),
            "other_s": sum(r.other_s for r in runs),
            "overhead_s_per_round": sum(r.sample_s + r.other_s for r in runs) / rounds if rounds else None,
            "draft_decode_s_per_token": sum(r.draft_decode_s for r in runs) / drafted if drafted else None,
            "target_decode_s_per_round": sum(r.target_decode_s for r in runs) / rounds if rounds else None,
            "tokens_per_s": [r.tokens_per_s for r in runs]}


@dataclass
class CalibrationEvents:
    """Progress callbacks (the CLI's status line); calibration itself prints nothing."""

    step: Callable[[str], None] = lambda what: None


def calibrate(files: PairFiles, load: LoadConfig, prompts: Sequence[Prompt], n_predict: int, ks: Sequence[int],
              reps: int = DEFAULT_REPS, name: str | None = None, events: CalibrationEvents = CalibrationEvents()) -> dict:
    """Measure one offload setting; return the calibration record (not stored here)."""
    check_k_range(ks)
    if reps < 1:
        raise ConfigError(f"--reps must be >= 1, got {reps}")
    if n_predict < 2:
        raise ConfigError(f"--n-predict must be >= 2 to tune (one token comes with the prompt), got {n_predict}")
    k_max = max(ks)
    greedy = SamplingConfig()
    started = time.perf_counter()
    with LoadedPair(files, load) as pair:
        chat_ok = pair.target.has_chat_template()
        tokens = [pair.prompt_tokens(p.text, p.chat and chat_ok) for p in prompts]
        for t in tokens:
            pair.check_fits(len(t), n_predict, k_max)
        events.step("warm-up")
        pair.generate("speculative", tokens[0], min(16, n_predict), k_max, greedy)
        runs, texts = [], []
        for prompt, toks in zip(prompts, tokens):
            events.step(f"speculative run K={k_max} on {prompt.id}")
            res = pair.generate("speculative", toks, n_predict, k_max, greedy)
            runs.append(res)
            texts.append(Text(prompt.id, tuple(match_flags(pair.draft, toks, res)), res.n_tokens, res.stopped_by_eog))
        events.step(f"timing decodes of 1..{k_max + 1} tokens")
        decodes = measure_decodes(pair, tokens, n_predict, k_max, reps)
        offload = {"target": pair.offload_label("target"), "draft": pair.offload_label("draft")}
    round_overhead = _round_overhead(runs, texts, decodes, k_max, n_predict)
    timings = Timings(decodes["t_draft_s"], decodes["t_draft2_s"], tuple(decodes["t_verify_s"]), max(0.0, round_overhead))
    predicted_s = sum(t.decode_s(timings, k_max, n_predict)[0] for t in texts)
    reached = [sum(r.reached_at[j] for r in runs) for j in range(k_max)]
    accepted = [sum(r.accepted_at[j] for r in runs) for j in range(k_max)]
    return {
        "kind": KIND, "time": now_iso(), "tune": name, "pair": files.name,
        "config": {**load_config_dict(load), "temperature": 0.0, "prompts": [p.id for p in prompts],
                   "n_predict": n_predict, "ks": list(ks), "k_max": k_max, "reps": reps,
                   "position": decodes["position"]},
        "offload": offload,
        "timings": {"t_draft_s": timings.t_draft, "t_draft2_s": timings.t_draft2, "t_verify_s": list(timings.t_verify),
                    "round_overhead_s": timings.round_overhead, "round_overhead_raw_s": round_overhead,
                    "regular_overhead_s": decodes["verify_python_s"][0], "draft_python_s": decodes["draft_python_s"],
                    "verify_python_s": decodes["verify_python_s"],
                    # the K_max runs themselves, and what the timings predict for them (a check of the calibration)
                    "in_loop": _in_loop(runs) | {"predicted_decode_s": predicted_s}},
        "acceptance": {"a": [acc / rea if rea else None for acc, rea in zip(accepted, reached)],
                       "reached_at": reached, "accepted_at": accepted,
                       "prompts": [{"prompt_id": t.prompt_id, "n_tokens": t.n_tokens, "stopped_by_eog": t.stopped_by_eog,
                                    "matches": [int(m) for m in t.matches]} for t in texts]},
        "calibration_s": time.perf_counter() - started,
        "env": environment(), "models": models_record(files.target, files.draft),
    }


# --- --check: predicted against measured ----------------------------------------------------------


def check_ks(cal: Calibration, k: int) -> list[int]:
    """The recommended K and its neighbours, within the calibrated range."""
    return [x for x in (k - 1, k, k + 1) if x in cal.ks]


def check_rows(cal: Calibration, records: Sequence[dict]) -> list[dict]:
    """Sweep run records of one setting -> per K (0: the target alone) the measured mean tokens/s over
    prompts next to the prediction, and the prediction's error in percent of the measurement."""
    by_k: dict[int, list[float]] = {}
    for r in records:
        m = r.get("metrics") or {}
        if r.get("error") or m.get("tokens_per_s") is None or r.get("mode") not in ("target", "speculative"):
            continue
        k = r["config"]["k"] if r["mode"] == "speculative" else 0
        by_k.setdefault(k, []).append(m["tokens_per_s"])
    rows = []
    for k in sorted(by_k):
        p = cal.predict(k) if k else cal.predict(min(cal.ks))
        predicted = p.tokens_per_s if k else p.baseline_tokens_per_s
        measured = statistics.fmean(by_k[k])
        rows.append({"k": k, "ngl": cal.ngl, "ngld": cal.ngld, "predicted_tokens_per_s": predicted,
                     "measured_tokens_per_s": measured, "error_pct": 100.0 * (predicted / measured - 1.0),
                     "runs": len(by_k[k])})
    base = next((r["measured_tokens_per_s"] for r in rows if r["k"] == 0), None)
    for r in rows:
        r["measured_gain_pct"] = 100.0 * (r["measured_tokens_per_s"] / base - 1.0) if base and r["k"] else None
    return rows
