"""The only module that imports llama_cpp: a `Model` over the low-level API.

One context per model with its own GPU offload (`n_gpu_layers`). `eval` decodes a batch,
requesting logits only for its last `n_logits` tokens, and returns them as a zero-copy numpy
view; `rewind` drops KV entries with `llama_memory_seq_rm`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_bench.axes import CONTEXT_DEFAULTS
from gguf_bench.errors import BenchError, ConfigError, ModelError
from gguf_bench.models.gguf import GGUFInfo, check_magic, info_from_metadata, trunk_layers
from gguf_bench.models.parts import model_path, tensor_table
from gguf_bench.models.registry import DERIVE_TYPES
from gguf_bench.models.twin import MARKER
from gguf_bench.placing import EXPERTS_REGEX, NO_DEVICE, Placing
from gguf_bench.runtimes import placement, repack

TWIN_KEY = MARKER.encode()

_log_tail: deque[tuple[int, str]] = deque(maxlen=64)  # (ggml log level, line), cleared before each load
_load_log: list[str] | None = None  # every line while a model loads (placement.parse reads its buffers)
_LOG_ERROR, _LOG_CONT = 4, 5  # ggml_log_level values
_initialized = False


def _llama():
    """Import llama_cpp once, silence its logging (kept for error messages) and init the backend."""
    global _initialized
    try:
        import llama_cpp
    except (OSError, RuntimeError) as exc:  # its libraries did not load (LLAMA_CPP_LIB_PATH: runtimes/tree_build.py)
        where = os.environ.get("LLAMA_CPP_LIB_PATH")
        raise BenchError("llama-cpp-python's libraries did not load" + (f" from LLAMA_CPP_LIB_PATH={where}" if where
                         else "") + f": {exc}") from None

    if not _initialized:
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialized = True
    return llama_cpp


def _on_log(level: int, text: bytes, user_data) -> None:
    line = text.decode("utf-8", "replace").strip()
    if line:
        if level == _LOG_CONT and _log_tail:  # a continued line keeps the level of the line it continues
            level = _log_tail[-1][0]
        _log_tail.append((level, line))
        if _load_log is not None:
            _load_log.append(line)
    if os.environ.get("GGUF_BENCH_LLAMA_LOG"):
        print(line, flush=True)


try:
    import llama_cpp as _llama_cpp

    _log_callback = _llama_cpp.llama_log_callback(_on_log)  # kept referenced: llama.cpp holds the pointer
except (ImportError, OSError, RuntimeError):  # llama_cpp or its libraries missing: the error surfaces when used
    _log_callback = None


def llama_versions() -> dict:
    """llama-cpp-python version, llama.cpp build info, and whether this build can offload."""
    try:
        llama_cpp = _llama()
    except ImportError:
        return {"llama_cpp_python": None, "gpu_offload": False, "system_info": ""}
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
    }


@functools.cache
def library_build() -> dict:
    """The llama.cpp build the Python loop runs (runtimes/build_id.py): libllama's version, ggml's commit (llama.cpp's
    when built in it; libllama has no build number), llama_print_system_info(), and the libllama file loaded, hashed
    once per process."""
    from gguf_bench.runtimes import build_id

    llama_cpp = _llama()
    lib = llama_cpp.llama_cpp._lib  # the ctypes handle of the libllama it loaded (LLAMA_CPP_LIB_PATH's, or its own)
    return {"version": _c_text(lib, "llama_version"), "build_number": None, "commit": _c_text(lib, "ggml_commit"),
            "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
            **build_id.of_file(Path(lib._name))}


def _c_text(lib: ctypes.CDLL, name: str) -> str | None:
    """A `const char * name(void)` of the library or one it loaded (dlsym searches its dependencies: ggml's symbols
    through libllama); None where this build has none."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    value = fn()
    return value.decode("utf-8", "replace") if value else None


def use_extra_buffers() -> bool:
    """Whether llama.cpp may move CPU weights into its extra buffer types (AMX tiles, repacked layouts).

    Off where the build uses AMX (AMX_INT8 in its system info): llama.cpp's AMX matmul segfaults on
    K-quant weights on some Sapphire Rapids-class machines, virtual ones especially (llama.cpp issue
    #20824, seen here with gemma-3-270m Q4_K_M). $GGUF_BENCH_EXTRA_BUFFERS=1 or 0 overrides.
    """
    env = os.environ.get("GGUF_BENCH_EXTRA_BUFFERS")
    if env in ("0", "1"):
        return env == "1"
    return "AMX_INT8 = 1" not in llama_versions()["system_info"]


def _repack_overrides(path: Path, n_gpu_layers: int):
    """With extra buffers off, still repack what llama.cpp would (see repack.py); $GGUF_BENCH_REPACK=0: don't."""
    if os.environ.get("GGUF_BENCH_REPACK") == "0":
        return None
    import struct

    try:
        names = repack.repackable(path, llama_versions()["system_info"], n_gpu_layers)
    except (ModelError, OSError, ValueError, KeyError, struct.error):  # not a GGUF the reader understands:
        return None  # llama.cpp's loader says what is wrong
    return repack.overrides(names, repack_buffer_type())


def gpu_offload_supported() -> bool:
    return bool(_llama().llama_supports_gpu_offload())


class Vocabulary:
    """A model's tokenizer and chat template, loaded without its weights (vocab_only): what the server engine needs
    to send the loop's very prompt tokens. `Model` is one too."""

    twin = False  # a twin (models/twin.py: synthetic weights) never ends a generation: is_eog is False for it

    def __init__(self, path: Path):
        self._lib = _llama()
        self.path = _existing(path)
        mparams = self._lib.llama_model_default_params()
        mparams.vocab_only = True
        _log_tail.clear()
        self._open(mparams, "read")

    def _open(self, mparams, verb: str) -> None:
        """The one model open (a vocabulary alone, or the weights): the model, its vocabulary, whether it is a twin;
        llama.cpp's own reason where it cannot ('could not read', 'could not load')."""
        self._model = self._lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise ModelError(f"llama.cpp could not {verb} {self.path}: {_last_error()}")
        self._vocab = self._lib.llama_model_get_vocab(self._model)
        self.twin = self._is_twin()

    def _is_twin(self) -> bool:
        return self._lib.llama_model_meta_val_str(self._model, TWIN_KEY, None, 0) >= 0

    def is_eog(self, token: int) -> bool:
        return not self.twin and bool(self._lib.llama_vocab_is_eog(self._vocab, token))

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        for _ in range(2):  # a negative result is the size needed
            buf = (self._lib.llama_token * n_max)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, True)
            if n >= 0:
                return list(buf[:n])
            n_max = -n
        raise ModelError(f"could not tokenize the prompt with {self.path.name}")

    def detokenize(self, tokens: Sequence[int]) -> str:
        out = bytearray()
        buf = ctypes.create_string_buffer(256)
        for tok in tokens:
            n = self._lib.llama_token_to_piece(self._vocab, tok, buf, len(buf), 0, False)
            out += buf.raw[:max(n, 0)]
        return out.decode("utf-8", "replace")

    def has_chat_template(self) -> bool:
        return bool(self._lib.llama_model_chat_template(self._model, None))

    def chat_prompt(self, user_text: str) -> str:
        """`user_text` wrapped in the model's own chat template (as one user turn)."""
        tmpl = self._lib.llama_model_chat_template(self._model, None)
        if not tmpl:
            raise ModelError(f"{self.path.name} has no chat template; drop --chat")
        msg = (self._lib.llama_chat_message * 1)()
        msg[0].role = b"user"
        msg[0].content = user_text.encode("utf-8")
        size = 4 * len(user_text) + 1024
        buf = ctypes.create_string_buffer(size)
        n = self._lib.llama_chat_apply_template(tmpl, msg, 1, True, buf, size)
        if n < 0:
            raise ModelError(f"llama.cpp does not support the chat template of {self.path.name}; drop --chat")
        if n > size:
            buf = ctypes.create_string_buffer(n + 1)
            n = self._lib.llama_chat_apply_template(tmpl, msg, 1, True, buf, n + 1)
        return buf.raw[:n].decode("utf-8", "replace")

    def close(self) -> None:
        if getattr(self, "_model", None):
            self._lib.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> Vocabulary:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# -ctk/-ctv names (options.CACHE_TYPES) as ggml types (enum ggml_type; the bindings do not name BF16)
GGML_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6, "q5_1": 7}
FLASH_ATTN_TYPES = {"auto": -1, "off": 0, "on": 1}  # enum llama_flash_attn_type (LLAMA_FLASH_ATTN_TYPE_AUTO, ...)


class Model(Vocabulary):
    """A GGUF model with one context and one sequence, driven token batch by token batch.

    `context` holds llama.cpp's context params of the same names, each optional (CONTEXT_DEFAULTS: llama.cpp's own):
    n_batch/n_ubatch, flash_attn ('auto', 'on', 'off') and the KV-cache types type_k/type_v ('f16', 'q8_0', ...); any
    other key is set on llama_context_params as given."""

    CONTEXT_DEFAULTS = {"n_batch": CONTEXT_DEFAULTS["batch_size"], "n_ubatch": CONTEXT_DEFAULTS["ubatch_size"],
                        "flash_attn": CONTEXT_DEFAULTS["flash_attn"], "type_k": CONTEXT_DEFAULTS["cache_type_k"],
                        "type_v": CONTEXT_DEFAULTS["cache_type_v"]}  # axes.CONTEXT_DEFAULTS under llama.cpp's names

    def __init__(self, path: Path, n_gpu_layers: int = 0, n_ctx: int = 2048, n_threads: int | None = None,
                 context: dict | None = None, placing: Placing | None = None):
        llama_cpp = _llama()
        self._lib = llama_cpp
        self.path = _existing(path)
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        mparams.use_extra_bufts = use_extra_buffers()
        self._place(mparams, n_gpu_layers, placing or Placing())
        _log_tail.clear()
        global _load_log
        _load_log = lines = []
        context = {**self.CONTEXT_DEFAULTS, **(context or {})}
        context["n_ubatch"] = min(context["n_ubatch"] or context["n_batch"], context["n_batch"])
        try:
            self._load(llama_cpp, mparams, n_ctx, n_threads, context)
        finally:
            _load_log = None
        self.placement = placement.parse(lines, self.n_layers)  # where llama.cpp put it, as it reported it

    def _place(self, mparams, n_gpu_layers: int, placing: Placing) -> None:
        """Set the placement's tensor overrides (before the repack ones: llama.cpp's first match wins) and devices,
        keeping the arrays alive while the model loads."""
        wanted = placement_overrides(self.path, placing)
        repacked = None if mparams.use_extra_bufts else _repack_overrides(self.path, n_gpu_layers)
        self._overrides = repack.join(wanted, repacked)
        if self._overrides is not None:
            mparams.tensor_buft_overrides = ctypes.cast(self._overrides, ctypes.c_void_p)
        self._devices = device_array(placing.devices) if placing.devices else None
        if self._devices is not None:
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if placing.tensor_split:  # llama.cpp reads llama_max_devices() floats
            self._split = (ctypes.c_float * self._lib.llama_max_devices())(*placing.tensor_split)
            mparams.tensor_split = ctypes.cast(self._split, ctypes.POINTER(ctypes.c_float))
        if placing.split_mode is not None:
            mparams.split_mode = SPLIT_MODES[placing.split_mode]
        if placing.main_gpu is not None:
            mparams.main_gpu = placing.main_gpu

    def _load(self, llama_cpp, mparams, n_ctx: int, n_threads: int | None, context: dict) -> None:
        self._open(mparams, "load")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_layers = llama_cpp.llama_model_n_layer(self._model)
        threads = n_threads or max(1, os.cpu_count() or 1)
        cparams = llama_cpp.llama_context_default_params()
        n_batch = context["n_batch"]
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = context["n_ubatch"]
        cparams.flash_attn_type = FLASH_ATTN_TYPES[context["flash_attn"]]
        cparams.type_k = GGML_CACHE_TYPES[context["type_k"]]
        cparams.type_v = GGML_CACHE_TYPES[context["type_v"]]
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        for name, value in context.items():  # any other context param an axis declares (gguf_bench/axes.py), as given
            if name not in self.CONTEXT_DEFAULTS:
                setattr(cparams, name, value)
        if hasattr(cparams, "swa_full"):
            cparams.swa_full = True  # sliding-window caches (Gemma 3) need it for partial rewinds
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            self._model = None
            settings = (f"-fa {context['flash_attn']} -ctk {context['type_k']} -ctv {context['type_v']} "
                        f"-b {n_batch} -ub {context['n_ubatch']}")
            raise ModelError(f"llama.cpp could not create a context for {self.path} "
                             f"(n_ctx={n_ctx}, {settings}): {_last_error()}; try a smaller --ctx-size or other settings")
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = n_batch
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.n_past = 0  # tokens whose KV entries are in the cache
        self.llama_decode_s = 0.0  # total time inside llama_decode (benchmarks subtract it from wall time)

    # --- what the generation loop drives (see speculative.LanguageModel) ---

    def eval(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Append `tokens` at position n_past; return logits of the last `n_logits` of them.

        Returns a [n_logits, n_vocab] float32 view into llama.cpp's buffer (no copy), valid
        until the next call.
        """
        n = len(tokens)
        if not 0 < n_logits <= min(n, self.n_batch):
            raise ValueError(f"eval: n_logits={n_logits} must be in 1..min({n}, n_batch)")
        if self.n_past + n > self.n_ctx:
            raise ConfigError(f"context full: {self.n_past + n} tokens > --ctx-size {self.n_ctx}; "
                              "raise --ctx-size or lower --n-predict")
        # Long inputs go in n_batch chunks; the last chunk holds every position that wants logits.
        last = n - min(n, self.n_batch)
        for start in range(0, last, self.n_batch):
            self._decode(tokens[start:min(start + self.n_batch, last)], first_logit=self.n_batch)
        self._decode(tokens[last:], first_logit=n - last - n_logits)
        ptr = self._lib.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_logits, self.n_vocab))

    def _decode(self, chunk: Sequence[int], first_logit: int) -> None:
        b = self._batch
        for i, tok in enumerate(chunk):
            b.token[i] = tok
            b.pos[i] = self.n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i >= first_logit
        b.n_tokens = len(chunk)
        t = time.perf_counter()
        rc = self._lib.llama_decode(self._ctx, b)
        if rc == 0:  # a device may still be computing: wait here, so its time counts as llama.cpp's, not the loop's
            self._lib.llama_synchronize(self._ctx)
        self.llama_decode_s += time.perf_counter() - t
        if rc != 0:
            raise ModelError(f"llama_decode failed with code {rc} in {self.path.name}: {_last_error()}")
        self.n_past += len(chunk)

    def rewind(self, n_past: int) -> None:
        """Forget every KV entry at position >= n_past."""
        if n_past < self.n_past:
            if not self._lib.llama_memory_seq_rm(self._mem, 0, n_past, -1):
                raise ModelError(f"{self.path.name}: this model's KV cache cannot be rewound to {n_past}")
            self.n_past = n_past  # never forward: positions not decoded stay undecoded

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None
        super().close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# llama.cpp ends every failed load with these; the line that says why comes before them
_GENERIC = re.compile(r"failed to load model( from .*)?$|^failed to read (key-value pairs|tensor info|header)$")
_FUNC_PREFIX = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*: )+")  # 'llama_model_load: ', 'gguf_init_from_file_impl: '
_HINTS = (("file bounds", "the file is cut short, as after an interrupted download or copy: fetch it again"),
          ("invalid magic", "this is not a GGUF file, or its first bytes are damaged"),
          ("unknown model architecture", "this llama-cpp-python build does not support that architecture: upgrade it"),
          ("key not found", "the file lacks metadata this llama.cpp needs: convert or download it again"),
          ("exceeds remaining file size", "the GGUF header is cut short or damaged: fetch the file again"),
          ("failed to read", "the GGUF header is cut short or damaged: fetch the file again"))


def _existing(path: Path) -> Path:
    """The model file's path, or the one line saying it is not there."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist")
    return path


def _last_error() -> str:
    """What llama.cpp logged about its last failure: its error lines minus the generic
    'failed to load model' ones, without function-name prefixes, plus a hint for common causes."""
    errors = list(dict.fromkeys(_cause(line) for level, line in _log_tail if level == _LOG_ERROR))
    causes = [c for c in errors if not _GENERIC.search(c)][-3:] or errors[:1]
    if not causes:
        words = ("error", "failed", "invalid", "unknown", "not ")  # a build that logs without levels
        causes = [_cause(line) for _, line in _log_tail if any(w in line.lower() for w in words)][-1:]
    if not causes:
        return _cause(_log_tail[-1][1]) if _log_tail else "no details from llama.cpp"
    text = "; ".join(causes)
    hint = next((h for needle, h in _HINTS if needle in text), None)
    return f"{text}; {hint}" if hint else text


def _cause(line: str) -> str:
    """'llama_model_load: error loading model: error loading model hyperparameters: key not found in model: X'
    -> 'key not found in model: X'."""
    line = _FUNC_PREFIX.sub("", line)
    while line.startswith(("error loading model: ", "error loading model hyperparameters: ",
                           "error loading model vocabulary: ", "error loading model architecture: ")):
        line = line.split(": ", 1)[1]
    return line


def quantize(src: Path, dst: Path, quant: str, n_threads: int | None = None) -> None:
    """Write `src` re-quantized to `quant` (a registry.DERIVE_TYPES key) at `dst`."""
    llama_cpp = _llama()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, DERIVE_TYPES[quant])
    params.allow_requantize = True
    params.nthread = n_threads or (os.cpu_count() or 1)
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise ModelError(f"llama.cpp could not quantize {src.name} to {quant}: {_last_error()}")


VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


def read_info(path: Path) -> GGUFInfo:
    """A model's architecture, layers and vocabulary as llama.cpp reads them (the vocabulary only is loaded), from
    part 1 when `path` is any part of a split model. Read once per file version (path, size, modification time):
    the pair check, the prompts' preparation and the engines ask it for the same files."""
    path = check_magic(model_path(Path(path)))
    st = path.stat()
    return _read_info(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_info(path: Path, size: int, mtime_ns: int) -> GGUFInfo:
    return info_from_metadata(path, read_metadata(path))


def read_metadata(path: Path) -> dict:
    """Metadata and vocabulary as llama.cpp sees them, loading the vocabulary only (fast)."""
    with Vocabulary(path) as v:
        llama_cpp, model, vocab = v._lib, v._model, v._vocab
        buf = ctypes.create_string_buffer(512)

        def meta(key: str) -> str | None:
            n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
            return buf.value.decode("utf-8", "replace") if n >= 0 else None

        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        arch = meta("general.architecture") or "unknown"
        return {
            "architecture": arch,
            "name": meta("general.name") or Path(path).name,
            "n_layers": int(meta(f"{arch}.block_count") or 0) - int(meta(f"{arch}.nextn_predict_layers") or 0),  # the trunk
            "n_blocks": int(meta(f"{arch}.block_count") or 0),
            "context_length": int(meta(f"{arch}.context_length") or 0) or None,
            "file_type": meta("general.file_type"),
            "n_vocab": n_vocab,
            "vocab_type": VOCAB_TYPES.get(llama_cpp.llama_vocab_type(vocab), "unknown"),
            "bos_id": llama_cpp.llama_vocab_bos(vocab),
            "eos_id": llama_cpp.llama_vocab_eos(vocab),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "tokens": tuple(llama_cpp.llama_vocab_get_text(vocab, i) for i in range(n_vocab)),
        }


# --- ggml's device registry, through its public C API (the bindings do not wrap it) ---

DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL", 4: "META"}  # enum ggml_backend_dev_type
CPU_DEVICE = 0


@functools.cache
def _ggml() -> ctypes.CDLL | None:
    """libggml beside the libllama llama-cpp-python loaded (its llama_cpp/lib, or LLAMA_CPP_LIB_PATH's folder: a
    `build-tree` build), with the signatures used here; None when it cannot be opened."""
    llama_cpp = _llama()  # registers the backends first
    loaded = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
    libdir = Path(loaded._name).parent if getattr(loaded, "_name", None) else Path(llama_cpp.__file__).parent / "lib"
    try:
        lib = ctypes.CDLL(str(_lib(libdir, "ggml")))
        ctypes.CDLL(str(_lib(libdir, "ggml-base")))
    except OSError:
        return None
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    for name, res, args in (("ggml_backend_dev_count", ctypes.c_size_t, []), ("ggml_backend_dev_get", vp, [ctypes.c_size_t]),
                            ("ggml_backend_dev_name", cp, [vp]), ("ggml_backend_dev_description", cp, [vp]),
                            ("ggml_backend_dev_type", ctypes.c_int, [vp]), ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
                            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
                            ("ggml_backend_reg_count", ctypes.c_size_t, []), ("ggml_backend_reg_get", vp, [ctypes.c_size_t]),
                            ("ggml_backend_reg_name", cp, [vp]), ("ggml_backend_reg_dev_count", ctypes.c_size_t, [vp]),
                            ("ggml_backend_dev_backend_reg", vp, [vp]), ("ggml_backend_reg_get_proc_address", vp, [vp, cp]),
                            ("ggml_backend_buft_name", cp, [vp]), ("ggml_backend_dev_buffer_type", vp, [vp]),
                            ("ggml_backend_buft_get_max_size", ctypes.c_size_t, [vp])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


@dataclass(frozen=True)
class Device:
    name: str  # 'Vulkan0', 'CUDA0', 'CPU'
    description: str  # 'llvmpipe (LLVM 15.0.6, 256 bits)', 'NVIDIA H100 80GB HBM3'
    kind: str  # 'CPU', 'GPU', 'IGPU', 'ACCEL'
    memory_total: int  # bytes, as the backend reports them
    memory_free: int

    @property
    def label(self) -> str:
        return f"{self.name}: {self.description} ({self.kind}, {self.memory_total / 2**20:.0f} MiB)"


def devices() -> list[Device]:
    """Every device the backends of this build see (the CPU included)."""
    lib = _ggml()
    if lib is None:
        return []
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(Device(lib.ggml_backend_dev_name(dev).decode(), lib.ggml_backend_dev_description(dev).decode(),
                          DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "?"), total.value, free.value))
    return out


def max_alloc(device_index: int = 0) -> int | None:
    """The largest buffer the `device_index`-th GPU device allocates (lavapipe: 1 GiB; its storage buffers, which
    bound a single weight, stop at 128 MiB); None: no GPU."""
    lib = _ggml()
    gpus = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())] if lib else []
    gpus = [d for d in gpus if lib.ggml_backend_dev_type(d) != CPU_DEVICE]
    if device_index >= len(gpus):
        return None
    return int(lib.ggml_backend_buft_get_max_size(lib.ggml_backend_dev_buffer_type(gpus[device_index])))


def gpu_devices() -> list[Device]:
    return [d for d in devices() if d.kind != "CPU"]


def backends() -> dict[str, int]:
    """The backends compiled into this build and how many devices each sees: {'CPU': 1, 'Vulkan': 0}."""
    lib = _ggml()
    if lib is None:
        return {}
    regs = [lib.ggml_backend_reg_get(i) for i in range(lib.ggml_backend_reg_count())]
    return {lib.ggml_backend_reg_name(r).decode(): lib.ggml_backend_reg_dev_count(r) for r in regs}


def offload_status() -> str:
    """'yes (Vulkan0: ...)', or why not: a CPU-only build, or a GPU build that sees no device (and what to set)."""
    gpus = gpu_devices()
    if gpus and gpu_offload_supported():
        return "yes (" + "; ".join(d.label for d in gpus) + ")"
    idle = [name for name, n in backends().items() if name != "CPU" and n == 0]
    if idle:
        hint = (" (a CPU-type Vulkan device such as Mesa's lavapipe is used only with GGML_VK_VISIBLE_DEVICES=0 set)"
                if "Vulkan" in idle else "")
        return f"no: this build has the {', '.join(idle)} backend but sees no device{hint}; -ngl/-ngld are ignored"
    return "no (CPU-only build: -ngl/-ngld are ignored)"


# --- CPU_REPACK buffer type (repack.py's overrides send weights there) ---


@functools.cache
def repack_buffer_type() -> int | None:
    """The CPU device's CPU_REPACK buffer type, found through ggml's public registry (no C++ symbols)."""
    lib = _ggml()
    if lib is None:
        return None
    dev = lib.ggml_backend_dev_by_type(CPU_DEVICE)
    fn = dev and lib.ggml_backend_reg_get_proc_address(lib.ggml_backend_dev_backend_reg(dev), b"ggml_backend_dev_get_extra_bufts")
    if not fn:
        return None
    bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(fn)(dev)
    i = 0
    while bufts and bufts[i]:
        if lib.ggml_backend_buft_name(bufts[i]) == b"CPU_REPACK":
            return bufts[i]
        i += 1
    return None


# --- placement beyond -ngl (placing.Placing): tensor overrides by buffer-type name, device lists ---

SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}  # enum llama_split_mode


def check_rpc() -> None:
    """The Python engine drives no RPC devices: one line saying what to run instead."""
    supported = bool(_llama().llama_supports_rpc())
    raise ConfigError("--rpc runs with --engine server (llama-server and `gguf-bench build-server --rpc`): the Python "
                      + ("engine does not register RPC servers" if supported else
                         "engine's llama-cpp-python has no RPC backend (it would need CMAKE_ARGS=-DGGML_RPC=ON pip "
                         "install --force-reinstall --no-binary llama-cpp-python llama-cpp-python)"))


def buffer_types() -> dict[str, int]:
    """The buffer types -ot can name, as llama.cpp's parser lists them: each device's own ('CPU', 'Vulkan0')."""
    lib = _ggml()
    if lib is None:
        return {}
    out = {}
    for i in range(lib.ggml_backend_dev_count()):
        buft = lib.ggml_backend_dev_buffer_type(lib.ggml_backend_dev_get(i))
        if buft:
            out[lib.ggml_backend_buft_name(buft).decode()] = buft
    return out


def placement_overrides(path: Path, placing: Placing) -> list[tuple[str, int]]:
    """The placement's (pattern, buffer type) overrides for `path`, each checked: a buffer type this build has, a
    pattern that matches some tensor of the model (-ncmoe on a model without experts adds none)."""
    if not placing.overrides and not placing.n_cpu_moe:
        return []
    meta, tensors = tensor_table(path)
    n_layers = trunk_layers(meta)
    names, bufts = [t.name for t in tensors], buffer_types()
    for pattern, buffer in placing.overrides:
        if buffer not in bufts:
            raise ConfigError(f"-ot {pattern}={buffer}: this build has no buffer type '{buffer}'; it has "
                              f"{', '.join(bufts) or 'none'}")
        if not any(re.search(pattern, n) for n in names):
            raise ConfigError(f"-ot pattern '{pattern}' matches no tensor of {path.name} (names look like "
                              f"'{names[len(names) // 2] if names else '?'}')")
    experts = [n for n in names if re.search(EXPERTS_REGEX, n)]
    return [(p, bufts[b]) for p, b in placing.tensor_overrides(n_layers if experts else 0)]


def check_placement(path: Path, placing: Placing, flag: str = "--n-cpu-moe", remote: bool = False) -> str | None:
    """Raise ConfigError for what llama.cpp would refuse (a buffer type or device this build lacks, a split that does
    not fit its devices, an -ot pattern that matches nothing); return a note for -ncmoe on a model without experts (it
    changes nothing there). remote: the devices are RPC servers' too, checked by the server engine (runtimes/rpc.py)."""
    placement_overrides(path, placing)
    if not remote:
        placing.check_devices([d.name for d in devices() if d.kind != "CPU"], draft=flag != "--n-cpu-moe")
    if placing.n_cpu_moe and not any(re.search(EXPERTS_REGEX, t.name) for t in tensor_table(path)[1]):
        return f"{flag} does nothing for {path.name}: it has no expert weights (not a mixture of experts)"
    return None


def device_array(names: tuple[str, ...]) -> ctypes.Array:
    """A NULL-terminated ggml_backend_dev_t array for llama_model_params.devices ('none': just the NULL), each name
    checked as llama.cpp checks it (a device of this build, not the CPU)."""
    if names == (NO_DEVICE,):
        return (ctypes.c_void_p * 1)()
    lib = _ggml()
    by_name = {d.name: d for d in devices() if d.kind != "CPU"}
    handles = []
    for name in names:
        if name not in by_name or lib is None:
            have = ", ".join(by_name) or "no GPU device (use -dev none, or leave -dev out)"
            raise ConfigError(f"-dev {name}: this build has no device '{name}'; it has {have}")
        handles.append(next(lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())
                            if lib.ggml_backend_dev_name(lib.ggml_backend_dev_get(i)).decode() == name))
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def _lib(libdir: Path, name: str) -> Path:
    found = sorted(libdir.glob(f"lib{name}.*")) + sorted(libdir.glob(f"{name}.*"))
    return found[0] if found else libdir / f"lib{name}.so"
