"""Keep llama.cpp's repacked CPU weights on machines where its AMX buffers are turned off.

Where the build uses AMX, backend loads models with `use_extra_bufts = False` (llama.cpp's AMX matmul
segfaults on K-quants there, issue #20824). That also turns off CPU_REPACK, the interleaved layout
whose GEMM kernels make a batch of tokens (speculative verification) cheap: measured here on
Qwen2.5-Coder-1.5B Q4_K_M, 2 threads, a 9-token batch took 436 ms plain and 354 ms repacked.
This module gives the repack back without AMX: a tensor buffer-type override naming exactly the
weights that llama.cpp would repack on x86, so llama.cpp places them in CPU_REPACK.

An override skips llama.cpp's own support check, so the rules below must be exactly its rules
(`ggml_repack_get_optimal_repack_type` in ggml-cpu/repack.cpp): a weight it cannot repack would
abort the load. They are the x86 ones; elsewhere nothing is overridden.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from gguf_bench.models.gguf import trunk_layers
from gguf_bench.models.parts import tensor_table

# type -> the instruction set llama.cpp's x86 repack needs for it; every one needs ne[1] % 8 == 0
X86_REPACK = {"Q4_0": "AVX2", "Q4_K": "AVX2", "IQ4_NL": "AVX2", "MXFP4": "AVX2", "Q2_K": "AVX512"}
NOT_MATMUL = {"token_embd.weight"}  # read by GET_ROWS, which repacked weights do not serve


class Override(ctypes.Structure):
    """llama_model_tensor_buft_override: a regex over tensor names and the buffer type they go to."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def repackable(path: Path, system_info: str, n_gpu_layers: int = 0) -> list[str]:
    """Names of the weights of `path` that llama.cpp would repack on this CPU, among those it keeps on the
    CPU with `n_gpu_layers` offloaded (llama.cpp offloads the output layer first, then the last blocks)."""
    meta, tensors = tensor_table(path)
    blocks = trunk_layers(meta)
    cpu_blocks = None if n_gpu_layers <= 0 else max(0, blocks + 1 - n_gpu_layers)
    have = {isa for isa in ("AVX2", "AVX512") if f"{isa} = 1" in system_info}
    return [t.name for t in tensors
            if X86_REPACK.get(t.type_name) in have and len(t.shape) == 2 and t.shape[1] % 8 == 0
            and t.name not in NOT_MATMUL and _on_cpu(t.name, cpu_blocks)]


def _on_cpu(name: str, cpu_blocks: int | None) -> bool:
    """None: everything is on the CPU. Else blocks below `cpu_blocks` are, and nothing outside the blocks
    that -ngl moves (the output layer goes to the GPU first)."""
    if cpu_blocks is None:
        return True
    block = re.match(r"blk\.(\d+)\.", name)
    return bool(block) and int(block.group(1)) < cpu_blocks


def overrides(names: list[str], buft: int | None) -> ctypes.Array | None:
    """A NULL-terminated override array sending `names` to CPU_REPACK (`buft`, engines.llama_cpp.repack_buffer_type);
    None when there is nothing to send or this build has no CPU_REPACK buffer type. The caller keeps the array
    alive while the model loads."""
    if not names or buft is None:
        return None
    pattern = "^(?:" + "|".join(re.escape(n) for n in names) + ")$"
    array = (Override * 2)()
    array[0].pattern, array[0].buft = pattern.encode(), buft
    return array


def join(first: list[tuple[str, int]], repacked: ctypes.Array | None) -> ctypes.Array | None:
    """One NULL-terminated override array: `first` (pattern, buffer type) in order, then the repack override (llama.cpp
    takes the first pattern that matches a tensor's name). None when both are empty."""
    rest = [(repacked[0].pattern.decode(), repacked[0].buft)] if repacked is not None else []
    pairs = first + rest
    if not pairs:
        return None
    array = (Override * (len(pairs) + 1))()
    for i, (pattern, buft) in enumerate(pairs):
        array[i].pattern, array[i].buft = pattern.encode(), buft
    return array
