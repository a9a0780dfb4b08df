"""`-r auto`: repetitions until the verdicts are decided.

After a first pass of two repetitions, the stored runs are summarized and, per family of rows that compete for one
verdict (summary.FAMILY: one workload, the rows of one deploy line: a pair at one slot count, depth, temperature and
length), the comparisons the deploy line rests on are checked: the fastest speculative row against its target alone,
against the fastest target alone, and against the runner-up; each closes when it is decided either way (faster,
slower, or the same within --margin). Only the cells those rows need (the two
fastest speculative rows and their targets alone, the fastest target alone) run again, one repetition more per pass,
at plan.auto_looks' counts, until every verdict is decided, `--max-reps` is reached or the time budget is spent.

Looking several times and stopping at the first decided look inflates false decisions (optional stopping). So the
sweep fixes its looks in advance and every interval of an auto sweep is corrected for them as for rows (Bonferroni over
rows and looks: parts.order.Order.looks), in the sweep's own verdicts and in any later `report` of its file.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf_bench.measure.plan import Cell, Setting
from gguf_bench.results.decision.choice import is_one_of, open_verdicts
from gguf_bench.results.decision.table import for_objective, summarize, to_frame
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.run_fields import run_row


@dataclass(frozen=True)
class Undecided:
    """What a pass leaves open: the rows to measure again (their summary keys) and, per family, why."""

    rows: list[dict]
    why: list[str]


def undecided(records: list[RunRecord], margin: float | None = None, objective: str = "decode") -> Undecided:
    """The rows whose verdicts are still open in these records (one pair's), and why, per workload
    (choice.open_verdicts): a verdict is closed when it is faster, slower or the same within `margin` % (default
    summary.MARGIN), each of the `objective`'s figure (summary.OBJECTIVES)."""
    if all(r.error for r in records):  # nothing measured: nothing to decide
        return Undecided([], [])
    rows, why = [], []
    frame = for_objective(to_frame(records), objective)
    for need, reason in open_verdicts(summarize(frame, margin=margin), frame):
        rows += need
        why.append(reason)
    return Undecided(rows, why)


def selects(rows: list[dict], setting: Setting, cell: Cell) -> bool:
    """Whether a cell of the next pass is one of the rows to measure again."""
    return is_one_of(run_row(setting.record(cell)), rows)
