"""The page's pictures as plotly figures, each drawn from the rows of `report --format json` (document.Document.rows):
every point carries its row's index (customdata), so a reader, or the browser test, can find the figure it plots.

Colours say the verdict (summary.VERDICTS): decided faster green, decided slower red, the same within the margin blue,
undecided orange, untested grey; the target alone is grey."""

from __future__ import annotations

import pandas as pd

from gguf_bench.results.presentation.report import ttft_measured, wide_interval

VERDICT_COLOURS = {"faster": "#1a9850", "slower": "#d73027", "same": "#4575b4", "undecided": "#f39c12",
                   None: "#999999"}
VERDICT_NAMES = {"faster": "faster (decided)", "slower": "slower (decided)", "same": "the same (≈, within the margin)",
                 "undecided": "undecided (~)", None: "no test (fewer than 2 pairs)"}
SYMBOLS = {"faster": "circle", "slower": "circle", "same": "diamond", "undecided": "circle-open", None: "x"}
GREY = "rgba(120,120,120,0.18)"
PALETTE = ("#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e", "#2ca02c")
LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "height": 420,
          "font": {"size": 12}, "legend": {"orientation": "h", "y": -0.18}}


def _go():
    import plotly.graph_objects as go  # noqa: PLC0415 (html.check says where it is missing)

    return go


def _layout(fig, **changes) -> None:
    fig.update_layout({**LAYOUT, **changes})


def verdict(row: pd.Series) -> str | None:
    v = row.get("verdict")
    return v if isinstance(v, str) else None


def wide(lo, hi) -> bool:
    """An interval too wide to read as a number (report.WIDE_INTERVAL)."""
    return wide_interval(lo, hi)


def _errors(rows: pd.DataFrame, value: str, lo: str, hi: str) -> dict:
    """plotly's asymmetric error bars from an interval's bounds; none where a row has none or it is too wide."""
    if lo not in rows or hi not in rows:
        return {"visible": False}
    keep = [pd.notna(a) and pd.notna(b) and not wide(a, b) for a, b in zip(rows[lo], rows[hi])]
    up = [float(b - v) if k else None for k, v, b in zip(keep, rows[value], rows[hi])]
    down = [float(v - a) if k else None for k, v, a in zip(keep, rows[value], rows[lo])]
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down, "thickness": 1.2, "width": 4}


def _nums(series: pd.Series) -> list:
    return [None if pd.isna(v) else float(v) for v in series]


def _line_of(frame: pd.DataFrame, labels: dict) -> pd.Series:
    """Each row's line in the K picture: its setting's name without K ('engine server ngram(1-4)')."""
    names = pd.Series(labels["setting"], index=frame.index)
    return pd.Series([" ".join(w for w in name.split() if not w.startswith("K=")) for name in names], index=frame.index)


def k_figures(frame: pd.DataFrame, labels: dict) -> list:
    """Per workload: tokens/s against K per setting (± std; the target alone a grey band, mean ± std) above the gain
    against K with its interval (the margin a grey band), each point marked by its verdict."""
    spec = frame[(frame["mode"] == "speculative") & frame["tokens_per_s"].notna()]
    work = pd.Series(labels["workload"], index=frame.index)
    return [_k_figure(frame, spec[work[spec.index] == name], work, labels, name)
            for name in dict.fromkeys(work[spec.index])]


def _k_figure(frame: pd.DataFrame, spec: pd.DataFrame, work: pd.Series, labels: dict, name: str):
    go = _go()
    from plotly.subplots import make_subplots  # noqa: PLC0415

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=(f"{_figure_name(frame)} against K", "gain over the target alone, % (95% interval)"))
    lines = _line_of(frame, labels)
    setting = pd.Series(labels["setting"], index=frame.index)
    alone = frame[(frame["mode"] == "target") & (work == name)]
    for n, (_, row) in enumerate(alone.iterrows()):
        mean, std = row["tokens_per_s"], 0.0 if pd.isna(row.get("tokens_per_s_std")) else row["tokens_per_s_std"]
        if pd.notna(mean):
            fig.add_hrect(y0=mean - std, y1=mean + std, fillcolor=GREY, line_width=0, row=1, col=1)
            fig.add_trace(go.Scatter(x=[spec["k"].min(), spec["k"].max()], y=[mean, mean], mode="lines",
                                     line={"color": "grey", "dash": "dash", "width": 1}, customdata=[int(row.name)] * 2,
                                     meta={"y": "tokens_per_s"},
                                     name=f"{setting[row.name]} (mean ± std)", legendgroup="alone",
                                     showlegend=n == 0 or len(alone) > 1), row=1, col=1)
    margin = frame["margin_pct"].dropna().iloc[0] if "margin_pct" in frame and frame["margin_pct"].notna().any() else 0
    fig.add_hrect(y0=-margin, y1=margin, fillcolor=GREY, line_width=0, row=2, col=1)
    for i, line in enumerate(dict.fromkeys(lines[spec.index])):
        rows = spec[lines[spec.index] == line].sort_values("k")
        colour, idx = PALETTE[i % len(PALETTE)], [int(j) for j in rows.index]
        marks = {"symbol": [SYMBOLS[verdict(r)] for _, r in rows.iterrows()], "size": 10,
                 "line": {"width": 2, "color": colour}}
        fig.add_trace(go.Scatter(x=_nums(rows["k"]), y=_nums(rows["tokens_per_s"]), customdata=idx, name=line,
                                 meta={"x": "k", "y": "tokens_per_s"},
                                 legendgroup=line, mode="lines+markers", line={"color": colour}, marker=marks,
                                 error_y={"type": "data", "array": _nums(rows.get("tokens_per_s_std", rows["k"] * 0)),
                                          "thickness": 1, "width": 3}), row=1, col=1)
        fig.add_trace(go.Scatter(x=_nums(rows["k"]), y=_nums(rows["gain_pct"]), customdata=idx, name=line,
                                 meta={"x": "k", "y": "gain_pct"},
                                 legendgroup=line, showlegend=False, mode="lines+markers", line={"color": colour},
                                 marker={**marks, "color": [VERDICT_COLOURS[verdict(r)] for _, r in rows.iterrows()]},
                                 text=[_verdict_text(r) for _, r in rows.iterrows()],
                                 hovertemplate="K=%{x}: %{y:+.1f}% %{text}<extra>%{fullData.name}</extra>",
                                 error_y=_errors(rows, "gain_pct", "gain_lo", "gain_hi")), row=2, col=1)
    fig.update_xaxes(title_text="draft length K", dtick=1, row=2, col=1)
    _layout(fig, height=560, title={"text": name, "x": 0.01})
    return fig


def _figure_name(frame: pd.DataFrame) -> str:
    objective = frame["objective"].dropna().iloc[0] if "objective" in frame and frame["objective"].notna().any() else None
    return {"request": "request tokens/s (-n over the request's latency)",
            "throughput": "served tokens/s (all tokens over the wall time)"}.get(objective, "tokens/s")


def _verdict_text(row: pd.Series) -> str:
    lo, hi = row.get("gain_lo"), row.get("gain_hi")
    interval = ("" if pd.isna(lo) or pd.isna(hi) else " [wide: decides nothing yet]" if wide(lo, hi)
                else f" [{lo:+.0f},{hi:+.0f}]")
    return f"{interval} {VERDICT_NAMES[verdict(row)]}"


def verdict_map(frame: pd.DataFrame, labels: dict):
    """Settings (rows) x workloads (columns): each cell coloured by its verdict, the gain and interval written in it."""
    go = _go()
    spec = frame[frame["mode"] == "speculative"]
    if spec.empty:
        return None
    setting = pd.Series(labels["setting"], index=frame.index)[spec.index]
    work = pd.Series(labels["workload"], index=frame.index)[spec.index]
    ys, xs = list(dict.fromkeys(setting)), list(dict.fromkeys(work))
    codes = {v: n for n, v in enumerate(VERDICT_COLOURS)}
    z = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    custom = [[None] * len(xs) for _ in ys]
    for i, row in spec.iterrows():
        y, x = ys.index(setting[i]), xs.index(work[i])
        z[y][x], custom[y][x] = codes[verdict(row)], int(i)
        text[y][x] = _cell_text(row)
    n = len(codes)
    scale = [[edge, colour] for k, colour in enumerate(VERDICT_COLOURS.values()) for edge in (k / n, (k + 1) / n)]
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, text=text, texttemplate="%{text}", customdata=custom, zmin=-0.5,
                               zmax=n - 0.5, colorscale=scale, showscale=False, xgap=2, ygap=2,
                               hovertemplate="%{y} · %{x}: %{text}<extra></extra>"))
    for v, colour in VERDICT_COLOURS.items():  # the legend: one invisible point per verdict that appears
        if any(verdict(r) == v for _, r in spec.iterrows()):
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=VERDICT_NAMES[v],
                                     marker={"color": colour, "symbol": "square", "size": 12}))
    _layout(fig, height=max(260, 60 + 34 * len(ys)), title={"text": "gain over the target alone, by "
                      "setting and workload", "x": 0.01}, xaxis={"side": "top", "title": None}, yaxis={"autorange": "reversed"})
    fig.update_layout(margin={"l": 20, "r": 20, "t": 90, "b": 40})
    fig.update_yaxes(automargin=True)
    return fig


def _cell_text(row: pd.Series) -> str:
    if pd.isna(row["gain_pct"]):
        return "no gain"
    lo, hi = row.get("gain_lo"), row.get("gain_hi")
    mark = {"same": "≈", "undecided": "~"}.get(verdict(row), "")
    interval = "" if pd.isna(lo) or pd.isna(hi) else " [wide]" if wide(lo, hi) else f" [{lo:+.0f},{hi:+.0f}]"
    return f"{mark}{row['gain_pct']:+.1f}%{interval}"


def request_figure(frame: pd.DataFrame, labels: dict):
    """The whole request: decode gain (y) against the time-to-first-token cost (x), per prompt length, each with its
    interval; None where no speculative row's prompts were long enough to time (report.ttft_measured)."""
    go = _go()
    if "ttft_cost_pct" not in frame:
        return None
    rows = frame[(frame["mode"] == "speculative") & frame["ttft_cost_pct"].notna()]
    rows = rows[rows.apply(ttft_measured, axis=1)] if not rows.empty else rows
    if rows.empty:
        return None
    length = rows["prompt_length"] if "prompt_length" in rows and rows["prompt_length"].notna().any() else \
        rows["prompt_tokens"].round(-1)
    fig = go.Figure()
    for i, value in enumerate(dict.fromkeys(length)):
        part = rows[length == value]
        fig.add_trace(go.Scatter(x=_nums(part["ttft_cost_pct"]), y=_nums(part["gain_pct"]), mode="markers+text",
                                 customdata=[int(j) for j in part.index], name=f"{int(value)}-token prompts",
                                 meta={"x": "ttft_cost_pct", "y": "gain_pct"},
                                 text=[labels["setting"][j] for j in part.index], textposition="top center",
                                 marker={"size": 11, "color": PALETTE[i % len(PALETTE)],
                                         "symbol": [SYMBOLS[verdict(r)] for _, r in part.iterrows()]},
                                 error_x=_errors(part, "ttft_cost_pct", "ttft_cost_lo", "ttft_cost_hi"),
                                 error_y=_errors(part, "gain_pct", "gain_lo", "gain_hi")))
    fig.add_hline(y=0, line={"color": "grey", "width": 1})
    fig.add_vline(x=0, line={"color": "grey", "width": 1})
    _layout(fig, title={"text": "decode gain against the first token's cost", "x": 0.01},
                      xaxis_title="time to first token over the target alone's, % (+: a cost)",
                      yaxis_title="decode gain, %")
    return fig


def slots_figure(frame: pd.DataFrame, labels: dict):
    """Per slot count: each request's own tokens/s (y) against all clients' together (x), a line per setting through
    its slot counts; the target alone grey. None where no row was measured with slots."""
    go = _go()
    if "parallel" not in frame or "per_request_tokens_per_s" not in frame:
        return None
    rows = frame[frame["parallel"].notna() & frame["per_request_tokens_per_s"].notna() & (frame["mode"] != "draft")]
    if rows.empty:
        return None
    lines = _line_of(frame, labels)
    fig = go.Figure()
    for i, line in enumerate(dict.fromkeys(lines[rows.index] + pd.Series(rows["k"].astype(str), index=rows.index))):
        part = rows[(lines[rows.index] + rows["k"].astype(str)) == line].sort_values(["clients", "parallel"])
        first = part.iloc[0]
        colour = "grey" if first["mode"] == "target" else PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(x=_nums(part["tokens_per_s"]), y=_nums(part["per_request_tokens_per_s"]),
                                 customdata=[int(j) for j in part.index], mode="lines+markers+text",
                                 meta={"x": "tokens_per_s", "y": "per_request_tokens_per_s"},
                                 name=labels["setting"][int(first.name)], line={"color": colour},
                                 text=[_slots(r) for _, r in part.iterrows()], textposition="top center",
                                 marker={"size": 10, "symbol": [SYMBOLS[verdict(r)] for _, r in part.iterrows()]}))
    _layout(fig, title={"text": "per request against all clients", "x": 0.01},
                      xaxis_title="all clients' tokens/s", yaxis_title="each request's tokens/s")
    return fig


def _slots(row: pd.Series) -> str:
    n = int(row["parallel"])
    c = int(row["clients"]) if pd.notna(row.get("clients")) else n
    return f"{n} slot{'s' if n > 1 else ''}" + (f", {c} clients" if c != n else "")


def positions_figure(positions: list[dict]):
    """Acceptance of each draft position, given it was reached, a line per setting (plots.position_acceptance)."""
    go = _go()
    if not positions:
        return None
    frame = pd.DataFrame(positions)
    keys = [c for c in frame if c not in ("position", "acceptance")]
    varying = [c for c in keys if frame[c].astype(str).nunique() > 1]
    fig = go.Figure()
    for i, (key, part) in enumerate(frame.groupby(varying or keys[:1], dropna=False, sort=False)):
        key = key if isinstance(key, tuple) else (key,)
        name = ", ".join(f"{c} {v}" if c != "strategy" else str(v or "draft model") for c, v in zip(varying, key))
        fig.add_trace(go.Scatter(x=_nums(part["position"]), y=_nums(part["acceptance"]), mode="lines+markers",
                                 name=name or "speculative", line={"color": PALETTE[i % len(PALETTE)]}))
    _layout(fig, title={"text": "acceptance by draft position (the runs of each line's largest K)",
                                       "x": 0.01}, xaxis={"title": "draft position j", "dtick": 1},
                      yaxis={"title": "accepted, given reached", "range": [0, 1.05], "tickformat": ".0%"})
    return fig


def ceiling_figure(frame: pd.DataFrame, labels: dict):
    """Each row's share of the memory-bandwidth ceiling (ceiling_pct); None where no row has one."""
    go = _go()
    if "ceiling_pct" not in frame or frame["ceiling_pct"].isna().all():
        return None
    rows = frame[frame["ceiling_pct"].notna()]
    names = [f"{labels['workload'][j]} · {labels['setting'][j]}" for j in rows.index]
    colours = ["grey" if m == "target" else PALETTE[0] for m in rows["mode"]]
    fig = go.Figure(go.Bar(x=_nums(rows["ceiling_pct"]), y=names, orientation="h", customdata=[int(j) for j in rows.index],
                           meta={"x": "ceiling_pct"},
                           marker_color=colours, text=[f"{v:.0f}%" for v in rows["ceiling_pct"]], textposition="auto"))
    fig.add_vline(x=100, line={"color": "black", "dash": "dot"})
    _layout(fig, height=max(260, 60 + 26 * len(rows)), showlegend=False,
                      title={"text": "share of the memory-bandwidth ceiling (gguf-bench machine)", "x": 0.01},
                      xaxis_title="% of the tokens/s the measured bandwidth allows", yaxis={"autorange": "reversed"})
    fig.update_yaxes(automargin=True)
    return fig

