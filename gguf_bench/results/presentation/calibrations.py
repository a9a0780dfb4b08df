"""Stored `tune` calibrations as a frame and a table (rich and markdown): what `report` shows of them where a file holds
no runs."""


from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from gguf_bench.results.presentation.tuning import predicted_frame
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.text import number_text, spaced_layout, speed_text

CALIBRATION_COLUMNS = ["pair", "ngl", "ngld", "n_predict", "prompts", "k", "predicted_tokens_per_s",
                       "predicted_baseline_tokens_per_s", "predicted_gain_pct"]


def calibration_frame(records: Sequence[CalibrationRecord]):
    """Each calibrated pair and setting (its latest calibration) at its best K, the highest predicted gain first: what
    `report` shows of calibrations (tune's, drafts --measure's) that no measured run sits beside."""
    df = predicted_frame(records)
    best = df[df["predicted_best"]][CALIBRATION_COLUMNS]
    return best.sort_values("predicted_gain_pct", ascending=False, kind="stable").reset_index(drop=True)


def calibration_table(frame, width: int = 80) -> Table:
    """calibration_frame as a table: a row per pair and setting."""
    columns = _calibration_cells(frame)
    table = Table(title="calibrations: tokens/s predicted at the best K, and for the target alone",
                  **spaced_layout(columns, width))
    for col in columns:
        table.add_column(col, justify="left" if col == "pair" else "right", no_wrap=col != "pair",
                         overflow="fold")
    for cells in zip(*columns.values()):
        table.add_row(*cells)
    return table


def calibration_markdown(frame) -> str:
    columns = _calibration_cells(frame)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in zip(*columns.values())]) + "\n"


def _calibration_cells(frame) -> dict[str, list[str]]:
    rows = list(frame.itertuples())
    return {"pair": [r.pair for r in rows], "setting": [f"-ngl {r.ngl} -ngld {r.ngld}" for r in rows],
            "n": [str(r.n_predict) for r in rows], "K": [str(r.k) for r in rows],
            "tokens/s": [speed_text(r.predicted_tokens_per_s) for r in rows],
            "alone": [speed_text(r.predicted_baseline_tokens_per_s) for r in rows],
            "gain %": [number_text(r.predicted_gain_pct, "{:+.1f}") for r in rows]}

