"""Where one model's weights go beyond -ngl, as one value: llama.cpp's -ncmoe/-cmoe, -ot and -dev (and the draft's
-ncmoed, -otd, -devd), the target's split over several devices (-ts, -sm, -mg) and the RPC servers that give some of
those devices (--rpc; --rpc-delay: gguf-bench's delaying proxy in front of each, runtimes/rpc_link.py), parsed as
llama.cpp parses them (vendored common/arg.cpp). llama-server has no split or RPC flags for the draft: its -devd can
name the target's RPC devices.

A `Placing` is what the engines apply (runtimes/llama_cpp.Model: tensor_buft_overrides and devices; llama-server:
its flags), what a run record stores (`label`, the flags as typed) and what the planner reads (models/offload_plan.py).
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
SPLIT_MODES = ("layer", "row", "none")  # -sm (llama.cpp's experimental 'tensor' aside)
MAX_RPC_DELAY_MS = 1000  # --rpc-delay's bound (rpc_link.py holds each direction's bytes that long)
SPLIT_FLAGS = {"tensor_split": "-ts", "split_mode": "-sm", "main_gpu": "-mg"}
RPC_FLAGS = {"rpc": "--rpc", "rpc_delay_ms": "--rpc-delay"}  # --rpc-delay is gguf-bench's, never llama.cpp's
TARGET_FLAGS = {"n_cpu_moe": "-ncmoe", "cpu_moe": "-cmoe", "overrides": "-ot", "devices": "-dev", **SPLIT_FLAGS,
                **RPC_FLAGS}
DRAFT_FLAGS = {"n_cpu_moe": "-ncmoed", "cpu_moe": "-cmoed", "overrides": "-otd", "devices": "-devd"}


@dataclass(frozen=True)
class Placing:
    """One model's placement beyond -ngl; the default places as llama.cpp does without these flags."""

    n_cpu_moe: int = 0  # expert weights of the first N layers on the CPU (ALL_LAYERS: every layer's, -cmoe)
    overrides: tuple[tuple[str, str], ...] = ()  # -ot: (tensor name pattern, buffer type name), in order
    devices: tuple[str, ...] = ()  # -dev: the devices to offload to, in order; ('none',): none; (): every GPU device
    tensor_split: tuple[float, ...] = ()  # -ts: each device's share of the layers, in device order; (): by free memory
    split_mode: str | None = None  # -sm layer|row|none (None: llama.cpp's default, layer)
    main_gpu: int | None = None  # -mg: with -sm none, the one device (an index into the devices)
    rpc: tuple[str, ...] = ()  # --rpc: HOST:PORT of each rpc-server, whose devices (RPC0, RPC1...) come first
    rpc_delay_ms: int = 0  # --rpc-delay: one-way delay each way through a loopback proxy in front of each server

    def __post_init__(self) -> None:
        self._check_split()
        if self.n_cpu_moe < 0:
            raise ConfigError(f"--n-cpu-moe takes a number of layers >= 0 or 'all', got {self.n_cpu_moe}")
        for pattern, _ in self.overrides:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"bad -ot pattern '{pattern}': {e}") from None
        if NO_DEVICE in self.devices and len(self.devices) > 1:
            raise ConfigError(f"-dev none means no device: it cannot be listed with others ({','.join(self.devices)})")

    def _check_split(self) -> None:
        if any(v < 0 for v in self.tensor_split) or (self.tensor_split and not any(self.tensor_split)):
            raise ConfigError(f"-ts takes shares of 0 or more, not all 0, got {_shares(self.tensor_split)}")
        if self.split_mode is not None and self.split_mode not in SPLIT_MODES:
            raise ConfigError(f"-sm takes {', '.join(SPLIT_MODES)}, got '{self.split_mode}'")
        if self.main_gpu is not None and self.main_gpu < 0:
            raise ConfigError(f"-mg takes a device index of 0 or more, got {self.main_gpu}")
        for endpoint in self.rpc:
            endpoint_parts(endpoint)
        if not 0 <= self.rpc_delay_ms <= MAX_RPC_DELAY_MS:
            raise ConfigError(f"--rpc-delay takes 0 to {MAX_RPC_DELAY_MS} ms, got {self.rpc_delay_ms}")
        if self.rpc_delay_ms and not self.rpc:
            raise ConfigError("--rpc-delay delays the link to RPC servers: give them with --rpc HOST:PORT,...")

    @property
    def is_default(self) -> bool:
        return self == Placing()

    @property
    def no_offload(self) -> bool:
        return self.devices == (NO_DEVICE,)

    def check_devices(self, names: list[str], draft: bool = False, have: str = "this build") -> None:
        """One line for what llama.cpp would refuse on `names` (its devices, in its order, the CPU aside): a -dev naming
        none of them, a -ts whose shares are not one per device, a -mg beyond them."""
        flag = (DRAFT_FLAGS if draft else TARGET_FLAGS)["devices"]
        for name in self.devices:
            if name != NO_DEVICE and name not in names:
                raise ConfigError(f"{flag} {name}: {have} has no device '{name}'; it has "
                                  f"{', '.join(names) or 'no GPU device (use -dev none, or leave -dev out)'}")
        used = [] if self.no_offload else list(self.devices) or names  # -dev's list, else every device
        if self.tensor_split and len(self.tensor_split) != len(used):
            raise ConfigError(f"-ts {_shares(self.tensor_split)} gives {len(self.tensor_split)} shares for "
                              f"{len(used)} device{'s' * (len(used) != 1)} ({', '.join(used) or 'none'}): give one share "
                              "per device")
        if self.main_gpu is not None and self.main_gpu >= max(len(used), 1):
            raise ConfigError(f"-mg {self.main_gpu}: there are {len(used)} devices ({', '.join(used) or 'none'}), "
                              "counted from 0")

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
        if self.tensor_split:
            out += ["-ts", _shares(self.tensor_split)]
        if self.split_mode is not None:
            out += ["-sm", self.split_mode]
        if self.main_gpu is not None:
            out += ["-mg", str(self.main_gpu)]
        return out

    def rpc_flags(self, endpoints: tuple[str, ...] | None = None) -> list[str]:
        """['--rpc', 'HOST:PORT,...'] (llama-server wants it right after -m: -dev/-devd can name its devices only once
        they are registered); endpoints: the addresses to connect to instead (a delaying proxy's)."""
        return rpc_flag(self.rpc if endpoints is None else endpoints)

    def label(self, draft: bool = False) -> str | None:
        """The flags as one string (what a record stores), None for the default placement."""
        delay = ["--rpc-delay", str(self.rpc_delay_ms)] if self.rpc_delay_ms else []
        return " ".join([*self.rpc_flags(), *self.flags(draft), *delay]) or None


def rpc_flag(endpoints: tuple[str, ...]) -> list[str]:
    """['--rpc', 'HOST:PORT,...'] as llama.cpp's tools take it; [] for no RPC server."""
    return ["--rpc", ",".join(endpoints)] if endpoints else []


def _shares(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}" for v in values)


def endpoint_parts(endpoint: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port), checked."""
    host, colon, port = endpoint.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--rpc takes HOST:PORT of each rpc-server, separated by commas, got '{endpoint}'")
    return host, int(port)


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
        kw[role][field] = _field_value(field, words[i + 1])
        i += 2
    return Placing(**kw[0]), Placing(**kw[1])


def _field_value(field: str, text: str):
    if field in ("n_cpu_moe", "main_gpu", "rpc_delay_ms"):
        return int(text)
    readers = {"overrides": overrides, "devices": devices, "tensor_split": tensor_split, "rpc": rpc_servers}
    return readers.get(field, str)(text)


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


def tensor_split(text: str) -> tuple[float, ...]:
    """One -ts value: '3,1' (llama.cpp also takes '3/1')."""
    try:
        return tuple(float(v) for v in text.replace("/", ",").split(","))
    except ValueError:
        raise ConfigError(f"bad -ts '{text}': give each device's share, separated by commas (1,1 or 3,1)") from None


def rpc_servers(text: str) -> tuple[str, ...]:
    """One --rpc value: 'HOST:PORT,HOST:PORT'."""
    names = tuple(n for n in text.replace(" ", "").split(",") if n)
    for name in names or ("",):
        endpoint_parts(name)
    return names


@dataclass(frozen=True)
class Split:
    """The target's split and RPC options as typed (`sweep`: a repeated -ts/--rpc, and comma lists of -sm, -mg and
    --rpc-delay, are alternatives)."""

    tensor_split: list[str] | None = None
    split_mode: str | None = None
    main_gpu: str | None = None
    rpc: list[str] | None = None
    rpc_delay: str | None = None

    def combinations(self) -> list[dict]:
        if self.rpc_delay is not None and not self.rpc:
            raise ConfigError("--rpc-delay delays the link to RPC servers: give them with --rpc HOST:PORT,...")
        axes = {"tensor_split": [tensor_split(t) for t in self.tensor_split] if self.tensor_split else [()],
                "split_mode": [m.strip() for m in self.split_mode.split(",")] if self.split_mode else [None],
                "main_gpu": int_list(self.main_gpu, "-mg") if self.main_gpu is not None else [None],
                "rpc": [rpc_servers(r) for r in self.rpc] if self.rpc else [()],
                "rpc_delay_ms": int_list(self.rpc_delay, "--rpc-delay") if self.rpc_delay is not None else [0]}
        return [dict(zip(axes, values)) for values in product(*axes.values())]


def placings(n_cpu_moe: str | None = None, override: list[str] | None = None, device: list[str] | None = None,
             draft: bool = False, split: Split = Split()) -> list[Placing]:
    """Every combination of the given alternatives (each -ot/-dev given more than once is one more alternative)."""
    flags = DRAFT_FLAGS if draft else TARGET_FLAGS
    ns = n_cpu_moes(n_cpu_moe, "--n-cpu-moe-draft" if draft else "--n-cpu-moe")
    ots = [overrides(o, flags["overrides"]) for o in override] if override else [()]
    devs = [devices(d, flags["devices"]) for d in device] if device else [()]
    return list(dict.fromkeys(Placing(n, o, d, **kw) for n, o, d, kw in product(ns, ots, devs, split.combinations())))


def placing_axes(n_cpu_moe: str | None = None, override: list[str] | None = None, device: list[str] | None = None,
                 n_cpu_moe_draft: str | None = None, override_draft: list[str] | None = None,
                 device_draft: list[str] | None = None, single: bool = False, split: Split = Split()) -> dict[str, list[Placing]]:
    """The placement options as plan.Grid's axes; single: `run`, one placement per model."""
    out = {"placings": placings(n_cpu_moe, override, device, split=split),
           "placings_draft": placings(n_cpu_moe_draft, override_draft, device_draft, draft=True)}
    for axis, flags in (("placings", "--n-cpu-moe, -ot, -dev, -ts, -sm, -mg, --rpc, --rpc-delay"),
                        ("placings_draft", "--n-cpu-moe-draft, -otd, -devd")):
        if single and len(out[axis]) != 1:
            raise ConfigError(f"{flags} take one value each here; `gguf-bench sweep` takes lists")
    return out
