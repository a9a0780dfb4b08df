"""`report --html PAGE` and `sweep --html PAGE`: the report as one self-contained HTML file that opens offline.

The pictures are plotly's (its plotly.min.js inlined from the `plotly` package: no network, no CDN); the json that
`report --format json` prints is embedded as it prints, and every figure is drawn from its rows (document.py picks,
figures.py draws, page.py lays out). docs/page.md says why plotly and what each section shows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gguf_bench.errors import BenchError
from gguf_bench.results.schema.records import RunRecord


def check() -> None:
    """Say before any work is done that a page cannot be made (plotly missing)."""
    try:
        import plotly  # noqa: F401, PLC0415
    except ImportError:
        raise BenchError("--html needs plotly: pip install plotly (a dependency of gguf-bench; reinstall it)") from None


def write(path: Path, summary: pd.DataFrame, df: pd.DataFrame, runs: Sequence[RunRecord], sources: Sequence[str] = (),
          title: str = "gguf-bench report") -> int:
    """Write the page for a summary with its deploy columns (deploy.with_deploy, as --format json renders it); its
    size in bytes."""
    check()
    from plotly.offline import get_plotlyjs  # noqa: PLC0415

    from gguf_bench.results.presentation.html import document, page  # noqa: PLC0415 (plotly's import: only here)

    text = page.render(document.build(summary, df, runs, sources), title, get_plotlyjs())
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"could not write the page {path}: {exc.strerror or exc}") from None
    return len(text.encode("utf-8"))
