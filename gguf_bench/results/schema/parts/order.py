"""Where a run stood in its sweep (measure/sweep.py and the engines' designs fill it); its columns."""

from __future__ import annotations

from dataclasses import dataclass

from gguf_bench.results.schema.fields import Field

BLOCKS = "blocks"  # Order.design: llama-server's processes one at a time, in chunks of one repetition
SETTINGS_ALTERNATE = "settings-alternate"  # Order.settings: every setting loaded at once, taking turns block by block
LOADS_EACH = "each"  # Order.loads: a fresh load (or server process) per repetition, the unit the verdicts count
LOADS_ONCE = "once"  # Order.loads: one load (or process) per setting served the sweep
SETTINGS_CHUNKS = "settings-chunks"  # Order.settings: one setting loaded at a time, in chunks of one repetition (A B |
# B A ...), loaded again at each switch; BLOCKS and SETTINGS_CHUNKS pairs share their chunks (summary.in_chunks)


@dataclass
class Order:
    """Where a run stood in its sweep: the verdicts pair a speculative run with the target alone measured next to it."""

    design: str = ""  # 'shuffled': each repetition block's cells in a seeded random order (the Python loop);
    # 'alternate': the setting's llama-server processes held at once, requests in turn (A B A B); 'blocks': one process
    # at a time, in counterbalanced blocks (A B B A ...)
    position: int = 0  # its place in its setting's order (0: measured first)
    seed: int | None = None  # what shuffled the blocks
    started: float | None = None  # Unix time the run began
    looks: int | None = None  # -r auto: how many times the sweep may look at its verdicts (its intervals are corrected
    # for them); None: a fixed -r, one look
    ended: float | None = None  # Unix time the run ended (with `started`: how far apart two paired runs were)
    settings: str | None = None  # how the sweep's settings (offload, placement, context, threads, engine) took turns:
    # 'settings-alternate': loaded side by side, one repetition of each in turn (A B | B A ...); 'settings-chunks': one
    # repetition at a time in that balanced order, the model loaded again at each switch; None: one setting
    invocation: str | None = None  # the run of the command that measured it (plan.Grid.invocation): a pair never
    # crosses invocations (a --resume, a re-run of failed cells measure their baseline again: summary.sweep_of)
    loads: str | None = None  # LOADS_EACH: the setting was loaded again (a fresh process, a fresh model load) for each
    # repetition, so a repetition is one observation of a load's own speed (summary.in_chunks); None: one load served
    # the sweep
    margin: float | None = None  # the question the sweep answered (plan.Grid.margin, .objective), so that `report`
    objective: str | None = None  # later gives the same answer; None: a file written before it was stored


FIELDS = (
    Field("design", lambda r: r.order.design if r.order else None),  # how the runs were ordered (Order)
    Field("position", lambda r: r.order.position if r.order else None),
    Field("started", lambda r: r.order.started if r.order else None),
    Field("looks", lambda r: r.order.looks if r.order else None),
    Field("ended", lambda r: r.order.ended if r.order else None),
    Field("settings_design", lambda r: r.order.settings if r.order else None),  # Order.settings
    Field("invocation", lambda r: r.order.invocation if r.order else None),
    Field("loads", lambda r: r.order.loads if r.order else None),  # Order.loads
)
