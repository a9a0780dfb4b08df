"""Where one model's weights go beyond -ngl, as one value: llama.cpp's -ncmoe/-cmoe, -ot and -dev (and the draft's
-ncmoed, -otd, -devd), parsed as llama.cpp parses them (vendored common/arg.cpp).

A `Placing` is what the engines apply (engines/llama_cpp.Model: tensor_buft_overrides and devices; llama-server:
its flags), what a run record stores (`label`, the flags as typed) and what the planner reads (models/memory.py).
Tensor overrides are tried in order and the first pattern found in a tensor's name wins (std::regex_search): -ot
first, then -ncmoe's one override per layer, as `flags` writes them on llama-server's command line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from gguf_bench.errors import ConfigError
from gguf_bench.options import ALL_LAYERS, int_list

EXPERTS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # LLM_FFN_EXPS_REGEX: a MoE layer's expert weights
CPU = "CPU"  # the CPU's buffer type, as -ot names it
NO_DEVICE = "none"  # -dev none: nothing offloaded
TARGET_FLAGS = {"n_cpu_moe": "-ncmoe", "cpu_moe": "-cmoe", "overrides": "-ot", "devices": "-dev"}
DRAFT_FLAGS = {"n_cpu_moe": "-ncmoed", "cpu_moe": "-cmoed", "overrides": "-otd", "devices": "-devd"}


@dataclass(frozen=True)
class Placing:
    """One model's placement beyond -ngl; the default places as llama.cpp does without these flags."""

    n_cpu_moe: int = 0  # expert weights of the first N layers on the CPU (ALL_LAYERS: every layer's, -cmoe)
    overrides: tuple[tuple[str, str], ...] = ()  # -ot: (tensor name pattern, buffer type name), in order
    devices: tuple[str, ...] = ()  # -dev: the devices to offload to, in order; ('none',): none; (): every GPU device

    def __post_init__(self) -> None:
        if self.n_cpu_moe < 0:
            raise ConfigError(f"--n-cpu-moe takes a number of layers >= 0 or 'all', got {self.n_cpu_moe}")
        for pattern, _ in self.overrides:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"bad -ot pattern '{pattern}': {e}") from None
        if NO_DEVICE in self.devices and len(self.devices) > 1:
            raise ConfigError(f"-dev none means no device: it cannot be listed with others ({','.join(self.devices)})")

    @property
    def is_default(self) -> bool:
        return self == Placing()

    @property
    def no_offload(self) -> bool:
        return self.devices == (NO_DEVICE,)

    def expert_layers(self, n_layers: int) -> int:
        """How many of `n_layers` layers keep their experts on the CPU through -ncmoe/-cmoe."""
        return min(self.n_cpu_moe, n_layers)

    def tensor_overrides(self, n_layers: int) -> list[tuple[str, str]]:
        """Every (pattern, buffer type) override in llama.cpp's order: -ot's, then one per layer for -ncmoe
        (llm_add_n_cpu_ffn_overrides), or the one -cmoe pattern."""
        out = list(self.overrides)
        if self.n_cpu_moe == ALL_LAYERS:
            out.append((EXPERTS_REGEX, CPU))
        else:
            out += [(rf"blk\.{i}{EXPERTS_REGEX}", CPU) for i in range(min(self.n_cpu_moe, n_layers))]
        return out

    def flags(self, draft: bool = False) -> list[str]:
        """The llama-server/llama-cli flags (the draft's with draft=True): ['-ot', 'exps=CPU', '-ncmoe', '2']."""
        names = DRAFT_FLAGS if draft else TARGET_FLAGS
        out: list[str] = []
        if self.overrides:
            out += [names["overrides"], ",".join(f"{p}={b}" for p, b in self.overrides)]
        if self.n_cpu_moe == ALL_LAYERS:
            out.append(names["cpu_moe"])
        elif self.n_cpu_moe:
            out += [names["n_cpu_moe"], str(self.n_cpu_moe)]
        if self.devices:
            out += [names["devices"], ",".join(self.devices)]
        return out

    def label(self, draft: bool = False) -> str | None:
        """The flags as one string (what a record stores), None for the default placement."""
        return " ".join(self.flags(draft)) or None


def parse_label(label: str | None, draft: bool = False) -> Placing:
    """A stored label back into a Placing (the inverse of `label`)."""
    return split_label(label)[1 if draft else 0]


def split_label(label: str | None) -> tuple[Placing, Placing]:
    """Both models' flags ('-ncmoe 2 -devd none', RunConfig.placement_label) back into (target, draft) Placings."""
    names = {**{v: (0, k) for k, v in TARGET_FLAGS.items()}, **{v: (1, k) for k, v in DRAFT_FLAGS.items()}}
    words, kw = (label or "").split(), ({}, {})
    i = 0
    while i < len(words):
        role, field = names.get(words[i], (None, None))
        if field == "cpu_moe":
            kw[role]["n_cpu_moe"], i = ALL_LAYERS, i + 1
            continue
        if field is None or i + 1 >= len(words):
            raise ConfigError(f"cannot read the placement '{label}'")
        value = words[i + 1]
        kw[role][field] = int(value) if field == "n_cpu_moe" else overrides(value) if field == "overrides" else devices(value)
        i += 2
    return Placing(**kw[0]), Placing(**kw[1])


# --- option text -> values (lists of alternatives are swept like -ngl) ---

def n_cpu_moes(spec: str | None, what: str = "--n-cpu-moe") -> list[int]:
    """--n-cpu-moe: layer counts, ranges and 'all' (every layer's experts, -cmoe), a comma list in sweeps."""
    return [0] if spec is None else int_list(spec, what, {"all": ALL_LAYERS})


def overrides(text: str, what: str = "-ot") -> tuple[tuple[str, str], ...]:
    """One -ot value: 'PATTERN=BUFFER,PATTERN=BUFFER' ('none': no override)."""
    if text.strip().lower() == NO_DEVICE:
        return ()
    out = []
    for part in text.split(","):
        pattern, eq, buffer = part.strip().rpartition("=")
        if not eq or not pattern or not buffer:
            raise ConfigError(f"bad {what} '{part}': write PATTERN=BUFFER, e.g. 'ffn_.*_exps=CPU' (several with commas)")
        out.append((pattern, buffer))
    return tuple(out)


def devices(text: str, what: str = "-dev") -> tuple[str, ...]:
    """One -dev value: 'Vulkan0,CUDA1' or 'none'."""
    names = tuple(n for n in text.replace(" ", "").split(",") if n)
    if not names:
        raise ConfigError(f"{what} needs a device name (see `gguf-bench info`) or 'none'")
    return tuple(NO_DEVICE if n.lower() == NO_DEVICE else n for n in names)


def placings(n_cpu_moe: str | None = None, override: list[str] | None = None, device: list[str] | None = None,
             draft: bool = False) -> list[Placing]:
    """Every combination of the given alternatives (each -ot/-dev given more than once is one more alternative)."""
    flags = DRAFT_FLAGS if draft else TARGET_FLAGS
    ns = n_cpu_moes(n_cpu_moe, "--n-cpu-moe-draft" if draft else "--n-cpu-moe")
    ots = [overrides(o, flags["overrides"]) for o in override] if override else [()]
    devs = [devices(d, flags["devices"]) for d in device] if device else [()]
    return list(dict.fromkeys(Placing(n, o, d) for n, o, d in product(ns, ots, devs)))


def placing_axes(n_cpu_moe: str | None = None, override: list[str] | None = None, device: list[str] | None = None,
                 n_cpu_moe_draft: str | None = None, override_draft: list[str] | None = None,
                 device_draft: list[str] | None = None, single: bool = False) -> dict[str, list[Placing]]:
    """The placement options as plan.Grid's axes; single: `run`, one placement per model."""
    out = {"placings": placings(n_cpu_moe, override, device),
           "placings_draft": placings(n_cpu_moe_draft, override_draft, device_draft, draft=True)}
    for axis, flags in (("placings", "--n-cpu-moe, -ot, -dev"), ("placings_draft", "--n-cpu-moe-draft, -otd, -devd")):
        if single and len(out[axis]) != 1:
            raise ConfigError(f"{flags} take one value each here; `gguf-bench sweep` takes lists")
    return out
