"""Tiny llama-architecture GGUF target/draft pairs with random weights, for tests and demos.

The draft is the target with Gaussian noise added to every weight; `noise` sets how far it
strays (0 = identical, acceptance 100%). Byte-level BPE vocabulary: 256 byte symbols, a few
merges (llama.cpp refuses a BPE vocabulary without merges), then BOS and EOS.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MERGES = ["Ġ t", "t h", "Ġ a", "i n", "e r", "o n", "r e", "a n"]


@dataclass(frozen=True)
class TinySpec:
    n_layers: int = 4
    width: int = 64
    n_heads: int = 4
    ff: int = 128
    n_ctx: int = 4096
    logit_scale: float = 4.0  # sharpens the output distribution so greedy choices have margins
    extra_tokens: int = 0  # pad the vocabulary (to make incompatible pairs)
    n_experts: int = 0  # > 0: a mixture of experts (Mixtral's layout in the llama architecture), each FFN an expert
    n_experts_used: int = 2


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def vocabulary(extra_tokens: int = 0) -> tuple[list[str], list[int], int, int]:
    """(tokens, token types, bos id, eos id)."""
    tokens = byte_symbols() + [m.replace(" ", "") for m in MERGES]
    tokens += [f"<extra_{i}>" for i in range(extra_tokens)]
    types = [1] * len(tokens)  # NORMAL
    bos, eos = len(tokens), len(tokens) + 1
    return tokens + ["<s>", "</s>"], types + [3, 3], bos, eos  # 3 = CONTROL


def random_weights(spec: TinySpec, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Weights as numpy arrays in GGUF's (reversed) shape order."""
    rng = np.random.default_rng(seed)
    d, ff = spec.width, spec.ff

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    w = {
        "token_embd.weight": mat(n_vocab, d, np.sqrt(d)),
        "output_norm.weight": np.ones(d, np.float32),
        "output.weight": mat(n_vocab, d, spec.logit_scale),
    }
    for i in range(spec.n_layers):
        p = f"blk.{i}."
        w |= {
            p + "attn_norm.weight": np.ones(d, np.float32),
            p + "attn_q.weight": mat(d, d),
            p + "attn_k.weight": mat(d, d),
            p + "attn_v.weight": mat(d, d),
            p + "attn_output.weight": mat(d, d),
            p + "ffn_norm.weight": np.ones(d, np.float32),
        }
        if spec.n_experts:
            e = spec.n_experts
            w |= {p + "ffn_gate_inp.weight": mat(e, d),
                  p + "ffn_gate_exps.weight": np.stack([mat(ff, d) for _ in range(e)]),
                  p + "ffn_up_exps.weight": np.stack([mat(ff, d) for _ in range(e)]),
                  p + "ffn_down_exps.weight": np.stack([mat(d, ff) for _ in range(e)])}
        else:
            w |= {p + "ffn_gate.weight": mat(ff, d), p + "ffn_up.weight": mat(ff, d), p + "ffn_down.weight": mat(d, ff)}
    return w


def perturb(weights: dict[str, np.ndarray], noise: float, seed: int) -> dict[str, np.ndarray]:
    """Each matrix plus Gaussian noise of `noise` times its own standard deviation."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in weights.items():
        if w.ndim == 2 and noise > 0:
            w = (w + rng.standard_normal(w.shape).astype(np.float32) * (noise * w.std())).astype(np.float32)
        out[name] = w
    return out


def add_bpe_vocabulary(writer, tokens: list[str], types: list[int], bos: int, eos: int, file_type) -> None:
    """The vocabulary keys of a byte-level BPE model (`vocabulary()`'s tokens and MERGES), after its size and file
    type, as the tiny models and the synthesised headers (models/shapes.py, models/tiny_heads.py) write them."""
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(file_type)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(True)


def write_gguf(path: Path, spec: TinySpec, weights: dict[str, np.ndarray], eos_id: int | None = None,
               name: str = "tiny", vocab: tuple[list[str], list[int], int, int] | None = None,
               tokenizer: str = "gpt2", metadata: dict[str, str] | None = None) -> Path:
    """A tiny model; `vocab` (tokens, types, bos, eos) replaces `vocabulary(spec.extra_tokens)`, `tokenizer` names
    its type (gpt2: BPE with merges; llama: SentencePiece), `metadata` adds general.* strings (basename, size_label)."""
    import gguf

    tokens, types, bos, eos = vocab or vocabulary(spec.extra_tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    writer.add_context_length(spec.n_ctx)
    writer.add_embedding_length(spec.width)
    writer.add_block_count(spec.n_layers)
    writer.add_feed_forward_length(spec.ff)
    writer.add_head_count(spec.n_heads)
    writer.add_head_count_kv(spec.n_heads)
    writer.add_rope_dimension_count(spec.width // spec.n_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    if spec.n_experts:
        writer.add_expert_count(spec.n_experts)
        writer.add_expert_used_count(spec.n_experts_used)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(tokenizer)
    if tokenizer == "gpt2":
        writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if tokenizer == "gpt2":
        writer.add_token_merges(MERGES)
    else:
        writer.add_token_scores([0.0] * len(tokens))
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos if eos_id is None else eos_id)
    writer.add_add_bos_token(True)
    for tensor_name, w in weights.items():
        writer.add_tensor(tensor_name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_pair(out_dir: Path, noise: float = 0.0, seed: int = 0, spec: TinySpec = TinySpec(),
              draft_spec: TinySpec | None = None, eos_id: int | None = None) -> tuple[Path, Path]:
    """Write tiny-target.gguf and tiny-draft.gguf into `out_dir`; return their paths.

    `draft_spec` with another vocabulary makes an incompatible pair (for tests of `info`).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_vocab = len(vocabulary(spec.extra_tokens)[0])
    target_w = random_weights(spec, n_vocab, seed)
    target = write_gguf(out_dir / "tiny-target.gguf", spec, target_w, eos_id, "tiny-target")
    if draft_spec is None:
        draft_w = perturb(target_w, noise, seed + 1)
        draft_spec = spec
    else:
        draft_w = random_weights(draft_spec, len(vocabulary(draft_spec.extra_tokens)[0]), seed + 1)
    draft = write_gguf(out_dir / "tiny-draft.gguf", draft_spec, draft_w, eos_id, "tiny-draft")
    return target, draft
