"""The bytes one decode step of a model reads, from its GGUF header alone: the numerator of the memory-bandwidth ceiling
(results/predictions/ceiling.py).

Decoding one token reads every weight its step touches once (a dense model: all of them; a MoE: the shared tensors and
the experts the token routes to) and the KV cache so far. A speculative round reads the target once for its K+1
positions and the draft once per drafted token, and yields tau tokens (accepted + 1):

    bytes per token = (target step over K+1 positions + drafted x draft step) / tau

The tensor sizes are models/offload_plan.py's (Shape.from_header); records.py applies this to a run's own counts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.offload_plan import Shape
from gguf_bench.models.parts import tensor_table

KV_DEFAULT = "f16"  # llama.cpp's cache type when a record names none
# llama.cpp's sliding-window layouts (llama-model.cpp set_swa_pattern(n): layer il slides where il % n < n - 1), for the
# architectures whose header gives `attention.sliding_window` but no pattern; others count every layer at full depth
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "gpt-oss": 2}


@dataclass(frozen=True)
class StepBytes:
    """What one decode step of a model reads, from its header: the weights every step reads (every block's but its
    experts, and the output layer, with a tied embedding's copy: the logits read the whole matrix; the input
    embedding is one row a token, left out), the experts, the KV bytes per cached position, a recurrent state."""

    weights: int
    experts: int = 0  # every expert weight of every block (0: dense)
    n_expert: int = 0
    n_expert_used: int = 0
    kv_per_position: int = 0  # keys and values of one cached position over the attending layers, at the cache type
    swa_kv_per_position: int = 0  # the sliding-window layers' share of it
    window: int = 0  # their window (0: none)
    state: int = 0  # the recurrent blocks' states (read and written whole every step)

    def experts_read(self, positions: int = 1) -> float:
        """Expert bytes a step over `positions` tokens reads: each token routes to n_expert_used of n_expert per block.
        Over a verify batch of K+1 tokens the union is estimated as if each token chose its experts independently and
        uniformly: a given expert is read unless no position picks it, 1 - (1 - used/n)^positions of them. Real routing
        is correlated between neighbouring tokens, so the true union is smaller: this is an upper estimate of the bytes
        (a lower one of the ceiling's share)."""
        if not self.experts or not self.n_expert:
            return float(self.experts)
        share = min(1.0, self.n_expert_used / self.n_expert)
        return self.experts * (1.0 - (1.0 - share) ** max(positions, 1))

    def kv_read(self, context: float) -> float:
        """KV bytes one step reads with `context` positions cached: every attending layer reads them all, a
        sliding-window layer at most its window (ggml's flash attention skips the masked positions)."""
        full = self.kv_per_position - self.swa_kv_per_position
        window = min(context, self.window) if self.window else context
        return full * context + self.swa_kv_per_position * window

    def step(self, context: float, positions: int = 1) -> float:
        """Bytes of one step over `positions` tokens (1: a plain decode; K+1: a verify batch) at `context`."""
        return self.weights + self.experts_read(positions) + self.kv_read(context) + self.state


def element_bytes(cache_type: str | None) -> float:
    """Bytes per element of a KV cache type ('f16': 2, 'q8_0': 34/32, ...)."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[(cache_type or KV_DEFAULT).upper()]]
    return size / block


def from_header(meta: dict, tensors: list, cache_type_k: str | None = None, cache_type_v: str | None = None) -> StepBytes:
    """A model's StepBytes from its header (models/parts.tensor_table), its KV cache at the given types."""
    shape = Shape.from_header(meta, tensors)
    arch = shape.architecture

    def key(name: str, default=0):
        value = meta.get(f"{arch}.{name}")
        return default if value is None else value

    attending = [i for i in range(shape.n_layers) if not (i < len(shape.recurrent) and shape.recurrent[i])]
    per_layer = shape.n_head_kv * (shape.head_k * element_bytes(cache_type_k) + shape.head_v * element_bytes(cache_type_v))
    window, pattern = int(key("attention.sliding_window", 0) or 0), SWA_PATTERN.get(arch, 0)
    sliding = [i for i in attending if window and pattern and i % pattern < pattern - 1]
    return StepBytes(weights=sum(shape.block_bytes) + sum(shape.output_tensors), experts=sum(shape.expert_bytes),
                     n_expert=int(key("expert_count")), n_expert_used=int(key("expert_used_count")),
                     kv_per_position=round(per_layer * len(attending)), swa_kv_per_position=round(per_layer * len(sliding)),
                     window=window if sliding else 0, state=shape.state_bytes * sum(shape.recurrent))


@functools.lru_cache(maxsize=32)
def _file_bytes(path: str, size: int, mtime_ns: int, cache_type_k: str | None, cache_type_v: str | None) -> StepBytes:
    return from_header(*tensor_table(Path(path)), cache_type_k, cache_type_v)


def file_bytes(path: str | None, cache_type_k: str | None = None, cache_type_v: str | None = None) -> StepBytes | None:
    """The StepBytes of a model file (read once per file version); None where the file is not on this machine."""
    if not path:
        return None
    try:
        st = Path(path).stat()
        return _file_bytes(str(path), st.st_size, st.st_mtime_ns, cache_type_k, cache_type_v)
    except (OSError, BenchError, KeyError, ValueError):
        return None


def speculative_round(target: StepBytes, draft: StepBytes | None, context: float, drafted: float,
                      draft_share: float = 1.0) -> float:
    """Bytes of one speculative round: the target once over drafted + 1 positions (the batch it verifies), the draft
    once per drafted token (none for an n-gram drafter; draft_share: the share of rounds a model drafted, where a
    chain drafts some by n-gram lookup)."""
    positions = max(1, round(drafted) + 1)
    return target.step(context, positions) + (drafted * draft_share * draft.step(context) if draft is not None else 0.0)


def per_token(round_bytes: float, tau: float) -> float | None:
    """Bytes per generated token: a round's bytes over the tokens it yields (tau: accepted + 1)."""
    return round_bytes / tau if tau and tau > 0 else None
