"""Proof that speculation ran: a speculative run whose drafter proposed no token is marked, with the likely reason.

Such a run measured the target alone under another name (and, in llama-server, a process that holds a draft context):
its speed says nothing about speculation. The record keeps the reason (RunMetrics.no_drafts); `report` shows the row
as "no drafts" and never makes it a best K, a gain or a deploy line (results/presentation/report.py, measure/deploy.py).

The reasons come from llama.cpp's drafters (vendored common/speculative.cpp, 0c1e570):
- ngram-mod looks up the last --spec-ngram-mod-n-match tokens (NGRAM_MOD_MATCH) in a pool that starts empty in a cold
  process and is filled from the context 32 tokens at a time: a prompt shorter than that match leaves it empty, so a
  draft needs the output itself to repeat a whole match's stretch, then --spec-ngram-mod-n-min tokens found in a row;
- the other n-gram types draft only where the context repeats the pattern they look up;
- on a hybrid or recurrent target llama.cpp rolls a rejected draft back through checkpoints, and reports in the field
  say the n-gram types draft nothing there.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from gguf_bench import engine_registry
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import BenchError
from gguf_bench.results.schema.records import Mode, RunMetrics
from gguf_bench.runtimes.llama_cpp import Vocabulary
from gguf_bench.runtimes.llama_server import NGRAM_MOD_MATCH, Speculation

NO_REASON = "its drafter proposed no token in this run"


def marked(metrics: RunMetrics | None, mode: Mode, strategy: Strategy | None, k: int, engine: str | None,
           target: Path | None) -> RunMetrics | None:
    """The run's metrics with `no_drafts` set where a speculative run drafted nothing; unchanged otherwise (a round of
    several clients: judged by its shortest prompt). Drafts not counted (None: a llama-server without the speculative
    counters) are not measured, and not marked."""
    if metrics is None or mode != Mode.SPECULATIVE or metrics.drafted is None or metrics.drafted or not metrics.n_tokens \
            or strategy is None:
        return metrics
    prompt = min((r.get("prompt_n") or 0 for r in metrics.requests), default=0) if metrics.requests else 0
    return replace(metrics, no_drafts=why_no_drafts(strategy, k, engine, prompt or metrics.prompt_tokens, target))


def why_no_drafts(strategy: Strategy, k: int, engine: str | None, prompt_tokens: int, target: Path | None) -> str:
    """The likely reason a run of `strategy` drafted nothing (llama.cpp's drafters for the server engine); `target`
    None: a model served by someone else, whose file is not here."""
    spec_type = strategy.spec_type if engine_registry.of(engine).server_types else ""  # the loop drafts by its own rules
    if spec_type.startswith("ngram") and target is not None and _recurrent(target):
        return "the target is a hybrid or recurrent model: llama.cpp's n-gram types may not draft on it"
    if spec_type == "ngram-mod":
        flags = Speculation("ngram-mod", k, n_min=strategy.n_min).flags()  # as the server was started
        n_min = flags[flags.index("--spec-ngram-mod-n-min") + 1]
        if prompt_tokens < NGRAM_MOD_MATCH:
            return (f"the prompt ({prompt_tokens} tokens) is shorter than ngram-mod's match ({NGRAM_MOD_MATCH} tokens, "
                    f"--spec-ngram-mod-n-match): its pool starts empty, so a draft needs the output itself to repeat "
                    f"{NGRAM_MOD_MATCH} tokens, then {n_min} found in a row (--spec-ngram-mod-n-min)")
        return f"no {NGRAM_MOD_MATCH}-token stretch of the text came again (ngram-mod drafts only after one)"
    if spec_type.startswith("ngram") or "ngram" in strategy.spec_type.split(","):
        return "the text never repeated the pattern the n-gram drafter looks up"
    return NO_REASON


@functools.lru_cache(maxsize=16)
def _recurrent(path: Path) -> bool:
    """Whether llama.cpp reads the model as recurrent or hybrid (its architecture; the weights are not loaded)."""
    try:
        with Vocabulary(path) as v:
            lib, model = v._lib, v._model
            return bool(lib.llama_model_is_recurrent(model) or lib.llama_model_is_hybrid(model))
    except BenchError:
        return False
