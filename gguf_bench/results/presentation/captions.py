"""The lines under the terminal's table: its title and caption, how the gains were paired and decided, drift,
concurrency, what was left out and why."""


from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from gguf_bench import engine_registry
from gguf_bench.axes import CONTEXT_DEFAULTS
from gguf_bench.results.predictions import ceiling
from gguf_bench.results.presentation.columns import (
    AGREEING_NOTE,
    FLAGS,
    TWIN_NOTE,
    WIDE_INTERVAL,
    _stem,
    _ttft_present,
    _undecided_gain,
    rounds_by_length,
    row_label,
    short_of_request,
    wide_interval,
)
from gguf_bench.results.presentation.summary import (
    CONCURRENCY,
    DRIFT,
    GAIN_LEVEL,
    MAIN_SHARE,
    NO_REASON,
    OTHERS_CORES,
    SETTING,
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
from gguf_bench.results.schema.run_fields import RUN_FIELDS


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
            fixed.append(f"{FLAGS[c]} {summary[c].iloc[0]}")
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
        twin = summary["twin"].fillna(False).astype(bool)
        agreeing = twin & summary.get("twin_agrees", pd.Series(False, index=summary.index)).fillna(False).astype(bool)
        if (twin & ~agreeing).any():
            lines.append(f"⧉ twin: {TWIN_NOTE}")
        if agreeing.any():
            lines.append(f"⧉ {AGREEING_NOTE}")
    if "predicted_tokens_per_s" in summary:
        lines.append("pred.: tokens/s that `gguf-bench tune` predicted for the setting")
    if summary.get("schedule_predicted_tokens_per_s", pd.Series(dtype=float)).notna().any():
        lines.append("pred. of a 'cost' row: what the cost schedule predicted for the rounds it chose")
    sized = summary[summary["strategy"].fillna("").str.contains("cost")] if "draft_lengths" in summary else summary[:0]
    counted = [(" ".join([f"{FLAGS[c]} {r[c]}" for c in varying] + [row_label(r)]), rounds_by_length(r["draft_lengths"]))
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
            label = " ".join([f"{FLAGS[c]} {r[c]}" for c in varying] + [row_label(r)])
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
        where = " ".join(f"{FLAGS[c]} {r[c]}" for c in varying if c in FLAGS and c != "prompt_id")
        spec = summary[(summary["mode"] == "speculative") & matching(summary, r, [c for c in SETTING if c in summary
                                                                                   and c not in SPECULATION])]
        unpaired = (spec.get("gain_test") == "unpaired").any()
        then = "its unpaired gains are not decided" if unpaired else "the paired gains cancel a slow drift"
        out.append(f"drift: the target alone{f' ({where})' if where else ''} moved {r['drift_pct']:+.1f}% from the first "
                   f"to the last quarter of its {int(r['drift_runs'])} runs ({r['drift_min']:.1f} min); {then}")
    return out


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

