"""What `tune` shows and stores beside the cost model (results/predictions/costmodel.py): its options as strategies, the offload
settings a build can tell apart, rows for --json, the lines on the cost schedule, the predictions as a frame that
`report` joins to measured rows, and --check's predicted-against-measured rows. Pure: loads no model, prints nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from rich.console import Group
from rich.text import Text

from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.errors import ConfigError
from gguf_bench.results.predictions.costmodel import (
    Calibration,
    CostOutlook,
    Recommendation,
    ScatterGuard,
    at_acceptance,
    break_even,
    modeled,
    recommend,
)
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.text import columns_width, number_text, right_table, speed_text


def tune_strategies(spec_types: str, k_schedules: str, ngram_min: int, ngram_max: int, k_cap: int | None,
               ks: Sequence[int]) -> list[Strategy]:
    """tune's --spec-type and --k-schedule lists as strategies (draft model, fixed K first when asked)."""
    cap = k_cap if k_cap is not None else max(ks)
    if cap > max(ks):
        raise ConfigError(f"--k-cap {cap} is above the largest -K {max(ks)}: verify costs are measured up to -K")
    out = [Strategy(spec, ngram_min, ngram_max, 0.0, 0, schedule, cap)
           for spec in str(spec_types).replace(" ", "").split(",") for schedule in str(k_schedules).replace(" ", "").split(",")]
    for st in out:
        modeled(st)
    return list(dict.fromkeys(out))

def prediction_rows(calibrations: Sequence[Calibration], strategies: Sequence[Strategy] = (DEFAULT_STRATEGY,)) -> list[dict]:
    """Flat rows (what `tune --json` prints), the recommended one marked (none: run the target alone)."""
    rec = recommend(calibrations, strategies) if calibrations else None
    top = (rec.fastest_cal, rec.fastest) if rec is not None and rec.speculative else None
    rows = []
    for cal in calibrations:
        for p in cal.predictions(strategies):
            rows.append({"pair": cal.pair, "ngl": cal.ngl, "ngld": cal.ngld, "k": p.k, "strategy": p.strategy,
                         "predicted_tokens_per_s": p.tokens_per_s, "predicted_gain_pct": p.gain_pct,
                         "predicted_baseline_tokens_per_s": p.baseline_tokens_per_s,
                         "tokens_per_round": p.tokens_per_round, "acceptance": p.acceptance, "round_ms": p.round_ms,
                         "draft_cost": p.k * cal.timings.draft_cost_ratio(),
                         "verify_ratio": cal.timings.verify_curve()[p.k],
                         "best": top is not None and top[0] is cal and top[1] == p, "objective": cal.objective,
                         "predicted_request_s": p.request_s, "predicted_baseline_request_s": p.baseline_request_s,
                         "predicted_request_gain_pct": request_gain_pct(p)})
    return rows


def request_gain_pct(p) -> float | None:
    """The predicted request's gain: the target alone's latency over this one's, less one (None: prompts not timed)."""
    return 100.0 * (p.baseline_request_s / p.request_s - 1.0) if p.request_s and p.baseline_request_s else None


def unit(cal: Calibration) -> str:
    """What a prediction's tokens/s holds under the calibration's objective."""
    return "request tokens/s" if cal.objective == "request" else "tokens/s"


def request_line(cal: Calibration, p) -> str | None:
    """One request's predicted latency, prompt included, for `p` (a speculative prediction) and the target alone:
    'request (n=64, 19-token prompts, predicted): 2.61 s with draft K=4 against 3.9 s alone (+49.4%); the prompt
    takes 0.12 s alone, 0.15 s with the draft'. None where the calibration did not time its prompts."""
    if p is None or p.request_s is None or p.baseline_request_s is None:
        return None
    alone = statistics.fmean(t.prompt_s for t in cal.texts)
    drafted = p.strategy.startswith("draft")
    both = statistics.fmean(t.prompt_s + (t.draft_prompt_s or 0.0) for t in cal.texts) if drafted else alone
    return (f"request (n={cal.n_predict}, {cal.prompt_tokens:.0f}-token prompts, predicted): {_s(p.request_s)} with "
            f"{p.strategy} against {_s(p.baseline_request_s)} alone ({request_gain_pct(p):+.1f}%); the prompt takes "
            f"{_s(alone)} alone, {_s(both)} with {'the draft' if drafted else 'this drafting'}")


def _s(seconds: float) -> str:
    """Seconds to three figures: '2.61 s', '0.00412 s'."""
    return f"{seconds:.3g} s"


def cost_outlook_lines(outlooks: Sequence[CostOutlook]) -> list[str]:
    """tune's lines on --k-schedule cost: the prediction and what it assumes, or why there is none."""
    lines = []
    for o in outlooks:
        f = o.best_fixed
        fixed = f"best fixed K: {f.strategy} {o.best_fixed_cal.setting} ({f.tokens_per_s:.2f})"
        if o.prediction is not None:
            p = o.prediction
            lines.append(f"--k-schedule cost ({p.strategy}, K its cap, -ngl {o.cal.ngl}): predicted {p.tokens_per_s:.2f} "
                         f"{unit(o.cal)}, {o.gain_over_fixed_pct:+.1f}% over the {fixed}, {p.gain_pct:+.1f}% over the target "
                         "alone (assumes the calibration's greedy texts, its timings as the schedule's costs, hit rates "
                         "learned afresh per prompt)")
        else:
            what = (f"draft {o.length} every round ({o.approx.strategy}, {o.approx.tokens_per_s:.2f} {unit(o.cal)})"
                    if o.approx is not None else "not draft at all (the target alone)")
            lines.append(f"--k-schedule cost ({o.spec}): not predicted: it sizes rounds by the draft's per-token "
                         f"confidence, which the calibration does not record; by the per-position acceptance alone it "
                         f"would {what}; {fixed}; measure it with sweep --k-schedule cost")
    return lines

def cost_outlook_rows(outlooks: Sequence[CostOutlook], rec: Recommendation) -> list[dict]:
    """tune --json's cost_schedule entries."""
    return [{"spec": o.spec, "predicted": o.prediction is not None,
             "strategy": o.prediction.strategy if o.prediction else None,
             "k_cap": o.prediction.k if o.prediction else None, "ngl": o.cal.ngl, "ngld": o.cal.ngld,
             "predicted_tokens_per_s": o.prediction.tokens_per_s if o.prediction else None,
             "predicted_gain_pct": o.prediction.gain_pct if o.prediction else None,
             "gain_over_best_fixed_pct": o.gain_over_fixed_pct,
             "best_fixed": {"strategy": o.best_fixed.strategy, "k": o.best_fixed.k, "ngl": o.best_fixed_cal.ngl,
                            "ngld": o.best_fixed_cal.ngld, "predicted_tokens_per_s": o.best_fixed.tokens_per_s},
             "acceptance_length": o.length, "recommended": o.beats(rec)} for o in outlooks]

def predicted_frame(records: Sequence[CalibrationRecord]):
    """Predictions from every calibration record among `records`, one row per (setting, K) for the draft
    model with a fixed K (what sweep measures), in the
    columns report uses: pair, host ('local': tune measures in its own process), ngl, ngld, temperature,
    n_predict, k, predicted_tokens_per_s,
    predicted_gain_pct, predicted_baseline_tokens_per_s, predicted_best, and the calibration's
    prompt ids (comma-joined). The latest record of a (pair, ngl, ngld, n_predict, depth) wins."""
    import pandas as pd

    latest: dict[tuple, Calibration] = {}
    for rec in sorted((r for r in records if isinstance(r, CalibrationRecord)), key=lambda r: r.time or ""):
        cal = Calibration.from_record(rec)
        if cal.twin:  # a twin's texts are chance: it predicts no run
            continue
        latest[(cal.pair, cal.ngl, cal.ngld, cal.placement, cal.n_predict, cal.depth)] = cal
    rows = []
    for cal in latest.values():
        preds = cal.predictions()
        top = max(p.tokens_per_s for p in preds)
        prompts = ",".join(t.prompt_id for t in cal.texts)
        rows += [{"pair": cal.pair, "host": "local", "ngl": cal.ngl, "ngld": cal.ngld, "placement": cal.placement,
                  "temperature": 0.0, "n_predict": cal.n_predict,
                  "depth": cal.depth,
                  "k": p.k, "predicted_tokens_per_s": p.tokens_per_s, "predicted_gain_pct": p.gain_pct,
                  "predicted_baseline_tokens_per_s": p.baseline_tokens_per_s, "predicted_best": p.tokens_per_s == top,
                  "prompts": prompts}
                 for p in preds]
    columns = ["pair", "host", "ngl", "ngld", "placement", "temperature", "n_predict", "depth", "k", "predicted_tokens_per_s",
               "predicted_gain_pct",
               "predicted_baseline_tokens_per_s", "predicted_best", "prompts"]
    return pd.DataFrame(rows, columns=columns)


def gain_cell(row: dict) -> str:
    """A check row's measured gain as report writes one: '+12.3 [+8,+17]', '~+2.8 [-4,+10]' where it is not decided,
    '~+2.8' where no interval could be made, 'no drafts' where it drafted nothing, '' for the target alone."""
    gain = row.get("measured_gain_pct")
    if gain is None:
        return "no drafts" if row.get("no_drafts") else ""
    lo, hi = row.get("measured_gain_lo"), row.get("measured_gain_hi")
    mark = "" if row.get("decided") else "~"
    if lo is None or hi is None:
        return f"{mark}{gain:+.1f}"
    return f"{mark}{gain:+.1f} [{lo:+.0f},{'>+999' if hi > 999 else f'{hi:+.0f}'}]"  # a few pairs' interval reaches far


CHECK_LEGEND = ("gain %: measured, over the target alone measured beside it; [a,b] its 95% interval, corrected for the "
                "rows compared at once; ~ not decided (the interval holds zero, or fewer than 2 pairs of runs): never "
                "recommended")


def recommendation_line(rec: Recommendation, top_cal: Calibration, top, cost_top: CostOutlook | None,
                        several_strategies: bool, ngram: tuple[int, int]) -> str:
    """tune's 'recommended: ...' line: the cost schedule when it beats the best fixed K, else the fastest K, else the
    target alone (with the fastest K, which does not beat it or does by less than the scatter guard's margin)."""
    how = f" ({top.strategy})" if several_strategies else ""
    u = unit(top_cal)
    if cost_top is None and rec.within_scatter:
        return (f"recommended: run the target alone (-ngl {rec.baseline_cal.ngl}, predicted "
                f"{rec.baseline_tokens_per_s:.2f} {u}): the fastest, -K {top.k} {top_cal.setting}{how}, is "
                f"predicted at {top.tokens_per_s:.2f} {u} ({rec.gain_pct:+.1f}%), within the scatter of the target "
                f"alone's own {rec.guard.timings} (±{rec.scatter:.1%}): --check measures it")
    if cost_top is not None:
        p, c = cost_top.prediction, cost_top.cal
        flags = " --spec-type ngram" + ("" if ngram == (1, 4) else f" --ngram-min {ngram[0]} --ngram-max {ngram[1]}")
        return (f"recommended: -K {p.k} --k-schedule cost{flags} -ngl {c.ngl}: predicted {p.tokens_per_s:.2f} "
                f"{u}, {cost_top.gain_over_fixed_pct:+.1f}% over the best fixed K, {p.gain_pct:+.1f}% over "
                f"the target alone ({p.baseline_tokens_per_s:.2f})")
    if rec.speculative:
        return (f"recommended: -K {top.k} {top_cal.setting}{how}: predicted "
                f"{top.tokens_per_s:.2f} {u}, {top.gain_pct:+.1f}% over the target alone "
                f"({top.baseline_tokens_per_s:.2f})")
    return (f"recommended: run the target alone (-ngl {rec.cal.ngl}, predicted "
            f"{rec.baseline_tokens_per_s:.2f} {u}): no draft length is predicted to beat it; the "
            f"fastest, -K {top.k} {top_cal.setting}{how}, is predicted at "
            f"{top.tokens_per_s:.2f} {u} ({top.gain_pct:+.1f}%)")


def measured_line(verdict: dict, rec: Recommendation, cost_top: CostOutlook | None) -> str:
    """tune --check's recommendation: what its runs say by the verdict rule (results/checks.measured_verdict), then what
    was predicted (`rec`, `cost_top`): never a setting slower than another it measured."""
    setting = f"-ngl {verdict.get('ngl')} -ngld {verdict.get('ngld')}"
    u = unit(rec.fastest_cal)
    if verdict["k"] == 0:
        what = f"run the target alone ({setting}, {verdict['tokens_per_s']:.2f} {u} measured): {verdict['why']}"
    else:
        k = f"-K {verdict['k']}" if verdict["strategy"] == DEFAULT_STRATEGY.name else verdict["label"]
        what = f"{k} {setting}: {verdict['tokens_per_s']:.2f} {u} measured, {verdict['why']}"
    return f"recommended (measured by --check): {what}; predicted: {_predicted_text(rec, cost_top)}"


def _predicted_text(rec: Recommendation, cost_top: CostOutlook | None) -> str:
    """What tune predicted it would recommend, in a few words."""
    p, cal = (cost_top.prediction, cost_top.cal) if cost_top is not None else (rec.prediction, rec.cal)
    u = unit(cal)
    if p is None:
        return f"the target alone (-ngl {cal.ngl}) at {rec.baseline_tokens_per_s:.2f} {u}"
    return f"{p.strategy} {cal.setting} at {p.tokens_per_s:.2f} {u}"


def acceptance_rows(cal: Calibration, alphas: Sequence[float]) -> list[dict]:
    """Per calibrated K: the verify and draft costs, the acceptance below which K cannot pay (break_even), and the
    long-run tokens/s and gain at each named acceptance rate (what a twin's timings say; costmodel.at_acceptance)."""
    tm, base = cal.timings, 1.0 / cal.timings.t_target
    return [{"k": k, "ngl": cal.ngl, "ngld": cal.ngld, "verify_ratio": tm.verify_curve()[k],
             "draft_cost": k * tm.draft_cost_ratio(), "break_even": break_even(tm, k), "baseline_tokens_per_s": base,
             "at": {f"{a:g}": at_acceptance(tm, a, k) for a in alphas}} for k in cal.ks]


def acceptance_table(cal: Calibration, alphas: Sequence[float], width: int = 80) -> Group:
    """acceptance_rows as a table: tokens/s (gain %) per named acceptance rate, and the break-even rate."""
    rows = acceptance_rows(cal, alphas)
    columns: dict[str, list[str]] = {
        "K": [str(r["k"]) for r in rows], "verify ×": [number_text(r["verify_ratio"]) for r in rows],
        "K·c": [number_text(r["draft_cost"]) for r in rows],
        "break-even a": ["never" if r["break_even"] is None else f"{r['break_even']:.0%}" for r in rows]}
    for a in alphas:
        columns[f"a={a:g}"] = [f"{speed_text(r['at'][f'{a:g}'])} ({100 * (r['at'][f'{a:g}'] / r['baseline_tokens_per_s'] - 1):+.0f}%)"
                               for r in rows]
    table = right_table(columns, f"tune {cal.pair}, {cal.setting}: tokens/s at the acceptance rates named "
                                 f"(twins' timings; target alone {speed_text(1.0 / cal.timings.t_target)})", width)
    legend = ["a: the chance each draft token is accepted, the same at every position (long-run rounds)",
              "break-even a: below it, K is slower than the target alone"]
    return Group(table, Text("\n".join(legend)))


def strategy_heading(st: Strategy) -> str:
    """A column heading in `tune`'s table: the strategy without its K ('draft', 'ngram h<=16')."""
    return st.spec_type + (f" h<={st.k_cap}" if st.k_schedule == "heuristic" else "")


def prediction_table(cal, strategies: list, top_cal, top, width: int = 80, guard: ScatterGuard | None = None) -> Group:
    """One row per K: why it is fast or slow (acceptance, draft and verify cost) and the prediction of
    each strategy (with one strategy, its tokens per round and round time too). Fits `width` without wrapping a
    cell: the gaps narrow first, then verify × and K·c go (never K or a prediction). `guard`: its line in the legend."""
    tm = cal.timings
    base = cal.predict(min(cal.ks)).baseline_tokens_per_s
    one = len(strategies) == 1
    by_k: dict[int, list] = {}
    for p in cal.predictions(strategies):
        by_k.setdefault(p.k, []).append(p)
    columns: dict[str, list[str]] = {
        "K": [str(k) for k in by_k], "a_K": [number_text(cal.a[k - 1] if k <= len(cal.a) else None, "{:.0%}") for k in by_k],
        "K·c": [number_text(k * tm.draft_cost_ratio()) for k in by_k], "verify ×": [number_text(tm.verify_curve()[k]) for k in by_k]}
    if one:
        columns |= {"tok/round": [], "ms/round": [], "tokens/s": [], "gain %": []}
    else:
        columns |= {strategy_heading(st): [] for st in strategies}
    for k, preds in by_k.items():
        labels = {p.strategy: p for p in preds}
        for st in strategies:
            p = labels.get(st.label(k))
            star = " ★" if p is not None and p == top and cal is top_cal else ""
            if one:
                cells = ["–"] * 4 if p is None else [number_text(p.tokens_per_round), number_text(p.round_ms, "{:.1f}"),
                                                     speed_text(p.tokens_per_s) + star, number_text(p.gain_pct, "{:+.1f}")]
                for name, cell in zip(("tok/round", "ms/round", "tokens/s", "gain %"), cells):
                    columns[name].append(cell)
            else:
                columns[strategy_heading(st)].append("–" if p is None else
                                                     f"{speed_text(p.tokens_per_s)} ({number_text(p.gain_pct, '{:+.0f}')}%){star}")
    for optional in ("verify ×", "K·c"):  # too wide even with one space between columns
        if columns_width(columns, 1) <= width:
            break
        columns.pop(optional)
    legend = (["a_K: acceptance of draft position K once reached"]
              + (["K·c: a round's draft cost in target decodes"] if "K·c" in columns else [])
              + (["verify ×: t_verify(K+1)/t_verify(1)"] if "verify ×" in columns else []) + strategies_caption(strategies)
              + ([guard.line()] if guard is not None else []))
    if cal.objective == "request":
        legend.append(f"request tokens/s: n={cal.n_predict} tokens over the request's latency, the prompt's processing "
                      "included (the target's, and the draft model's); gain %: against the target alone's")
    table = right_table(columns, f"tune {cal.pair}, {cal.setting}: predicted {unit(cal)} (greedy, n={cal.n_predict}, "
                                 f"{len(cal.texts)} prompt{'s' if len(cal.texts) > 1 else ''}"
                                 f"{f' of {cal.prompt_tokens:.0f} tokens' if cal.objective == 'request' else ''}; target alone "
                                 f"{speed_text(base)})", width,
                        styles=["bold" if cal is top_cal and top in by_k[k] else None for k in by_k])
    return Group(table, Text("\n".join(legend)))  # a line each: a caption would wrap at the table's width


def strategies_caption(strategies: list) -> list[str]:
    if len(strategies) == 1:
        return []
    ngram = next((st for st in strategies if st.spec_type == "ngram"), None)
    return (["cells: tokens/s (gain %)", "h<=C: heuristic K from K up to C"]
            + ([f"ngram: lookup of {ngram.ngram_min}-{ngram.ngram_max} tokens"] if ngram else []))


def components_line(cal) -> str:
    """The measured parts the prediction is built from."""
    tm = cal.timings
    return (f"measured: target t_verify(1) {1000 * tm.t_target:.2f} ms, draft {1000 * tm.t_draft:.2f} ms "
            f"(c = {tm.draft_cost_ratio():.3f}; 2-token catch-up {1000 * tm.t_draft2:.2f} ms), round overhead "
            f"{1000 * tm.round_overhead:.2f} ms")


def check_table(rows: list[dict], top_k: int | None, width: int = 80) -> Group:
    """Predicted beside measured for the K --check ran; ★ beside the recommended K (none when the target alone is)."""
    columns: dict[str, list[str]] = {"K": [], "predicted tok/s": [], "measured tok/s": [], "error %": [], "gain %": [],
                                     "runs": []}
    for r in rows:
        label = r.get("strategy") or ("target alone" if r["k"] == 0 else f"{r['k']}" + (" ★" if r["k"] == top_k else ""))
        for name, cell in zip(columns, (label, number_text(r["predicted_tokens_per_s"]), number_text(r["measured_tokens_per_s"]),
                                        number_text(r["error_pct"], "{:+.1f}"), gain_cell(r), str(r["runs"]))):
            columns[name].append(cell)
    table = right_table(columns, "--check: predicted against measured (mean over prompts, as sweep measures)", width)
    return Group(table, Text(CHECK_LEGEND))


def twin_json(tuned, alphas: list[float]) -> dict:
    """tune --twin's JSON: whose twins, where the acceptance came from, tokens/s at each named acceptance rate."""
    return {"twin_of": tuned.job.real_pair, "acceptance_from": tuned.calibrations[0].acceptance_from or None,
            "at_acceptance": [row for cal in tuned.calibrations for row in acceptance_rows(cal, alphas)]}


def as_json(pair: str, out: Path, calibrations: list, strategies: list, checked: list[dict] | None, outlooks: list,
            verdict: dict | None = None) -> dict:
    """tune --json's document: each setting's measured parts, every prediction, the best (--check's measured verdict
    where it ran, the prediction beside it as predicted_best), the scatter guard, the cost schedule's outlook and
    --check's rows."""
    rows = prediction_rows(calibrations, strategies)
    rec = recommend(calibrations, strategies)
    cost = cost_outlook_rows(outlooks, rec)
    doc = {"pair": pair, "results": str(out),
           "settings": [{"ngl": c.ngl, "ngld": c.ngld, "t_target_s": c.timings.t_target, "t_draft_s": c.timings.t_draft,
                         "t_draft2_s": c.timings.t_draft2, "draft_cost_ratio": c.timings.draft_cost_ratio(),
                         "verify_curve": c.timings.verify_curve(), "round_overhead_s": c.timings.round_overhead,
                         "a": list(c.a), "target_scatter": c.scatter} for c in calibrations],
           "rows": rows, "best": _predicted_best(rec, rows, cost), "scatter_guard": rec.guard.as_json()}
    if rec.within_scatter and not any(r["recommended"] for r in cost):
        doc["within_scatter"] = {"k": rec.fastest.k, "ngl": rec.fastest_cal.ngl, "ngld": rec.fastest_cal.ngld,
                                 "strategy": rec.fastest.strategy, "predicted_gain_pct": rec.gain_pct,
                                 "target_scatter": rec.scatter}
    doc["cost_schedule"] = cost  # --k-schedule cost against the best fixed K (predicted for n-gram drafting only)
    if checked is not None:
        doc["check"] = checked
    if verdict is not None:  # the fastest measured setting wins: the prediction stays beside it
        doc["predicted_best"], doc["best"] = doc["best"], _measured_best(verdict)
    return doc


def _predicted_best(rec: Recommendation, rows: list[dict], cost: list[dict]) -> dict:
    """The recommended prediction: the cost schedule, a K, or the target alone (none beats it by the guard's margin)."""
    top = (max((r for r in cost if r["recommended"]), key=lambda r: r["predicted_tokens_per_s"], default=None)
           or next((r for r in rows if r["best"]), None) or {  # no K beats the target alone: run it alone
               "k": 0, "ngl": rec.cal.ngl, "ngld": None, "strategy": "run the target alone",
               "predicted_tokens_per_s": rec.baseline_tokens_per_s, "predicted_gain_pct": 0.0})
    if "k_cap" in top:  # the cost schedule: its cap is the -K to run it with
        top = dict(top, k=top["k_cap"])
    keys = ("k", "ngl", "ngld", "strategy", "predicted_tokens_per_s", "predicted_gain_pct")
    return {key: top[key] for key in keys} | {"from": "predicted"}


def _measured_best(verdict: dict) -> dict:
    """--check's verdict as tune --json's best."""
    alone = verdict["k"] == 0
    return {"k": verdict["k"], "ngl": verdict.get("ngl"), "ngld": verdict.get("ngld"),
            "strategy": "run the target alone" if alone else f"{verdict['strategy']} K={verdict['k']}",
            "measured_tokens_per_s": verdict["tokens_per_s"], "measured_gain_pct": verdict["gain_pct"],
            "decided": verdict["decided"], "why": verdict["why"], "from": "measured by --check"}
