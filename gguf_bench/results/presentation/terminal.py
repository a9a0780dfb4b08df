"""The rich printer: the summary as a table that fits the terminal, with its title and caption."""


from __future__ import annotations

import pandas as pd
from rich import box
from rich.table import Table

from gguf_bench.axes import AXES
from gguf_bench.results.presentation.captions import (
    _caption,
    _title,
)
from gguf_bench.results.presentation.columns import (
    FLAGS,
    NARROWING,
    RUN_COLUMNS,
    STEP_COLUMNS,
    STEPS_LEGEND,
    TABLE_ORDER,
    _cells,
    _predicted,
    _varying_cells,
    _width,
)
from gguf_bench.results.presentation.summary import (
    offload_label,
)
from gguf_bench.results.schema.text import fit_title

# the columns of words, left-aligned: the run, names, and each axis whose values are words (-fa on, -ctk q8_0)
LEFT = ("run", "pair", "engine", "host", "prompt", *(a.flag for a in AXES if a.type is str))


def rich_table(summary: pd.DataFrame, title: str = "", width: int = 80, show_host: bool = False,
               steps: bool = False) -> Table:
    """A table that fits `width` columns without wrapping a cell: what is the same for every row (pair,
    files, offload, temperature, machine) goes into the title and caption; columns that vary (host,
    prompt, GPU layers) get their own; where it is still too wide, the overhead, tokens-per-round and
    runs columns go first. A terminal of 120 columns or more always gets GPU layers. steps: steps/s and
    tokens per step beside tokens/s (STEP_COLUMNS), kept however narrow the terminal."""
    varying = [c for c in FLAGS if c in summary.columns
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
        table.add_column(name, justify="left" if name in LEFT else "right", no_wrap=True)
    best = list(summary["best_k"])
    for i, cells in enumerate(zip(*columns.values())):
        table.add_row(*cells, style="bold" if best[i] else None)
    return fit_title(table, width)

