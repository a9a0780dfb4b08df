"""Runs laid out as Spec-Bench lays out its results, so a row can sit beside a published one.

Spec-Bench's table has a row per method and, per task, the speed-up over autoregressive decoding of the same model,
then the mean accepted tokens per round (τ: the tokens a round yields, the target's own included) and the overall
speed-up. Here a method is a speculative setting (pair, engine, strategy and K, and the other settings of the
summary), a task is a prompt's category, and the speed-up divides the setting's mean tokens/s on that category by the
target alone's on the same category, setting and depth. τ and the overall speed-up pool every category.
"""

from __future__ import annotations

import pandas as pd
from rich import box
from rich.table import Table

from gguf_bench.results.report import SETTING, matching, row_label, summarize
from gguf_bench.results.text import number_text

KEYS = [*SETTING, "strategy", "k"]
CATEGORY_NAMES = {"mt_bench": "MT-Bench", "translation": "Translation", "summarization": "Summarization", "qa": "QA",
                  "math_reasoning": "Math", "math": "Math", "rag": "RAG", "humaneval": "HumanEval"}


def frame(df: pd.DataFrame) -> pd.DataFrame | None:
    """One row per speculative setting: a `speedup <category>` column per category, `tau`, `speedup overall`;
    None when the runs hold no category."""
    if "category" not in df or df["category"].fillna("").eq("").all():
        return None
    by_category = summarize(df.assign(prompt_id=df["category"].fillna("")), by_prompt=True)
    overall = summarize(df)
    spec = overall[overall["mode"] == "speculative"]
    cats = list(dict.fromkeys(c for c in df["category"].fillna("") if c))
    rows = []
    for _, r in spec.iterrows():
        row = {k: r[k] for k in KEYS if k in r.index} | {"tau": r["tokens_per_round"], "label": row_label(r)}
        mine = by_category[matching(by_category, r, KEYS) & (by_category["mode"] == "speculative")].set_index("prompt_id")
        for c in cats:
            row[f"speedup {c}"] = 1 + mine.loc[c, "gain_pct"] / 100 if c in mine.index else None
        row["speedup overall"] = 1 + r["gain_pct"] / 100 if pd.notna(r["gain_pct"]) else None
        rows.append(row)
    return pd.DataFrame(rows) if rows else None


def _columns(sb: pd.DataFrame) -> list[str]:
    return [c for c in sb.columns if c.startswith("speedup ") and c != "speedup overall"]


def _method(r: pd.Series, several_pairs: bool, several_depths: bool) -> str:
    engine = "" if r.get("engine") in (None, "python") else f" ({r['engine']})"
    depth = f" @ d{int(r['depth'] or 0)}" if several_depths else ""  # llama-bench's spelling
    return (f"{r['pair']} " if several_pairs else "") + r["label"] + engine + depth


def _several(sb: pd.DataFrame) -> tuple[bool, bool]:
    """Whether the rows come from several pairs, and from several depths (the label then says which)."""
    depths = sb["depth"].fillna(0) if "depth" in sb else pd.Series([0])
    return sb["pair"].nunique() > 1, depths.nunique() > 1


def table(sb: pd.DataFrame, title: str = "Spec-Bench layout: speed-up over the target alone, per category") -> Table:
    several = _several(sb)
    t = Table(title=title, caption="τ: mean tokens per round (accepted drafts + the target's own), all categories",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left", caption_justify="left")
    t.add_column("method", no_wrap=True)
    for c in _columns(sb):
        t.add_column(CATEGORY_NAMES.get(c[8:], c[8:]), justify="right", no_wrap=True)
    t.add_column("τ", justify="right")
    t.add_column("overall", justify="right")
    for _, r in sb.iterrows():
        t.add_row(_method(r, *several), *[number_text(r[c], "{:.2f}×") for c in _columns(sb)],
                  number_text(r["tau"], "{:.2f}"), number_text(r["speedup overall"], "{:.2f}×"))
    return t


def markdown(sb: pd.DataFrame) -> str:
    several = _several(sb)
    heads = [CATEGORY_NAMES.get(c[8:], c[8:]) for c in _columns(sb)]
    lines = ["| Method | " + " | ".join(heads) + " | #Mean Accepted Tokens | Overall |",
             "|---|" + "---:|" * (len(heads) + 2)]
    for _, r in sb.iterrows():
        lines.append(f"| {_method(r, *several)} | " + " | ".join(number_text(r[c], "{:.2f}×") for c in _columns(sb))
                     + f" | {number_text(r['tau'], '{:.2f}')} | {number_text(r['speedup overall'], '{:.2f}×')} |")
    return "\n".join(lines) + "\n"
