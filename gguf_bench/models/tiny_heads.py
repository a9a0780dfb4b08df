"""Tiny drafters of 2026's kinds, random weights: a target with its own MTP (NextN) head (llama-server's
`--spec-type draft-mtp`), and EAGLE-3 and DFlash sidecars for tiny.py's llama target (draft-eagle3, draft-dflash).

Architecture glm4moe (GLM-4.5's): the simplest whose draft-mtp graph the vendored llama.cpp has. Its trunk is plain
attention (no recurrent state: qwen35/qwen3next are hybrids with gated delta-net layers, whose speculation needs state
checkpoints, and deepseek2's attention is MLA), and its one NextN block is a trunk block plus eh_proj/enorm/hnorm
(src/models/glm4-moe.cpp: load_arch_tensors, graph_mtp). What that file asks for, and so what is written:
- every block is a mixture of experts (`leading_dense_block_count` 0) with one shared expert and a routing bias
  (`ffn_exp_probs_b`): graph_mtp asserts `ffn_gate_inp` and runs the shared expert unconditionally;
- `block_count` counts the NextN block; `nextn_predict_layers` = 1 (graph_mtp asserts exactly one);
- the head reuses `token_embd` and `output`/`output_norm` (nextn.embed_tokens, shared_head_* are optional).
Acceptance means nothing (random weights); drafting, verifying and the counters do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_bench.models.tiny import TinySpec, add_bpe_vocabulary, vocabulary

ARCH = "glm4moe"


@dataclass(frozen=True)
class TinyMtpSpec:
    n_layers: int = 2  # trunk blocks; the NextN block is one more
    width: int = 64
    n_heads: int = 4
    ff_exp: int = 64
    n_experts: int = 4
    n_experts_used: int = 2
    n_ctx: int = 4096
    logit_scale: float = 4.0


def _matrices(rng: np.random.Generator):
    """mat(*shape, scale): random weights of unit output spread times `scale` (rows read by a matmul of shape[-1])."""
    def mat(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    return mat


def mtp_weights(spec: TinyMtpSpec, n_vocab: int, seed: int, heads: int = 1) -> dict[str, np.ndarray]:
    """Weights in GGUF's (reversed) shape order: blocks 0..n_layers-1 the trunk, the `heads` blocks after them NextN
    heads."""
    mat = _matrices(np.random.default_rng(seed))
    d, f, e = spec.width, spec.ff_exp, spec.n_experts
    w = {"token_embd.weight": mat(n_vocab, d, scale=np.sqrt(d)), "output_norm.weight": np.ones(d, np.float32),
         "output.weight": mat(n_vocab, d, scale=spec.logit_scale)}
    for i in range(spec.n_layers + heads):
        p = f"blk.{i}."
        w |= {p + "attn_norm.weight": np.ones(d, np.float32), p + "attn_q.weight": mat(d, d),
              p + "attn_k.weight": mat(d, d), p + "attn_v.weight": mat(d, d), p + "attn_output.weight": mat(d, d),
              p + "post_attention_norm.weight": np.ones(d, np.float32),
              p + "ffn_gate_inp.weight": mat(e, d), p + "exp_probs_b.bias": np.zeros(e, np.float32),
              p + "ffn_gate_exps.weight": mat(e, f, d), p + "ffn_up_exps.weight": mat(e, f, d),
              p + "ffn_down_exps.weight": mat(e, d, f),
              p + "ffn_gate_shexp.weight": mat(f, d), p + "ffn_up_shexp.weight": mat(f, d),
              p + "ffn_down_shexp.weight": mat(d, f)}
    for i in range(spec.n_layers, spec.n_layers + heads):
        p = f"blk.{i}.nextn."
        w |= {p + "eh_proj.weight": mat(d, 2 * d), p + "enorm.weight": np.ones(d, np.float32),
              p + "hnorm.weight": np.ones(d, np.float32)}
    return w


def _writer(path: Path, arch: str, name: str, n_ctx: int, width: int, blocks: int, ff: int, n_heads: int):
    """A GGUFWriter at `path` (its folder made) with the hyperparameters every tiny model here shares."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(width)
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_heads)
    writer.add_rope_dimension_count(width // n_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    return writer


def _finish(writer, weights: dict[str, np.ndarray], path: Path) -> Path:
    """The tensors added, the file written and closed."""
    for name, w in weights.items():
        writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_vocabulary(writer, tokens: list[str], types: list[int], bos: int, eos: int) -> None:
    import gguf

    add_bpe_vocabulary(writer, tokens, types, bos, eos, gguf.LlamaFileType.ALL_F32)


def write_mtp_target(path: Path, spec: TinyMtpSpec = TinyMtpSpec(), seed: int = 0, heads: int = 1) -> Path:
    """A tiny glm4moe target with `heads` NextN heads. 0: the same trunk without them (for refusals). More than one is
    a header for the rules only: llama.cpp's glm4moe MTP graph runs exactly one (glm4-moe.cpp:136 asserts it)."""
    tokens, types, bos, eos = vocabulary()
    path = Path(path)
    writer = _writer(path, ARCH, f"tiny-mtp-{heads}-heads", spec.n_ctx, spec.width, spec.n_layers + heads, spec.ff_exp,
                     spec.n_heads)
    writer.add_uint32(f"{ARCH}.nextn_predict_layers", heads)
    writer.add_expert_feed_forward_length(spec.ff_exp)
    writer.add_expert_count(spec.n_experts)
    writer.add_expert_used_count(spec.n_experts_used)
    writer.add_expert_shared_count(1)
    writer.add_leading_dense_block_count(0)
    writer.add_expert_weights_norm(True)
    writer.add_expert_weights_scale(1.0)
    _add_vocabulary(writer, tokens, types, bos, eos)
    return _finish(writer, mtp_weights(spec, len(tokens), seed, heads), path)


def write_eagle3_sidecar(path: Path, target: TinySpec = TinySpec(), seed: int = 1,
                         layers: tuple[int, int, int] = (0, 1, 2)) -> Path:
    """A tiny EAGLE-3 sidecar for make_pair's llama target (`target` its spec): architecture eagle3, one decoder block
    whose attention reads the token's embedding beside `fc` of three target layers' inputs (`layers`: llama.cpp's llama
    graph hands each layer's input to the sidecar, src/models/llama.cpp `t_layer_inp`), and the target's vocabulary
    (src/models/eagle3.cpp: load_arch_hparams, load_arch_tensors)."""
    tokens, types, bos, eos = vocabulary(target.extra_tokens)
    mat = _matrices(np.random.default_rng(seed))
    d, ff, n = target.width, target.ff, len(tokens)
    ones = np.ones(d, np.float32)
    weights = {"token_embd.weight": mat(n, d, scale=np.sqrt(d)), "fc.weight": mat(d, 3 * d), "output_norm.weight": ones,
               "output.weight": mat(n, d, scale=target.logit_scale), "blk.0.attn_norm.weight": ones,
               "blk.0.attn_norm_2.weight": ones, "blk.0.attn_q.weight": mat(d, 2 * d), "blk.0.attn_k.weight": mat(d, 2 * d),
               "blk.0.attn_v.weight": mat(d, 2 * d), "blk.0.attn_output.weight": mat(d, d), "blk.0.ffn_norm.weight": ones,
               "blk.0.ffn_gate.weight": mat(ff, d), "blk.0.ffn_up.weight": mat(ff, d), "blk.0.ffn_down.weight": mat(d, ff)}
    path = Path(path)
    writer = _writer(path, "eagle3", "tiny-eagle3", target.n_ctx, d, 1, ff, target.n_heads)
    writer.add_array("eagle3.target_layers", list(layers))
    writer.add_uint32("eagle3.target_hidden_size", d)
    _add_vocabulary(writer, tokens, types, bos, eos)
    return _finish(writer, weights, path)


def write_dflash_sidecar(path: Path, target: TinySpec = TinySpec(), seed: int = 3,
                         layers: tuple[int, ...] = (0, 1, 2), block_size: int = 8) -> Path:
    """A tiny DFlash sidecar for make_pair's llama target: architecture dflash, one block that denoises
    [last token, <mask> x (block_size - 1)] in one pass, reading `fc` of the target layers' inputs (`layers`); llama.cpp
    drafts at most block_size - 1 with it (src/models/dflash.cpp, common/speculative.cpp:1016). Its mask token is the
    vocabulary's BOS (any id serves with random weights)."""
    tokens, types, bos, eos = vocabulary(target.extra_tokens)
    mat = _matrices(np.random.default_rng(seed))
    d, ff, n, hd = target.width, target.ff, len(tokens), target.width // target.n_heads
    ones = np.ones(d, np.float32)
    weights = {"token_embd.weight": mat(n, d, scale=np.sqrt(d)), "fc.weight": mat(d, len(layers) * d),
               "enc.output_norm.weight": ones, "output_norm.weight": ones,
               "output.weight": mat(n, d, scale=target.logit_scale), "blk.0.attn_norm.weight": ones,
               "blk.0.attn_q.weight": mat(d, d), "blk.0.attn_k.weight": mat(d, d), "blk.0.attn_v.weight": mat(d, d),
               "blk.0.attn_output.weight": mat(d, d), "blk.0.attn_q_norm.weight": np.ones(hd, np.float32),
               "blk.0.attn_k_norm.weight": np.ones(hd, np.float32), "blk.0.ffn_norm.weight": ones,
               "blk.0.ffn_gate.weight": mat(ff, d), "blk.0.ffn_up.weight": mat(ff, d), "blk.0.ffn_down.weight": mat(d, ff)}
    path = Path(path)
    writer = _writer(path, "dflash", "tiny-dflash", target.n_ctx, d, 1, ff, target.n_heads)
    writer.add_array("dflash.target_layers", list(layers))
    writer.add_uint32("dflash.block_size", block_size)
    _add_vocabulary(writer, tokens, types, bos, eos)
    writer.add_uint32("tokenizer.ggml.mask_token_id", bos)
    return _finish(writer, weights, path)
