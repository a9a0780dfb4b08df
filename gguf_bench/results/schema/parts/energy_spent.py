"""What a run spent, from energy counters (measure/trackers/energy.py fills it); its columns."""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench.results.schema import legacy
from gguf_bench.results.schema.fields import Field

DECODE_WINDOW = "decode"  # Energy.window: the counters read at the first token and after the last (tokens/s's window)
SHARE_WINDOW = "decode share"  # read around the request, times its decode time over the request's (llama-server)
LEGACY_WINDOW = legacy.ENERGY_WINDOW  # records before issue 56: around prompt and decode, from every counter


@dataclass
class Energy:
    """What one run spent, from energy counters read at the two ends of its window (measure/trackers/energy.py): whole
    devices' or packages' counters, so the idle draw and any other process's work in the window are in it. `joules`
    only where the counters read cover every device the run used; else `missing` says what they left out.

    GPU only: where the counters cover every GPU the run used but not the CPU (NVML read, no RAPL: the usual case for a
    user who is not root), `gpu_joules` holds those GPUs' joules over the same window, a figure of its own, never the
    run's: `joules` stays None and `missing` says why the CPU is not counted. Records without it (every one before
    issue 75, and every run whose joules are the run's) read as None."""

    joules: float | None = None  # over `window`; None unless the counters cover `devices` (never a part of them)
    source: str | None = None  # the counters added into joules: 'rapl:package-0+nvml:GPU0'
    wall_s: float | None = None  # the window's time between its two readings
    counters: list[str] = field(default_factory=list)  # every counter read: 'rapl:package-0', 'nvml:GPU0', ...
    devices: list[str] | None = None  # what the run used: 'CPU', 'CUDA0', 'Vulkan0', 'RPC0[HOST:PORT]' (None: unknown)
    missing: str | None = None  # why joules is None: 'the run used CUDA0 and the CPU; no RAPL (...)'
    window: str = DECODE_WINDOW  # DECODE_WINDOW, SHARE_WINDOW or LEGACY_WINDOW
    prompt_joules: float | None = None  # the prompt's processing, before the decode window (where the engine marks it)
    gpu_joules: float | None = None  # the GPUs the run used alone, over `window`, where the CPU is not counted
    gpu_prompt_joules: float | None = None  # the same GPUs' over the prompt's processing
    gpu_source: str | None = None  # the counters added into gpu_joules: 'nvml:GPU0'

    @property
    def decode_joules(self) -> float | None:
        """The joules over tokens/s's window (None for records before issue 56: another window, partial counters)."""
        return self.joules if self.window != LEGACY_WINDOW else None

    @property
    def gpu_decode_joules(self) -> float | None:
        """The GPUs' joules alone over tokens/s's window (None: the run's joules are stored, or no GPU's were)."""
        return self.gpu_joules if self.window != LEGACY_WINDOW and self.joules is None else None



def _joules(run) -> float | None:
    """The run's joules over tokens/s's window (Energy.decode_joules), None where not measured."""
    return run.energy.decode_joules if run.energy else None


def _gpu_joules(run) -> float | None:
    """The joules of the GPUs the run used alone (Energy.gpu_decode_joules), None where not measured that way."""
    return run.energy.gpu_decode_joules if run.energy else None


def _per(joules: float | None, count: int | None) -> float | None:
    """Joules per token, where both are known and the count is not 0."""
    return joules / count if joules is not None and count else None


def _per_joule(run, joules=_joules) -> float | None:
    """Tokens per joule: None wherever joules per token is (no energy, no tokens), and for a zero reading."""
    spent, count = joules(run), run.metrics.n_tokens if run.metrics else None
    return count / spent if spent and count else None


def _tokens(run) -> int | None:
    return run.metrics.n_tokens if run.metrics else None


def _accepted(run) -> int | None:
    return run.metrics.accepted if run.metrics else None


def _energy_source(run) -> str | None:
    """The counters a run's joules came from, and how its window was taken where it is not read at the decode's ends."""
    if _joules(run) is None:
        return None
    share = " (llama-server: the request's joules times its decode time's share)" * (run.energy.window == SHARE_WINDOW)
    return f"{run.energy.source}{share}"


def _gpu_energy_source(run) -> str | None:
    """The GPU counters a GPU-only figure came from, the window as _energy_source says it."""
    if _gpu_joules(run) is None:
        return None
    share = " (llama-server: the request's joules times its decode time's share)" * (run.energy.window == SHARE_WINDOW)
    return f"{run.energy.gpu_source}{share}"


GPU_ONLY = " (GPU only)"  # every GPU-only column's heading ends so: never read as the run's energy


FIELDS = (
    Field("energy_j", _joules, "J", "mean", numeric=True, optional=True),
    Field("joules_per_token", lambda r: _per(_joules(r), r.metrics.n_tokens if r.metrics else None), "J/token", "mean",
          numeric=True, optional=True, header="J/tok", fmt="{:.3g}", place=112, legend_from="energy_source",
          legend="J/tok: joules per generated token over the decode (tokens/s's window), J/acc: per accepted draft token, "
                 "from {} (whole devices: idle draw included; every device the run used, or no figure); energy: tokens "
                 "per joule over the target alone's"),
    Field("joules_per_accepted", lambda r: _per(_joules(r), r.metrics.accepted if r.metrics else None), "J/token",
          "mean", numeric=True, optional=True, header="J/acc", fmt="{:.3g}", place=113),
    Field("tokens_per_joule", _per_joule, "tokens/J", "mean", numeric=True, optional=True, gain="energy", place=111),
    Field("prompt_energy_j", lambda r: r.energy.prompt_joules if r.energy else None, "J", "mean", numeric=True,
          optional=True),  # the prompt's processing, apart (Python engine)
    Field("energy_source", _energy_source, "", "first", optional=True),
    # GPU only (the CPU not counted): columns of their own, so that no row or gain sets them against the run's
    Field("gpu_energy_j", _gpu_joules, "J", "mean", numeric=True, optional=True),
    Field("gpu_joules_per_token", lambda r: _per(_gpu_joules(r), _tokens(r)), "J/token", "mean", numeric=True,
          optional=True, header=f"J/tok{GPU_ONLY}", fmt="{:.3g}", place=112, legend_from="gpu_energy_source",
          legend=f"J/tok{GPU_ONLY}, J/acc{GPU_ONLY}: joules per generated token and per accepted draft token over the "
                 "decode of the GPUs the run used alone, from {} (the CPU was not counted: no readable RAPL counter, "
                 "see the sweep's note; whole devices: idle draw included); never compare them with a whole-run J/tok; "
                 f"energy{GPU_ONLY}: tokens per GPU joule over the target alone's"),
    Field("gpu_joules_per_accepted", lambda r: _per(_gpu_joules(r), _accepted(r)), "J/token", "mean", numeric=True,
          optional=True, header=f"J/acc{GPU_ONLY}", fmt="{:.3g}", place=113),
    Field("gpu_tokens_per_joule", lambda r: _per_joule(r, _gpu_joules), "tokens/J", "mean", numeric=True, optional=True,
          gain=f"energy{GPU_ONLY}", place=111),
    Field("gpu_prompt_energy_j", lambda r: r.energy.gpu_prompt_joules if _gpu_joules(r) is not None else None, "J",
          "mean", numeric=True, optional=True),
    Field("gpu_energy_source", _gpu_energy_source, "", "first", optional=True),
)
