"""The answer as text: one deploy line per workload (measure/deploy.with_deploy chose its row), saying what it rests
on: its figure (the command's own engine's), its gain and interval, the loads it was measured in, what made a simpler
row the answer, and the faster rows still undecided."""

from __future__ import annotations

import pandas as pd

from gguf_bench import engine_registry as capabilities
from gguf_bench.results.decision.choice import TWINS_NEVER_DEPLOYED
from gguf_bench.results.decision.verdicts import gain_decided, margin_of, own_engine, verdict_of
from gguf_bench.results.presentation.crossover import gain_text, over_text, slots_label, workload_part
from gguf_bench.results.presentation.report import row_label
from gguf_bench.results.presentation.summary import CONCURRENCY, FAMILY, OBJECTIVE_NAMES, matching, objective_of

GROUP = FAMILY  # a deploy line per workload (measure/deploy.GROUP)


def loads_text(row: pd.Series) -> str:
    """' over 6 loads': the loads (model loads, llama-server processes) a deployed gain rests on, each one observation
    of a load's own speed; ' from one load of each setting, ...' where a load served the whole sweep."""
    n = row.get("load_count")
    if n is None or pd.isna(n) or pd.isna(row.get("gain_lo")):
        return ""
    if int(n) > 1:
        return f" over {int(n)} loads"
    return " from one load of each setting: a load's own speed is not in the interval (--loads each measures it)"


def faster_undecided(rows: pd.DataFrame, chosen: pd.Series) -> str:
    """'; K=16 measured faster (41.2 tokens/s, ~+30.1% [-4,+75]), undecided': the speculative rows of the workload
    measured faster than the deployed one whose verdict is still open, the fastest first (two at most); '' where none."""
    spec = rows[(rows["mode"] == "speculative") & (rows["tokens_per_s"] > chosen["tokens_per_s"])
                & (rows.index != chosen.name)]
    spec = spec[spec.apply(lambda r: verdict_of(r) in (None, "undecided"), axis=1)] if not spec.empty else spec
    named = [f"{row_label(r)} measured faster ({r['tokens_per_s']:.2f} tokens/s, ~{gain_text(r)}), undecided"
             for _, r in spec.sort_values("tokens_per_s", ascending=False).head(2).iterrows() if pd.notna(r["gain_pct"])]
    return "".join(f"; {n}" for n in named)


def lines(summary: pd.DataFrame) -> list[tuple[str, str]]:
    """(what the line reproduces, the command line) for each best row (with_deploy's `deploy` column), one per workload,
    named by what differs between the workloads of the summary (temperature, depth, length, prompt, host; the slots
    and clients after the row), and by the objective where it is not decode tokens/s (summary.OBJECTIVES)."""
    out = []
    objective = objective_of(summary)
    group = [c for c in GROUP if c in summary]
    varying = [c for c in group if c not in ("pair", *CONCURRENCY) and summary[c].nunique(dropna=False) > 1]
    blocked = summary.get("deploy_busy", pd.Series(None, index=summary.index, dtype=object)).notna()
    for _, r in summary[summary["deploy"].notna() | blocked].iterrows():
        rows = summary[matching(summary, r, group)]
        named = " ".join(workload_part(c, r[c]) for c in varying)
        if objective != "decode":
            named = "; ".join(p for p in (named, f"objective: {OBJECTIVE_NAMES[objective]}") if p)
        where = f" at {slots_label(r['parallel'], r['clients'])}" if pd.notna(r.get("parallel")) else ""
        if pd.isna(r["deploy"]):  # a busy machine's row above every deployable one: no line to paste
            out.append((f"deploy {r['pair']}{f' ({named})' if named else ''}{where}: none yet: {r['deploy_busy']}", ""))
            continue
        speed = _figure(r, objective)
        simpler = f"; {r['deploy_note']}" if isinstance(r.get("deploy_note"), str) else ""
        over = f"; {over_text(r)}" if over_text(r) else ""  # over another setting's fastest target alone
        if r["mode"] != "speculative" and isinstance(r.get("deploy_over"), str):  # over another setting's alone
            over = f"; {r['deploy_over']}"
        simpler += faster_undecided(own_engine(rows), r)
        if isinstance(r.get("deploy_builds"), str):  # over the same setting on the other builds (--server-bin A,B)
            over += f"; {r['deploy_builds']}"
        if "server_bin" in rows and rows["server_bin"].nunique(dropna=False) > 1:
            where = f" on build {r['server_bin']}{where}"
        what = (f"{row_label(r)}{where} ({speed}, gain {gain_text(r)}{loads_text(r)}{over}{simpler})"
                if r["mode"] == "speculative"
                else f"no speculation{where} ({speed}; {_why_alone(own_engine(rows), r)}{over}{simpler})")
        note = ("" if capabilities.of(r["engine"]).server_process else
                f" (measured in {capabilities.of(r['engine']).what}: check it with --engine server)")
        out.append((f"deploy {r['pair']}{f' ({named})' if named else ''}: {what}{note}", r["deploy"]))
    return out


def _figure(row: pd.Series, objective: str) -> str:
    """The deployed row's figure under the objective: '41.20 tokens/s', '3.41 s per request of 64 tokens', '52.10 tokens/s
    served'."""
    if objective == "request" and pd.notna(row.get("request_latency_s")):
        return f"{row['request_latency_s']:.2f} s per request of {int(row['n_predict'])} tokens"
    return f"{row['tokens_per_s']:.2f} tokens/s" + (" served" if objective == "throughput" else "")


def _why_alone(rows: pd.DataFrame, alone: pd.Series) -> str:
    """Why a workload's line is the (fastest) target alone's: the fastest speculative row is the same as its target
    alone within the margin, nothing gained, the best gain could not be told from zero, or it was not faster than this
    target alone."""
    spec = rows[(rows["mode"] == "speculative") & rows["gain_pct"].notna()]
    fastest = spec.loc[spec["tokens_per_s"].idxmax()] if not spec.empty else None
    if fastest is not None and fastest.get("twin") == True:  # noqa: E712 (NaN: no twin ran); choice.candidates
        return f"the speculative rows {TWINS_NEVER_DEPLOYED}"
    if fastest is not None and verdict_of(fastest) == "same":
        return (f"{row_label(fastest)} is the same as the target alone within {margin_of(rows):g}%: "
                f"{gain_text(fastest)}")
    gained = rows[(rows["mode"] == "speculative") & (rows["gain_pct"] > 0)]
    if gained.empty:
        return "no speculative setting gained"
    best = gained.loc[gained["tokens_per_s"].idxmax()]
    what = f"the fastest speculative row, {row_label(best)} at {best['tokens_per_s']:.2f} tokens/s, {gain_text(best)}"
    if pd.isna(best.get("gain_lo")):
        if best.get("gain_test") == "paired" and not best.get("gain_pairs") and not best.get("gain_busy"):
            return (f"{what}, has no target alone measured beside it (in its own sweep and invocation): its gain is "
                    f"over runs measured apart and decides nothing; measure the target alone with it (a --resume "
                    f"that adds a setting measures it again)")
        return f"{what}, comes from fewer than 2 pairs: no interval can tell it from zero; measure it with -r 2 or more"
    if best.get("undecided_why"):
        why = {"busy": "the machine was busy", "drift": "its unpaired runs drifted",
               "margin": f"its interval is above zero but not told above the {margin_of(rows):g}% margin",
               "zero width": "its interval has zero width (every ratio the same)"}[best["undecided_why"]]
        return f"{what}: {why}, so it is not decided"
    if verdict_of(best) == "same":
        return f"{what}: the same as its target alone within {margin_of(rows):g}%"
    if gain_decided(best) is not True:
        return f"{what}: its 95% interval (corrected for {int(best['gain_family'])} rows) holds zero"
    return f"{what}: not told above this target alone's {alone['tokens_per_s']:.2f} tokens/s (another setting)"
