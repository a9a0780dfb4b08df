"""`plan --compare-fit`: llama.cpp's own fitting (llama-fit-params) beside the planner's best row, one model at a
time: what it picks, what it predicts for its pick, and what the planner predicts for that same pick."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.table import Table

from gguf_bench.cli.app import console
from gguf_bench.models import offload_plan
from gguf_bench.models.offload_plan import MIB, Budget, DeviceBytes, PlanRow, Shape
from gguf_bench.placing import Placing
from gguf_bench.results.schema.text import fit_title
from gguf_bench.runtimes import fit_params
from gguf_bench.runtimes.placement import layer_spans

CPU_ONLY = ("llama-fit-params: llama.cpp's fitting needs a GPU device and this build has none (it sees only the "
            "host: {host}); nothing to compare")


def compare_fit(rows: list[PlanRow], shapes: list[Shape], files: list[Path], budget: Budget, n_ctx: int) -> None:
    """For the target and the draft apart: llama-fit-params' pick within `budget` (each model alone) beside the
    planner's best row, then what its two picks need together."""
    best = offload_plan.best_row(rows)
    runs = []
    for role, shape, source in zip(("target", "draft"), shapes, files):
        run, notes = fit_params.fit(source, n_ctx, budget)
        if run.choice is None and not run.devices:
            host = run.estimate[-1]
            console.print(CPU_ONLY.format(host=f"{host.model} MiB of weights, {host.context} of KV, {host.compute} "
                                          "of compute"), markup=False)
            return
        console.print()
        for note in notes if not runs else ():  # the same budget for both models: its notes once
            console.print(f"Note: {note}", markup=False)
        planned = None if best is None else (best.target, best.placing) if role == "target" else (
            best.draft, best.placing_draft)
        console.print(fit_title(_table(role, shape, source, run, planned, budget, n_ctx), console.width))
        runs.append(run)
    console.print(_together(runs, best, budget), markup=False)


def _table(role: str, shape: Shape, source: Path, run: fit_params.FitRun, planned: tuple[DeviceBytes, Placing] | None,
           budget: Budget, n_ctx: int) -> Table:
    alone = ", the draft ignored" if role == "target" else ""
    table = Table(title=f"{role} {source.name}: llama-fit-params fits it alone{alone}", box=box.SIMPLE_HEAD, collapse_padding=True,
                  pad_edge=False, caption=f"llama-fit-params found no placement: {run.failure}" if run.failure else None)
    for col in ("", "-ngl", "experts on CPU", "device", "model", "KV", "compute", "total"):
        table.add_column(col, justify="left" if col in ("", "experts on CPU", "device") else "right",
                         no_wrap=col != "experts on CPU")
    device = run.devices[0].device
    if planned is not None:
        _planner_rows(table, "planner's best", _cells(shape, *planned), planned[0], device)
    choice = run.choice or fit_params.FitChoice(n_ctx, -1)  # no pick: its estimate at llama.cpp's default
    picked = offload_plan.device_bytes(shape, choice.layers, n_ctx, None, choice.placing, budget)
    cells = _cells(shape, picked, choice.placing)
    for i, e in enumerate(run.devices):
        table.add_row(("llama.cpp picks" if run.choice else "llama.cpp, all") if i == 0 else "",
                      *(cells if i == 0 else ("", "")), e.device, *(str(v) for v in (e.model, e.context, e.compute,
                                                                                      e.total)))
    _planner_rows(table, "planner, same" if run.choice else "planner, all", cells, picked, device)
    return table


def _together(runs: list[fit_params.FitRun], best: PlanRow | None, budget: Budget) -> str:
    """What llama.cpp's two picks need together on each device, against the budget and the planner's best row."""
    need: dict[str, int] = {}
    for e in (e for run in runs if run.choice for e in run.devices):
        need[e.device] = need.get(e.device, 0) + e.total
    sizes = dict(budget.devices)
    parts = [f"{mib} MiB on {name} of {sizes.get(budget.device(name), 0) / MIB:.0f}" for name, mib in need.items()]
    joint = (f"; the planner's best row, {best.used / MIB:.1f} MiB, fits (of its rows, the one that keeps the most "
             "weight bytes of both models on the devices)" if best else "; no row of the planner fits")
    return ("MiB: llama.cpp's own estimate (--fit-print, whole MiB rounded down) and the planner's. "
            f"llama.cpp's two picks together need {', '.join(parts) or 'nothing'} (at least: rounded down){joint}.")


def _planner_rows(table: Table, label: str, cells: tuple[str, str], m: DeviceBytes, device: str) -> None:
    """One line per device the planner puts `m` on (a one-size budget's device is named `device`, llama.cpp's)."""
    for i, (name, *terms) in enumerate(m.terms or ((device, 0, 0, 0),)):
        table.add_row(label if i == 0 else "", *(cells if i == 0 else ("", "")),
                      name or device, *(f"{v / MIB:.1f}" for v in (*terms, sum(terms))))


def _cells(shape: Shape, m: DeviceBytes, placing: Placing) -> tuple[str, str]:
    """The -ngl and experts-on-CPU cells."""
    return f"{m.layers}/{m.total_layers}", _experts(shape, placing)


def _experts(shape: Shape, placing: Placing) -> str:
    """The layers whose experts `placing` keeps on the CPU: 'blk 0-2, part of blk 3' (some of its expert tensors)."""
    if not shape.has_experts:
        return "(dense)"
    moved = offload_plan.cpu_experts(shape, placing)
    part = [layer for layer, size in moved.items() if size < shape.expert_bytes[layer]]
    whole = [layer for layer in moved if layer not in part]
    return ", ".join([*([layer_spans(whole)] if whole else []), *([f"part of {layer_spans(part)}"] if part else [])]) or "-"
