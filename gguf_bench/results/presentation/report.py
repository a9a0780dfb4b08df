"""Summaries (results/presentation/summary.py) -> the report: its columns and labels (columns.py), the terminal's table
(terminal.py) and the lines under it (captions.py), two engines side by side (engines_table.py), markdown/csv/json/jsonl
(text_formats.py), and the page (html/). Reads and writes no model; computes no figure (results/decision/ decides).
This module gathers their names for the callers that import them from here.
"""

from __future__ import annotations

from gguf_bench.results.presentation.captions import (  # noqa: F401
    PAIR_GAP_S,
    _busy_reason,
    _caption,
    _concurrent,
    _interval_legend,
    _offload_line,
    _paired_how,
    _span,
    _title,
    concurrency_lines,
    drift_lines,
    left_out_lines,
    objective_line,
    proof_lines,
)
from gguf_bench.results.presentation.columns import (  # noqa: F401
    FLAGS,
    FORMATS,
    MD_ORDER,
    MD_SHOWN,
    NARROWING,
    RUN_COLUMNS,
    STEP_COLUMNS,
    STEPS_LEGEND,
    TABLE_ORDER,
    TWIN_NOTE,
    WIDE_INTERVAL,
    RunColumn,
    _cells,
    _count,
    _field_column,
    _gain_column,
    _gain_text,
    _mark,
    _model_md,
    _offload_md,
    _pairs,
    _placed_fewer,
    _predicted,
    _run_text,
    _stem,
    _tps,
    _ttft_present,
    _ttft_text,
    _undecided_gain,
    _varying_cells,
    _width,
    model_label,
    rounds_by_length,
    row_label,
    short_of_request,
    ttft_measured,
    wide_interval,
)
from gguf_bench.results.presentation.engines_table import (  # noqa: F401
    SIDE,
    _engine_gain,
    _short,
    engines_frame,
    engines_table,
    greedy_agreement,
    server_greedy_lines,
)
from gguf_bench.results.presentation.terminal import (  # noqa: F401
    rich_table,
)
from gguf_bench.results.presentation.text_formats import (  # noqa: F401
    render,
    render_results,
    to_markdown,
)
