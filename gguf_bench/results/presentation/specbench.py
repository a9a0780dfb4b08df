"""Runs laid out as Spec-Bench lays out its results, so a row can sit beside a published one.

Spec-Bench's table has a row per method and, per task, the speed-up over autoregressive decoding of the same model,
then the mean accepted tokens per round (τ: the tokens a round yields, the target's own included) and the overall
speed-up. Here a method is a speculative setting (pair, engine, strategy and K, and the other settings of the
summary), a task is a prompt's category, and the speed-up divides the setting's mean tokens/s on that category by the
target alone's on the same category, setting and depth. τ and the overall speed-up pool every category.
"""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from gguf_bench import engine_registry
from gguf_bench.results.presentation.report import row_label
from gguf_bench.results.presentation.summary import SETTING, matching, summarize
from gguf_bench.results.schema.text import columns_width, number_text, spaced_layout

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


# Spec-Bench's own abbreviations, where the full names do not fit the terminal
SHORT_NAMES = CATEGORY_NAMES | {"mt_bench": "MT", "translation": "Trans.", "summarization": "Sum."}


def _method(r: pd.Series, several_pairs: bool, several_depths: bool) -> str:
    engine = "" if engine_registry.is_default(r.get("engine")) else f" ({r['engine']})"
    depth = f" @ d{0 if pd.isna(r.get('depth')) else int(r['depth'])}" if several_depths else ""  # llama-bench's spelling
    return (f"{r['pair']} " if several_pairs else "") + r["label"] + engine + depth


def _several(sb: pd.DataFrame) -> tuple[bool, bool]:
    """Whether the rows come from several pairs, and from several depths (the label then says which)."""
    depths = sb["depth"].fillna(0) if "depth" in sb else pd.Series([0])
    return sb["pair"].nunique() > 1, depths.nunique() > 1


def _cells(sb: pd.DataFrame, names: dict[str, str]) -> dict[str, list[str]]:
    """{header: cells} of the rich table, categories headed by `names`."""
    several = _several(sb)
    columns = {"method": [_method(r, *several) for _, r in sb.iterrows()]}
    columns |= {names.get(c[8:], c[8:]): [number_text(v, "{:.2f}×") for v in sb[c]] for c in _columns(sb)}
    return columns | {"τ": [number_text(v, "{:.2f}") for v in sb["tau"]],
                      "overall": [number_text(v, "{:.2f}×") for v in sb["speedup overall"]]}


def table(sb: pd.DataFrame, width: int = 80,
          title: str = "Spec-Bench layout: speed-up over the target alone, per category") -> Table:
    """The rich table within `width` columns: the categories' full names where they fit, else Spec-Bench's short ones."""
    columns = _cells(sb, CATEGORY_NAMES)
    if columns_width(columns, 1) > width:
        columns = _cells(sb, SHORT_NAMES)
    t = Table(title=title, caption="τ: mean tokens per round (accepted drafts + the target's own), all categories",
              **spaced_layout(columns, width))
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for cells in zip(*columns.values()):
        t.add_row(*cells)
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
