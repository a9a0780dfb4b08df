"""Device memory of a model at `-ngl N`, predicted from its GGUF header alone (no model loaded, no weights read).

llama.cpp's rules (llama-model.cpp load_tensors, llama-kv-cache.cpp, read for the vendored 0c1e570; see
shared/notes/offload-memory.md):
- layers are counted as llama.cpp counts them: the model's blocks plus the output layer. `-ngl N` offloads the
  output layer first (output.weight, output_norm; a tied embedding is copied there), then the last N-1 blocks;
  the token embeddings always stay on the CPU;
- the KV cache of a layer lives with its weights (offload_kqv, the default): per layer and cell, key and value
  rows of n_head_kv x head size, f16; the cache holds n_ctx cells rounded up to 256 (gguf-bench loads Gemma 3's
  sliding-window layers with swa_full, so they hold as many);
- the compute buffer is what the scheduler reserves for the worst graph of one ubatch (n_ubatch = 512 tokens):
  estimated (`compute_estimate`), the one term here that is not arithmetic on the header. llama.cpp's own log
  (engines/placement.py) is what every term is checked against (scripts/bench_plan.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MIB = 2**20
UBATCH = 512  # gguf-bench's n_batch = n_ubatch (engines/llama_cpp.Model)
KV_BYTES = 2  # f16 keys and values
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def tensor_bytes(type_name: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of a ggml type: elements / block size x block bytes."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    return math.prod(shape) // block * size


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
    block_bytes: tuple[int, ...]  # weights of each block
    output_tensors: tuple[int, ...]  # bytes of each weight of the output layer (with the copy of a tied embedding)
    input_bytes: int  # token embeddings: always on the CPU

    @classmethod
    def from_header(cls, meta: dict, tensors: list) -> Shape:
        arch = str(meta.get("general.architecture"))

        def key(name: str, default=None):
            value = meta.get(f"{arch}.{name}", default)
            return value if value is not None else default

        n_layers = int(key("block_count", 0))
        n_embd, n_head = int(key("embedding_length", 0)), int(key("attention.head_count", 1))
        n_head_kv = int(key("attention.head_count_kv", n_head))
        blocks = [0] * n_layers
        output: list[int] = []
        inputs = 0
        names = {t.name for t in tensors}
        embd = None
        for t in tensors:
            size = tensor_bytes(t.type_name, t.shape)
            if m := _BLOCK.match(t.name):
                blocks[int(m[1])] += size
            elif t.name.startswith("token_embd"):
                inputs += size
                embd = t if t.name == "token_embd.weight" else embd
            else:
                output.append(size)
        if "output.weight" not in names and embd is not None:
            output.append(tensor_bytes(embd.type_name, embd.shape))  # tied: the output layer holds its own copy
        vocab_rows = next((t.shape[-1] for t in tensors if t.name in ("output.weight", "token_embd.weight")), 0)
        return cls(arch, n_layers, n_embd, n_head, n_head_kv, int(key("attention.key_length", n_embd // max(n_head, 1))),
                   int(key("attention.value_length", n_embd // max(n_head, 1))), int(key("feed_forward_length", 0)),
                   int(vocab_rows), tuple(blocks), tuple(output), inputs)

    @property
    def total_layers(self) -> int:
        return self.n_layers + 1

    def offloaded(self, ngl: int) -> int:
        """Layers on the device for -ngl `ngl` (a huge value: all)."""
        return max(0, min(ngl, self.total_layers))


def kv_cells(n_ctx: int) -> int:
    return -(-n_ctx // 256) * 256


@dataclass(frozen=True)
class DeviceBytes:
    """A model's predicted bytes on the device, by term."""

    layers: int  # offloaded, out of total_layers
    total_layers: int
    weights: int
    kv: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute


def kv_bytes_per_layer(shape: Shape, n_ctx: int) -> int:
    return kv_cells(n_ctx) * shape.n_head_kv * (shape.head_k + shape.head_v) * KV_BYTES


def compute_estimate(shape: Shape, n_ctx: int) -> int:
    """The device's compute buffer for one ubatch (n_ubatch = 512 tokens), flash attention on (llama.cpp's default,
    auto): four FFN-wide f32 activations alive at once, and the attention mask over the cache (f16, twice).
    Reserved on a GPU build even at -ngl 0, where large matmuls of CPU weights run on the device (op offload).
    The one term that is not arithmetic on the header: its coefficients were read off llama.cpp's buffers for
    gemma-3-270m on Vulkan (scripts/bench_plan.py, within 3% at full offload there); partial offload moves it by a
    few MiB either way."""
    ffn = 4 * shape.n_ff * UBATCH * 4
    mask = 2 * kv_cells(n_ctx) * UBATCH * 2
    return ffn + mask


def device_bytes(shape: Shape, ngl: int, n_ctx: int, max_alloc: int | None = None) -> DeviceBytes:
    """What -ngl `ngl` puts on the device at context n_ctx. max_alloc: the device's largest buffer (a weight
    larger than that stays on the CPU, as llama.cpp falls back; Mesa's lavapipe stops at 128 MiB)."""
    k = shape.offloaded(ngl)
    blocks = range(shape.n_layers - (k - 1), shape.n_layers) if k > 1 else range(0)
    output = sum(b for b in shape.output_tensors if max_alloc is None or b <= max_alloc) if k else 0
    weights = output + sum(shape.block_bytes[i] for i in blocks)
    kv = len(blocks) * kv_bytes_per_layer(shape, n_ctx)
    return DeviceBytes(k, shape.total_layers, weights, kv, compute_estimate(shape, n_ctx))


def largest_fit(shape: Shape, budget: int, n_ctx: int, max_alloc: int | None = None) -> DeviceBytes | None:
    """The most layers whose device bytes fit `budget` (None: not even the output layer)."""
    best = None
    for ngl in range(1, shape.total_layers + 1):
        need = device_bytes(shape, ngl, n_ctx, max_alloc)
        if need.total > budget:
            break
        best = need
    return best


@dataclass(frozen=True)
class PlanRow:
    """For one -ngld: the draft's device bytes and the largest -ngl of the target that still fits beside it."""

    ngld: int
    draft: DeviceBytes
    target: DeviceBytes | None  # None: the draft alone leaves no room even for the target's output layer
    budget: int

    @property
    def used(self) -> int:
        return self.draft.total + (self.target.total if self.target else 0)


def plan(target: Shape, draft: Shape, budget: int, n_ctx: int, nglds: list[int], max_alloc: int | None = None) -> list[PlanRow]:
    """Each -ngld in `nglds` (distinct layer counts only), with the largest -ngl that fits `budget` bytes."""
    rows, seen = [], set()
    for ngld in nglds:
        d = device_bytes(draft, ngld, n_ctx, max_alloc)
        if d.layers in seen:
            continue
        seen.add(d.layers)
        room = budget - d.total
        rows.append(PlanRow(d.layers, d, largest_fit(target, room, n_ctx, max_alloc) if room > 0 else None, budget))
    return rows


def fits(target: Shape, draft: Shape | None, ngl: int, ngld: int, n_ctx: int, budget: int,
         max_alloc: int | None = None) -> str | None:
    """None when target at -ngl and draft at -ngld fit `budget` bytes; else why not, in one line."""
    t = device_bytes(target, ngl, n_ctx, max_alloc)
    d = device_bytes(draft, ngld, n_ctx, max_alloc) if draft else None
    need = t.total + (d.total if d else 0)
    if need <= budget:
        return None
    return (f"predicted {need / MIB:.0f} MiB on the device (target {t.layers}/{t.total_layers} layers {t.total / MIB:.0f} MiB"
            + (f", draft {d.layers}/{d.total_layers} layers {d.total / MIB:.0f} MiB" if d else "")
            + f") > {budget / MIB:.0f} MiB available")
