"""Plots: `report --plot` (tokens/s against K with the target alone as a band, acceptance by draft position)
and `tune --plot` (the verify cost curve and predicted tokens/s). matplotlib is optional ('gguf-bench[plot]')."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gguf_bench.errors import BenchError
from gguf_bench.results.decision.terms import CONTEXT
from gguf_bench.results.predictions.costmodel import Calibration
from gguf_bench.results.presentation.tuning import strategy_heading

LINE = ["pair", "engine", "host", "ngl", "ngld", *CONTEXT, "temperature"]  # one line per setting (and engine)


def position_acceptance(df: pd.DataFrame) -> pd.DataFrame:
    """Acceptance of draft position j given it was reached, per setting, pooled over the runs of the
    largest K (the per-position counts the loop stores): columns LINE + position, acceptance."""
    spec = df[(df["mode"] == "speculative") & df["error"].isna() & df["reached_at"].notna()]
    lines = _lines(df)
    rows = []
    for key, grp in spec.groupby(lines, dropna=False):
        top = grp[grp["k"] == grp["k"].max()]
        reached = pd.DataFrame(top["reached_at"].tolist()).sum()
        accepted = pd.DataFrame(top["accepted_at"].tolist()).sum()
        for j in reached.index:
            if reached[j] > 0:
                rows.append({**dict(zip(lines, key)), "position": j + 1, "acceptance": accepted[j] / reached[j]})
    return pd.DataFrame(rows, columns=lines + ["position", "acceptance"])


def _lines(frame: pd.DataFrame) -> list[str]:
    """One line per setting and drafting strategy."""
    return [c for c in LINE if c in frame.columns] + (["strategy"] if "strategy" in frame.columns else [])


def plot(summary: pd.DataFrame, path: Path, metric: str = "tokens_per_s", df: pd.DataFrame | None = None) -> Path:
    """Write `figure(...)` as a PNG."""
    fig = figure(summary, metric, df)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


METRICS = ("tokens_per_s", "gain_pct")


def check_plot(metric: str = "tokens_per_s") -> None:
    """Say before any work is shown that a plot cannot be made (no matplotlib, an unknown metric)."""
    if metric not in METRICS:
        raise BenchError(f"--plot-metric must be {' or '.join(METRICS)}, got '{metric}'")
    _pyplot()


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("plotting needs matplotlib: pip install 'gguf-bench[plot]'") from None
    return plt


def figure(summary: pd.DataFrame, metric: str = "tokens_per_s", df: pd.DataFrame | None = None):
    """Left: tokens/s (or gain %) against K with ± std bars, the target alone as a band. Right:
    acceptance by draft position (when the raw runs `df` are given). One line per setting."""
    plt = _pyplot()
    if metric not in METRICS:
        raise BenchError(f"--plot-metric must be {' or '.join(METRICS)}, got '{metric}'")
    spec = summary[(summary["mode"] == "speculative") & summary["tokens_per_s"].notna()]
    if spec.empty:
        raise BenchError("nothing to plot: these results hold no speculative runs")
    positions = position_acceptance(df) if df is not None else pd.DataFrame()
    fig, axes = plt.subplots(1, 2 if not positions.empty else 1, figsize=(12 if not positions.empty else 7, 4.8),
                             squeeze=False)
    speed, accept = axes[0][0], axes[0][-1]
    lines = _lines(spec)
    for key, grp in spec.groupby(lines, dropna=False):
        label = _line_label(dict(zip(lines, key)), spec)
        setting = [c for c in lines if c != "strategy"]
        color = _draw_speed(speed, summary, grp, dict(zip(setting, key)), label, metric)
        if not positions.empty:
            pos = positions[(positions[lines] == pd.Series(key, index=lines)).all(axis=1)]
            accept.plot(pos["position"], pos["acceptance"], marker="o", color=color, label=label)
    speed.set_xlabel("draft length K")
    speed.set_ylabel("tokens/s (band: target alone, mean ± std)" if metric == "tokens_per_s" else "gain % over target alone")
    speed.grid(alpha=0.3)
    speed.legend(fontsize=7)
    if not positions.empty:
        accept.set_xlabel("draft position j")
        accept.set_ylabel("acceptance of position j, given reached")
        accept.set_ylim(0, 1.05)
        accept.grid(alpha=0.3)
    fig.suptitle(_plot_title(spec), fontsize=10)
    fig.tight_layout()
    return fig


def _draw_speed(ax, summary: pd.DataFrame, grp: pd.DataFrame, key: dict, label: str, metric: str) -> str:
    grp = grp.sort_values("k")
    err = grp["tokens_per_s_std"] if metric == "tokens_per_s" else None
    line = ax.errorbar(grp["k"], grp[metric], yerr=err, marker="o", capsize=3, label=label)
    color = line[0].get_color()
    predicted = f"predicted_{metric}"
    if predicted in grp and grp[predicted].notna().any():
        known = grp[grp[predicted].notna()]
        ax.plot(known["k"], known[predicted], linestyle=":", marker="x", color=color, label=f"{label}: predicted (tune)")
    if metric == "tokens_per_s":
        base = summary[(summary["mode"] == "target") & (summary[list(key)] == pd.Series(key)).all(axis=1)]
        if not base.empty and not pd.isna(base["tokens_per_s"].iloc[0]):
            mean, std = base["tokens_per_s"].iloc[0], base["tokens_per_s_std"].fillna(0).iloc[0]
            ax.axhspan(mean - std, mean + std, color=color, alpha=0.15)
            ax.axhline(mean, color=color, linestyle="--", linewidth=1)
    else:
        ax.axhline(0, color="grey", linestyle="--", linewidth=1)
    return color


def _line_label(values: dict, spec: pd.DataFrame) -> str:
    """Only what tells the lines apart."""
    parts = [f"{c}={values[c]:g}" if c == "temperature" else values[c] if c == "strategy" else f"{c}={values[c]}"
             for c in values if spec[c].nunique() > 1]
    return ", ".join(parts) or "speculative"


def _plot_title(spec: pd.DataFrame) -> str:
    first = spec.iloc[0]
    parts = [f"{c}: {first[c]}" for c in ("pair",) if spec[c].nunique() == 1]
    if spec["target_offload"].nunique() == 1 and spec["draft_offload"].nunique() == 1:
        parts.append(f"GPU layers {first['target_offload']} + {first['draft_offload']}")
    if spec["temperature"].nunique() == 1:
        parts.append(f"T={first['temperature']:g}")
    if spec["host"].nunique() == 1:
        machine = first["gpu"] if isinstance(first.get("gpu"), str) and first["gpu"] else first.get("cpu")
        parts.append(f"on {machine}" + (f" ({first['host']})" if first["host"] != "local" else ""))
    return " · ".join(str(p) for p in parts)


def plot_tune(calibrations: list[Calibration], strategies: list, checked: list[dict] | None, path: Path,
              outlooks: Sequence = ()) -> Path:
    """Left: verify cost t_verify(b)/t_verify(1) against b. Right: predicted tokens/s against K (dashed:
    the target alone), the cost schedule's predictions as stars at their cap (costmodel.CostOutlook), and the
    --check measurements as crosses (fixed K) and pluses (the cost schedule)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for cal in calibrations:
        label = f"-ngl {cal.ngl} -ngld {cal.ngld}"
        curve = cal.timings.verify_curve()
        left.plot(range(1, len(curve) + 1), curve, marker="o", label=label)
        colors = []
        for st in strategies:
            preds = cal.predictions([st])
            what = "" if len(strategies) == 1 else f" {strategy_heading(st)}"
            line, = right.plot([p.k for p in preds], [p.tokens_per_s for p in preds], marker="o",
                               label=f"predicted{what} {label}")
            colors.append(line.get_color())
        right.axhline(preds[0].baseline_tokens_per_s, color=colors[0], linestyle="--", linewidth=1)
    for o in outlooks:
        if o.prediction is not None:
            right.scatter([o.prediction.k], [o.prediction.tokens_per_s], marker="*", s=140, zorder=3,
                          label=f"predicted {o.prediction.strategy} (K: its cap) -ngl {o.cal.ngl}")
    if checked:
        for cost, marker, what in ((False, "x", "measured (--check)"), (True, "P", "measured cost schedule (--check)")):
            rows = [r for r in checked if r["k"] and ("strategy" in r) == cost]
            if rows:
                right.scatter([r["k"] for r in rows], [r["measured_tokens_per_s"] for r in rows], marker=marker, s=60,
                              color="black", zorder=4, label=what)
    left.plot([1, len(curve)], [1, 1], color="grey", linestyle=":", linewidth=1)
    left.set_xlabel("batch size b (= K + 1 when verifying K draft tokens)")
    left.set_ylabel("t_verify(b) / t_verify(1)")
    left.set_title("verify cost: flat = free verification (GPU-like)")
    right.set_xlabel("draft length K")
    right.set_ylabel("tokens/s (dashed: target alone)")
    right.set_title(f"{calibrations[0].pair}: predicted tokens/s")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise BenchError(f"could not write the plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
