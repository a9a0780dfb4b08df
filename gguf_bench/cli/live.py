"""The live side-by-side view of `gguf-bench compare`: two rich panels filled as tokens arrive."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gguf_bench.decoding.loop import GenerationResult
from gguf_bench.results.schema.kinds import gain_pct

ACCEPTED_STYLE = "black on green"  # draft tokens the target accepted


class SideBySide:
    def __init__(self, detokenize: Callable[[list[int]], str], left_title: str, right_title: str):
        self.detokenize = detokenize
        self.titles = {"regular": left_title, "speculative": right_title}
        self.texts = {"regular": Text(), "speculative": Text()}
        self.counts = {"regular": 0, "speculative": 0}
        self.started: dict[str, float] = {}
        self.final: dict[str, float] = {}  # tokens/s of a finished side, as its result reports it
        self._live: Live | None = None

    def live(self, console: Console) -> Live:
        self._live = Live(self._render(), console=console, refresh_per_second=12, transient=False)
        return self._live

    def on_round(self, side: str):
        self.started[side] = time.perf_counter()

        def update(tokens: list[int], from_draft: list[bool]) -> None:
            for tok, accepted in zip(tokens, from_draft):
                self.texts[side].append(self.detokenize([tok]), style=ACCEPTED_STYLE if accepted else None)
            self.counts[side] += len(tokens)
            if self._live:
                self._live.update(self._render())

        return update

    def finish(self, side: str, res: GenerationResult) -> None:
        """End a side on its result's own figure (decode time, the prompt left out), as the summary line does."""
        self.final[side] = res.tokens_per_s
        if self._live:
            self._live.update(self._render())

    def _panel(self, side: str) -> Panel:
        elapsed = time.perf_counter() - self.started[side] if side in self.started else 0.0
        rate = f"{self.counts[side] / elapsed:.1f} tokens/s" if elapsed > 0 and self.counts[side] else "waiting"
        if side in self.final:
            rate = f"{self.final[side]:.2f} tokens/s"
        return Panel(self.texts[side], title=self.titles[side], subtitle=f"{self.counts[side]} tokens, {rate}")

    def _render(self) -> Table:
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1)
        grid.add_column(ratio=1)
        grid.add_row(self._panel("regular"), self._panel("speculative"))
        return grid

    @staticmethod
    def summary(regular: GenerationResult, spec: GenerationResult, same: str) -> str:
        return (f"regular: {regular.n_tokens} tokens in {regular.decode_s:.2f} s ({regular.tokens_per_s:.2f} tokens/s) | "
                f"speculative: {spec.n_tokens} tokens in {spec.decode_s:.2f} s ({spec.tokens_per_s:.2f} tokens/s), "
                f"acceptance {spec.acceptance:.1%}, gain {gain_pct(spec.tokens_per_s, regular.tokens_per_s):+.1f}% | {same}")
