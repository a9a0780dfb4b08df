"""tune's settings and checks: the offload settings that differ on this build (what to calibrate), the K's a check
measures, and each checked K's measured speed beside its prediction."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gguf_bench.options import ALL_LAYERS, layers_label
from gguf_bench.results.predictions.costmodel import Calibration
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.results.schema.run_fields import request_tokens_per_s


def effective_settings(ngls: Sequence[int], nglds: Sequence[int], gpu: bool, target_layers: int,
                       draft_layers: int) -> tuple[list[tuple[int, int]], list[str]]:
    """The (ngl, ngld) pairs that differ on this build, and a warning for each request folded away.

    Without GPU offload every request runs on the CPU: only (0, 0) is calibrated. With it, a value
    above a model's layer count (+1 for the output layer, as llama.cpp counts) is the same as 'all'.
    """
    warnings: list[str] = []
    if not gpu:
        if any(ngls) or any(nglds):
            asked = ", ".join(f"-ngl {layers_label(a)} -ngld {layers_label(b)}" for a in ngls for b in nglds if a or b)
            warnings.append(f"this llama-cpp-python build cannot offload to a GPU: calibrating -ngl 0 -ngld 0 only "
                            f"(not {asked}); reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\" to tune offload")
        return [(0, 0)], warnings

    def fold(values: Sequence[int], n_layers: int, flag: str) -> list[int]:
        out: list[int] = []
        for v in values:
            eff = ALL_LAYERS if v >= n_layers + 1 else v  # llama.cpp counts the output layer too
            if eff in out:
                warnings.append(f"{flag} {layers_label(v)} offloads the same layers as an earlier value: calibrated once")
            else:
                out.append(eff)
        return out

    return [(a, b) for a in fold(ngls, target_layers, "-ngl") for b in fold(nglds, draft_layers, "-ngld")], warnings



def check_ks(cal: Calibration, k: int) -> list[int]:
    """The recommended K and its neighbours, within the calibrated range."""
    return [x for x in (k - 1, k, k + 1) if x in cal.ks]



def check_rows(cal: Calibration, records: Sequence[RunRecord], objective: str = "decode") -> list[dict]:
    """Sweep run records of one setting -> per K (0: the target alone) the measured mean tokens/s over
    prompts (under --objective request: -n tokens over each request's latency) next to the prediction, and the
    prediction's error in percent of the measurement."""
    by_k: dict[int, list[float]] = {}
    for r in records:
        figure = r.tokens_per_s if objective == "decode" else (None if r.error else request_tokens_per_s(r))
        if r.error or figure is None or r.mode not in (Mode.TARGET, Mode.SPECULATIVE):
            continue
        by_k.setdefault(r.k, []).append(figure)
    rows = []
    for k in sorted(by_k):
        p = cal.predict(k) if k else cal.predict(min(cal.ks))
        predicted = p.tokens_per_s if k else p.baseline_tokens_per_s
        measured = statistics.fmean(by_k[k])
        rows.append({"k": k, "ngl": cal.ngl, "ngld": cal.ngld, "predicted_tokens_per_s": predicted,
                     "measured_tokens_per_s": measured, "error_pct": 100.0 * (predicted / measured - 1.0),
                     "runs": len(by_k[k])})
    return rows  # the measured gains are the verdict rule's (decision/tune_verdict.gain_fields), not a ratio of these means
