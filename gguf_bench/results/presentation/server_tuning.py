"""`tune --engine server`'s tables, lines and JSON (the model is results/predictions/server_costs.py, the flow
measure/flows/server_tune.py)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.text import Text

from gguf_bench.results.predictions.server_costs import ServerCalibration
from gguf_bench.results.presentation.tuning import gain_cell
from gguf_bench.results.schema.text import right_table, speed_text


def _slots(cal: ServerCalibration) -> str:
    return f"{cal.parallel} slots, req t/s" if cal.parallel else "one request at a time"


def prediction_table(cal: ServerCalibration, ks: Sequence[int], top, width: int = 80) -> Group:
    """One row per K: the acceptance of its position, the share of steps that drafted, tokens per round, seconds per
    round (measured ● or between measured K's), predicted tokens/s and gain; ★ on the recommendation."""
    measured = dict(cal.rounds_s)
    columns: dict[str, list[str]] = {"K": [], "a_K": [], "drafted": [], "tok/round": [], "ms/round": [], "tokens/s": [],
                                     "gain %": []}
    for p in cal.predictions(ks):
        star = " ★" if top is not None and top[0] is cal and top[1] == p else ""
        cells = (str(p.k), f"{cal.a[p.k - 1]:.0%}", f"{cal.drafting_at(p.k):.0%}", f"{p.tokens_per_round:.2f}",
                 f"{p.round_ms:.1f}" + (" ●" if p.k in measured else ""), speed_text(p.tokens_per_s) + star,
                 f"{p.gain_pct:+.1f}")
        for name, cell in zip(columns, cells):
            columns[name].append(cell)
    table = right_table(columns, f"tune {cal.pair}, llama-server {cal.spec_type}: predicted tokens/s", width)
    legend = [f"greedy, {_slots(cal)}; target alone {speed_text(1 / cal.t_target)} tokens/s", cal.guard.line(),
              f"a_K: acceptance of draft position K once reached ({cal.a_from}, at K={cal.k_max})",
              "drafted: the share of steps that drafted (the rest decoded one plain token), measured ● or between",
              "ms/round: ● measured at that K, else linear between the measured K's (K=0: the target alone's token)",
              *[f"K={k}: its {n:g} rounds among {steps:g} steps could not be timed apart from the plain steps (less "
                "than one target step left per round): linear between its neighbours" for k, n, steps in cal.untimed]]
    return Group(table, Text("\n".join(legend)))


def recommendation_line(tuned) -> str:
    if tuned.verdict is not None:
        return measured_line(tuned)
    if tuned.within_scatter is not None:
        cal, p = tuned.within_scatter
        return (f"recommendation: run the target alone: the best prediction, {cal.spec_type} K={p.k} at "
                f"{p.gain_pct:+.1f}%, is within the scatter of the target alone's own repetitions (±{cal.scatter:.1%}): "
                "more --reps can tell it")
    if tuned.top is None:
        return ("recommendation: run the target alone: no type and K is predicted to beat it "
                f"({', '.join(c.spec_type for c in tuned.calibrations)} calibrated)")
    cal, p = tuned.top
    return (f"recommendation: --spec-type {cal.spec_type} at K={p.k}: predicted "
            f"{speed_text(p.tokens_per_s)} tokens/s against {speed_text(p.baseline_tokens_per_s)} for the target alone "
            f"({p.gain_pct:+.1f}%)")


def measured_line(tuned) -> str:
    """--check's recommendation: what its runs say by the verdict rule (results/checks.measured_verdict), then the
    prediction: never a setting slower than another it measured."""
    v, cal = tuned.verdict, tuned.checked_cal
    speed = f"{speed_text(v['tokens_per_s'])} tokens/s measured"
    what = (f"run the target alone ({speed}): {v['why']}" if v["k"] == 0 else
            f"--spec-type {cal.spec_type} at K={v['k']}: {speed}, {v['why']}")
    predicted = (f"--spec-type {tuned.top[0].spec_type} at K={tuned.top[1].k}" if tuned.top else "the target alone")
    return f"recommendation (measured by --check): {what}; predicted: {predicted}"


def check_table(tuned, width: int = 80) -> Group:
    """--check: predicted beside measured for the K's it ran."""
    columns: dict[str, list[str]] = {"run": [], "predicted": [], "measured": [], "error %": [],
                                     "gain % pred / meas": [], "runs": []}
    for r in tuned.checked:
        label = "target alone" if r["k"] == 0 else f"{r['spec_type']} K={r['k']}"
        gains = "" if r["k"] == 0 else f"{r['predicted_gain_pct']:+.1f} / {gain_cell(r) or '–'}"
        for name, cell in zip(columns, (label, speed_text(r["predicted_tokens_per_s"]), speed_text(r["measured_tokens_per_s"]),
                                        f"{r['error_pct']:+.1f}", gains, str(r["runs"]))):
            columns[name].append(cell)
    table = right_table(columns, "--check: tokens/s predicted against measured through llama-server (mean over "
                                 "prompts and repetitions)", width)
    legend = ["gain %: over the target alone, predicted (the calibration's) and measured (the check's own); where the "
              "target alone's error is as large as a K's, the machine's speed moved",
              "measured: over the target alone measured beside each run; [a,b] its 95% interval, corrected for the rows "
              "compared at once; ~ not decided (the interval holds zero, or fewer than 2 pairs of runs): never "
              "recommended"]
    return Group(table, Text("\n".join(legend)))


def as_json(tuned, twin: bool = False) -> dict:
    cals = tuned.calibrations
    rows = [{"spec_type": c.spec_type, "parallel": c.parallel, "k": p.k, "predicted_tokens_per_s": p.tokens_per_s,
             "predicted_gain_pct": p.gain_pct, "tokens_per_round": p.tokens_per_round, "round_ms": p.round_ms,
             "drafting_share": c.drafting_at(p.k), "round_from": c.round_from(p.k)}
            for c in cals for p in c.predictions(tuned.job.ks)]
    best = ({"spec_type": tuned.top[0].spec_type, "k": tuned.top[1].k, "predicted_tokens_per_s": tuned.top[1].tokens_per_s,
             "predicted_gain_pct": tuned.top[1].gain_pct} if tuned.top else
            {"spec_type": None, "k": 0, "predicted_tokens_per_s": 1 / cals[0].t_target, "predicted_gain_pct": 0.0}
            ) | {"from": "predicted"}
    if twin:  # a twin's own acceptance is chance: its round times only, predicted at named rates by the caller
        return {"pair": cals[0].pair, "engine": "server", "results": str(tuned.job.out),
                "calibrations": [{"spec_type": c.spec_type, "parallel": c.parallel, "t_target_s": c.t_target,
                                  "rounds_s": dict(c.rounds_s), "round_from": _round_from(c, tuned.job.ks)}
                                 for c in cals]}
    doc = {"pair": cals[0].pair, "engine": "server", "results": str(tuned.job.out),
           "calibrations": [{"spec_type": c.spec_type, "parallel": c.parallel, "t_target_s": c.t_target,
                             "rounds_s": dict(c.rounds_s), "round_from": _round_from(c, tuned.job.ks),
                             "drafting_share": dict(c.drafting), "a": list(c.a),
                             "a_from": c.a_from, "target_scatter": c.scatter} for c in cals],
           "rows": rows, "best": best, "scatter_guard": cals[0].guard.as_json()}  # one target alone for every type
    if tuned.within_scatter is not None:
        cal, p = tuned.within_scatter
        doc["within_scatter"] = {"spec_type": cal.spec_type, "k": p.k, "predicted_gain_pct": p.gain_pct,
                                 "target_scatter": cal.scatter}
    if tuned.checked is not None:
        doc["check"] = tuned.checked
    if tuned.verdict is not None:  # the fastest measured setting wins: the prediction stays beside it
        doc["predicted_best"], doc["best"] = best, _measured_best(tuned)
    return doc


def _measured_best(tuned) -> dict:
    """--check's verdict as tune --json's best."""
    v = tuned.verdict
    return {"spec_type": tuned.checked_cal.spec_type if v["k"] else None, "k": v["k"],
            "measured_tokens_per_s": v["tokens_per_s"], "measured_gain_pct": v["gain_pct"], "decided": v["decided"],
            "why": v["why"], "from": "measured by --check"}


def _round_from(cal: ServerCalibration, ks: Sequence[int]) -> dict[int, str]:
    """Each K's round: 'measured', 'interpolated' (calibrated, not timed) or 'not calibrated' (ServerCalibration)."""
    return {k: cal.round_from(k) for k in sorted(set(ks))}


def acceptance_rows(tuned, alphas: Sequence[float]) -> list[dict]:
    """Twins: predicted tokens/s of each type and K at each named acceptance rate."""
    return [{"spec_type": c.spec_type, "acceptance": a, "k": p.k, "predicted_tokens_per_s": p.tokens_per_s,
             "predicted_gain_pct": p.gain_pct} for c in tuned.calibrations for a in alphas
            for p in (c.at_acceptance(a, k) for k in tuned.job.ks)]


def acceptance_table(cal: ServerCalibration, ks: Sequence[int], alphas: Sequence[float], width: int = 80) -> Group:
    """Twins: one row per K, a column per named acceptance rate (tokens/s and gain); ★ on each column's best K."""
    columns: dict[str, list[str]] = {"K": [str(k) for k in ks], "ms/round": [f"{cal.round_at(k) * 1000:.1f}" for k in ks]}
    for a in alphas:
        preds = [cal.at_acceptance(a, k) for k in ks]
        top = max(preds, key=lambda p: p.tokens_per_s)
        columns[f"at {a:.0%}"] = [f"{speed_text(p.tokens_per_s)} ({p.gain_pct:+.0f}%)"
                                  + (" ★" if p is top and p.gain_pct > 0 else "") for p in preds]
    table = right_table(columns, f"tune {cal.pair}, llama-server {cal.spec_type}: tokens/s at named acceptance",
                        width)
    legend = [f"greedy, {_slots(cal)}; target alone {speed_text(1 / cal.t_target)} tokens/s",
              "at A: every draft position accepted with probability A; ★ the fastest K where it gains"]
    return Group(table, Text("\n".join(legend)))
