"""Evidence that speculative generation keeps the target's output quality.

- The multiplication benchmark (as in llama-ssp): success rates of regular and speculative
  generation with 95% Wilson intervals, a two-proportion z-test, and at temperature 0 the share of
  prompts whose speculative output is identical to the regular one.
- A distribution check: sample the next m tokens many times both ways and compare the token
  distributions position by position with a two-sample chi-square test, and say how large a difference
  (in total variation) the test could have detected: a test too weak to tell says so instead of 'matches'.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq
from scipy.stats import chi2, chi2_contingency, ncx2, norm

from gguf_bench.decoding.divergence import BATCH_NUMERICS, LOOP_ERROR, compare_greedy, describe
from gguf_bench.decoding.loop import GenerationResult, OnRound, Verify
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.errors import ConfigError
from gguf_bench.measure.pair import LoadedPair
from gguf_bench.results.schema.evaluation import EvalConfig, EvalMetrics, EvalRecord, EvalRow
from gguf_bench.results.schema.records import Mode
from gguf_bench.results.schema.store import environment, models_record, now_iso

Z95 = 1.959963984540054


# --- multiplication benchmark ------------------------------------------------------------------


@dataclass(frozen=True)
class MulPrompt:
    a: int
    b: int

    @property
    def answer(self) -> int:
        return self.a * self.b

    @property
    def text(self) -> str:
        return f"Question: What is {self.a} times {self.b}? Answer with the number only.\nAnswer:"


def mul_prompts(n: int, seed: int = 0) -> list[MulPrompt]:
    """n prompts with factors drawn uniformly from 1..99, the same for the same seed."""
    if n < 1:
        raise ConfigError(f"--nb-prompts must be >= 1, got {n}")
    rng = random.Random(seed)
    return [MulPrompt(rng.randint(1, 99), rng.randint(1, 99)) for _ in range(n)]


_NUMBER = re.compile(r"-?\d[\d,]*")


def parse_answer(text: str) -> int | None:
    """The first integer in a reply: '1081', ' = 1,081.', 'The answer is 1081' -> 1081."""
    m = _NUMBER.search(text.replace("\u202f", "").replace("\u00a0", ""))
    if not m:
        return None
    digits = m.group().rstrip(",")
    if "," in digits and not re.fullmatch(r"-?\d{1,3}(,\d{3})+", digits):
        digits = digits.split(",")[0]  # '12,3' is a list, not a thousands separator
    return int(digits.replace(",", ""))


def wilson_interval(successes: int, n: int) -> tuple[float, float, float]:
    """(p, low, high): the 95% Wilson score interval. Unlike Wald's p +- 1.96 sqrt(p (1 - p) / n) it does not
    collapse to [0, 0] at 0 successes (or [1, 1] at n), and it keeps its coverage at small n."""
    if n < 1:
        raise ValueError("n must be >= 1")
    p, z2 = successes / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def two_proportion_p_value(s1: int, n1: int, s2: int, n2: int) -> float:
    """Two-sided p-value of the z-test that two success rates are equal (1.0 when undefined)."""
    pooled = (s1 + s2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    return float(2 * norm.sf(abs(s1 / n1 - s2 / n2) / se))


@dataclass
class EvalResult:
    n: int
    regular_ok: int
    speculative_ok: int
    identical: int  # prompts whose two outputs are token-for-token equal
    batch_numerics: int  # greedy differences the replay shows are batch numerics (see divergence.py)
    loop_errors: int  # greedy differences the replay does not explain: the loop is wrong
    greedy: bool
    acceptance: float
    rows: list[EvalRow]

    def interval(self, mode: str) -> tuple[float, float, float]:
        return wilson_interval(self.regular_ok if mode == "regular" else self.speculative_ok, self.n)

    @property
    def p_value(self) -> float:
        return two_proportion_p_value(self.regular_ok, self.n, self.speculative_ok, self.n)

    @property
    def differ(self) -> bool:
        return self.p_value < 0.05


def run_eval(pair: LoadedPair, prompts: list[MulPrompt], k: int, cfg: SamplingConfig, n_predict: int = 12,
             progress: Callable[[int], None] = lambda i: None, chat: bool = False,
             verify: Verify = Verify.BATCHED) -> EvalResult:
    rows = []
    drafted = accepted = 0
    for i, prompt in enumerate(prompts):
        tokens = pair.prompt_tokens(prompt.text, chat)
        seeded = SamplingConfig(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed + i)
        reg = pair.generate(Mode.TARGET, tokens, n_predict, k, seeded)
        spec = pair.generate(Mode.SPECULATIVE, tokens, n_predict, k, seeded, verify=verify)
        drafted, accepted = drafted + spec.drafted, accepted + spec.accepted
        reg_text, spec_text = pair.target.detokenize(reg.tokens), pair.target.detokenize(spec.tokens)
        identical = reg.tokens == spec.tokens
        rows.append(EvalRow(a=prompt.a, b=prompt.b, answer=prompt.answer, regular=reg_text, speculative=spec_text,
                            regular_ok=parse_answer(reg_text) == prompt.answer,
                            speculative_ok=parse_answer(spec_text) == prompt.answer, identical=identical,
                            divergence=compare_greedy(pair.target, tokens, reg.tokens, spec)
                            if cfg.greedy and not identical else None))
        progress(i + 1)
    return EvalResult(n=len(rows), regular_ok=sum(r.regular_ok for r in rows),
                      speculative_ok=sum(r.speculative_ok for r in rows), identical=sum(r.identical for r in rows),
                      batch_numerics=_count_cause(rows, BATCH_NUMERICS), loop_errors=_count_cause(rows, LOOP_ERROR),
                      greedy=cfg.greedy, acceptance=accepted / drafted if drafted else float("nan"), rows=rows)


def eval_record(res: EvalResult, files, config: EvalConfig) -> EvalRecord:
    """The stored record of one evaluation."""
    return EvalRecord(time=now_iso(), pair=files.name, env=environment(), models=models_record(files.target, files.draft),
                      config=config, metrics=EvalMetrics(n=res.n, regular_ok=res.regular_ok, speculative_ok=res.speculative_ok,
                                                         identical=res.identical, batch_numerics=res.batch_numerics,
                                                         loop_errors=res.loop_errors, p_value=res.p_value,
                                                         acceptance=res.acceptance),
                      rows=res.rows)


def identity_lines(res: EvalResult) -> list[tuple[str, bool]]:
    """What greedy identity says, line by line; True marks a line that reports a loop error."""
    if not res.greedy:
        return []
    lines = [(f"identical outputs (greedy): {res.identical}/{res.n} ({res.identical / res.n:.0%})", False)]
    divs = [r.divergence for r in res.rows if r.divergence is not None]
    numerics = [d for d in divs if d.cause == BATCH_NUMERICS]
    if numerics:
        margins = ", ".join(f"{abs(d.margin_one_token):.4f}" for d in numerics)
        lines.append((f"  {len(numerics)} differ by batch numerics: replaying the very verify batch gives the speculative "
                      "token, the one-token decode the regular one (llama.cpp rounds a batch differently; "
                      f"logit margins {margins})", False))
    if res.loop_errors:
        whys = "; ".join(sorted({d.why for d in divs if d.cause == LOOP_ERROR}))
        lines.append((f"  {res.loop_errors} differ by a loop error: the replay does not reproduce them ({whys})", True))
    return lines


def _count_cause(rows: list[EvalRow], cause: str) -> int:
    return sum(r.divergence is not None and r.divergence.cause == cause for r in rows)


# --- distribution check ------------------------------------------------------------------------


@dataclass
class DistributionCheck:
    m: int
    samples: int
    p_values: list[float]  # per position 1..m
    tv_distance: list[float]  # total-variation distance of the two empirical distributions, per position
    dfs: list[int] = field(default_factory=list)  # degrees of freedom of each position's chi-square test

    @property
    def p_value(self) -> float:
        """Bonferroni-combined over positions."""
        return min(1.0, min(self.p_values) * self.m)

    @property
    def same(self) -> bool:
        return self.p_value >= ALPHA

    @property
    def detectable(self) -> list[float]:
        """Per position: the smallest total variation the test detects with 80% power at this sample size."""
        return [detectable_tv(self.samples, df, ALPHA / self.m) for df in (self.dfs or [1] * self.m)]

    @property
    def can_tell(self) -> bool:
        """Whether the test was strong enough for 'no difference found' to say anything (up to WEAK_TV)."""
        return max(self.detectable) <= WEAK_TV

    def verdict(self) -> str:
        if not self.same:
            return (f"the distributions differ (p = {self.p_value:.2g}): speculative sampling does NOT reproduce "
                    "the target's distribution, which points to a bug in the sampler")
        found = f"no evidence of a difference (p = {self.p_value:.3g} over {self.m} positions, {self.samples} samples each)"
        weakest = max(self.detectable)
        more = f"--samples {samples_to_detect(MATCH_TV, max(self.dfs or [1]), ALPHA / self.m)} would detect {MATCH_TV:g}"
        if not self.can_tell:
            return (f"{found}, but not enough samples to tell: with {self.samples} samples the test detects (80% power) "
                    f"only differences of total variation {weakest:.2f} or more; {more}")
        if weakest > MATCH_TV:
            return (f"{found}: no difference of total variation {weakest:.2f} or more (80% power); smaller ones would "
                    f"go unseen; {more}")
        return (f"{found}: speculative sampling matches the target's distribution (a difference of total variation "
                f"{weakest:.2f} or more would have been detected with 80% power)")


ALPHA = 0.01  # the check's significance level, over all positions (Bonferroni)
POWER = 0.8
MATCH_TV = 0.1  # 'matches' needs a test that detects this total variation (or less) with POWER
WEAK_TV = 0.25  # a test that cannot detect this much cannot tell


def _noncentrality(df: int, alpha: float, power: float = POWER) -> float:
    """The chi-square noncentrality at which a level-alpha test with df degrees of freedom rejects with `power`."""
    crit = chi2.ppf(1 - alpha, df)
    return float(brentq(lambda lam: ncx2.sf(crit, df, lam) - power, 1e-9, 1e4))


def detectable_tv(samples: int, df: int, alpha: float, power: float = POWER) -> float:
    """The smallest total variation the two-sample chi-square test (`samples` per side, df degrees of freedom, level
    alpha) detects with `power`, whatever the difference's shape. With n per side the test's noncentrality is
    n * sum((p_i - q_i)^2 / (p_i + q_i)), which Cauchy-Schwarz bounds below by 2 n TV^2: any difference of total
    variation at least sqrt(lambda / 2n) is detected."""
    return math.sqrt(_noncentrality(max(1, df), alpha, power) / (2 * samples))


def samples_to_detect(tv: float, df: int, alpha: float, power: float = POWER) -> int:
    """Samples per side for detectable_tv to reach `tv`."""
    return math.ceil(_noncentrality(max(1, df), alpha, power) / (2 * tv * tv))


def sample_positions(generate: Callable[[int], list[int]], m: int, samples: int) -> list[list[int]]:
    """Tokens at positions 1..m over `samples` generations (generate(seed) -> tokens)."""
    columns: list[list[int]] = [[] for _ in range(m)]
    for seed in range(samples):
        tokens = generate(seed)
        for j in range(m):
            columns[j].append(tokens[j] if j < len(tokens) else -1)  # -1: generation ended earlier
    return columns


def compare_samples(a: list[list[int]], b: list[list[int]]) -> DistributionCheck:
    """Two-sample chi-square per position; tokens seen fewer than 5 times in all are pooled."""
    p_values, tvs, dfs = [], [], []
    for col_a, col_b in zip(a, b):
        cats, inv = np.unique(np.array(col_a + col_b), return_inverse=True)
        ca = np.bincount(inv[: len(col_a)], minlength=len(cats))
        cb = np.bincount(inv[len(col_a):], minlength=len(cats))
        tvs.append(0.5 * float(np.abs(ca / len(col_a) - cb / len(col_b)).sum()))
        common = (ca + cb) >= 5
        table = np.array([np.append(ca[common], ca[~common].sum()), np.append(cb[common], cb[~common].sum())])
        table = table[:, table.sum(axis=0) > 0]
        p_values.append(1.0 if table.shape[1] < 2 else float(chi2_contingency(table)[1]))
        dfs.append(max(1, table.shape[1] - 1))
    return DistributionCheck(m=len(a), samples=len(a[0]), p_values=p_values, tv_distance=tvs, dfs=dfs)


def distribution_check(pair: LoadedPair, prompt: list[int], m: int, samples: int, k: int,
                       cfg: SamplingConfig) -> DistributionCheck:
    """Regular vs speculative next-m-token distributions at cfg's temperature (must be > 0)."""
    if cfg.greedy:
        raise ConfigError("the distribution check needs --temp > 0 (at 0 both are deterministic)")
    if m < 3 or samples < 10:
        # token 1 comes from the prompt's logits and a round never drafts past n_predict - 1,
        # so the draft takes part from m = 3 on
        raise ConfigError("the distribution check needs -m >= 3 (the draft only takes part from the second token) "
                          "and at least 10 samples")

    def run(mode: str) -> Callable[[int], list[int]]:
        return lambda seed: pair.generate(mode, prompt, m, k, SamplingConfig(
            cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed * 1_000_003 + seed + (0 if mode == Mode.TARGET else 500_009))).tokens

    return compare_samples(sample_positions(run(Mode.TARGET), m, samples), sample_positions(run(Mode.SPECULATIVE), m, samples))


# --- compare: one prompt, both ways, side by side ------------------------------------------------------


@dataclass
class CompareEvents:
    """The live view's hooks: a round callback for each side, and the side's result when it is done."""

    on_round: Callable[[str], OnRound | None] = lambda side: None  # side: "regular" or "speculative"
    finish: Callable[[str, GenerationResult], None] = lambda side, res: None


@dataclass
class Comparison:
    regular: GenerationResult
    speculative: GenerationResult
    verdict: str  # greedy: identical, or where and why they part; sampled: whether the outputs differ


def compare(pair: LoadedPair, tokens: list[int], n_predict: int, k: int, cfg: SamplingConfig,
            verify: Verify = Verify.BATCHED, events: CompareEvents = CompareEvents()) -> Comparison:
    """Regular then speculative generation of one prompt, after a warm-up (both models' first decodes are slow)."""
    pair.check_fits(len(tokens), n_predict, k)
    pair.generate(Mode.SPECULATIVE, tokens, min(16, n_predict), k, cfg)
    regular = pair.generate(Mode.TARGET, tokens, n_predict, k, cfg, events.on_round("regular"))
    events.finish("regular", regular)
    spec = pair.generate(Mode.SPECULATIVE, tokens, n_predict, k, cfg, events.on_round("speculative"), verify)
    events.finish("speculative", spec)
    if cfg.greedy:
        verdict = describe(compare_greedy(pair.target, tokens, regular.tokens, spec))
    else:
        verdict = "identical output" if regular.tokens == spec.tokens else "outputs differ (sampling)"
    return Comparison(regular, spec, verdict)


# --- eval: the multiplication benchmark, stored -------------------------------------------------------


def evaluate(pair: LoadedPair, files, config: EvalConfig, progress: Callable[[int], None] = lambda i: None
             ) -> tuple[EvalResult, EvalRecord]:
    """Run the benchmark `config` describes on a loaded pair; the result and the record to store."""
    res = run_eval(pair, mul_prompts(config.nb_prompts, config.seed), config.k, config.sampling(), config.n_predict,
                   progress=progress, chat=config.chat, verify=Verify(config.verify))
    return res, eval_record(res, files, config)
