"""The summary the printers read: the decision layer's table (results/decision/table.py) with tune's predictions
joined to the rows they predict, and the offload text of a row.
"""

from __future__ import annotations

import os
from pathlib import PurePath

import pandas as pd

from gguf_bench.axes import CONTEXT_DEFAULTS
from gguf_bench.results.decision.table import *  # noqa: F403 (the names the printers and tests import from here)
from gguf_bench.results.decision.table import SETTING
from gguf_bench.results.presentation.tuning import predicted_frame
from gguf_bench.results.schema.calibration import CalibrationRecord


def with_predictions(summary: pd.DataFrame, df: pd.DataFrame, calibrations: list[CalibrationRecord]) -> pd.DataFrame:
    """Add `predicted_tokens_per_s` (and `predicted_gain_pct`) from stored `tune` calibrations to the rows
    they predict: the target alone and the draft model with a fixed K, under the same pair, host, offload,
    temperature and length, and only where the runs used the calibration's prompts (a prediction for other
    prompts predicts other text). Rows without a prediction get NaN; no calibration, or a summary kept
    apart by prompt (a calibration predicts the mean over its prompts): `summary` unchanged."""
    pred = predicted_frame(calibrations) if calibrations else None
    if pred is None or pred.empty or "prompt_id" in summary.columns:
        return summary
    setting = [c for c in SETTING if c in pred.columns]  # a calibration runs with llama.cpp's default context settings
    default = pd.Series(True, index=df.index)
    for col, value in CONTEXT_DEFAULTS.items():
        if col in df.columns:
            default &= df[col] == value
    prompts = df[default].groupby(setting, dropna=False)["prompt_id"].agg(lambda ids: ",".join(sorted(set(map(str, ids)))))
    pred = pred.assign(prompts=pred["prompts"].map(lambda p: ",".join(sorted(p.split(",")))))
    pred = pred.merge(prompts.rename("measured_prompts").reset_index(), on=setting, how="inner")
    pred = pred[pred["prompts"] == pred["measured_prompts"]]
    spec = pred.assign(mode="speculative", strategy="draft")[setting + ["mode", "strategy", "k", "predicted_tokens_per_s",
                                                                        "predicted_gain_pct"]]
    base = (pred.drop_duplicates(setting)[setting + ["predicted_baseline_tokens_per_s"]]
            .rename(columns={"predicted_baseline_tokens_per_s": "predicted_tokens_per_s"})
            .assign(mode="target", strategy="", k=0, predicted_gain_pct=float("nan"))[spec.columns])
    keys = setting + ["mode", "strategy", "k"]
    both = pd.concat([spec, base], ignore_index=True).assign(**CONTEXT_DEFAULTS)  # predicted for the default settings only
    keys += [c for c in CONTEXT_DEFAULTS if c in summary]
    out = summary.merge(both.astype({c: summary[c].dtype for c in keys if c in summary})[keys + ["predicted_tokens_per_s",
                                                                                          "predicted_gain_pct"]],
                        on=keys, how="left")
    return out if out["predicted_tokens_per_s"].notna().any() else summary


def offload_label(row: pd.Series) -> str:
    if row["mode"] == "target":
        return str(row["target_offload"])
    if row["mode"] == "draft":
        return str(row["draft_offload"])
    return f"{row['target_offload']} + {row['draft_offload']}"


def with_build_names(df: pd.DataFrame) -> pd.DataFrame:
    """The runs with each build (server_bin, where a sweep's --server-bin listed several) named by what tells it apart
    from the others, for the printers: '/x/tree-cpu/bin/llama-server' and '/x/tree-cpu-GGML_OPENMP=OFF/bin/llama-server'
    read 'tree-cpu' and 'tree-cpu-GGML_OPENMP=OFF'. Records keep the path (and the build part its sha256), and the
    deploy command runs it; the frame is unchanged with one build."""
    paths = [p for p in df.get("server_bin", pd.Series(dtype=object)).dropna().unique() if p]
    return df if len(paths) < 2 else df.assign(server_bin=df["server_bin"].replace(build_names(paths)))


def build_names(paths: list[str]) -> dict[str, str]:
    """Each path less the folders all share at the start and the parts all share at the end; the whole path where
    that leaves two names alike or one empty."""
    parts = [PurePath(p).parts for p in paths]
    lead = len(os.path.commonprefix(parts))
    lead = lead if lead > 1 else 0  # no folder but the root in common: the whole paths
    tail = len(os.path.commonprefix([q[lead:][::-1] for q in parts]))
    names = {p: str(PurePath(*q[lead:len(q) - tail])) if len(q) > lead + tail else "" for p, q in zip(paths, parts)}
    return names if all(names.values()) and len(set(names.values())) == len(names) else {p: p for p in paths}
