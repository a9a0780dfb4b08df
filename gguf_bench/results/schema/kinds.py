"""What kind a record is, what a run generated, and the label and gain every table writes from them."""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    RUN = "run"  # one generation measured: target alone, draft alone or speculative
    EVAL = "eval"  # a multiplication benchmark, regular against speculative
    CALIBRATION = "calibration"  # what `tune` measured to predict tokens/s


class Mode(StrEnum):
    TARGET = "target"  # the target alone: the baseline
    DRAFT = "draft"  # the draft alone
    SPECULATIVE = "speculative"


def gain_pct(tokens_per_s, baseline_tokens_per_s):
    """Speed-up over the baseline in percent (+28 means 1.28x); numbers or pandas columns."""
    return 100.0 * (tokens_per_s / baseline_tokens_per_s - 1.0)


def run_label(mode: Mode | str, strategy_name: str, k: int) -> str:
    """A row's name: 'target alone', 'draft alone', 'K=4' (the draft model with a fixed K), 'ngram(1-4) K=16',
    'draft p-min 0.8 K=16', 'draft heuristic K=4' (K: where the schedule starts). The one place it is made."""
    if mode == Mode.TARGET:
        return "target alone"
    if mode == Mode.DRAFT:
        return "draft alone"
    if not k:  # a server someone else started (the endpoint engine): its draft length is its own, not told to a client
        return "speculative" if strategy_name in ("", "draft") else strategy_name
    return f"K={int(k)}" if strategy_name in ("", "draft") else f"{strategy_name} K={int(k)}"
