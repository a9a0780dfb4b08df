"""Summaries (results/presentation/summary.py) -> rich tables, markdown/csv/json/jsonl: the report's rendering and its labels.

Reads and writes no model; computes no figure: summary.py loads, aggregates and tests the gains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
from rich import box
from rich.table import Table

from gguf_bench import engine_registry
from gguf_bench.errors import BenchError
from gguf_bench.options import CONTEXT_DEFAULTS
from gguf_bench.results.predictions import ceiling
from gguf_bench.results.presentation import evals as evals_view
from gguf_bench.results.presentation.summary import (
    CONCURRENCY,
    DRIFT,
    GAIN_LEVEL,
    MAIN_SHARE,
    NO_REASON,
    OTHERS_CORES,
    SETTING,
    SIDE,
    SPECULATION,
    SPREAD,
    STEAL_CORES,
    TTFT_PROMPT_TOKENS,
    gain_decided,
    margin_of,
    matching,
    objective_of,
    offload_label,
)
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.fields import Field
from gguf_bench.results.schema.kinds import run_label
from gguf_bench.results.schema.run_fields import RUN_FIELDS
from gguf_bench.results.schema.text import fit_title, number_text, speed_text

FORMATS = ("md", "csv", "json", "jsonl")


def rounds_by_length(counts) -> str:
    """'0:12 1:3 4:20': the draft lengths that occurred, with their rounds."""
    return " ".join(f"{n}:{c}" for n, c in enumerate(counts) if c) if isinstance(counts, list) else ""


# --- labels and numbers ---------------------------------------------------------------------


def row_label(row: pd.Series) -> str:
    """Short: 'target alone', 'draft alone', 'K=4', 'ngram(1-4) K=16', 'draft p-min 0.8 K=16' (the files are in the
    table's caption; the draft model with fixed K is the plain 'K=4')."""
    return run_label(row["mode"], row.get("strategy") or "", row["k"])


def model_label(row: pd.Series) -> str:
    """Long, with the files: for the markdown table."""
    if row["mode"] == "target":
        return f"{_stem(row['target_file'])} (target alone)"
    if row["mode"] == "draft":
        return f"{_stem(row['draft_file'])} (draft alone)"
    if "draft" not in str(row.get("strategy") or "draft"):
        return f"{_stem(row['target_file'])}, {row_label(row)}"  # the n-gram drafts without a model
    return f"{_stem(row['target_file'])} + {_stem(row['draft_file'])}, {row_label(row)}"


TWIN_NOTE = ("synthetic weights with the real model's shapes (gguf-bench twin): its speed is the model's, its acceptance "
             "and text are not, so they are left out")


def _stem(name) -> str:
    return str(name).removesuffix(".gguf")


def _tps(row: pd.Series) -> str:
    if pd.isna(row["tokens_per_s"]):
        return "–"
    std = row["tokens_per_s_std"]
    return speed_text(row["tokens_per_s"]) + ("" if pd.isna(std) else f" ± {speed_text(std)}")


# --- rich tables ----------------------------------------------------------------------------

_VARYING = {"pair": "pair", "engine": "engine", "host": "host", "parallel": "-np", "clients": "clients", "depth": "-d",
            "prompt_length": "prompt tok",
            "temperature": "T", "n_predict": "n", "prompt_id": "prompt",
            "ngl": "-ngl", "ngld": "-ngld", "placement": "placement",
            "flash_attn": "-fa", "cache_type_k": "-ctk", "cache_type_v": "-ctv",
            "batch_size": "-b", "ubatch_size": "-ub", "threads_draft": "-td"}


@dataclass(frozen=True)
class RunColumn:
    """One column of the run summary, defined once: its heading in the terminal table and in markdown (None: that
    printer leaves it out), how a row shows it (md_text: where markdown shows it otherwise), and whether a summary
    has it at all. csv and json carry the summary's own columns, numbers unformatted."""

    table: str | None
    md: str | None
    text: Callable[[pd.Series], str]
    md_text: Callable[[pd.Series], str] | None = None
    present: Callable[[pd.DataFrame], bool] = lambda summary: True
    place: int = 0  # where the terminal table puts it (TABLE_ORDER)


def _gain_text(row: pd.Series) -> str:
    """'+12.3% [+8, +17]': the gain and its 95% interval; '~+2.8% [-4, +10]': a gain that is not decided
    (gain_decided); 'no drafts': nothing was drafted."""
    if row["mode"] == "target":
        return ""
    if isinstance(row.get("no_drafts"), str):
        return "no drafts"
    lo, hi = row.get("gain_lo"), row.get("gain_hi")
    interval = "" if lo is None or pd.isna(lo) or pd.isna(row["gain_pct"]) else f" [{lo:+.0f},{hi:+.0f}]"
    if interval and wide_interval(lo, hi):  # its bounds as numbers would read as a measurement (proof_lines says why)
        interval = f" [wide: {_pairs(row.get('gain_pairs'))}]"
    return _mark(row) + number_text(row["gain_pct"], "{:+.1f}%") + interval


WIDE_INTERVAL = 1000.0  # percentage points: an interval wider than ten times the target alone's speed says nothing its
# bounds could (the quick start on a busy machine printed ~+64.0% [-100,+12322933]); the table names its pairs instead


def wide_interval(lo, hi) -> bool:
    """Whether a gain's interval is too wide to print as numbers (WIDE_INTERVAL)."""
    return lo is not None and hi is not None and pd.notna(lo) and pd.notna(hi) and hi - lo > WIDE_INTERVAL


def _pairs(pairs) -> str:
    return f"{int(pairs)} pair{'s' if pairs != 1 else ''}" if pairs is not None and pd.notna(pairs) else "few pairs"


def _mark(row: pd.Series, prefix: str = "") -> str:
    """'≈' before a gain that is the same as the target alone within the margin, '~' before one that is undecided
    (summary.VERDICTS), '' before a decided one or one without a test."""
    if row.get(f"{prefix}verdict") == "same":
        return "≈"
    if prefix:
        return "~" if row.get(f"{prefix}decided") is False else ""
    return "~" if _undecided_gain(row) else ""


def ttft_measured(row: pd.Series) -> bool:
    """Whether a row's prompts are long enough for its TTFT cost to be shown (summary.TTFT_PROMPT_TOKENS)."""
    tokens = row.get("prompt_tokens")
    return tokens is not None and pd.notna(tokens) and tokens >= TTFT_PROMPT_TOKENS


def _ttft_text(row: pd.Series) -> str:
    """'+41% [+35,+48]': a speculative row's time to first token over its target alone's, with its interval (paired and
    corrected as the gain is); '–' where its prompts are too short to tell (ttft_measured)."""
    if row["mode"] != "speculative":
        return ""
    cost = row.get("ttft_cost_pct")
    if not ttft_measured(row) or cost is None or pd.isna(cost):
        return "–"
    lo, hi = row.get("ttft_cost_lo"), row.get("ttft_cost_hi")
    return f"{cost:+.0f}%" + ("" if lo is None or pd.isna(lo) else f" [{lo:+.0f},{hi:+.0f}]")


def _ttft_present(summary: pd.DataFrame) -> bool:
    spec = summary[summary["mode"] == "speculative"]
    return "ttft_cost_pct" in summary and "prompt_tokens" in summary and bool(
        (spec["prompt_tokens"] >= TTFT_PROMPT_TOKENS).any())


def _undecided_gain(row: pd.Series) -> bool:
    """A gain whose test could be made and decides nothing (its interval holds zero and reaches past the margin, or its
    baseline was busy); a gain that is the same within the margin is decided the other way (≈)."""
    return gain_decided(row) is False and row.get("verdict") != "same"


def _run_text(row: pd.Series) -> str:
    return (row_label(row) + (" ★" if row["best_k"] else "") + (" !" if row.get("unreliable") else "")
            + (" ⧉" if row.get("twin") is True else ""))


def _model_md(row: pd.Series) -> str:
    flags = (" **(best K)**" if row["best_k"] else "") + (" (twin: speed only)" if row.get("twin") is True else "")
    return model_label(row) + flags + (f" (unreliable: {row['unreliable']})" if row.get("unreliable") else "")


def _offload_md(row: pd.Series) -> str:
    asked = f" (asked -ngl {row['ngl']} -ngld {row['ngld']})" if "ngl" in row and short_of_request(row) else ""
    return offload_label(row) + asked


def _field_column(f: Field) -> RunColumn:
    """A declared field's own column: its value as the field formats it, where the summary has it (shown_with: where
    that column holds a value in some row)."""
    def present(summary: pd.DataFrame) -> bool:
        return f.name in summary and (f.shown_with is None or (f.shown_with in summary and summary[f.shown_with].notna().any()))
    return RunColumn(f.header, f.md, lambda r: f.text(r.get(f.name)), present=present, place=f.place)


def _gain_column(f: Field) -> RunColumn:
    """A declared field's gain over the target alone (summarize's NAME_gain_pct), beside the speed gain."""
    def text(row: pd.Series) -> str:
        undecided = row.get(f"{f.name}_decided") is False  # the speed gain's rule (summary._decided)
        return "" if row["mode"] == "target" else ("~" if undecided else "") + number_text(
            row.get(f"{f.name}_gain_pct"), "{:+.1f}%")
    return RunColumn(f.gain, f"{f.gain} gain %", text, present=lambda summary: f"{f.name}_gain_pct" in summary,
                     place=f.place)


RUN_COLUMNS = {
    "model": RunColumn(None, "model", model_label, _model_md),
    "run": RunColumn("run", None, _run_text, place=10),
    "offload": RunColumn("GPU layers", "GPU layers offload", offload_label, _offload_md, place=20),
    "tokens_per_s": RunColumn("tokens/s", "tokens/s", _tps, place=30),
    # the table: tune's prediction, else the cost schedule's own (_predicted); markdown: tune's
    "predicted": RunColumn("pred.", "predicted tokens/s", lambda r: speed_text(r["_pred"]),
                           lambda r: speed_text(r["predicted_tokens_per_s"]), place=40),
    "gain": RunColumn("gain", "gain %", _gain_text, place=110),
    "ttft": RunColumn("TTFT", "TTFT cost %", _ttft_text, present=_ttft_present, place=115),
    "runs": RunColumn("runs", None, lambda r: f"{r['runs']}" + (f" ({r['failed']} failed)" if r["failed"] else ""),
                      place=130),
    "temperature": RunColumn(None, "temperature", lambda r: number_text(r["temperature"], "{:g}")),
    **{f.name: _field_column(f) for f in RUN_FIELDS if f.header or f.md},  # ms/tok, accept, pp t/s, p95 s, ...
    **{f"{f.name}_gain": _gain_column(f) for f in RUN_FIELDS if f.gain},  # energy: tokens per joule's gain
}
# speed as its two factors, beside tokens/s where `report --steps` asks for them (json and csv always carry both)
STEP_COLUMNS = {
    "steps_per_s": RunColumn("steps/s", None, lambda r: number_text(r.get("steps_per_s"), "{:.1f}"),
                             present=lambda summary: "steps_per_s" in summary, place=31),
    "tokens_per_step": RunColumn("tok/step", None, lambda r: number_text(r.get("tokens_per_step"), "{:.2f}"),
                                 present=lambda summary: "tokens_per_step" in summary, place=32),
}
RUN_COLUMNS |= STEP_COLUMNS
TABLE_ORDER = tuple(sorted((n for n, c in RUN_COLUMNS.items() if c.table and n not in STEP_COLUMNS),
                           key=lambda n: RUN_COLUMNS[n].place))
STEPS_LEGEND = "steps/s: the target's decode steps a second (a verify batch, or one token) · tok/step: tokens a step"
# what goes first where a table is too wide: the optional fields' columns (energy, memory), then these
NARROWING = (*(f.header for f in RUN_FIELDS if f.optional and f.header), "pp t/s", "ovh", "tok/rnd", "runs", "ms/tok",
             "p95 s", "pred.", "accept", *(f.gain for f in RUN_FIELDS if f.optional and f.gain), "TTFT")  # a gain goes
# last
MD_ORDER = ("model", "offload", "tokens_per_s", "predicted", "gain", "ttft",
            *(f"{f.name}_gain" for f in RUN_FIELDS if f.gain), "acceptance", "temperature")  # llama.cpp's notebook's,
# the TTFT cost where prompts are long enough, and a declared field's gain where a run has it
MD_SHOWN = ("pair", "ngl", "ngld", "temperature")  # settings the markdown table's own columns show (model, offload, T)


def _cells(summary: pd.DataFrame, names: Sequence[str], md: bool = False) -> dict[str, list[str]]:
    """Heading -> the rows' texts, for the named columns the summary has (in that order)."""
    out = {}
    for name in names:
        col = RUN_COLUMNS[name]
        heading, text = (col.md, col.md_text or col.text) if md else (col.table, col.text)
        if heading and col.present(summary):
            out[heading] = [text(r) for _, r in summary.iterrows()]
    return out


def _varying_cells(summary: pd.DataFrame, varying: Sequence[str]) -> dict[str, list[str]]:
    """Heading -> the rows' texts of the settings that tell rows apart (_VARYING's)."""
    return {_VARYING[c]: [number_text(v, "{:g}") if c == "temperature" else _count(v) if c in CONCURRENCY else str(v)
                          for v in summary[c]] for c in varying}


def rich_table(summary: pd.DataFrame, title: str = "", width: int = 80, show_host: bool = False,
               steps: bool = False) -> Table:
    """A table that fits `width` columns without wrapping a cell: what is the same for every row (pair,
    files, offload, temperature, machine) goes into the title and caption; columns that vary (host,
    prompt, GPU layers) get their own; where it is still too wide, the overhead, tokens-per-round and
    runs columns go first. A terminal of 120 columns or more always gets GPU layers. steps: steps/s and
    tokens per step beside tokens/s (STEP_COLUMNS), kept however narrow the terminal."""
    varying = [c for c in _VARYING if c in summary.columns
               and (summary[c].nunique(dropna=False) > 1 or (c == "host" and show_host))]
    offloads = summary.apply(offload_label, axis=1)
    requested = "ngl" in varying or "ngld" in varying  # the groups differ by what was asked: show what was placed
    show_offload = width >= 120 or requested or offloads[summary["mode"] == "speculative"].nunique() > 1
    columns = _varying_cells(summary, varying)
    pred = _predicted(summary)
    order = sorted([*TABLE_ORDER, *STEP_COLUMNS], key=lambda n: RUN_COLUMNS[n].place) if steps else TABLE_ORDER
    shown = [c for c in order if (c != "offload" or show_offload) and (c != "predicted" or pred is not None)]
    columns |= _cells(summary.assign(_pred=pred), shown)
    # still too wide: drop what does not tell rows apart, never a column that does (pair, host, T, n, prompt, -ngl,
    # -ngld, the context settings, and the layers placed beside them)
    for optional in NARROWING:
        if _width(columns) <= width:
            break
        columns.pop(optional, None)
    tight = _width(columns) > width  # still too wide: one space between columns instead of three
    caption = _caption(summary, show_offload, "ovh" in columns, "pp t/s" in columns, varying)
    table = Table(title=_title(summary, varying, title),
                  caption=caption + ("\n" + STEPS_LEGEND if "steps/s" in columns else ""),
                  box=box.SIMPLE_HEAD,
                  show_edge=False, padding=(0, 0) if tight else (0, 1), pad_edge=False, title_justify="left", caption_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name in ("run", "pair", "engine", "host", "prompt", "-fa", "-ctk", "-ctv")
                         else "right", no_wrap=True)
    best = list(summary["best_k"])
    for i, cells in enumerate(zip(*columns.values())):
        table.add_row(*cells, style="bold" if best[i] else None)
    return fit_title(table, width)


# --- engines side by side -------------------------------------------------------------------


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
    fixed = [f"{both['pair'].iloc[0]}"] if "pair" not in varying else []
    fixed += [f"T={number_text(both['temperature'].iloc[0], '{:g}')}"] if "temperature" not in varying else []
    fixed += [f"n={both['n_predict'].iloc[0]}"] if "n_predict" not in varying else []
    title = f"{engine_registry.title(first)} vs {engine_registry.title(second)} (tokens/s)"
    columns: dict[str, list[str]] = {_VARYING.get(c, c): [number_text(v, "{:g}") if c == "temperature" else str(v)
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


def short_of_request(row: pd.Series) -> bool:
    """Whether llama.cpp placed fewer layers than -ngl/-ngld asked for, on the models this row ran (a CPU-only build
    places none: it ignores them)."""
    checks = [] if row["mode"] == "draft" else [(row["ngl"], row["target_offload"])]
    if row["mode"] != "target":
        checks.append((row["ngld"], row["draft_offload"]))
    return any(_placed_fewer(asked, placed) for asked, placed in checks)


def _placed_fewer(asked, placed) -> bool:
    """asked: 'all' or a number; placed: 'N/total' as llama.cpp counts (anything else, a run without a model: False)."""
    try:
        on, total = map(int, str(placed).split("/"))
        want = total if str(asked).lower() in ("all", "max", "-1") else min(int(asked), total)
    except ValueError:
        return False
    return on < want


def _offload_line(summary: pd.DataFrame) -> str | None:
    """One caption line when some row got fewer GPU layers than it asked for; None when every row got what it asked."""
    if not {"ngl", "ngld"} <= set(summary.columns):
        return None
    short = summary[summary.apply(short_of_request, axis=1)]
    if short.empty:
        return None
    on_cpu = short.apply(offload_label, axis=1).str.split(" + ").map(lambda ps: all(p.startswith("0/") or "/" not in p for p in ps))
    if on_cpu.all():
        return "this llama.cpp build has no GPU device: -ngl/-ngld were ignored"
    return "GPU layers: what llama.cpp placed, fewer than -ngl/-ngld asked"


def _width(columns: dict[str, list[str]]) -> int:
    """Rendered width: each column's widest cell or header, 3 characters between columns (padding, rule, padding)."""
    return sum(max(len(name), *map(len, cells)) for name, cells in columns.items()) + 3 * (len(columns) - 1)


def _title(summary: pd.DataFrame, varying: list[str], title: str) -> str:
    fixed = []
    for c in ("pair", "engine", "temperature", "n_predict", "host"):
        if c not in varying and c in summary.columns:
            v = summary[c].iloc[0]
            if (c == "host" and v == "local") or (c == "engine" and engine_registry.is_default(v)):
                continue
            if c == "engine":
                v = engine_registry.title(v)
            fixed.append(f"T={v:g}" if c == "temperature" else f"n={v}" if c == "n_predict" else str(v))
    if "placement" in summary.columns and "placement" not in varying and summary["placement"].iloc[0]:
        fixed.append(summary["placement"].iloc[0])  # the flags every row was placed with
    if "depth" in summary.columns and "depth" not in varying and summary["depth"].iloc[0]:
        fixed.append(f"@ d{summary['depth'].iloc[0]}")  # llama-bench's spelling of a depth
    if "prompt_length" in summary.columns and "prompt_length" not in varying and summary["prompt_length"].iloc[0]:
        fixed.append(f"{summary['prompt_length'].iloc[0]}-token prompts")
    for c, default in CONTEXT_DEFAULTS.items():  # a context setting every row shares, where it is not llama.cpp's default
        if c not in varying and c in summary.columns and summary[c].iloc[0] != default:
            fixed.append(f"{_VARYING[c]} {summary[c].iloc[0]}")
    return " · ".join(([title] if title else []) + fixed)


def _caption(summary: pd.DataFrame, show_offload: bool, show_ovh: bool, show_pp: bool = False,
             varying: Sequence[str] = ()) -> str:
    """Files and offload when they are the same for every row, and what the short columns mean."""
    lines = []
    first = summary.iloc[0]
    if summary["target_file"].nunique() == 1 and summary["draft_file"].nunique() <= 1:
        target, draft = _stem(first["target_file"]), _stem(first["draft_file"])
        if not show_offload and pd.notna(first["target_offload"]):  # not known of a server someone else started
            target += f" ({first['target_offload']} on GPU)"
            draft += f" ({first['draft_offload']})"
        lines += [f"target {target}"] + ([f"draft  {draft}"] if isinstance(first["draft_file"], str) else [])
    if offload := _offload_line(summary):
        lines.append(offload)
    legend = (["★ best K"] if summary["best_k"].any() else []) + ["gain vs target alone"]
    lines.append(" · ".join(legend) + (" · ovh: outside llama_decode, % of inside" if show_ovh else ""))
    if objective_of(summary) != "decode":
        lines.append(objective_line(objective_of(summary)))
    if show_pp:
        lines.append("pp t/s: prompt tokens per second of prompt processing (speculative rows: both models')")
    if _ttft_present(summary):
        lines.append(f"TTFT: time to first token over the target alone's (+ is a cost: the drafter processes the "
                     f"prompt too), paired as the gain; shown for prompts of {TTFT_PROMPT_TOKENS}+ tokens")
    lines += [f.caption(summary) for f in RUN_FIELDS if f.legend and f.name in summary]  # what a measured column means
    lines += ceiling.footer_lines(summary, row_label)  # each row's share of the memory-bandwidth ceiling, where known
    reasons = set(",".join(summary["unreliable"]).split(",")) - {""} if "unreliable" in summary else set()
    if reasons:
        why = [f"runs of one prompt spread over {SPREAD:.0%} of their mean"] if "spread" in reasons else []
        why += [_busy_reason(summary[summary["unreliable"].str.contains("busy")])] if "busy" in reasons else []
        lines.append(f"! unreliable: {'; '.join(why)}; no best K is starred beside such rows")
    lines += left_out_lines(summary)
    lines += proof_lines(summary, varying)
    if _concurrent(summary):
        lines.append("several clients: tokens/s is all clients' tokens over the round's wall time (prompts included); "
                     "req t/s: each request's own decode speed; p95 s: end-to-end latency")
        lines += concurrency_lines(summary)
    if "twin" in summary and summary["twin"].any():
        lines.append(f"⧉ twin: {TWIN_NOTE}")
    if "predicted_tokens_per_s" in summary:
        lines.append("pred.: tokens/s that `gguf-bench tune` predicted for the setting")
    if summary.get("schedule_predicted_tokens_per_s", pd.Series(dtype=float)).notna().any():
        lines.append("pred. of a 'cost' row: what the cost schedule predicted for the rounds it chose")
    sized = summary[summary["strategy"].fillna("").str.contains("cost")] if "draft_lengths" in summary else summary[:0]
    counted = [(" ".join([f"{_VARYING[c]} {r[c]}" for c in varying] + [row_label(r)]), rounds_by_length(r["draft_lengths"]))
               for _, r in sized.iterrows()]
    if any(text for _, text in counted):
        lines.append("rounds per draft length (tokens drafted:rounds, all runs) of the 'cost' rows:")
        lines += [f"  {label}: {text}" for label, text in counted if text]
    return "\n".join(lines)


def objective_line(objective: str) -> str:
    """What tokens/s and the gain read under --objective (summary.OBJECTIVES)."""
    if objective == "request":
        return ("objective: request latency (--objective request): tokens/s is -n tokens over TTFT + -n tokens at the "
                "row's speed; gain = latency alone / latency - 1 (+ is a shorter request)")
    return ("objective: served throughput (--objective throughput): tokens/s is every token over the wall time, prompts "
            "included, at the row's slots")


def proof_lines(summary: pd.DataFrame, varying: Sequence[str] = ()) -> list[str]:
    """What the gain column's marks mean, where a row has one: each row that drafted nothing with the likely reason, a
    gain the test cannot tell from zero, gains from one run per prompt (no test possible)."""
    spec = summary[summary["mode"] == "speculative"]
    lines = []
    if "no_drafts" in spec:
        for _, r in spec[spec["no_drafts"].notna()].iterrows():
            label = " ".join([f"{_VARYING[c]} {r[c]}" for c in varying] + [row_label(r)])
            why = "" if r["no_drafts"] == NO_REASON else f": {r['no_drafts']}"
            lines.append(f"no drafts: {label} drafted no token, so it measured the target alone{why}")
    decided = spec.apply(gain_decided, axis=1) if not spec.empty else pd.Series(dtype=object)
    tested = spec[decided.notna()] if not spec.empty else spec
    if not tested.empty:
        lines.append(_interval_legend(tested))
    if "verdict" in spec and (spec["verdict"] == "same").any():
        lines.append(f"≈ the same as the target alone: the whole interval within ±{margin_of(summary):g}% (--margin); "
                     "the simpler setting is deployed")
    if not spec.empty and spec.apply(_undecided_gain, axis=1).any():
        lines.append("~ not decided (the interval holds zero and reaches past the margin, or the machine was busy or "
                     "drifted): never recommended")
    if "gain_lo" in spec and any(wide_interval(lo, hi) for lo, hi in zip(spec["gain_lo"], spec["gain_hi"])):
        lines.append(f"[wide: N pairs]: an interval over {WIDE_INTERVAL:.0f} points wide, from N quiet pairs of runs: it "
                     "decides nothing yet; more repetitions on a quiet machine (-r auto) narrow it")
    if (decided.isna() & spec["gain_pct"].notna()).any():
        lines.append("a gain from fewer than 2 runs of each side: no interval can tell it from zero, so none is "
                     "recommended (-r 2 or more)")
    return lines + drift_lines(summary, varying)


def _interval_legend(tested: pd.DataFrame) -> str:
    """What the [lo,hi] beside a gain is: paired or not, corrected for how many rows."""
    family = int(tested["gain_family"].max()) if "gain_family" in tested and tested["gain_family"].notna().any() else 1
    paired = (tested.get("gain_test") == "paired").all()
    how = (_paired_how(tested) if paired else "Welch's test (runs not interleaved: an older file)"
           if (tested.get("gain_test") == "unpaired").all() else "paired where runs were interleaved, else Welch's")
    looks = int(tested["gain_looks"].max()) if "gain_looks" in tested and tested["gain_looks"].notna().any() else 1
    rows = family // looks
    corrected = (f", corrected for {rows} row{'s' if rows > 1 else ''} x {looks} looks (-r auto)" if looks > 1 else
                 f", corrected for {family} rows" if family > 1 else "")
    return f"[-a,+b]: the gain's {1 - GAIN_LEVEL:.0%} interval, {how}{corrected}"


PAIR_GAP_S = 300.0  # paired runs that began at most this far apart are "paired in time": a drift slower than this cancels


def _paired_how(tested: pd.DataFrame) -> str:
    """How the paired runs stood in time: 'paired in time' only where every pair began within PAIR_GAP_S of each
    other, with the median and the largest gap (the rows' medians' median: a summary row keeps no single pair)."""
    medians = pd.to_numeric(tested.get("pair_gap_median_s", pd.Series(dtype=float)), errors="coerce").dropna()
    largest = pd.to_numeric(tested.get("pair_gap_max_s", pd.Series(dtype=float)), errors="coerce").dropna()
    if medians.empty or largest.empty:  # runs without their start time: paired by block
        return "runs paired by block"
    gaps = f"gaps median {_span(medians.median())}, largest {_span(largest.max())}"
    if largest.max() <= PAIR_GAP_S:
        return f"runs paired in time ({gaps})"
    return f"runs paired by block, far apart in time ({gaps}: a drift between them is not cancelled)"


def _span(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def drift_lines(summary: pd.DataFrame, varying: Sequence[str] = ()) -> list[str]:
    """One line per setting whose target alone moved more than summary.DRIFT during the sweep (summary.drift)."""
    if "drift_pct" not in summary:
        return []
    alone = summary[(summary["mode"] == "target") & (summary["drift_pct"].abs() > 100 * DRIFT)]
    out = []
    for _, r in alone.iterrows():
        where = " ".join(f"{_VARYING[c]} {r[c]}" for c in varying if c in _VARYING and c != "prompt_id")
        spec = summary[(summary["mode"] == "speculative") & matching(summary, r, [c for c in SETTING if c in summary
                                                                                   and c not in SPECULATION])]
        unpaired = (spec.get("gain_test") == "unpaired").any()
        then = "its unpaired gains are not decided" if unpaired else "the paired gains cancel a slow drift"
        out.append(f"drift: the target alone{f' ({where})' if where else ''} moved {r['drift_pct']:+.1f}% from the first "
                   f"to the last quarter of its {int(r['drift_runs'])} runs ({r['drift_min']:.1f} min); {then}")
    return out


def _count(v) -> str:
    """A slot or client count; '-' for rows measured one request at a time."""
    return "-" if pd.isna(v) else f"{int(v)}"


def _concurrent(summary: pd.DataFrame) -> bool:
    return "parallel" in summary and summary["parallel"].notna().any()


def concurrency_lines(summary: pd.DataFrame) -> list[str]:
    """Where speculation stops paying as clients grow: 'K=4 gains +31% at 1 client, +6% at 2, -18% at 4 (slots = clients)'
    per speculative row, when the summary holds more than one client count."""
    rows = summary[summary["clients"].notna()] if "clients" in summary else summary[:0]
    if rows["clients"].nunique() < 2:
        return []
    rest = [c for c in SETTING if c not in CONCURRENCY]
    lines = []
    spec = rows[rows["mode"] == "speculative"]
    for _, group in spec.groupby(rest + ["strategy", "k"], dropna=False, sort=False):
        group = group.sort_values(["clients", "parallel"])
        gains = [(int(r["clients"]), int(r["parallel"]), r["gain_pct"], gain_decided(r) is True and r["gain_pct"] > 0)
                 for _, r in group.iterrows() if pd.notna(r["gain_pct"])]
        if len(gains) < 2:
            continue
        parts = [("" if pays else "~") + f"{g:+.0f}% at {c} client{'s' if c > 1 else ''}"
                 + (f" on {n} slot{'s' if n > 1 else ''}" if n != c else "") for c, n, g, pays in gains]
        stops = next((c for c, _, _, pays in gains if not pays), None)
        verdict = ("; it pays at every count measured" if stops is None else "; it is told to pay at none of them"
                   if stops == gains[0][0] else f"; it is told to pay below {stops} clients only")
        lines.append(f"{row_label(group.iloc[0])} gains {', '.join(parts)}{verdict}")
    return lines


def left_out_lines(summary: pd.DataFrame) -> list[str]:
    """'2 of 8 runs left out: busy (...)': the runs measured while the machine had other work (summary.busy), each left
    out with the run paired with it; and how many sweeps the rows pool, where more than one (each with its own pairs)."""
    lines = []
    left = int(summary["busy_runs"].sum()) if "busy_runs" in summary else 0
    if left:
        reason = _busy_reason(summary[summary["busy_runs"] > 0]).removeprefix("the machine was busy: ")
        lines.append(f"{left} of {int(summary['runs'].sum())} runs left out: busy ({reason}); gains are read from "
                     "the others (a pair with a busy run is left out whole)")
    pooled = int(summary["sweeps"].max()) if "sweeps" in summary and summary["sweeps"].notna().any() else 1
    if pooled > 1:
        lines.append(f"rows pool up to {pooled} sweeps: each sweep's runs paired among themselves, their pairs added")
    return lines


def _busy_reason(busy: pd.DataFrame) -> str:
    """'the machine was busy: others used 1.3 of 2 cores during these runs': what the flagged rows measured."""
    others, cores = busy["others_cores"].max(), busy["cpu_count"].max()
    starved = busy["main_cpu_share"].min()
    parts = [f"others used {others:.1f} of {cores:.0f} cores during these runs"] if pd.notna(others) and others > OTHERS_CORES else []
    stolen = busy["steal_cores"].max() if "steal_cores" in busy else float("nan")
    if pd.notna(stolen) and stolen > STEAL_CORES:
        parts.append(f"the hypervisor gave {stolen:.2f} cores to other guests (steal)")
    if pd.notna(starved) and starved < MAIN_SHARE:
        parts.append(f"the generating thread got {starved:.0%} of the wall time")
    if not parts:  # records without the others' CPU time: judged by their load average
        parts.append(f"load average {busy['load1'].max():.1f} on {cores:.0f} cores")
    return "the machine was busy: " + "; ".join(parts)


def _predicted(summary: pd.DataFrame) -> pd.Series | None:
    """Per row, tune's prediction, else the cost schedule's own for its rounds; None where no row has either."""
    cols = [summary[c] for c in ("predicted_tokens_per_s", "schedule_predicted_tokens_per_s") if c in summary]
    pred = cols[0].combine_first(cols[1]) if len(cols) == 2 else cols[0] if cols else None
    return pred if pred is not None and pred.notna().any() else None


# --- files ----------------------------------------------------------------------------------


def to_markdown(summary: pd.DataFrame) -> str:
    """The published llama.cpp notebook's table: model, GPU layers offload, tokens/s, gain %; led by the settings that
    tell rows apart and that those columns do not show (-np, clients, prompt, engine, host, ...), as the table is."""
    predicted = "predicted_tokens_per_s" in summary
    varying = [c for c in _VARYING if c in summary.columns and c not in MD_SHOWN
               and summary[c].nunique(dropna=False) > 1]
    columns = _varying_cells(summary, varying)
    columns |= _cells(summary, [c for c in MD_ORDER if c != "predicted" or predicted], md=True)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cells) + " |" for cells in zip(*columns.values())]
    return "\n".join(lines) + "\n"


def render_results(summary: pd.DataFrame | None, evals: list[EvalRecord], fmt: str) -> str:
    """What --format writes: the run summary; evaluations too in md (a second table), and alone when there are no runs."""
    if summary is None:
        return evals_view.markdown(evals) if fmt == "md" else render(evals_view.frame(evals), fmt)
    return render(summary, fmt) + ("\n" + evals_view.markdown(evals) if fmt == "md" and evals else "")


def render(summary: pd.DataFrame, fmt: str) -> str:
    if "placement" in summary.columns and not summary["placement"].astype(bool).any():
        summary = summary.drop(columns="placement")  # a column only where a placement was asked for
    if fmt == "md":
        return to_markdown(summary)
    summary = ceiling.with_ceiling(summary)  # bandwidth_gbs, ceiling_pct: where this host's bandwidth is stored
    if fmt == "csv":
        return summary.to_csv(index=False)
    if fmt == "json":
        return summary.to_json(orient="records", indent=1)
    if fmt == "jsonl":
        return "".join(json.dumps(rec, default=str) + "\n" for rec in json.loads(summary.to_json(orient="records")))
    raise BenchError(f"unknown format '{fmt}'; choose from {', '.join(FORMATS)}")
