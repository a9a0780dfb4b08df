"""Every axis of a sweep's load declared once, as llama-bench keeps one vector per option in `cmd_params`: its record
field, its Grid list, its flags and parser, llama.cpp's default, its help, and what the engines call it. The product
(plan.Grid.settings), the narrowing to one setting (Ray's units), the CLI options of `run` and `sweep`, the load's
fields and label, the record's fields and resume key, the report's and plots' columns and the deploy line's flags all
derive from `AXES`; only the code that acts on an axis (the runtimes that pass it to llama.cpp) names it again.

A new axis is one `Axis` here (or `declare`d before the modules that derive from AXES are imported, as
tests/test_axis_declared.py does): every class with a field per axis is made when its module is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass

from gguf_bench import options
from gguf_bench.engine_registry import PYTHON_ENGINE, SERVER_ENGINE
from gguf_bench.errors import ConfigError

Get = Callable[[str], object]  # a setting's value by its field name (a load's, or a record's)


@dataclass(frozen=True)
class Axis:
    name: str  # the field of a load (measure/pair.LoadConfig), of a run's record (RunConfig) and the report's column
    grid: str  # plan.Grid's list of its values (and `sweep`'s parameter)
    flags: tuple[str, str]  # long and short, as llama.cpp spells them; the short one names it in tables and lines
    parse: Callable[[str, str], list]  # option text -> its values (options.py), the flag given for messages
    type: type  # one value's type
    help: str
    default: object = None  # llama.cpp's value where none is given (None: `follows`' value, or none at all)
    follows: str | None = None  # the load's setting it takes where not given (the draft's threads: --threads)
    at_most: str | None = None  # the axis whose value llama.cpp clamps it to (n_ubatch <= n_batch)
    # how an engine that acts on it passes it on (set only for an engine of `engines`; none: its own code does, as -td)
    llama: str | None = None  # its key in the context params runtimes/llama_cpp.Model takes (the Python engine)
    server: str | None = None  # its field of runtimes/llama_server.Launch (llama-server's flag, the deploy line)
    engines: tuple[str, ...] = (PYTHON_ENGINE, SERVER_ENGINE)  # the engines that act on it (the others run llama.cpp's default)
    refuse: Callable[[Get], str | None] | None = None  # why llama.cpp cannot run this value beside the others, or None

    @property
    def flag(self) -> str:
        """The short flag: a table's heading, a setting's label, a deploy line's flag."""
        return self.flags[-1]

    def values(self, spec: str | None, single: bool = False) -> list:
        """The option's text as the Grid's list ([None]: not given, llama.cpp's default); single: `run`, one value."""
        values = [None] if spec is None else self.parse(spec, self.flag)
        if single and len(values) != 1:
            raise ConfigError(f"{self.flag} takes one value here, got '{spec}'; `gguf-bench sweep` takes lists")
        return values

    def check(self, value: object) -> None:
        """One line for a value its parser would refuse (a load built in code, not from the command line)."""
        if value is not None:
            self.parse(str(value), self.flag)

    def ran(self, get: Get) -> object:
        """The value llama.cpp runs with: the one given, else its default (or the setting it follows), clamped."""
        value = get(self.name)
        if value is None:
            value = self.default if self.follows is None else get(self.follows)
        if self.at_most is not None and value is not None:
            value = min(value, AXIS[self.at_most].ran(get))
        return value

    def usual(self, get: Get) -> object:
        """What llama.cpp runs where nothing is given: the default, or the setting it follows."""
        return self.default if self.follows is None else get(self.follows)


def _ubatch_above_batch(get: Get) -> str | None:
    ub, b = get("ubatch_size"), AXIS["batch_size"].ran(get)
    if ub is not None and ub > b:
        return f"-ub {ub} with -b {b}: llama.cpp computes at most -b tokens at once (use -ub <= -b)"
    return None


def _quantized_v_without_flash(get: Get) -> str | None:
    ctv = get("cache_type_v")
    if get("flash_attn") == "off" and ctv not in (None, "f16", "f32", "bf16"):
        return (f"-fa off with -ctv {ctv}: llama.cpp needs flash attention for a quantized V cache (use -fa on or auto, "
                "or -ctv f16)")
    return None


# llama.cpp's context settings (llama-bench's -fa, -ctk, -ctv, -b, -ub, and -td), in the product's order
AXES: list[Axis] = [
    Axis("flash_attn", "flash_attns", ("--flash-attn", "-fa"), options.flash_attns, str,
         "flash attention: on, off or auto (default: auto, llama.cpp's choice)", default="auto", llama="flash_attn",
         server="flash_attn"),
    Axis("cache_type_k", "cache_types_k", ("--cache-type-k", "-ctk"), options.cache_types, str,
         f"KV-cache type for K: f16 (default), {', '.join(options.CACHE_TYPES[1:])}", default="f16", llama="type_k",
         server="cache_type_k"),
    Axis("cache_type_v", "cache_types_v", ("--cache-type-v", "-ctv"), options.cache_types, str,
         "KV-cache type for V (as -ctk); a quantized V cache needs flash attention", default="f16", llama="type_v",
         server="cache_type_v", refuse=_quantized_v_without_flash),
    Axis("batch_size", "batch_sizes", ("--batch-size", "-b"), options.positive_ints, int,
         "llama.cpp's n_batch: the most tokens one decode takes (default: 512)", default=512, llama="n_batch",
         server="batch"),
    Axis("ubatch_size", "ubatch_sizes", ("--ubatch-size", "-ub"), options.positive_ints, int,
         "llama.cpp's n_ubatch: the most it computes at once (default: 512, at most -b)", default=512,
         at_most="batch_size", llama="n_ubatch", server="ubatch", refuse=_ubatch_above_batch),
    Axis("threads_draft", "threads_drafts", ("--threads-draft", "-td"), options.positive_ints, int,
         "the draft model's CPU threads (default: --threads)", follows="threads", server="threads_draft"),
]
AXIS: dict[str, Axis] = {a.name: a for a in AXES}
# what llama.cpp uses when an option is not given (records of earlier versions ran with these)
CONTEXT_DEFAULTS: dict[str, object] = {a.name: a.default for a in AXES if a.default is not None}


def declare(axis: Axis) -> Axis:
    """Add an axis (before the modules that derive from AXES are imported: their classes have a field per axis)."""
    if axis.name in AXIS:
        raise ValueError(f"axis {axis.name} is declared twice")
    AXES.append(axis)
    AXIS[axis.name] = axis
    if axis.default is not None:
        CONTEXT_DEFAULTS[axis.name] = axis.default
    return axis


def fields_of(cls_name: str, lists: bool = False, frozen: bool = False) -> type:
    """A dataclass with one keyword-only field per axis, a base for the classes that hold a value of each (a load, a
    record's config: None, not given) or a list of each (the Grid: [None], llama.cpp's default)."""
    if lists:
        spec = [(a.grid, list, field(default_factory=lambda: [None], kw_only=True)) for a in AXES]
    else:
        spec = [(a.name, a.type | None, field(default=None, kw_only=True)) for a in AXES]
    return make_dataclass(cls_name, spec, frozen=frozen)


def grid_lists(given: dict[str, str | None], single: bool = False) -> dict[str, list]:
    """The options given (by axis name) as plan.Grid's lists; single: `run`, one value each."""
    return {a.grid: a.values(given.get(a.name), single) for a in AXES}


def labelled(get: Get) -> list[str]:
    """'-fa on', '-ub 64': the axes given, as flags."""
    return [f"{a.flag} {v}" for a in AXES if (v := get(a.name)) is not None]


def launch_fields(get: Get) -> dict:
    """The axes llama-server acts on that `get` gives, as runtimes/llama_server.Launch takes them (its flags)."""
    return {a.server: v for a in AXES if a.server and (v := get(a.name)) is not None}


def impossible(get: Get) -> str | None:
    """Why llama.cpp cannot run these values together, or None."""
    return next((why for a in AXES if a.refuse and (why := a.refuse(get))), None)
