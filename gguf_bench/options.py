"""One parser and one validator per command-line option, shared by every command and the library.

Lists and ranges follow llama-bench: '1,2,4', '1-8', '1-8+2' (step), '1-16*2' (factor). GPU layers
take a number or 'all' (also 'max' and '-1', as llama.cpp's own tools accept), in lists too.
"""

from __future__ import annotations

import re

from gguf_bench import engine_registry
from gguf_bench.errors import ConfigError

ALL_LAYERS = 2**31 - 1  # llama.cpp clamps n_gpu_layers to the model's layer count
_ALL_WORDS = ("all", "max", "-1")
_RANGE = re.compile(r"^(\d+)-(\d+)(?:([+*])(\d+))?$")


def int_list(spec: str | int, what: str, words: dict[str, int] | None = None) -> list[int]:
    """Numbers and ranges separated by commas, without duplicates, in the order given."""
    values: list[int] = []
    for part in str(spec).replace(" ", "").split(","):
        if words and part.lower() in words:
            values.append(words[part.lower()])
        elif part.isdigit():
            values.append(int(part))
        elif m := _RANGE.match(part):
            values += _expand(m, part, what)
        else:
            hint = f", {', '.join(repr(w) for w in words)}" if words else ""
            raise ConfigError(f"bad {what} value '{part}': use numbers, ranges like 1-8 or 1-8+2 or 1-16*2{hint}, "
                              "separated by commas")
    return list(dict.fromkeys(values))


def _expand(m: re.Match, part: str, what: str) -> list[int]:
    lo, hi, op, step = int(m[1]), int(m[2]), m[3] or "+", int(m[4] or 1)
    if lo > hi or (op == "+" and step < 1) or (op == "*" and (step < 2 or lo < 1)):
        raise ConfigError(f"bad {what} range '{part}': need low <= high and a step >= 1 (factor >= 2)")
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v = v + step if op == "+" else v * step
    return out


def layers(value: str | int) -> int:
    """One -ngl/-ngld value: a number of layers >= 0, or all/max/-1 for every layer."""
    text = str(value).strip().lower()
    if text in _ALL_WORDS:
        return ALL_LAYERS
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(f"GPU layers must be a number or 'all', got '{value}'") from None
    if n < 0:
        raise ConfigError(f"GPU layers must be >= 0 or 'all', got {n}")
    return n


def layer_list(spec: str | int, what: str = "-ngl") -> list[int]:
    return int_list(spec, what, {w: ALL_LAYERS for w in _ALL_WORDS})


def engines(text: str) -> tuple[str, ...]:
    """--engine: an engine's name, or both (the engines and their names: engine_registry)."""
    return engine_registry.chosen(text)


def layers_label(n: int) -> str | int:
    """How a layer count is stored and shown: 'all' or the number."""
    return "all" if n == ALL_LAYERS else n


def draft_length(k: int) -> int:
    if k < 1:
        raise ConfigError(f"draft length -K/--draft-max must be >= 1, got {k}")
    return k


def draft_lengths(spec: str | int) -> list[int]:
    return [draft_length(k) for k in int_list(spec, "-K")]


def one_draft_length(spec: str | int) -> int:
    """A command's single -K (sweep and tune take lists)."""
    values = draft_lengths(spec)
    if len(values) != 1:
        raise ConfigError(f"-K takes one draft length here, got '{spec}'; `gguf-bench sweep` takes lists")
    return values[0]


def nb_prompts(n: int) -> int:
    if n < 1:
        raise ConfigError(f"--nb-prompts must be >= 1, got {n}")
    return n


def n_predict(n: int) -> int:
    if n < 1:
        raise ConfigError(f"--n-predict must be >= 1, got {n}")
    return n


def temperature(t: float) -> float:
    if t < 0:
        raise ConfigError(f"--temp must be >= 0, got {t:g}")
    return t


def temperatures(spec: str | float) -> list[float]:
    try:
        values = [float(x) for x in str(spec).replace(" ", "").split(",")]
    except ValueError:
        raise ConfigError(f"bad temperature list '{spec}': use numbers separated by commas, like 0,0.7") from None
    return [temperature(t) for t in dict.fromkeys(values)]


def results_name(name: str) -> str:
    """A --name: becomes results/NAME.jsonl, so no path separators or other surprises."""
    if not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"--name '{name}' may hold only letters, digits, '-', '_' and '.'")
    return name


def repetitions(n: int) -> int:
    if n < 1:
        raise ConfigError(f"--repetitions must be >= 1, got {n}")
    return n


def repetitions_text(text: str) -> int | None:
    """-r N (a count) or -r auto (None: repetitions until decided)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return repetitions(int(text))
    except ValueError:
        raise ConfigError(f"-r/--repetitions takes a count (3) or 'auto', got '{text}'") from None


def duration_s(text: str, what: str) -> float:
    """'90', '90s', '30m', '2h' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(f"{what} takes a duration above zero (90s, 30m, 2h), got '{text}'")
    return value


def offload_requested(*layer_values: int) -> bool:
    return any(n != 0 for n in layer_values)


# --- context settings' parsers (llama.cpp's context params; each axis declared in gguf_bench/axes.py) -----------------

FLASH_ATTN = ("auto", "on", "off")  # llama.cpp's LLAMA_FLASH_ATTN_TYPE_AUTO / ENABLED / DISABLED
_FLASH_WORDS = {"auto": "auto", "-1": "auto", "on": "on", "1": "on", "true": "on", "off": "off", "0": "off", "false": "off"}
CACHE_TYPES = ("f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")  # what llama-server's -ctk takes


def _words(spec: str) -> list[str]:
    return [w for w in str(spec).replace(" ", "").lower().split(",") if w]


def flash_attns(spec: str, what: str = "-fa") -> list[str]:
    """-fa: on, off, auto (also 1, 0, -1), a comma list in sweeps."""
    values = []
    for word in _words(spec) or [""]:
        if word not in _FLASH_WORDS:
            raise ConfigError(f"bad -fa/--flash-attn value '{word}': use on, off or auto (comma-separated in a sweep)")
        values.append(_FLASH_WORDS[word])
    return list(dict.fromkeys(values))


def cache_types(spec: str, what: str = "-ctk") -> list[str]:
    """-ctk/-ctv: KV-cache types as llama.cpp names them, a comma list in sweeps."""
    values = _words(spec) or [""]
    for word in values:
        if word not in CACHE_TYPES:
            raise ConfigError(f"bad {what} cache type '{word}': choose from {', '.join(CACHE_TYPES)}")
    return list(dict.fromkeys(values))


def positive_ints(spec: str | int, what: str) -> list[int]:
    """Whole numbers >= 1 (-b and the like), a list or range in sweeps."""
    values = int_list(spec, what)
    for n in values:
        if n < 1:
            raise ConfigError(f"{what} must be >= 1, got {n}")
    return values


# --- drafting strategies (decoding.strategy): one value for `run`, lists for `sweep` --------------

def p_mins(spec: str | float) -> list[float]:
    """--draft-p-min: 0 (off) up to but not including 1; a comma list in sweeps."""
    try:
        values = [float(x) for x in str(spec).replace(" ", "").split(",")]
    except ValueError:
        raise ConfigError(f"bad --draft-p-min list '{spec}': use numbers in [0, 1) separated by commas, like 0,0.6,0.8") from None
    for p in values:
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"--draft-p-min must be in [0, 1) (0 = off), got {p:g}")
    return list(dict.fromkeys(values))


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]i?b?)?$", re.I)
_UNITS = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def byte_size(text: str, what: str = "--vram") -> int:
    """'24GB', '24 GiB', '8000MB', '512MiB' -> bytes (GB = 10^9, GiB = 2^30; a bare number is GB)."""
    m = _SIZE.match(str(text).strip())
    if not m:
        raise ConfigError(f"bad {what} '{text}': give a size like 24GB, 24GiB or 8000MB")
    unit = (m[2] or "g").lower().removesuffix("b") or "g"
    return int(float(m[1]) * _UNITS[unit])


def acceptances(spec: str) -> list[float]:
    """--acceptance: the acceptance rates a twin's timings are predicted at, each in (0, 1]."""
    try:
        values = [float(x) for x in str(spec).replace(" ", "").split(",")]
    except ValueError:
        raise ConfigError(f"bad --acceptance list '{spec}': use rates in (0, 1] separated by commas, like 0.5,0.7,0.9") from None
    for a in values:
        if not 0.0 < a <= 1.0:
            raise ConfigError(f"--acceptance takes rates in (0, 1], got {a:g}")
    return sorted(dict.fromkeys(values))
