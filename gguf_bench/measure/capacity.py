"""What this machine can hold, checked before a sweep loads anything: system memory for CPU-only settings, and the
device budget each offload setting is planned against (models/offload_plan.py predicts from the headers)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.measure.pair import LoadConfig, PairFiles
from gguf_bench.measure.plan import Grid
from gguf_bench.models.offload_plan import Budget, Shape, fits
from gguf_bench.models.parts import model_size, tensor_table
from gguf_bench.placing import CPU, Placing
from gguf_bench.results.schema.text import size_text
from gguf_bench.runtimes.llama_cpp import check_placement, check_rpc, gpu_devices


def vram_budget(text: str) -> Budget:
    """--vram: one size (one device), or NAME=SIZE per device; on a build with GPU devices each name must be one of
    them, and the budgets are put in the build's device order (the order llama.cpp splits layers in)."""
    budget = Budget.parse(text)
    names = [d.name for d in gpu_devices()]
    if not budget.named or not names:
        return budget
    for name, _ in budget.devices:
        if name not in names and not name.startswith("RPC"):  # an RPC server's device: the server engine's to check
            raise ConfigError(f"--vram {name}=...: this build has no device '{name}'; it has {', '.join(names)}")
    return Budget(tuple(sorted(budget.devices, key=lambda d: names.index(d[0]))))


def device_budget(grid: Grid) -> Budget | None:
    """What a setting may put on each device: --vram, else what this build's first GPU device reports (as one
    device); None on a CPU-only build (which ignores -ngl)."""
    if grid.vram is not None:
        return grid.vram
    gpus = gpu_devices() if any(_offloads(lo) for lo in grid.settings()) else []
    return Budget.one(gpus[0].memory_total) if gpus else None


def _offloads(load: LoadConfig) -> bool:
    """Whether a setting may put anything on a device: layers (-ngl, -ngld) or a weight sent there (-ot, -otd)."""
    sent = [b for p in (load.placing, load.placing_draft) if not p.no_offload for _, b in p.overrides if b != CPU]
    return bool(load.ngl or load.ngld or sent)


def does_not_fit(files: PairFiles, load: LoadConfig, n_ctx: int, budget: Budget) -> str | None:
    """Why this offload setting (-ngl/-ngld and the placings: -ncmoe, -ot, -dev and the draft's) cannot fit the
    devices (models/offload_plan.py's prediction from the headers), or None."""
    if not _offloads(load) or (load.placing.rpc and not budget.named):  # RPC devices: their servers' memory,
        return None  # planned only when --vram names them (RPC0=8GB,...)
    target = Shape.from_header(*tensor_table(files.target))
    draft = Shape.from_header(*tensor_table(files.draft)) if files.draft else None
    why = fits(target, draft, load.ngl, load.ngld, n_ctx, budget, placing=load.placing, placing_draft=load.placing_draft)
    return f"{load.label}: {why}; lower -ngl/-ngld or --ctx-size" if why else None


def side_by_side(files: PairFiles, loads: Sequence[LoadConfig], n_ctx: int, budget: Budget | None) -> bool:
    """Whether the pair can be loaded once per setting, all at once (the planner's figures): every model file once per
    setting within 80% of the memory available now (weights offloaded elsewhere counted here too: the safe side), and
    on the devices each offloading setting within an equal share of the budget (does_not_fit)."""
    if len(loads) < 2:
        return True
    avail = available_memory()
    need = len(loads) * (model_size(files.target) + (model_size(files.draft) if files.draft else 0))
    if avail is not None and need > 0.8 * avail:
        return False
    offloading = [lo for lo in loads if _offloads(lo)]
    if budget is None or not offloading:
        return True
    share = Budget(tuple((name, size // len(offloading)) for name, size in budget.devices))
    return not any(does_not_fit(files, lo, n_ctx, share) for lo in offloading)


def check_memory(files: PairFiles, grid: Grid) -> None:
    """On a CPU-only setting both models must fit in available memory (a split model: every part); say so before
    starting."""
    if any(load.ngl or load.ngld for load in grid.settings()):
        return  # with offload, part of the weights go to the GPU: let llama.cpp decide
    need = model_size(files.target) + (model_size(files.draft) if files.draft else 0)
    avail = available_memory()
    if avail is not None and need > avail:
        raise BenchError(f"the pair needs about {size_text(need)} of memory (every part of a split model) but "
                         f"{size_text(avail)} is available; free memory, offload layers to a GPU (-ngl/-ngld), or "
                         "choose smaller quants")


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_placements(files: PairFiles, placings: Sequence[Placing], placings_draft: Sequence[Placing],
                     python: bool = True) -> list[str]:
    """Each placement checked against its model before anything loads (ConfigError: one line for what llama.cpp would
    refuse); notes for what does nothing (-ncmoe on a dense model), so a sweep over several pairs goes on. With --rpc
    the devices are the servers' too: the server engine checks them (ServerEngine.check_placements); python: the Python
    engine runs these, and it has no RPC."""
    remote = any(p.rpc for p in placings)
    if remote and python:
        check_rpc()
    notes = [check_placement(files.target, p, remote=remote) for p in placings]
    if files.draft is not None:
        notes += [check_placement(files.draft, p, "--n-cpu-moe-draft", remote) for p in placings_draft]
    return list(dict.fromkeys(n for n in notes if n))
