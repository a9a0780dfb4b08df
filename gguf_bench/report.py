"""Run records -> pandas summaries -> rich tables, markdown/csv/json/jsonl, and a plot.

Reads and writes no model. Gain % compares a row's mean tokens/s with the target-alone
baseline measured in the same sweep under the same offload, temperature and prompt set.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from rich.table import Table

from gguf_bench.errors import BenchError

SETTING = ["pair", "ngl", "ngld", "temperature", "n_predict"]  # what a baseline must share with its row
FORMATS = ("md", "csv", "json", "jsonl")


def to_frame(records: list[dict]) -> pd.DataFrame:
    """One row per run, flat columns."""
    rows = []
    for r in records:
        cfg, m, env = r.get("config", {}), r.get("metrics") or {}, r.get("env", {})
        rows.append({
            "sweep": r.get("sweep"), "time": r.get("time"), "pair": r.get("pair"), "mode": r.get("mode"),
            "k": cfg.get("k") if r.get("mode") == "speculative" else 0,
            "ngl": str(cfg.get("ngl")), "ngld": str(cfg.get("ngld")),
            "temperature": cfg.get("temperature"), "n_predict": cfg.get("n_predict"),
            "prompt_id": cfg.get("prompt_id"), "repetition": cfg.get("repetition"),
            "tokens_per_s": m.get("tokens_per_s"), "ms_per_token": m.get("ms_per_token"),
            "acceptance": m.get("acceptance"), "tokens_per_round": m.get("tokens_per_round"),
            "n_tokens": m.get("n_tokens"), "error": r.get("error"),
            "target_offload": (r.get("offload") or {}).get("target"),
            "draft_offload": (r.get("offload") or {}).get("draft"),
            "target_file": ((r.get("models") or {}).get("target") or {}).get("file"),
            "draft_file": ((r.get("models") or {}).get("draft") or {}).get("file"),
            "cpu": env.get("cpu"), "gpu": env.get("gpu"), "threads": cfg.get("threads"),
        })
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame, by_prompt: bool = False) -> pd.DataFrame:
    """Fold repetitions (and prompts, unless by_prompt) into mean and std; add gain % and best K."""
    if df.empty:
        raise BenchError("no runs in these results")
    setting = SETTING + (["prompt_id"] if by_prompt else [])
    keys = setting + ["mode", "k"]
    ok = df[df["error"].isna()]
    failed = df[df["error"].notna()].groupby(keys, dropna=False).size().rename("failed")
    agg = ok.groupby(keys, dropna=False).agg(
        runs=("tokens_per_s", "size"), tokens_per_s=("tokens_per_s", "mean"), tokens_per_s_std=("tokens_per_s", "std"),
        ms_per_token=("ms_per_token", "mean"), acceptance=("acceptance", "mean"),
        tokens_per_round=("tokens_per_round", "mean"), target_offload=("target_offload", "first"),
        draft_offload=("draft_offload", "first"), target_file=("target_file", "first"),
        draft_file=("draft_file", "first"))
    agg = agg.join(failed, how="outer").reset_index()
    agg["runs"] = agg["runs"].fillna(0).astype(int)
    agg["failed"] = agg["failed"].fillna(0).astype(int)
    base = agg[agg["mode"] == "target"][setting + ["tokens_per_s"]].rename(columns={"tokens_per_s": "baseline_tokens_per_s"})
    agg = agg.merge(base, on=setting, how="left")
    agg["gain_pct"] = 100.0 * (agg["tokens_per_s"] / agg["baseline_tokens_per_s"] - 1.0)
    spec = agg[(agg["mode"] == "speculative") & agg["tokens_per_s"].notna()]
    spec = spec[spec.groupby(setting, dropna=False)["k"].transform("size") > 1]  # a choice of K to make
    best = spec.loc[spec.groupby(setting, dropna=False)["tokens_per_s"].idxmax()].index if not spec.empty else []
    agg["best_k"] = False
    agg.loc[best, "best_k"] = True
    order = {"target": 0, "draft": 1, "speculative": 2}
    agg["_order"] = agg["mode"].map(order)
    return agg.sort_values(setting + ["_order", "k"]).drop(columns="_order").reset_index(drop=True)


def model_label(row: pd.Series) -> str:
    if row["mode"] == "target":
        return f"{_stem(row['target_file'])} (target alone)"
    if row["mode"] == "draft":
        return f"{_stem(row['draft_file'])} (draft alone)"
    return f"speculative, K={int(row['k'])}"


def _stem(name) -> str:
    return str(name).removesuffix(".gguf")


def offload_label(row: pd.Series) -> str:
    if row["mode"] == "target":
        return str(row["target_offload"])
    if row["mode"] == "draft":
        return str(row["draft_offload"])
    return f"{row['target_offload']} + {row['draft_offload']}"


def _num(x, fmt: str = "{:.2f}") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _tps(row: pd.Series) -> str:
    if pd.isna(row["tokens_per_s"]):
        return "–"
    std = row["tokens_per_s_std"]
    return f"{row['tokens_per_s']:.2f}" + ("" if pd.isna(std) else f" ± {std:.2f}")


def rich_table(summary: pd.DataFrame, title: str = "") -> Table:
    """Columns that hold one value for every row (pair, temperature, ...) move into the title."""
    varying = [c for c in ("pair", "temperature", "n_predict", "prompt_id")
               if c in summary.columns and summary[c].nunique(dropna=False) > 1]
    fixed = [f"{c}={summary[c].iloc[0]:g}" if c == "temperature" else f"{c}={summary[c].iloc[0]}"
             for c in ("pair", "temperature", "n_predict") if c not in varying]
    table = Table(title=", ".join(([title] if title else []) + fixed))
    for col in varying + ["model", "GPU layers", "tokens/s", "ms/token", "accept", "tok/round", "gain %", "runs"]:
        table.add_column({"temperature": "T", "n_predict": "n", "prompt_id": "prompt"}.get(col, col),
                         justify="left" if col in ("pair", "model", "prompt_id") else "right", overflow="fold")
    for _, row in summary.iterrows():
        gain = _num(row["gain_pct"], "{:+.1f}") if row["mode"] != "target" else ""
        cells = [_num(row[c], "{:g}") if c == "temperature" else str(row[c]) for c in varying] + [
            model_label(row) + (" ★ best" if row["best_k"] else ""), offload_label(row), _tps(row),
            _num(row["ms_per_token"]), _num(row["acceptance"], "{:.1%}"), _num(row["tokens_per_round"]), gain,
            f"{row['runs']}" + (f" ({row['failed']} failed)" if row["failed"] else "")]
        table.add_row(*cells, style="bold" if row["best_k"] else None)
    return table


def to_markdown(summary: pd.DataFrame) -> str:
    """The published llama.cpp notebook's table: model, GPU layers offload, tokens/s, gain %."""
    lines = ["| model | GPU layers offload | tokens/s | gain % | acceptance | temperature |",
             "|---|---|---|---|---|---|"]
    for _, row in summary.iterrows():
        gain = "" if row["mode"] == "target" else _num(row["gain_pct"], "{:+.1f}%")
        best = " **(best K)**" if row["best_k"] else ""
        model = model_label(row) if row["mode"] != "speculative" else (
            f"{_stem(row['target_file'])} + {_stem(row['draft_file'])}, K={int(row['k'])}")
        lines.append(f"| {model}{best} | {offload_label(row)} | {_tps(row)} | {gain} | "
                     f"{_num(row['acceptance'], '{:.1%}')} | {_num(row['temperature'], '{:g}')} |")
    return "\n".join(lines) + "\n"


def render(summary: pd.DataFrame, fmt: str) -> str:
    if fmt == "md":
        return to_markdown(summary)
    if fmt == "csv":
        return summary.to_csv(index=False)
    if fmt == "json":
        return summary.to_json(orient="records", indent=1)
    if fmt == "jsonl":
        return "".join(json.dumps(rec, default=str) + "\n" for rec in json.loads(summary.to_json(orient="records")))
    raise BenchError(f"unknown format '{fmt}'; choose from {', '.join(FORMATS)}")


def plot(summary: pd.DataFrame, path: Path, metric: str = "tokens_per_s") -> Path:
    """Tokens/s (or gain %) against draft length, one line per pair and offload setting."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("plotting needs matplotlib: pip install 'gguf-bench[plot]'") from None
    if metric not in ("tokens_per_s", "gain_pct"):
        raise BenchError("--plot-metric must be tokens_per_s or gain_pct")
    spec = summary[summary["mode"] == "speculative"]
    if spec.empty:
        raise BenchError("nothing to plot: these results hold no speculative runs")
    fig, ax = plt.subplots(figsize=(8, 5))
    for (pair, ngl, ngld, temp), grp in spec.groupby(["pair", "ngl", "ngld", "temperature"]):
        grp = grp.groupby("k", as_index=False)[metric].mean()
        line, = ax.plot(grp["k"], grp[metric], marker="o", label=f"{pair} ngl={ngl} ngld={ngld} T={temp:g}")
        if metric == "tokens_per_s":
            base = summary[(summary["mode"] == "target") & (summary["pair"] == pair) & (summary["ngl"] == ngl)
                           & (summary["ngld"] == ngld) & (summary["temperature"] == temp)]["tokens_per_s"].mean()
            if not math.isnan(base):
                ax.axhline(base, color=line.get_color(), linestyle="--", linewidth=1)
    if metric == "gain_pct":
        ax.axhline(0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("draft length K")
    ax.set_ylabel("tokens/s (dashed: target alone)" if metric == "tokens_per_s" else "gain % over target alone")
    ax.set_title("speculative decoding: draft length vs speed")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
