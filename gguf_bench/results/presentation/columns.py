"""The report's columns and labels: what each summary column is called, how a cell is written, which columns vary;
every printer (rich, markdown, csv, json, html) reads them."""


from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from gguf_bench.results.decision.terms import FLAGS
from gguf_bench.results.decision.wording import row_label  # noqa: F401 (report.row_label)
from gguf_bench.results.presentation.summary import (
    CONCURRENCY,
    TTFT_PROMPT_TOKENS,
    gain_decided,
    offload_label,
)
from gguf_bench.results.schema.fields import Field
from gguf_bench.results.schema.run_fields import RUN_FIELDS
from gguf_bench.results.schema.text import number_text, speed_text

FORMATS = ("md", "csv", "json", "jsonl")


def rounds_by_length(counts) -> str:
    """'0:12 1:3 4:20': the draft lengths that occurred, with their rounds."""
    return " ".join(f"{n}:{c}" for n, c in enumerate(counts) if c) if isinstance(counts, list) else ""


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
AGREEING_NOTE = ("agreeing twins (twin --agree) predict token 0 everywhere: every draft is accepted by construction, "
                 "so their acceptance (1) and gain are the loop's upper bound, at this shape and offload, "
                 "not a real draft's")


def _stem(name) -> str:
    return str(name).removesuffix(".gguf")


def _tps(row: pd.Series) -> str:
    if pd.isna(row["tokens_per_s"]):
        return "–"
    std = row["tokens_per_s_std"]
    return speed_text(row["tokens_per_s"]) + ("" if pd.isna(std) else f" ± {speed_text(std)}")



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
    """Heading -> the rows' texts of the settings that tell rows apart (FLAGS's)."""
    return {FLAGS[c]: [number_text(v, "{:g}") if c == "temperature" else _count(v) if c in CONCURRENCY else str(v)
                          for v in summary[c]] for c in varying}


def _predicted(summary: pd.DataFrame) -> pd.Series | None:
    """Per row, tune's prediction, else the cost schedule's own for its rounds; None where no row has either."""
    cols = [summary[c] for c in ("predicted_tokens_per_s", "schedule_predicted_tokens_per_s") if c in summary]
    pred = cols[0].combine_first(cols[1]) if len(cols) == 2 else cols[0] if cols else None
    return pred if pred is not None and pred.notna().any() else None


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


def _count(v) -> str:
    """A slot or client count; '-' for rows measured one request at a time."""
    return "-" if pd.isna(v) else f"{int(v)}"


def _width(columns: dict[str, list[str]]) -> int:
    """Rendered width: each column's widest cell or header, 3 characters between columns (padding, rule, padding)."""
    return sum(max(len(name), *map(len, cells)) for name, cells in columns.items()) + 3 * (len(columns) - 1)
