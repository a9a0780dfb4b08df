"""Two engines side by side: the Python loop against llama-server per setting, and whether their greedy texts
agree."""


from __future__ import annotations

import pandas as pd
from rich import box
from rich.table import Table

from gguf_bench import engine_registry
from gguf_bench.results.decision.terms import CONTEXT
from gguf_bench.results.presentation.columns import (
    FLAGS,
    _width,
    row_label,
)
from gguf_bench.results.schema.kinds import run_label
from gguf_bench.results.schema.text import number_text, speed_text


def _short(engine: str) -> str:
    """The engine's name in the ratio's and the acc/gain columns (engine_registry)."""
    return engine_registry.short(engine)


def engines_table(both: pd.DataFrame, agreement: list[str], width: int = 120) -> Table:
    """The side-by-side table (summary.engines_frame) and, under it, whether the two engines' greedy texts agree. Every
    heading whole: the engines' short names throughout, and where `width` is too narrow the acceptance columns left
    out (never a heading cut)."""
    first, second = both.attrs["engines"]
    a, b = _short(first), _short(second)
    varying = [c for c in SIDE if both[c].nunique(dropna=False) > 1]
    builds = both.get("server_bin", pd.Series(dtype=object)).replace("", None).dropna()  # the server's, where several
    varying += ["server_bin"] if builds.nunique() > 1 else []
    fixed = [f"{both['pair'].iloc[0]}"] if "pair" not in varying else []
    fixed += [f"T={number_text(both['temperature'].iloc[0], '{:g}')}"] if "temperature" not in varying else []
    fixed += [f"n={both['n_predict'].iloc[0]}"] if "n_predict" not in varying else []
    title = f"{engine_registry.title(first)} vs {engine_registry.title(second)} (tokens/s)"
    columns: dict[str, list[str]] = {FLAGS.get(c, c): [number_text(v, "{:g}") if c == "temperature" else str(v)
                                                          for v in both[c]] for c in varying}
    columns["run"] = [row_label(r) for _, r in both.iterrows()]
    for e, short in ((first, a), (second, b)):
        columns[f"{short} t/s"] = [speed_text(v) for v in both[f"tokens_per_s_{e}"]]
    columns[f"{a}/{b}"] = [number_text(v, "{:.2f}") for v in both["ratio"]]
    for e, short in ((first, a), (second, b)):
        columns[f"acc {short}"] = [number_text(v, "{:.1%}") for v in both[f"acceptance_{e}"]]
    for e, short in ((first, a), (second, b)):
        columns[f"gain {short}"] = [_engine_gain(r, e) for _, r in both.iterrows()]
    for optional in (f"acc {b}", f"acc {a}"):  # too wide: acceptance goes first (json and csv keep it)
        if _width(columns) > width:
            columns.pop(optional)
    gains = columns[f"gain {a}"] + columns[f"gain {b}"]
    marks = [text for mark, text in (("~", "~ not decided"), ("≈", "≈ the same"), ("★", "★ the workload's best K"))
             if any(mark in g for g in gains)]  # a legend only for the marks that appear
    table = Table(title=" · ".join([title, *fixed]),
                  caption="\n".join([" · ".join([f"{a}: {first}, {b}: {second}", f"{a}/{b}: {a} t/s over {b} t/s",
                                                  "gain: over the same engine's target alone", *marks]), *agreement]),
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left", caption_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name in ("run", "pair", "host") else "right", no_wrap=True)
    for cells in zip(*columns.values()):
        table.add_row(*cells)
    return table


def _engine_gain(r: pd.Series, engine: str) -> str:
    """One engine's gain in the side-by-side table: marked as the run table marks it, ★ on the workload's best K."""
    if r["mode"] == "target":
        return ""
    mark = "≈" if r.get(f"verdict_{engine}") == "same" else "~" if r[f"decided_{engine}"] is False else ""
    return mark + number_text(r[f"gain_pct_{engine}"], "{:+.1f}%") + (" ★" if r[f"best_k_{engine}"] is True else "")


def greedy_agreement(df: pd.DataFrame) -> list[str]:
    """For each setting and prompt measured greedily by two engines (the first two names in sorted order, as
    summary.engines_frame compares): whether the target alone's text is the same in both (the first repetition), else
    where they part."""
    if "text" not in df.columns or "greedy" not in df.columns or df.get("engine", pd.Series(dtype=str)).nunique() < 2:
        return []
    first, second = sorted(df["engine"].dropna().unique())[:2]
    rows = df[(df["mode"] == "target") & df["greedy"].astype(bool) & df["error"].isna() & (df["repetition"] == 0)]
    out = []
    for key, group in rows.groupby([c for c in SIDE if c in rows] + ["prompt_id"], dropna=False):
        texts = {e: g["text"].iloc[0] for e, g in group.groupby("engine")}
        if texts.get(first) is None or texts.get(second) is None:
            continue
        a, b = texts[first], texts[second]
        prompt = key[-1]
        if a == b:
            out.append(f"greedy text, {prompt}: identical in both engines ({len(a)} characters)")
        else:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            out.append(f"greedy text, {prompt}: the engines part at character {at} of {max(len(a), len(b))} "
                       f"({first} {a[at:at + 20]!r} vs {second} {b[at:at + 20]!r})")
    return out


def server_greedy_lines(df: pd.DataFrame) -> list[str]:
    """For the greedy speculative runs (first repetition) of engines that do not replay a text that parts (llama-server):
    whether each one's text equals its own target alone's on the same server, and where the first that does not parts
    from it (the record's identity)."""
    if "differs_at" not in df.columns:
        return []
    unreplayed = df["engine"].map(lambda e: not engine_registry.of(e).replays)
    rows = df[unreplayed & (df["mode"] == "speculative") & df["greedy"].astype(bool)
              & df["error"].isna() & (df["repetition"] == 0) & df["identical"].notna()]
    out = []
    for engine, runs in rows.groupby("engine"):
        parted = runs[runs["identical"] == False]  # noqa: E712
        who = engine_registry.title(engine)
        if parted.empty:
            out.append(f"greedy text: every {who} speculative run ({len(runs)}) equals its target alone's")
        out += [f"greedy text: {who} {run_label(r['mode'], r['strategy'] or '', r['k'])} on {r['prompt_id']} parts "
                f"from its target alone at token {int(r['differs_at'])}" for _, r in parted.iterrows()]
    return out


# both engines' rows
SIDE = ["pair", "host", "ngl", "ngld", "placement", *CONTEXT, "depth", "prompt_length", "temperature", "n_predict"]
# must share these


def engines_frame(summary: pd.DataFrame) -> pd.DataFrame | None:
    """Per setting and run (target alone, each strategy and K): two engines' tokens/s, acceptance and gain over their
    own target alone, and which K is each engine's best; None unless the summary holds two engines. The first two
    engine names in sorted order are compared (python and server: the python loop first); `attrs["engines"]` names
    them, and each figure's column ends in its engine's name."""
    names = sorted(summary.get("engine", pd.Series(dtype=str)).dropna().unique())
    if len(names) < 2:
        return None
    first, second = names[:2]
    rows = summary[summary["mode"] != "draft"]
    keys = SIDE + ["mode", "strategy", "k"]
    cols = ["tokens_per_s", "acceptance", "gain_pct", "best_k", "decided", *(["verdict"] if "verdict" in summary else [])]
    a = rows[rows["engine"] == first][keys + cols]
    b = rows[rows["engine"] == second][keys + cols + [c for c in ["server_bin"] if c in rows]]  # one row a build
    both = a.merge(b, on=keys, how="outer", suffixes=(f"_{first}", f"_{second}"))
    both["ratio"] = both[f"tokens_per_s_{first}"] / both[f"tokens_per_s_{second}"]
    both = both.sort_values(keys, key=lambda c: c.map({"target": 0, "speculative": 1}) if c.name == "mode" else c)
    both.attrs["engines"] = (first, second)
    return both
