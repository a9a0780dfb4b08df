"""Device memory of a model at `-ngl N`, predicted from its GGUF header alone (no model loaded, no weights read).

llama.cpp's rules (llama-model.cpp load_tensors, llama-kv-cache.cpp, read for the vendored 0c1e570; see
shared/notes/offload-memory.md):
- layers are counted as llama.cpp counts them: the model's blocks plus the output layer. `-ngl N` offloads the
  output layer first (output.weight, output_norm; a tied embedding is copied there), then the last N-1 blocks;
  the token embeddings always stay on the CPU;
- with several devices, the offloaded layers are split by layer: layer i of the N offloaded goes to the first
  device whose cumulative share exceeds i/N (llama.cpp's std::upper_bound over the normalized split). llama.cpp
  takes the shares from each device's free memory; the planner takes them from the --vram budgets (`Budget`), the
  same shares for the target and the draft (in llama.cpp the draft, loaded second, sees less free memory); -ts gives
  the shares instead, and -sm none puts every offloaded layer on the -mg device (placing.Placing). -sm row is planned
  as layer (its split buffers exist on CUDA only), and pipeline parallelism's extra compute copies are not counted;
- tensor overrides (placing.Placing: -ot, then -ncmoe/-cmoe's one per layer) are tried in order and the first
  pattern found in a weight's name wins: to 'CPU' (or another host buffer) the weight stays on the CPU, to a
  device's buffer it goes to that device, whatever its layer. -dev none: nothing on any device;
- the KV cache of a layer lives with its layer's device (offload_kqv, the default), whatever the overrides do to
  its weights: per layer and cell, key and value rows of n_head_kv x head size, f16; the cache holds n_ctx cells
  rounded up to 256 (gguf-bench loads Gemma 3's sliding-window layers with swa_full, so they hold as many); a
  hybrid's recurrent block (Qwen3.5's gated delta-nets) holds a fixed F32 state instead, whatever the context;
- the compute buffer is what the scheduler reserves for the worst graph of one ubatch: the most bytes alive at once
  (ggml-alloc reuses a freed tensor's bytes), over the stages of the graph (`layer_stage`, `output_stage`,
  `compute_estimate`). The output stage (the logits of every token of the ubatch) goes to the device that runs the
  output matmul; with op offload a weight left on the CPU is copied into the first device's buffer for its matmul.
  Modelled for gguf-bench's Python engine (runtimes/llama_cpp.Model: n_batch = n_ubatch = 512, n_outputs_max left
  at 0, so n_batch). llama.cpp's own log (runtimes/placement.py) is what every term is checked against
  (scripts/bench_plan.py, tests/test_offload.py).
"""

from __future__ import annotations

import functools
import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from gguf_bench.errors import ConfigError
from gguf_bench.options import ALL_LAYERS, byte_size
from gguf_bench.placing import EXPERTS_REGEX, Placing

MIB = 2**20
UBATCH = 512  # gguf-bench's n_batch = n_ubatch (runtimes/llama_cpp.Model)
KV_BYTES = 2  # f16 keys and values
INPUT = -1  # the layer index of the input layer (token embeddings): always on the CPU
ONE_DEVICE = ""  # the name of the one device of a budget given as one size (--vram 24GB): every device name is it
_BLOCK = re.compile(r"^blk\.(\d+)\.")
_EXPERTS = re.compile(EXPERTS_REGEX)


def tensor_bytes(type_name: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of a ggml type: elements / block size x block bytes."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    return math.prod(shape) // block * size


@dataclass(frozen=True)
class Weight:
    """One weight as the planner places it: enough to apply -ot patterns and -ncmoe."""

    name: str
    bytes: int
    layer: int  # its block; INPUT: the token embeddings; n_layers: the output layer (llama.cpp's index for it)
    expert: bool = False  # a MoE expert weight (placing.EXPERTS_REGEX found in its name)


def _weights(tensors: list, n_layers: int) -> tuple[Weight, ...]:
    """Every weight with its layer; a tied embedding (no output.weight) once more, as the output layer's copy."""
    out, embd = [], None
    for t in tensors:
        size = tensor_bytes(t.type_name, t.shape)
        if m := _BLOCK.match(t.name):
            out.append(Weight(t.name, size, int(m[1]), bool(_EXPERTS.search(t.name))))
        elif t.name.startswith("token_embd"):
            out.append(Weight(t.name, size, INPUT))
            embd = t if t.name == "token_embd.weight" else embd
        else:
            out.append(Weight(t.name, size, n_layers))
    if embd is not None and not any(t.name == "output.weight" for t in tensors):
        out.append(Weight(embd.name, tensor_bytes(embd.type_name, embd.shape), n_layers))  # the output layer's copy
    return tuple(out)


@dataclass(frozen=True)
class Shape:
    """What the prediction needs from a header."""

    architecture: str
    n_layers: int  # blocks (llama.cpp counts one more layer: the output)
    n_embd: int
    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    n_ff: int
    n_vocab: int
    block_bytes: tuple[int, ...]  # weights of each block but its experts
    expert_bytes: tuple[int, ...]  # expert weights of each block (all 0 in a dense model)
    output_tensors: tuple[int, ...]  # bytes of each weight of the output layer (with the copy of a tied embedding)
    input_bytes: int  # token embeddings: always on the CPU
    weights: tuple[Weight, ...] = field(default=(), repr=False)  # every weight, in the file's order
    mtp_bytes: int = 0  # the MTP (NextN) heads' blocks after the trunk: llama.cpp skips them unless draft-mtp loads them
    recurrent: tuple[bool, ...] = ()  # trunk blocks with a recurrent state instead of a KV cache (Qwen3.5's delta-nets)
    state_bytes: int = 0  # one such block's state for one sequence (llama.cpp's F32 r and s rows)
    n_nextn: int = 0  # MTP (NextN) blocks: each an attending block with a KV cache in draft-mtp's own context
    swa: bool = False  # sliding-window layers beside global ones (Gemma 3): a second attention mask over the cache

    @classmethod
    def from_header(cls, meta: dict, tensors: list) -> Shape:
        arch = str(meta.get("general.architecture"))

        def key(name: str, default=None):
            value = meta.get(f"{arch}.{name}", default)
            return value if value is not None else default

        n_layers = int(key("block_count", 0)) - int(key("nextn_predict_layers", 0))  # llama.cpp's n_layer(): the trunk
        n_embd, n_head = int(key("embedding_length", 0)), int(key("attention.head_count", 1))
        every = _weights(tensors, n_layers)
        heads = [w for w in every if w.layer >= n_layers and _BLOCK.match(w.name)]  # MTP (NextN) blocks after the trunk
        weights = tuple(w for w in every if w not in heads)
        blocks, experts = [0] * n_layers, [0] * n_layers
        for w in weights:
            if 0 <= w.layer < n_layers:
                (experts if w.expert else blocks)[w.layer] += w.bytes
        vocab_rows = next((t.shape[-1] for t in tensors if t.name in ("output.weight", "token_embd.weight")), 0)
        return cls(arch, n_layers, n_embd, n_head, int(key("attention.head_count_kv", n_head)),
                   int(key("attention.key_length", n_embd // max(n_head, 1))),
                   int(key("attention.value_length", n_embd // max(n_head, 1))), _ffn_width(key),
                   int(vocab_rows), tuple(blocks), tuple(experts),
                   tuple(w.bytes for w in weights if w.layer == n_layers), sum(w.bytes for w in weights if w.layer == INPUT),
                   weights, sum(w.bytes for w in heads), *_recurrent(key, n_layers),
                   len({w.layer for w in heads}), bool(key("attention.sliding_window", 0)))

    @property
    def total_layers(self) -> int:
        return self.n_layers + 1

    @property
    def has_experts(self) -> bool:
        return any(self.expert_bytes)

    def offloaded(self, ngl: int) -> int:
        """Layers on the device for -ngl `ngl` (a huge value: all)."""
        return max(0, min(ngl, self.total_layers))


def _ffn_width(key) -> int:
    """The FFN width one token runs through: the dense width, or in a MoE the routed experts' it runs (each expert's
    width, `expert_feed_forward_length` or else `feed_forward_length`, times `expert_used_count`)."""
    dense, expert = int(key("feed_forward_length", 0) or 0), int(key("expert_feed_forward_length", 0) or 0)
    if int(key("expert_count", 0) or 0):
        return (expert or dense) * int(key("expert_used_count", 0) or 0)
    return dense


def _recurrent(key, n_layers: int) -> tuple[tuple[bool, ...], int]:
    """A hybrid's recurrent blocks and each one's state (src/llama-hparams.cpp n_embd_r, n_embd_s; F32 rows): the gated
    delta-nets of qwen3next/qwen35/qwen35moe, every block but each `full_attention_interval`-th unless
    `attention.recurrent_layers` lists them (src/models/qwen35.cpp load_arch_hparams). ((), 0) for other models."""
    interval, listed = key("full_attention_interval"), key("attention.recurrent_layers")
    if interval is None and listed is None:
        return (), 0
    flags = tuple(bool(x) for x in list(listed)[:n_layers]) if listed is not None else \
        tuple((i + 1) % int(interval or 4) != 0 for i in range(n_layers))
    conv, inner = int(key("ssm.conv_kernel", 0)), int(key("ssm.inner_size", 0))
    state, groups = int(key("ssm.state_size", 0)), int(key("ssm.group_count", 0))
    rows = max(conv - 1, 0) * (inner + 2 * groups * state) + state * inner
    return flags, rows * 4


def kv_cells(n_ctx: int) -> int:
    return -(-n_ctx // 256) * 256


@dataclass(frozen=True)
class Budget:
    """Bytes each device may hold: one size for one device (--vram 24GB: today's single budget, every device name
    is that device), or one per named device (--vram Vulkan0=8GB,CUDA1=24GB) in llama.cpp's device order."""

    devices: tuple[tuple[str, int], ...]  # (name, bytes); ((ONE_DEVICE, bytes),) for one unnamed device

    @classmethod
    def one(cls, size: int) -> Budget:
        return cls(((ONE_DEVICE, size),))

    @classmethod
    def parse(cls, text: str, what: str = "--vram") -> Budget:
        """'24GB' (one device) or 'Vulkan0=8GB,CUDA1=24GB' (sizes as options.byte_size reads them)."""
        if "=" not in text:
            return cls.one(byte_size(text, what))
        out: dict[str, int] = {}
        for part in text.split(","):
            name, eq, size = (s.strip() for s in part.partition("="))
            if not eq or not name or not size or name in out:
                raise ConfigError(f"bad {what} '{text}': give one size (24GB) or NAME=SIZE once per device, "
                                  "separated by commas (Vulkan0=8GB,CUDA1=24GB)")
            out[name] = byte_size(size, f"{what} size of {name}")
        return cls(tuple(out.items()))

    @property
    def named(self) -> bool:
        return self.devices[0][0] != ONE_DEVICE

    def device(self, name: str) -> str:
        """The device of this budget that a device or buffer name means (with one unnamed device: that one)."""
        return name if self.named else ONE_DEVICE

    def of(self, name: str) -> int:
        found = dict(self.devices).get(self.device(name))
        if found is None:
            raise ConfigError(f"--vram gives no budget for device '{name}' (named by -dev, -devd or -ot): add "
                              f"{name}=SIZE to it")
        return found

    def split(self, placing: Placing) -> tuple[tuple[str, float], ...]:
        """The devices a model's layers are split over, with their shares: -dev's (none: no device), else all; the
        shares -ts gives, else the budgets; -sm none: the -mg device alone."""
        if placing.no_offload:
            return ()
        devices = self.devices if not placing.devices or not self.named else tuple(
            (name, self.of(name)) for name in placing.devices)
        names = [name for name, _ in devices]
        if self.named:
            placing.check_devices(names, have="--vram")
        if placing.split_mode == "none":
            return ((devices[min(placing.main_gpu or 0, len(devices) - 1)][0], 1),)
        if placing.tensor_split and len(placing.tensor_split) == len(devices):
            return tuple(zip(names, placing.tensor_split))
        return devices

    def less(self, used: dict[str, int]) -> Budget:
        """What is left of each device once `used` bytes (by device) are taken."""
        self._check(used)
        return Budget(tuple((name, size - used.get(name, 0)) for name, size in self.devices))

    def over(self, used: dict[str, int]) -> str | None:
        """The first device whose `used` bytes exceed its budget, or None."""
        self._check(used)
        return next((name for name, size in self.devices if used.get(name, 0) > size), None)

    def _check(self, used: dict[str, int]) -> None:
        for name in used:
            self.of(name)


def _as_budget(budget: int | Budget | None) -> Budget:
    return budget if isinstance(budget, Budget) else Budget.one(budget or 0)


@dataclass(frozen=True)
class DeviceBytes:
    """A model's predicted bytes on the devices, by term (summed over the devices), and by device."""

    layers: int  # offloaded, out of total_layers
    total_layers: int
    weights: int
    kv: int
    compute: int
    by_device: tuple[tuple[str, int], ...] = ()  # (device, weights + KV + compute there)
    expert_layers: tuple[int, ...] = ()  # layers whose experts an override keeps on the CPU (llama.cpp logs these)
    cpu_experts: int = 0  # bytes of those expert weights
    terms: tuple[tuple[str, int, int, int], ...] = ()  # (device, weights, KV, compute) for each of by_device

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute

    def used(self) -> dict[str, int]:
        return dict(self.by_device)


def kv_bytes_per_layer(shape: Shape, n_ctx: int) -> int:
    return kv_cells(n_ctx) * shape.n_head_kv * (shape.head_k + shape.head_v) * KV_BYTES


def mtp_kv_bytes(shape: Shape, n_ctx: int) -> int:
    """The KV cache of draft-mtp's own context (LLAMA_CONTEXT_TYPE_MTP): its NextN blocks' cells at n_ctx."""
    return shape.n_nextn * kv_bytes_per_layer(shape, n_ctx)


def rollback_bytes(shape: Shape, k: int = 1) -> int:
    """A hybrid's recurrent state kept for rolling a rejected draft back: with draft-mtp, -eagle3, -dflash or -dspark
    llama.cpp holds 1 + K rows per block and sequence (n_rs_seq = --spec-draft-n-max, common.h need_n_rs_seq), so K
    more than `cache_bytes` counts. 0 for a model without recurrent blocks."""
    return k * shape.state_bytes * sum(shape.recurrent)


def cache_bytes(shape: Shape, layer: int, n_ctx: int) -> int:
    """Block `layer`'s cache: its KV cells, or a recurrent block's state (one sequence), whatever the context."""
    recurrent = layer < len(shape.recurrent) and shape.recurrent[layer]
    return shape.state_bytes if recurrent else kv_bytes_per_layer(shape, n_ctx)


def ubatch_tokens(n_ctx: int) -> int:
    """Tokens of the reserved graph, and its outputs: n_tokens = min(n_ctx, n_ubatch) and n_outputs =
    min(n_tokens, n_outputs_max), where n_outputs_max defaults to n_batch (src/llama-context.cpp lines 250, 630,
    670: sched_reserve). The Python engine passes n_batch = n_ubatch = 512 and no n_outputs_max, so every token of
    the ubatch has logits. (llama-server's draft context sets n_outputs_max to n_parallel: its logits are a few rows;
    not modelled.)"""
    return min(n_ctx, UBATCH)


def layer_stage(shape: Shape, n_ctx: int) -> int:
    """One block's activations, reused block after block (ggml-alloc frees a tensor after its last reader,
    ggml/src/ggml-alloc.c): at the FFN, the gate, the up and their product (n_ff wide each, f32) beside the residual
    and the normed input (n_embd), for every token of the ubatch; and the attention mask over the cache (f16, KQ
    mask n_kv x n_tokens, src/llama-graph.cpp build_attn_inp_kv), alive through every block; a model with
    sliding-window layers has two, the sliding window's over its own cache (build_attn_inp_kv_iswa, llama-graph.cpp
    lines 3434-3445), as large as the other's where gguf-bench loads it with swa_full (gemma-3-270m on lavapipe,
    every layer at ctx 4096: -3.7% with one mask, -1.2% with both). Where no block is on the device (-ngl 0) the
    stage is there all the same when op offload brings the blocks' matmuls (the F32 gemma at -ngl 0, ctx 4096: 27.5
    MiB predicted and allocated); weights the CPU backend repacked (CPU_REPACK, e.g. Q4_K on AVX2 CPUs) are not
    op-offloaded (its buffer type is not a host one, ggml-cpu/repack.cpp line 5246, and ggml-backend.cpp line 970
    offloads host weights only), so a Q4_K model's device then holds less than planned (gemma Q4_K_M at -ngl 0, ctx
    4096: 15.4 MiB for 23.5 planned): an error on the safe side of "does it fit", not modelled.
    Measured on lavapipe for the tiny models (width 64 to 256, FFN 128 to 1024, MoE too): within 0.1 MiB."""
    t = ubatch_tokens(n_ctx)
    masks = (1 + shape.swa) * kv_cells(n_ctx) * t * 2
    return (3 * shape.n_ff + 2 * shape.n_embd) * t * 4 + masks


def output_stage(shape: Shape, n_ctx: int) -> int:
    """The output layer's matmul: the logits of every output (n_vocab x n_outputs, f32) and the normed hidden state
    it reads (n_embd x n_outputs, f32); both are graph outputs (res->t_logits, res->t_embd, ggml_set_output), which
    ggml-alloc never frees. Llama-3's vocabulary at 512 tokens: 250.5 MiB + 4 MiB (n_embd 2048)."""
    t = ubatch_tokens(n_ctx)
    return (shape.n_vocab + shape.n_embd) * t * 4


def compute_estimate(shape: Shape, n_ctx: int, output: bool = False, copied: int = 0,
                     output_copied: bool = False) -> int:
    """A device's compute buffer: the largest of its stages (a block's activations, the output layer's) for one
    ubatch. `output`: the output matmul runs here; `output_copied`: on a weight left in host memory, which op
    offload copies into this buffer for the matmul (ggml/src/ggml-backend.cpp lines 968-976: a weight in host
    memory, an op the device `offload_op`s: batch >= 32, GGML_OP_OFFLOAD_MIN_BATCH, ggml-cuda.cu get_op_batch_size
    and ggml-vulkan's the same; the copy is a split input, lines 1513-1528). `copied`: bytes of a CPU block's weight
    copied likewise beside a block's activations (the largest one; ggml-alloc frees each copy after its matmul).
    H200, 2026-11-28 (docs/gpu.md): Qwen2.5-0.5B at -ngl 0 436 MiB (this: 137.9 + 296.75 + 1.75), Qwen2.5-7B at
    -ngl 0 730 (426 + 296.75 + 7), Llama-3.2-1B with every layer 254 (250.5 + 4)."""
    stages = [layer_stage(shape, n_ctx) + copied]
    if output:
        stages.append(output_stage(shape, n_ctx) + (sum(shape.output_tensors) if output_copied else 0))
    return max(stages)


def layer_devices(n_layers: int, ngl: int, split: tuple[tuple[str, int], ...]) -> list[str | None]:
    """The device of each layer index 0..n_layers (n_layers: the output layer), None for the CPU: llama.cpp's
    get_layer_buft_list with the default split by layer, shares from `split`."""
    act = min(max(ngl, 0), n_layers + 1) if split else 0
    start = n_layers + 1 - act
    total = sum(max(share, 0) for _, share in split) or 1
    bounds, acc = [], 0
    for _, share in split:
        acc += max(share, 0)
        bounds.append(acc / total)
    return [None if il < start else split[min(bisect_right(bounds, (il - start) / act), len(split) - 1)][0]
            for il in range(n_layers + 1)]


def _host(buffer: str) -> bool:
    """A host buffer type (CPU, CPU_REPACK, CUDA_Host, ...): the weight stays in system memory."""
    return buffer.startswith("CPU") or buffer.endswith("_Host") or buffer == "AMX"


@functools.lru_cache(maxsize=512)
def overridden(shape: Shape, placing: Placing) -> tuple[str | None, ...]:
    """Per weight of `shape`, the buffer the first matching tensor override sends it to (None: no override)."""
    rules = [(re.compile(p), buffer) for p, buffer in placing.tensor_overrides(shape.n_layers)]
    return tuple(next((b for rule, b in rules if rule.search(w.name)), None) for w in shape.weights)


def _weight_device(w: Weight, buffer: str | None, layers: list[str | None], max_alloc: int | None,
                   budget: Budget) -> str | None:
    """Where one weight goes: its override's buffer if one matched, else its layer's device (the output layer's
    weights larger than the device's largest buffer stay on the CPU, as llama.cpp falls back); None: the CPU."""
    if buffer is not None:
        return None if _host(buffer) else budget.device(buffer)
    if w.layer == INPUT:
        return None
    device = layers[w.layer]
    too_big = w.layer == len(layers) - 1 and max_alloc is not None and w.bytes > max_alloc
    return None if too_big else device


def device_bytes(shape: Shape, ngl: int, n_ctx: int, max_alloc: int | None = None, placing: Placing = Placing(),
                 budget: int | Budget | None = None) -> DeviceBytes:
    """What -ngl `ngl` with `placing` puts on the devices at context n_ctx. budget: the devices, whose budgets are
    the shares of the split by layer (None or a size: one device). max_alloc: the device's largest buffer (an
    output weight larger than that stays on the CPU, as llama.cpp falls back; Mesa's lavapipe stops at 128 MiB)."""
    budget = _as_budget(budget)
    split = budget.split(placing)
    layers = layer_devices(shape.n_layers, ngl, split)
    weights: dict[str, int] = {}
    kv: dict[str, int] = {}
    for w, buffer in zip(shape.weights, overridden(shape, placing)):
        if not placing.no_offload and (device := _weight_device(w, buffer, layers, max_alloc, budget)) is not None:
            weights[device] = weights.get(device, 0) + w.bytes
    for i, device in enumerate(layers[:-1]):  # the blocks' caches follow their layers, not their weights' overrides
        if device is not None:
            kv[device] = kv.get(device, 0) + cache_bytes(shape, i, n_ctx)
    first = split[0][0] if split else None  # op offload's device: the first
    busy = list(dict.fromkeys([*(d for d, _ in split[:1]), *weights, *kv]))
    compute = {device: compute_estimate(shape, n_ctx) for device in busy}
    if first is not None:
        compute.update(_output_compute(shape, n_ctx, layers, max_alloc, placing, budget, first))
    terms = tuple((d, weights.get(d, 0), kv.get(d, 0), compute[d]) for d in busy)
    experts = cpu_experts(shape, placing)
    return DeviceBytes(sum(d is not None for d in layers), shape.total_layers, sum(weights.values()), sum(kv.values()),
                       sum(compute.values()), tuple((d, sum(t)) for d, *t in terms), tuple(sorted(experts)),
                       sum(experts.values()), terms)


def _output_compute(shape: Shape, n_ctx: int, layers: list[str | None], max_alloc: int | None, placing: Placing,
                    budget: Budget, first: str) -> dict[str, int]:
    """The compute buffers the output matmul and op offload's copies raise: the output layer's device (the output
    stage), or the first device where the output weight stays in host memory (with its copy); the first device
    again where a block's weight stays in host memory (the largest such weight beside a block's activations).
    With `max_alloc` (Vulkan's largest buffer) an op whose weight or result is larger stays on the CPU (ggml-vulkan
    supports_op: tensor_size_supported), and so does its stage."""
    placed = [(w, _weight_device(w, b, layers, max_alloc, budget)) for w, b in zip(shape.weights, overridden(shape, placing))]
    head = max(((w, d) for w, d in placed if w.layer == shape.n_layers), key=lambda p: p[0].bytes, default=None)
    block = max((w.bytes for w, d in placed if d is None and 0 <= w.layer < shape.n_layers and _matrix(w)), default=0)
    copied = block if max_alloc is None or block <= max_alloc else 0
    out = {first: compute_estimate(shape, n_ctx, copied=copied)}
    logits = shape.n_vocab * ubatch_tokens(n_ctx) * 4
    if head is not None and (max_alloc is None or max(head[0].bytes, logits) <= max_alloc):
        on = head[1] or first
        out[on] = compute_estimate(shape, n_ctx, True, copied if on == first else 0, head[1] is None)
    return out


def _matrix(w: Weight) -> bool:
    """A weight a matmul reads (op offload copies it): not a norm's vector, nor a bias."""
    return not re.search(r"norm|bias", w.name)


def cpu_experts(shape: Shape, placing: Placing) -> dict[int, int]:
    """Per layer, the bytes of its expert weights that an override of `placing` keeps in host memory (a layer with
    fewer than shape.expert_bytes[layer]: only some of its experts' tensors, e.g. ffn_down_exps)."""
    out: dict[int, int] = {}
    for w, buffer in zip(shape.weights, overridden(shape, placing)):
        if w.expert and buffer and _host(buffer):
            out[w.layer] = out.get(w.layer, 0) + w.bytes
    return out


def largest_fit(shape: Shape, room: int | Budget, n_ctx: int, max_alloc: int | None = None,
                placing: Placing = Placing(), budget: Budget | None = None) -> DeviceBytes | None:
    """The most layers whose device bytes fit `room` (None: not even the output layer). budget: the devices'
    full budgets, the shares of the split (default: `room`)."""
    room = _as_budget(room)
    best = None
    for ngl in range(1, shape.total_layers + 1):
        need = device_bytes(shape, ngl, n_ctx, max_alloc, placing, budget or room)
        if room.over(need.used()) is not None:
            break
        best = need
    return best


def fewest_cpu_moe(shape: Shape, room: Budget, n_ctx: int, max_alloc: int | None = None,
                   budget: Budget | None = None) -> tuple[Placing, DeviceBytes] | None:
    """Every layer on the devices with the experts of the fewest first layers on the CPU (-ncmoe N) that fits
    `room`; None when not even -ncmoe all (every layer's experts on the CPU) fits. Bytes only fall as N grows."""
    def at(n: int) -> DeviceBytes:
        return device_bytes(shape, ALL_LAYERS, n_ctx, max_alloc, Placing(n_cpu_moe=n), budget or room)

    lo, hi = 0, shape.n_layers
    if room.over(at(hi).used()) is not None:
        return None
    while lo < hi:  # the smallest n that fits, in [lo, hi]
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if room.over(at(mid).used()) is None else (mid + 1, hi)
    return Placing(n_cpu_moe=lo), at(lo)


@dataclass(frozen=True)
class PlanRow:
    """For one draft placement (-ngld, and -devd): the draft's device bytes and one target placement that fits
    beside it (the largest -ngl; for a MoE target also every layer with the fewest -ncmoe)."""

    ngld: int
    draft: DeviceBytes
    target: DeviceBytes | None  # None: the draft alone leaves no room even for the target's output layer
    budget: Budget
    placing: Placing = Placing()  # the target's (-ncmoe)
    placing_draft: Placing = Placing()  # the draft's (-devd)

    @property
    def used(self) -> int:
        return self.draft.total + (self.target.total if self.target else 0)

    @property
    def free(self) -> int:
        """Bytes left on the device with the least room left."""
        used = {**self.draft.used()}
        for device, size in (self.target.by_device if self.target else ()):
            used[device] = used.get(device, 0) + size
        return min(size for _, size in self.budget.less(used).devices)


def plan(target: Shape, draft: Shape, budget: int | Budget, n_ctx: int, nglds: list[int], max_alloc: int | None = None,
         drafts: tuple[Placing, ...] = (Placing(),)) -> list[PlanRow]:
    """For each draft placement (each of `drafts` at each -ngld in `nglds`, distinct layer counts only), the target
    placements that fit `budget` beside it, best first: every layer with the fewest -ncmoe (a MoE target), then
    the largest -ngl without -ncmoe; one row with no target where nothing fits."""
    budget = _as_budget(budget)
    rows = []
    for placing_draft in drafts:
        seen = set()
        for ngld in nglds:
            d = device_bytes(draft, ngld, n_ctx, max_alloc, placing_draft, budget)
            if d.layers not in seen:
                seen.add(d.layers)
                rows += [PlanRow(d.layers, d, t, budget, pt, placing_draft)
                         for pt, t in _targets(target, d, budget, n_ctx, max_alloc)]
    return rows


def _targets(target: Shape, draft: DeviceBytes, budget: Budget, n_ctx: int,
             max_alloc: int | None) -> list[tuple[Placing, DeviceBytes | None]]:
    room = budget.less(draft.used())
    if room.over({}) is not None:
        return [(Placing(), None)]
    most = largest_fit(target, room, n_ctx, max_alloc, Placing(), budget)
    moe = fewest_cpu_moe(target, room, n_ctx, max_alloc, budget) if target.has_experts else None
    found = [moe] if moe and not (most and most.layers == target.total_layers) else []
    if most or not found:
        found.append((Placing(), most))
    return found


def best_row(rows: list[PlanRow]) -> PlanRow | None:
    """The row that keeps the most weight bytes of the two models together on the devices (decode reads every
    weight once per token: each byte on a device is read at its speed), the first of equals; None when no target
    placement fits."""
    fitting = [r for r in rows if r.target is not None]
    return max(fitting, key=lambda r: r.target.weights + r.draft.weights) if fitting else None


def fits(target: Shape, draft: Shape | None, ngl: int, ngld: int, n_ctx: int, budget: int | Budget, *,
         placing: Placing = Placing(), placing_draft: Placing = Placing()) -> str | None:
    """None when target at -ngl with `placing` and draft at -ngld with `placing_draft` fit `budget` on every
    device; else why not, in one line."""
    budget = _as_budget(budget)
    t = device_bytes(target, ngl, n_ctx, None, placing, budget)
    d = device_bytes(draft, ngld, n_ctx, None, placing_draft, budget) if draft else None
    need = t.used()
    for device, size in (d.by_device if d else ()):
        need[device] = need.get(device, 0) + size
    device = budget.over(need)
    if device is None:
        return None
    where = "the device" if device == ONE_DEVICE else device
    return (f"predicted {need[device] / MIB:.0f} MiB on {where} ({_part(t, 'target', device)}"
            + (f", {_part(d, 'draft', device)}" if d else "") + f") > {budget.of(device) / MIB:.0f} MiB available")


def _part(m: DeviceBytes, name: str, device: str) -> str:
    """'target 5/5 layers 12 MiB' (', on Vulkan0' with named devices): one model's share of an overfull device."""
    on = "" if device == ONE_DEVICE else f" on {device}"
    return f"{name} {m.layers}/{m.total_layers} layers{on} {m.used().get(device, 0) / MIB:.0f} MiB"
