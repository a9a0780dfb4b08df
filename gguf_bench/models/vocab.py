"""A model's vocabulary as llama.cpp sees it, from the GGUF header alone (no llama.cpp, no weights).

What llama.cpp's draft check reads (llama_vocab_type, llama_vocab_get_add_bos/eos, llama_vocab_bos/eos,
llama_vocab_n_tokens, llama_vocab_get_text) is the header's tokenizer keys after llama_vocab::impl::load fills in its
defaults (src/llama-vocab.cpp of the vendored llama.cpp): the vocabulary type from `tokenizer.ggml.model`, default
special ids per type (a default outside the vocabulary is disabled), add-BOS/EOS defaults per type and per BPE
pre-tokenizer, then the header's own keys (an id outside the vocabulary keeps the default). tests/test_drafts.py checks
every field against llama.cpp's vocab_only load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import ModelError
from gguf_bench.models.gguf import GGUFInfo, quant_name, trunk_layers

TOKENS_KEY = "tokenizer.ggml.tokens"
NULL = -1  # LLAMA_TOKEN_NULL, as runtimes/llama_cpp.read_info reports it

# tokenizer.ggml.model -> (llama.cpp's vocabulary type as read_info names it, default BOS, default EOS)
_TYPES = {
    "llama": ("spm", 1, 2), "bert": ("wpm", 101, NULL), "gpt2": ("bpe", 11, 11), "hybriddna": ("bpe", 11, 11),
    "whitespace": ("bpe", 11, 11), "gemma4": ("bpe", NULL, NULL), "t5": ("ugm", NULL, 1), "rwkv": ("rwkv", NULL, NULL),
    "test": ("test", NULL, NULL), "plamo2": ("plamo2", 1, 2), "none": ("none", NULL, NULL),
    "no_vocab": ("none", NULL, NULL),
}
_ADD = {"spm": (True, False), "wpm": (True, False), "ugm": (False, True), "rwkv": (False, False)}  # (add BOS, add EOS)
# BPE pre-tokenizers that change the defaults
_PRE_ADD_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                "jina-v5-nano", "tekken", "chameleon"}
_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}
_PRE_FORCE_ADD_BOS = {"gemma4", "granite-embed-multi-311m"}  # llama.cpp's Gemma 4 workaround


@dataclass(frozen=True)
class Vocab:
    vocab_type: str
    n_vocab: int
    bos_id: int  # -1: none
    eos_id: int
    add_bos: bool
    add_eos: bool
    tokens: tuple[bytes, ...]


def vocab_from_meta(meta: dict, where: str) -> Vocab:
    """The vocabulary llama.cpp would load from this metadata (`meta` holds TOKENS_KEY as a tuple of bytes)."""
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise ModelError(f"{where}: no tokenizer.ggml.model in its header (not a language model llama.cpp can load)")
    if model not in _TYPES:
        raise ModelError(f"{where}: unknown tokenizer '{model}' (llama.cpp refuses it)")
    vtype, bos, eos = _TYPES[model]
    tokens = meta.get(TOKENS_KEY)
    if vtype == "none":
        n = int(meta.get(f"{meta.get('general.architecture')}.vocab_size") or 0)
        return Vocab(vtype, n, NULL, NULL, False, False, (b"",) * n)
    if not isinstance(tokens, tuple):
        raise ModelError(f"{where}: no {TOKENS_KEY} array in its header")
    pre = meta.get("tokenizer.ggml.pre") or ("gemma4" if model == "gemma4" else "")
    add_bos, add_eos = _ADD.get(vtype, (False, False))
    if vtype == "bpe":
        add_bos = add_bos or pre in _PRE_ADD_BOS
        bos = NULL if pre in _PRE_NO_BOS else bos
    n = len(tokens)
    bos, eos = (_special(meta, key, default, n) for key, default in (("bos", bos), ("eos", eos)))
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", add_bos))
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", add_eos))
    if vtype == "bpe" and pre in _PRE_FORCE_ADD_BOS:
        add_bos = True
    return Vocab(vtype, n, bos, eos, add_bos, add_eos, tuple(t.split(b"\0", 1)[0] for t in tokens))  # C strings


def _special(meta: dict, name: str, default: int, n: int) -> int:
    if default >= n:
        default = NULL  # "default special token ... out of vocab range, disabling"
    given = meta.get(f"tokenizer.ggml.{name}_token_id")
    if given is None:
        return default
    given = int(given) & 0xFFFFFFFF  # read as uint32
    return given if given < n else default  # "bad special token ..., using default id"


def info_from_header(meta: dict, tensors: list, where: str, file_size: int) -> GGUFInfo:
    """A GGUFInfo as runtimes/llama_cpp.read_info gives it, from a header read with `keep={TOKENS_KEY}`."""
    v = vocab_from_meta(meta, where)
    arch = str(meta.get("general.architecture", "unknown"))
    ctx = meta.get(f"{arch}.context_length")
    return GGUFInfo(path=Path(where), architecture=arch, name=str(meta.get("general.name") or Path(where).stem),
                    n_layers=trunk_layers(meta), n_vocab=v.n_vocab, vocab_type=v.vocab_type,
                    quant=quant_name(meta.get("general.file_type")), file_size=file_size, bos_id=v.bos_id,
                    eos_id=v.eos_id, add_bos=v.add_bos, add_eos=v.add_eos,
                    context_length=int(ctx) if ctx is not None else None, tokens=v.tokens)
