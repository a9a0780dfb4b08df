"""llama.cpp's own fitting of one model to free device memory: `llama-fit-params` (tools/fit-params, built beside
llama-server by `gguf-bench build-server`), run for a model file and parsed.

llama-fit-params loads the model with no_alloc (no weights read), measures what llama.cpp would allocate per device,
and, without `-ngl` given, picks the placement (common/fit.cpp, vendored 0c1e570): the context first (only when -c is
not given: here it always is), then the most layers back to front, a MoE model's experts moved to the CPU first (one
`-ot blk\\.N\\.ffn_..._exps=CPU` per layer). It leaves `-fitt` MiB free on each device (default 1024), measured
against the free memory the device reports. It fits one model: a draft is not taken into account. `-fitp on`
prints its estimate for the placement given instead: one line per device and one for the host, `NAME model context
compute` in whole MiB (rounded down).

On a build without a GPU device the fit has no device to place anything on: it only checks the host memory and
prints `-ngl -1` (the default) whatever the budget, and `-fitp on` prints the host row alone (`FitRun.devices` empty).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.offload_plan import MIB, Budget
from gguf_bench.options import ALL_LAYERS
from gguf_bench.placing import Placing, overrides
from gguf_bench.runtimes import server_build
from gguf_bench.runtimes.llama_cpp import Device, gpu_devices

LOAD_FLAGS = ["-b", "512", "-ub", "512", "--swa-full"]  # as runtimes/llama_cpp.Model loads: n_batch = n_ubatch, swa_full
HOST = "Host"  # the last row of -fitp's estimate: system memory
LOST_TRIES = 3  # a failed fit runs again when its reason was not printed (`_run_fit`)
_FAILED = re.compile(r"failed to fit params to free device memory: (.*)")


@dataclass(frozen=True)
class FitChoice:
    """What llama-fit-params picks: its printed arguments."""

    n_ctx: int
    ngl: int  # -1: llama.cpp's default (every layer)
    tensor_split: tuple[float, ...] = ()  # -ts, with several devices
    overrides: tuple[tuple[str, str], ...] = ()  # -ot (pattern, buffer): for a MoE model, experts to the CPU

    @property
    def layers(self) -> int:
        """-ngl as a layer count (ALL_LAYERS for llama.cpp's default of every layer)."""
        return ALL_LAYERS if self.ngl < 0 else self.ngl

    @property
    def placing(self) -> Placing:
        return Placing(overrides=self.overrides)

    def flags(self) -> list[str]:
        out = ["-c", str(self.n_ctx), "-ngl", str(self.ngl)]
        if self.tensor_split:
            out += ["-ts", ",".join(f"{s:g}" for s in self.tensor_split)]
        if self.overrides:
            out += ["-ot", ",".join(f"{p}={b}" for p, b in self.overrides)]
        return out


@dataclass(frozen=True)
class FitEstimate:
    """One row of `-fitp on`: llama.cpp's own estimate for a device (or the host), whole MiB rounded down."""

    device: str
    model: int
    context: int
    compute: int

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute


@dataclass(frozen=True)
class FitRun:
    """llama-fit-params on one model: its pick (None when it could not fit: `failure` says why) and its estimate for
    that pick (for the given placement when it failed)."""

    choice: FitChoice | None
    estimate: tuple[FitEstimate, ...]
    failure: str | None = None

    @property
    def devices(self) -> tuple[FitEstimate, ...]:
        """The estimate's device rows (no host row): empty when llama.cpp sees no GPU device."""
        return tuple(e for e in self.estimate if e.device != HOST)


def parse_choice(stdout: str) -> FitChoice:
    """The last line of llama-fit-params' output that starts with '-c ': '-c 512 -ngl 5 -ot "PATTERN=CPU,..."'."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("-c ")), None)
    if line is None:
        raise BenchError(f"llama-fit-params printed no arguments: {stdout.strip()[-300:]!r}")
    words = shlex.split(line)
    values = dict(zip(words[::2], words[1::2]))
    split = tuple(float(s) for s in values["-ts"].split(",")) if "-ts" in values else ()
    return FitChoice(int(values["-c"]), int(values["-ngl"]), split,
                     overrides(values["-ot"], "llama-fit-params' -ot") if "-ot" in values else ())


def parse_estimate(stdout: str) -> tuple[FitEstimate, ...]:
    """`-fitp on`'s rows, 'NAME MODEL CONTEXT COMPUTE' in MiB, the host last."""
    rows = [m.groups() for m in re.finditer(r"^(\S+) (\d+) (\d+) (\d+) ?$", stdout, re.M)]
    if not rows or rows[-1][0] != HOST:
        raise BenchError(f"llama-fit-params --fit-print printed no estimate: {stdout.strip()[-300:]!r}")
    return tuple(FitEstimate(name, int(m), int(c), int(k)) for name, m, c, k in rows)


def margins(budget: Budget, gpus: list[Device]) -> tuple[list[str], list[int], list[str]]:
    """The devices to fit on (-dev), the MiB llama.cpp must leave free on each (-fitt: the free memory ggml reports
    less the budget) and one note per device whose budget is more than its free memory (its margin is then 0).
    A budget of one size is the first GPU device's."""
    free = {d.name: d.memory_free for d in gpus}
    names = [n for n, _ in budget.devices] if budget.named else [gpus[0].name]
    out, notes = [], []
    for name, (_, size) in zip(names, budget.devices):
        if name not in free:
            raise BenchError(f"llama-fit-params: this build has no device '{name}'; it has {', '.join(free)}")
        if size > free[name]:
            notes.append(f"the budget for {name} ({size / MIB:.0f} MiB) is more than its free memory "
                         f"({free[name] / MIB:.0f} MiB): llama.cpp fits to free memory, so it leaves none")
        out.append(max(free[name] - size, 0) // MIB)
    return names, out, notes


def fit(model: Path, n_ctx: int, budget: Budget, placing: Placing = Placing(),
        binary: Path | None = None) -> tuple[FitRun, list[str]]:
    """llama-fit-params' pick for `model` at context `n_ctx` within `budget` (with the -ot/-ncmoe of `placing`
    fixed), and its estimate for that pick; with the notes of `margins`. On a build without GPU devices the fit is
    not run: the estimate alone (at the default placement) says what llama.cpp sees."""
    gpus = gpu_devices()
    base = [*LOAD_FLAGS, *placing.flags()]
    if not gpus:
        return FitRun(None, estimate(model, ["-c", str(n_ctx), *base], binary)), []
    names, free, notes = margins(budget, gpus)
    base += ["-dev", ",".join(names)]
    proc = _run_fit(binary, ["-m", str(model), "-c", str(n_ctx), *base, "-fitt", ",".join(map(str, free))])
    if proc.returncode != 0:
        found = _FAILED.search(proc.stdout + proc.stderr)
        reason = found[1].strip() if found else (proc.stdout + proc.stderr).strip()[-200:]
        reason = reason or f"llama-fit-params exited {proc.returncode} and printed nothing ({LOST_TRIES} tries)"
        return FitRun(None, estimate(model, ["-c", str(n_ctx), *base], binary), reason), notes
    choice = parse_choice(proc.stdout)
    return FitRun(choice, estimate(model, [*choice.flags(), *base], binary)), notes


def _run_fit(binary: Path | None, args: list[str]) -> subprocess.CompletedProcess:
    """One fit, run again when it failed without saying why: llama.cpp's log is written by a thread that
    llama-fit-params' exit(1) does not wait for (common/log.cpp leaks its logger on purpose, "logs may be lost if not
    flushed before the program exits"), so a failure's one line is sometimes lost; seen once in CI, on lavapipe."""
    for _ in range(LOST_TRIES):
        proc = _run(binary, args)
        if proc.returncode == 0 or _FAILED.search(proc.stdout + proc.stderr):
            break
    return proc


def estimate(model: Path, flags: list[str], binary: Path | None = None) -> tuple[FitEstimate, ...]:
    """llama.cpp's estimate (`-fitp on`) for `model` placed by `flags`."""
    proc = _run(binary, ["-m", str(model), *flags, "-fitp", "on"])
    if proc.returncode != 0:
        raise BenchError(f"llama-fit-params --fit-print failed (exit {proc.returncode}): "
                         f"{(proc.stdout + proc.stderr).strip()[-300:]}")
    return parse_estimate(proc.stdout)


def find_binary(explicit: Path | None = None) -> Path:
    """The llama-fit-params `build-server` made (or `explicit`)."""
    found = explicit or server_build.cached_binary(server_build.FIT_PARAMS)
    if found is None:
        raise BenchError("no llama-fit-params built for this llama-cpp-python: run `gguf-bench build-server` (it "
                         "builds llama-server and llama-fit-params; about 15 minutes on 2 cores, once)")
    return found


def _run(binary: Path | None, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **server_build.library_env()}
    try:
        return subprocess.run([str(find_binary(binary)), *args], capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        raise BenchError("llama-fit-params did not finish in 10 minutes") from None
