"""The HTML page: sections in the order a reader asks (the answer, then why), plotly.js inlined so the file opens
offline, the json of `report --format json` embedded as it prints (id gguf-bench-report) beside what it does not carry
(id gguf-bench-extra) and the figures drawn from them (id gguf-bench-figures)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

import pandas as pd

from gguf_bench.results.presentation.html import figures as figs
from gguf_bench.results.presentation.html.document import Document
from gguf_bench.results.schema.text import speed_text


@dataclass
class Section:
    """One part of the page: its anchor, heading, what it shows, its figures (None: the one line why there are none)."""

    id: str
    title: str
    lead: str
    figures: list
    empty: str = ""
    body: str = ""  # HTML before the figures


def sections(doc: Document) -> list[Section]:
    frame = pd.DataFrame(doc.rows)
    spec = frame[frame["mode"] == "speculative"] if "mode" in frame else frame[:0]
    return [
        Section("answer", "The answer", "One line per workload: what to deploy, the gain with its 95% interval, what it "
                "rests on and the llama-server command; the rows that are the same as the target alone (≈) or not "
                "decided (~) are named under it.", [], body=answers_html(doc) + rows_html(doc, frame)),
        Section("by-k", "Tokens/s against K", "Per workload: every setting's tokens/s (± std) against the draft length, "
                "the target alone as a grey band (mean ± std); below, the gain with its interval, the margin grey. "
                "Filled: decided; diamond: the same; open: undecided; x: no test.",
                figs.k_figures(frame, doc.labels), "no speculative row: nothing to draw against K"),
        Section("map", "Settings × workloads", "Each speculative setting in each workload, coloured by its verdict.",
                [f for f in [figs.verdict_map(frame, doc.labels)] if f], "no speculative row: no verdict to map"),
        Section("request", "The whole request", "The decode gain beside the time to first token it costs (the drafter "
                "processes the prompt too), per prompt length.", [f for f in [figs.request_figure(frame, doc.labels)] if f],
                "no speculative row has prompts long enough to time the first token (sweep --prompt-tokens 512,2048 "
                "measures it)"),
        Section("slots", "Per slot", "Each request's tokens/s against all clients' together, through the slot counts.",
                [f for f in [figs.slots_figure(frame, doc.labels)] if f],
                "no row was measured with several slots (sweep --engine server --parallel 1,2,4 measures it)"),
        Section("positions", "Acceptance by draft position", "How often the draft's j-th token is accepted, given the "
                "round reached it.", [f for f in [figs.positions_figure(doc.positions)] if f],
                "no run stored acceptance by position (llama-server does not report it)" if not spec.empty else
                "no speculative row"),
        Section("ceiling", "Share of the memory-bandwidth ceiling", "tokens/s × bytes read a token ÷ the bandwidth "
                "`gguf-bench machine` measured on this host.", [f for f in [figs.ceiling_figure(frame, doc.labels)] if f],
                "no bandwidth stored for these hosts (gguf-bench machine measures it)"),
        Section("provenance", "Provenance", "What these figures were read from.", [], body=provenance_html(doc)),
    ]


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def answers_html(doc: Document) -> str:
    if not doc.answers:
        return "<p class='empty'>no workload has a deploy line (no target alone measured)</p>"
    out = []
    for n, a in enumerate(doc.answers):
        named = "".join(f"<li>{what}: {', '.join(_row_ref(doc, j) for j in rows)}</li>"
                        for what, rows in (("the same as the target alone (≈)", a.same), ("undecided (~)", a.undecided))
                        if rows)
        command = (f"<div class='command'><pre id='command-{n}'><code>{_e(a.command)}</code></pre>"
                   f"<button type='button' data-copy='command-{n}'>copy</button></div>" if a.command else "")
        out.append(f"<div class='answer' data-row='{a.row}'><h3>{_e(a.workload)}</h3><p class='headline'>{_e(a.headline)}"
                   f"</p><p class='rests'>rests on: {_e(a.rests_on)}</p>{command}"
                   + (f"<ul class='verdicts'>{named}</ul>" if named else "") + "</div>")
    return "\n".join(out)


def _row_ref(doc: Document, j: int) -> str:
    row = doc.rows[j]
    gain = row.get("gain_pct")
    return _e(f"{doc.labels['setting'][j]} ({'no gain' if gain is None else f'{gain:+.1f}%'}"
              f"{interval_text(row.get('gain_lo'), row.get('gain_hi'), row.get('gain_pairs'))})")


def interval_text(lo, hi, pairs=None) -> str:
    """' [-4,+10]'; ' [wide: 2 pairs]' for an interval wider than report.WIDE_INTERVAL; '' for none."""
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return ""
    if figs.wide(lo, hi):
        return f" [wide: {int(pairs) if pairs is not None and pd.notna(pairs) else 'few'} pairs]"  # as the table writes it
    return f" [{lo:+.0f},{hi:+.0f}]"


ROW_FIELDS = (("tokens_per_s", "tokens/s"), ("tokens_per_s_std", "± std"), ("gain_pct", "gain"),
              ("gain_lo", "low"), ("gain_hi", "high"), ("verdict", "verdict"), ("acceptance", "accept"),
              ("ttft_cost_pct", "TTFT cost"), ("runs", "runs"))


def cell_text(field: str, value) -> str:
    """How the rows table writes a json value (the browser test reads them back)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    if field in ("tokens_per_s", "tokens_per_s_std"):
        return speed_text(value)
    if field in ("gain_pct", "ttft_cost_pct"):
        return f"{value:+.1f}%"
    if field in ("gain_lo", "gain_hi"):
        return f"{value:+.0f}"
    if field == "acceptance":
        return f"{value:.1%}"
    return str(value)


def rows_html(doc: Document, frame: pd.DataFrame) -> str:
    """Every row of the json with its main figures, as --format json has them (each cell: its row and field)."""
    fields = [(f, h) for f, h in ROW_FIELDS if f in frame and frame[f].notna().any()]
    head = "".join(f"<th>{_e(h)}</th>" for h in ["workload", "setting", *[h for _, h in fields]])
    body = []
    for i, row in enumerate(doc.rows):
        cells = "".join(f"<td data-row='{i}' data-field='{f}'>{_e(cell_text(f, row.get(f)))}</td>" for f, _ in fields)
        body.append(f"<tr class='{_e(row.get('verdict') or row.get('mode'))}'><td>{_e(doc.labels['workload'][i])}</td>"
                    f"<td>{_e(doc.labels['setting'][i])}</td>{cells}</tr>")
    return (f"<details><summary>every row ({len(doc.rows)}), as <code>report --format json</code> has them</summary>"
            f"<table class='rows'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></details>")


def provenance_html(doc: Document) -> str:
    p = doc.provenance
    files = "".join(f"<li><code>{_e(f['path'])}</code> · {f['runs']} runs · sha256 <code>{_e(f['sha256'])}</code></li>"
                    for f in p["files"]) or "<li>not known (runs passed in memory)</li>"
    models = "".join(f"<li>{_e(m['role'])} <code>{_e(m['file'])}</code> · {_e(m['size'])} bytes · sha256 "
                     f"<code>{_e(m['sha256'])}</code></li>" for m in p["models"]) or "<li>none stored</li>"
    builds = "".join("<li>" + _e(" · ".join(f"{k} {v}" for k, v in b.items() if v)) + "</li>" for b in p["builds"])
    machines = "".join("<li>" + _e(" · ".join(f"{k} {v}" for k, v in m.items() if v)) + "</li>" for m in p["machines"])
    lines = "".join(f"<li>{_e(x)}</li>" for x in [*p["order"], *p["pairing"]])
    left = "".join(f"<li>{_e(x)}</li>" for x in p["left_out"])
    return (f"<h3>Results files</h3><ul>{files}</ul><h3>Models</h3><ul>{models}</ul><h3>Builds</h3><ul>{builds}</ul>"
            f"<h3>Machines</h3><ul>{machines}</ul><h3>Order and pairing</h3><ul>{lines}</ul>"
            f"<h3>Runs left out</h3><ul class='left-out'>{left}</ul>")


def _script_json(text: str) -> str:
    """JSON inside <script>: '</' written '<\\/' (the same JSON value), so no string can close the element."""
    return text.replace("</", "<\\/")


def render(doc: Document, title: str, plotly_js: str) -> str:
    parts = sections(doc)
    figures = {f"{s.id}-{n}": json.loads(fig.to_json()) for s in parts for n, fig in enumerate(s.figures)}
    nav = " · ".join(f"<a href='#{s.id}'>{_e(s.title)}</a>" for s in parts)
    body = "\n".join(_section_html(s) for s in parts)
    return TEMPLATE.format(title=_e(title), css=CSS, nav=nav, body=body, plotly=plotly_js, script=SCRIPT,
                           report=_script_json(doc.json_text), extra=_script_json(json.dumps(doc.extra(), default=str)),
                           figures=_script_json(json.dumps(figures)))


def _section_html(s: Section) -> str:
    pictures = "".join(f"<div class='figure' id='{s.id}-{n}'></div>" for n in range(len(s.figures)))
    empty = f"<p class='empty'>{_e(s.empty)}</p>" if not s.figures and s.empty else ""
    return (f"<section id='{s.id}'><h2>{_e(s.title)}</h2><p class='lead'>{_e(s.lead)}</p>{s.body}{pictures}{empty}"
            "</section>")


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1200px;padding:0 1.2em 3em;
color:#222;line-height:1.45}
h1{font-size:1.5em;margin:.8em 0 .2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.05em;margin:.9em 0 .2em}nav{font-size:.9em;color:#555}.lead{color:#555;font-size:.92em}
.answer{border-left:4px solid #1a9850;padding:.2em .8em;margin:.8em 0;background:#f7faf7}.headline{font-weight:600}
.rests{color:#555;margin:.2em 0}.command{display:flex;gap:.5em;align-items:flex-start}
pre{background:#f3f3f3;padding:.5em;overflow-x:auto;margin:.3em 0;flex:1;white-space:pre-wrap;word-break:break-all}
button{cursor:pointer}.empty{color:#777;font-style:italic}table.rows{border-collapse:collapse;font-size:.85em}
table.rows td,table.rows th{border-bottom:1px solid #eee;padding:.15em .5em;text-align:right}
table.rows td:nth-child(-n+2){text-align:left}tr.undecided{color:#a35f00}tr.same{color:#2b5797}tr.slower{color:#b22}
.figure{min-height:300px;margin:.6em 0}#page-error{color:#b22;font-weight:600}
"""

SCRIPT = """
(function(){
  var shown=function(e){var p=document.getElementById('page-error');p.textContent+=' '+e;p.hidden=false;};
  window.addEventListener('error',function(e){shown(e.message);});
  document.querySelectorAll('button[data-copy]').forEach(function(b){b.addEventListener('click',function(){
    var text=document.getElementById(b.dataset.copy).textContent;
    if(navigator.clipboard){navigator.clipboard.writeText(text).then(function(){b.textContent='copied';});}
    else{var r=document.createRange();r.selectNode(document.getElementById(b.dataset.copy));
      window.getSelection().removeAllRanges();window.getSelection().addRange(r);}
  });});
  var figures=JSON.parse(document.getElementById('gguf-bench-figures').textContent);
  var done=Object.keys(figures).map(function(id){var f=figures[id];
    return Plotly.newPlot(id,f.data,f.layout,{displaylogo:false,responsive:true});});
  Promise.all(done).then(function(){document.body.dataset.rendered=String(done.length);},
                         function(e){shown(String(e));});
})();
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{css}</style>
<script>{plotly}</script>
</head><body>
<h1>{title}</h1><p id="page-error" hidden>this page hit a script error:</p><nav>{nav}</nav>
{body}
<script type="application/json" id="gguf-bench-report">{report}</script>
<script type="application/json" id="gguf-bench-extra">{extra}</script>
<script type="application/json" id="gguf-bench-figures">{figures}</script>
<script>{script}</script>
</body></html>
"""
