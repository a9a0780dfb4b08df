"""Header-only GGUF files of a given architecture shape (no tensor data), for twins at real shapes.

A twin (models/twin.py) is written from a header alone; where no real model's header is at hand (no network, as on
a lent GPU machine), `write_header` synthesises one with gguf.GGUFWriter: the architecture's hyperparameters and
every tensor's name, shape and ggml type, laid out as a real file of that shape is, then the tensor infos end the
file. `gguf-bench twin HEADER -o TWIN` (or `write_twin(local_header(HEADER), ...)`) fills in the data.

The shapes are the published configurations (layers, width, FFN width, heads, KV heads, vocabulary, tied embeddings,
QKV biases) of Llama-3-8B, Llama-3.2-1B, Qwen2.5-7B and Qwen2.5-0.5B, of MoE targets (Qwen3-235B-A22B, Qwen3-30B-A3B,
OLMoE-1B-7B), of targets with their MTP heads (GLM-4.5-Air; Qwen3.5-27B and Qwen3.5-35B-A3B, hybrids of gated
delta-nets and attention), and tiny ones of the same layouts for quick checks. What is not the real model's: the
tokenizer (byte-level BPE from models/tiny.py, padded with `<extra_N>` tokens to the vocabulary size; a decode step's
cost depends on the vocabulary's size, not its strings), Qwen2.5-7B's vocabulary (151936 as the 0.5B's, where its file
pads to 152064: the pair check then needs no tolerance), and the quantization mix: targets in a Q4_K_M-like mix (Q4_K,
with attn_v, ffn_down and output in Q6_K; llama.cpp's Q4_K_M gives Q6_K to half of the ffn_down/attn_v layers), drafts
in Q8_0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_bench.models.offload_plan import tensor_bytes
from gguf_bench.models.tiny import add_bpe_vocabulary, vocabulary


@dataclass(frozen=True)
class ArchShape:
    arch: str  # "llama" | "qwen2"
    n_layers: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    tied: bool  # no output.weight: the token embedding is the output matrix
    qkv_bias: bool
    weights: str  # ggml type of the matrices
    strong: str  # ggml type of attn_v, ffn_down and output (a Q4_K_M-like mix)
    rope_base: float = 10000.0
    n_ctx: int = 8192
    description: str = ""
    head_dim: int = 0  # 0: n_embd / n_head
    n_expert: int = 0  # a mixture of experts: experts per layer (0: dense)
    n_expert_used: int = 0
    n_ff_exp: int = 0  # each expert's FFN width
    qk_norm: bool = False  # per-head RMS norms of Q and K (Qwen3)
    n_dense_lead: int = 0  # with experts: the first blocks' FFN is dense (GLM-4.5)
    n_expert_shared: int = 0  # experts every token runs besides its routed ones
    n_nextn: int = 0  # MTP (NextN) blocks after the trunk (`n_layers` is the trunk: llama.cpp's n_layer())
    rope_dims: int = 0  # 0: the whole head (GLM-4.5 rotates half of it, Qwen3.5 a quarter)
    full_attn_interval: int = 0  # a Qwen3.5 hybrid: every n-th trunk block attends, the others are gated delta-nets
    linear_k_heads: int = 0  # the delta-nets' key (and query) heads (llama.cpp's ssm.group_count)
    linear_v_heads: int = 0  # their value heads (ssm.time_step_rank)
    linear_head_dim: int = 0  # one width for keys and values (ssm.state_size)
    ssm_conv: int = 4  # their causal convolution's kernel (ssm.conv_kernel)

    @property
    def key_length(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    def recurrent(self, i: int) -> bool:
        """Block i is a gated delta-net (llama.cpp's default without `attention.recurrent_layers`: a trunk block whose
        1-based index the full-attention interval does not divide; the NextN blocks attend)."""
        return bool(self.full_attn_interval) and i < self.n_layers and (i + 1) % self.full_attn_interval != 0

    @property
    def rope_sections(self) -> list[int]:
        """Qwen3.5's interleaved M-RoPE sections over half the rotated dims: [11, 11, 10, 0] at 64 (the converter's
        default), in the same proportion below."""
        half = (self.rope_dims or self.key_length) // 2
        third = half * 10 // 32
        first = half - third - (half - third) // 2
        return [first, half - third - first, third, 0]


SHAPES = {
    "llama3-8b": ArchShape("llama", 32, 4096, 14336, 32, 8, 128256, False, False, "Q4_K", "Q6_K", 500000.0, 8192,
                           "Llama-3-8B-shaped target, Q4_K_M-like"),
    "llama3.2-1b": ArchShape("llama", 16, 2048, 8192, 32, 8, 128256, True, False, "Q8_0", "Q8_0", 500000.0, 8192,
                             "Llama-3.2-1B-shaped draft, Q8_0"),
    "qwen2.5-7b": ArchShape("qwen2", 28, 3584, 18944, 28, 4, 151936, False, True, "Q4_K", "Q6_K", 1000000.0, 32768,
                            "Qwen2.5-7B-shaped target, Q4_K_M-like"),
    "qwen2.5-0.5b": ArchShape("qwen2", 24, 896, 4864, 14, 2, 151936, True, True, "Q8_0", "Q8_0", 1000000.0, 32768,
                              "Qwen2.5-0.5B-shaped draft, Q8_0"),
    # the smallest shapes of the same layouts (scripts/gpu_proof.sh dry-run)
    "tiny-llama": ArchShape("llama", 2, 256, 512, 4, 2, 2048, False, False, "Q4_K", "Q6_K", 500000.0, 4096,
                            "tiny llama-layout target"),
    "tiny-llama-draft": ArchShape("llama", 1, 256, 512, 4, 2, 2048, True, False, "Q8_0", "Q8_0", 500000.0, 4096,
                                  "tiny llama-layout draft"),
    "tiny-qwen2": ArchShape("qwen2", 2, 256, 512, 4, 2, 2048, False, True, "Q4_K", "Q6_K", 1000000.0, 4096,
                            "tiny qwen2-layout target"),
    # Qwen3-235B-A22B's published configuration (94 layers, 128 experts of width 1536, 8 used, 64 heads of 128, 4 KV
    # heads, QK norms, untied output): 235B parameters, 22B active; in a Q4_K_M-like mix about 133 GiB, which the hub
    # ships split in 3 or more files
    "qwen3-235b-a22b": ArchShape("qwen3moe", 94, 4096, 12288, 64, 4, 151936, False, False, "Q4_K", "Q6_K", 1000000.0,
                                 40960, "Qwen3-235B-A22B-shaped MoE target, Q4_K_M-like", head_dim=128, n_expert=128,
                                 n_expert_used=8, n_ff_exp=1536, qk_norm=True),
    # Qwen3-30B-A3B's published configuration (48 layers, 128 experts of width 768, 8 used, 32 heads of 128, 4 KV
    # heads, QK norms, untied output): 30.5B parameters, 3.3B active; in this Q4_K_M-like mix 18.4 GiB (every ffn_down
    # in Q6_K; the hub's Q4_K_M is 17.3 GiB), one file
    "qwen3-30b-a3b": ArchShape("qwen3moe", 48, 2048, 6144, 32, 4, 151936, False, False, "Q4_K", "Q6_K", 1000000.0,
                               40960, "Qwen3-30B-A3B-shaped MoE target, Q4_K_M-like", head_dim=128, n_expert=128,
                               n_expert_used=8, n_ff_exp=768, qk_norm=True),
    # OLMoE-1B-7B-0924's (16 layers, 64 experts of width 1024, 8 used, 16 heads of 128 and as many KV heads, Q and K
    # normed over their whole width, untied output, 50304 tokens): 6.9B parameters, 1.3B active, 4.1 GiB here; llama.cpp
    # reads the experts' width from feed_forward_length (src/models/olmoe.cpp), so n_ff is it
    "olmoe-1b-7b": ArchShape("olmoe", 16, 2048, 1024, 16, 16, 50304, False, False, "Q4_K", "Q6_K", 10000.0, 4096,
                             "OLMoE-1B-7B-shaped MoE target, Q4_K_M-like", n_expert=64, n_expert_used=8, n_ff_exp=1024,
                             qk_norm=True),
    # GLM-4.5-Air's published configuration (46 layers and one MTP layer, 128 experts of width 1408, 8 used, one shared
    # expert, the first layer dense at 10944, 96 heads of 128, 8 KV heads, QKV biases, half the head rotated): 106B
    # parameters and 12B active, its MTP block 2.3B more; llama-server runs the head as --spec-type draft-mtp
    "glm4.5-air": ArchShape("glm4moe", 46, 4096, 10944, 96, 8, 151552, False, True, "Q4_K", "Q6_K", 1000000.0, 131072,
                            "GLM-4.5-Air-shaped MoE target with its MTP head, Q4_K_M-like", head_dim=128, n_expert=128,
                            n_expert_used=8, n_ff_exp=1408, n_dense_lead=1, n_expert_shared=1, n_nextn=1, rope_dims=64),
    "tiny-glm4moe": ArchShape("glm4moe", 2, 256, 512, 4, 2, 2048, False, True, "Q4_K", "Q6_K", 1000000.0, 4096,
                              "tiny glm4moe-layout target with one MTP head", head_dim=64, n_expert=8, n_expert_used=2,
                              n_ff_exp=256, n_dense_lead=1, n_expert_shared=1, n_nextn=1, rope_dims=32),
    # Qwen3.5-27B's published configuration (64 blocks, every 4th attending: 24 query heads of 256 with an output gate,
    # 4 KV heads, QK norms, a quarter of the head rotated; the other 48 gated delta-nets of 16 key and 48 value heads of
    # 128; FFN 17408; 248320 tokens, untied) and its one MTP block (an attending block fed by eh_proj): 27B parameters;
    # llama-server runs the head as --spec-type draft-mtp
    "qwen3.5-27b": ArchShape("qwen35", 64, 5120, 17408, 24, 4, 248320, False, False, "Q4_K", "Q6_K", 10000000.0,
                             262144, "Qwen3.5-27B-shaped hybrid target with its MTP head, Q4_K_M-like", head_dim=256,
                             qk_norm=True, n_nextn=1, rope_dims=64, full_attn_interval=4, linear_k_heads=16,
                             linear_v_heads=48, linear_head_dim=128),
    # Qwen3.5-35B-A3B's (40 blocks, every 4th attending: 16 query heads of 256, 2 KV heads; delta-nets of 16 key and 32
    # value heads of 128; 256 experts of width 512, 8 used, one shared expert of 512 behind a sigmoid gate; 248320
    # tokens, untied) and its one MTP block (MoE too): 35B parameters, 3B active
    "qwen3.5-35b-a3b": ArchShape("qwen35moe", 40, 2048, 0, 16, 2, 248320, False, False, "Q4_K", "Q6_K", 10000000.0,
                                 262144, "Qwen3.5-35B-A3B-shaped hybrid MoE target with its MTP head, Q4_K_M-like",
                                 head_dim=256, n_expert=256, n_expert_used=8, n_ff_exp=512, n_expert_shared=1,
                                 qk_norm=True, n_nextn=1, rope_dims=64, full_attn_interval=4, linear_k_heads=16,
                                 linear_v_heads=32, linear_head_dim=128),
    # the same layouts at the smallest size: 3 delta-nets, 1 attending block, the MTP block
    "tiny-qwen35": ArchShape("qwen35", 4, 256, 512, 4, 2, 2048, False, False, "Q4_K", "Q6_K", 10000000.0, 4096,
                             "tiny qwen35-layout hybrid target with one MTP head", head_dim=64, qk_norm=True, n_nextn=1,
                             rope_dims=16, full_attn_interval=4, linear_k_heads=2, linear_v_heads=4,
                             linear_head_dim=128),
    "tiny-qwen35moe": ArchShape("qwen35moe", 4, 256, 0, 4, 2, 2048, False, False, "Q4_K", "Q6_K", 10000000.0, 4096,
                                "tiny qwen35moe-layout hybrid MoE target with one MTP head", head_dim=64, n_expert=8,
                                n_expert_used=2, n_ff_exp=256, n_expert_shared=1, qk_norm=True, n_nextn=1,
                                rope_dims=16, full_attn_interval=4, linear_k_heads=2, linear_v_heads=4,
                                linear_head_dim=128),
    "tiny-qwen3moe": ArchShape("qwen3moe", 2, 256, 512, 4, 2, 2048, False, False, "Q4_K", "Q6_K", 1000000.0, 4096,
                               "tiny qwen3moe-layout target", head_dim=64, n_expert=8, n_expert_used=2, n_ff_exp=256,
                               qk_norm=True),
    "tiny-olmoe": ArchShape("olmoe", 2, 256, 256, 4, 4, 2048, False, False, "Q4_K", "Q6_K", 10000.0, 4096,
                            "tiny olmoe-layout target", n_expert=8, n_expert_used=2, n_ff_exp=256, qk_norm=True),
    "tiny-qwen2-draft": ArchShape("qwen2", 1, 256, 512, 4, 2, 2048, True, True, "Q8_0", "Q8_0", 1000000.0, 4096,
                                  "tiny qwen2-layout draft"),
}


# llama.cpp's quantizer falls back to these where a row is not whole 256-value K-quant blocks (llama-quant.cpp)
K_FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}


def tensors(shape: ArchShape) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, GGUF-order shape (ne0 first), ggml type) of every tensor, in a converter's order."""
    return [(n, dims, K_FALLBACK.get(t, t) if dims[0] % 256 else t) for n, dims, t in _tensors(shape)]


def _tensors(shape: ArchShape) -> list[tuple[str, tuple[int, ...], str]]:
    d, ff, head_dim = shape.n_embd, shape.n_ff, shape.key_length
    q, kv = shape.n_head * head_dim, shape.n_head_kv * head_dim
    out = [("token_embd.weight", (d, shape.n_vocab), shape.weights)]
    ffn_norm = "post_attention_norm" if shape.arch in ("glm4moe", "qwen35", "qwen35moe") else "ffn_norm"
    for i in range(shape.n_layers + shape.n_nextn):
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", (d,), "F32"))
        if shape.recurrent(i):
            out += _delta_net(shape, p)
        else:
            gated = 2 if shape.full_attn_interval else 1  # Qwen3.5's attn_q holds the query and its output gate
            for name, rows in (("attn_q", gated * q), ("attn_k", kv), ("attn_v", kv)):
                out.append((p + name + ".weight", (d, rows), shape.strong if name == "attn_v" else shape.weights))
                if shape.qkv_bias:
                    out.append((p + name + ".bias", (rows,), "F32"))
            if shape.qk_norm:  # per head (Qwen3), or over the whole projection (OLMoE)
                qn, kn = (q, kv) if shape.arch == "olmoe" else (head_dim, head_dim)
                out += [(p + "attn_q_norm.weight", (qn,), "F32"), (p + "attn_k_norm.weight", (kn,), "F32")]
            out.append((p + "attn_output.weight", (q, d), shape.weights))
        out.append((p + ffn_norm + ".weight", (d,), "F32"))
        if shape.n_expert and i >= shape.n_dense_lead:
            fe, n = shape.n_ff_exp, shape.n_expert
            out += [(p + "ffn_gate_inp.weight", (d, n), "F32"), (p + "ffn_gate_exps.weight", (d, fe, n), shape.weights),
                    (p + "ffn_up_exps.weight", (d, fe, n), shape.weights),
                    (p + "ffn_down_exps.weight", (fe, d, n), shape.strong)]
            if shape.arch == "glm4moe":
                out.append((p + "exp_probs_b.bias", (n,), "F32"))
            if shape.n_expert_shared:
                fs = fe * shape.n_expert_shared
                if shape.arch == "qwen35moe":  # the shared expert's sigmoid gate, one value per token
                    out.append((p + "ffn_gate_inp_shexp.weight", (d,), "F32"))
                out += [(p + "ffn_gate_shexp.weight", (d, fs), shape.weights),
                        (p + "ffn_up_shexp.weight", (d, fs), shape.weights),
                        (p + "ffn_down_shexp.weight", (fs, d), shape.strong)]
        else:
            out += [(p + "ffn_gate.weight", (d, ff), shape.weights), (p + "ffn_up.weight", (d, ff), shape.weights),
                    (p + "ffn_down.weight", (ff, d), shape.strong)]
        if i >= shape.n_layers:  # an MTP head: the block above, fed by a projection of [embedding; hidden state]
            out += [(p + "nextn.eh_proj.weight", (2 * d, d), shape.weights), (p + "nextn.enorm.weight", (d,), "F32"),
                    (p + "nextn.hnorm.weight", (d,), "F32"), (p + "nextn.shared_head_norm.weight", (d,), "F32")]
    out.append(("output_norm.weight", (d,), "F32"))
    if not shape.tied:
        out.append(("output.weight", (d, shape.n_vocab), shape.strong))
    return out


def _delta_net(shape: ArchShape, p: str) -> list[tuple[str, tuple[int, ...], str]]:
    """A Qwen3.5 gated delta-net's tensors (src/models/qwen35.cpp load_block_trunk): the fused q/k/v projection and
    the output gate z, the causal convolution over q/k/v (F32: llama.cpp's quantizer skips ssm_conv1d), per-value-head
    decay (ssm_a, ssm_dt) and beta/alpha projections, the gated norm and the output projection."""
    d, hd = shape.n_embd, shape.linear_head_dim
    keys, values = shape.linear_k_heads * hd, shape.linear_v_heads * hd
    v_heads, conv = shape.linear_v_heads, 2 * keys + values
    return [(p + "attn_qkv.weight", (d, conv), shape.weights), (p + "attn_gate.weight", (d, values), shape.weights),
            (p + "ssm_conv1d.weight", (shape.ssm_conv, conv), "F32"), (p + "ssm_dt.bias", (v_heads,), "F32"),
            (p + "ssm_a", (v_heads,), "F32"), (p + "ssm_beta.weight", (d, v_heads), shape.weights),
            (p + "ssm_alpha.weight", (d, v_heads), shape.weights), (p + "ssm_norm.weight", (hd,), "F32"),
            (p + "ssm_out.weight", (values, d), shape.weights)]


def write_header(path: Path, name: str, shape: ArchShape | None = None, split_max_size: int = 0) -> Path:
    """A header-only GGUF (metadata and tensor infos, no data) of SHAPES[name] (or `shape`) at `path`. With
    `split_max_size` (bytes of tensor data per part), split as the hub ships big models: gguf.GGUFWriter's own split
    (llama-gguf-split's layout and `split.*` keys), parts named PATH-00001-of-0000N.gguf; the first part's path is
    returned."""
    import gguf

    shape = shape or SHAPES[name]
    tokens, types, bos, eos = vocabulary(shape.n_vocab - len(vocabulary()[0]))
    assert len(tokens) == shape.n_vocab, (len(tokens), shape.n_vocab)
    writer = gguf.GGUFWriter(str(path), shape.arch, split_max_size=split_max_size)
    writer.add_name(name)
    writer.add_description(f"{shape.description or name}: synthesised header (gguf_bench.models.shapes), no data")
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layers + shape.n_nextn)
    if shape.n_ff:  # a Qwen3.5 MoE has no dense width (its converter writes none)
        writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.rope_dims or shape.key_length)
    writer.add_key_length(shape.key_length)
    writer.add_value_length(shape.key_length)
    if shape.n_expert:
        writer.add_expert_count(shape.n_expert)
        writer.add_expert_used_count(shape.n_expert_used)
        writer.add_expert_feed_forward_length(shape.n_ff_exp)
        if shape.arch == "qwen35moe":  # one shared expert of its own width, gated (qwen35moe.cpp)
            writer.add_expert_shared_feed_forward_length(shape.n_ff_exp * shape.n_expert_shared)
        else:
            writer.add_expert_shared_count(shape.n_expert_shared)
            writer.add_leading_dense_block_count(shape.n_dense_lead)
    if shape.full_attn_interval:  # the delta-nets' hyperparameters, as convert_hf_to_gguf writes them
        hd = shape.linear_head_dim
        writer.add_ssm_conv_kernel(shape.ssm_conv)
        writer.add_ssm_state_size(hd)
        writer.add_ssm_group_count(shape.linear_k_heads)
        writer.add_ssm_time_step_rank(shape.linear_v_heads)
        writer.add_ssm_inner_size(hd * shape.linear_v_heads)
        writer.add_full_attention_interval(shape.full_attn_interval)
        writer.add_rope_dimension_sections(shape.rope_sections)
    if shape.n_nextn:
        writer.add_uint32(f"{shape.arch}.nextn_predict_layers", shape.n_nextn)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(1e-6)
    add_bpe_vocabulary(writer, tokens, types, bos, eos, gguf.LlamaFileType.MOSTLY_Q4_K_M if shape.weights == "Q4_K"
                       else gguf.LlamaFileType.MOSTLY_Q8_0)
    for tname, dims, type_name in tensors(shape):
        qtype = gguf.GGMLQuantizationType[type_name]
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        if dims[0] % block:
            raise ValueError(f"{name}: {tname} rows of {dims[0]} are not whole {type_name} blocks of {block}")
        writer.add_tensor_info(tname, tuple(reversed(dims)), np.dtype(np.float32), tensor_bytes(type_name, dims), qtype)
    written = writer.format_shard_names(Path(path)) if len(writer.tensors) > 1 else [Path(path)]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return Path(written[0])


def parameters(shape: ArchShape) -> int:
    return sum(math.prod(dims) for _, dims, _ in tensors(shape))
