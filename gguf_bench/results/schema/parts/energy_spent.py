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
    only where the counters read cover every device the run used; else `missing` says what they left out."""

    joules: float | None = None  # over `window`; None unless the counters cover `devices` (never a part of them)
    source: str | None = None  # the counters added into joules: 'rapl:package-0+nvml:GPU0'
    wall_s: float | None = None  # the window's time between its two readings
    counters: list[str] = field(default_factory=list)  # every counter read: 'rapl:package-0', 'nvml:GPU0', ...
    devices: list[str] | None = None  # what the run used: 'CPU', 'CUDA0', 'Vulkan0', 'RPC0[HOST:PORT]' (None: unknown)
    missing: str | None = None  # why joules is None: 'the run used CUDA0 and the CPU; no RAPL (...)'
    window: str = DECODE_WINDOW  # DECODE_WINDOW, SHARE_WINDOW or LEGACY_WINDOW
    prompt_joules: float | None = None  # the prompt's processing, before the decode window (where the engine marks it)

    @property
    def decode_joules(self) -> float | None:
        """The joules over tokens/s's window (None for records before issue 56: another window, partial counters)."""
        return self.joules if self.window != LEGACY_WINDOW else None




def _joules(run) -> float | None:
    """The run's joules over tokens/s's window (Energy.decode_joules), None where not measured."""
    return run.energy.decode_joules if run.energy else None


def _per(joules: float | None, count: int | None) -> float | None:
    """Joules per token, where both are known and the count is not 0."""
    return joules / count if joules is not None and count else None


def _per_joule(run) -> float | None:
    """Tokens per joule: None wherever joules per token is (no energy, no tokens), and for a zero reading."""
    joules, count = _joules(run), run.metrics.n_tokens if run.metrics else None
    return count / joules if joules and count else None


def _energy_source(run) -> str | None:
    """The counters a run's joules came from, and how its window was taken where it is not read at the decode's ends."""
    if _joules(run) is None:
        return None
    share = " (llama-server: the request's joules times its decode time's share)" * (run.energy.window == SHARE_WINDOW)
    return f"{run.energy.source}{share}"


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
)
