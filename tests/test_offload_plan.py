"""The planner's compute buffer (models/offload_plan.py: layer_stage, output_stage, compute_estimate), CPU only.

The model is llama.cpp's reserve read from its source (the docstrings cite the lines); tests/test_offload.py checks it
against llama.cpp's own buffers on a GPU backend (lavapipe here, CUDA on the GPU kit's machine). Here: the formula
against the only figures that survive of the H200 run (docs/gpu.md, "The planner against CUDA's buffers", 2026-11-28:
the twins of scripts/gpu_proof.sh, models/shapes.py), and where each stage is charged.
"""

from __future__ import annotations

import dataclasses

import pytest

from gguf_bench.models.offload_plan import (
    MIB,
    Budget,
    Shape,
    compute_estimate,
    device_bytes,
    kv_cells,
    layer_stage,
    output_stage,
    ubatch_tokens,
)
from gguf_bench.models.parts import tensor_table
from gguf_bench.models.shapes import write_header
from gguf_bench.options import ALL_LAYERS


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """The header-only twins the H200 run planned (Llama-3.2-1B, Qwen2.5-0.5B and -7B), as Shapes."""
    out = tmp_path_factory.mktemp("headers")
    return {name: Shape.from_header(*tensor_table(write_header(out / f"{name}.gguf", name)))
            for name in ("llama3.2-1b", "qwen2.5-0.5b", "qwen2.5-7b")}


# H200, 2026-11-28 (docs/gpu.md): CUDA0's compute buffer. Only these figures survive: the lowest with every layer on
# the device (Llama-3.2-1B), the lowest and highest at -ngl 0 (Qwen2.5-0.5B, Qwen2.5-7B), at contexts 512 and 4096.
@pytest.mark.parametrize(("name", "ngl", "measured_mib"), [("qwen2.5-0.5b", 0, 436), ("qwen2.5-7b", 0, 730),
                                                           ("llama3.2-1b", ALL_LAYERS, 254)])
@pytest.mark.parametrize("n_ctx", [512, 4096])
def test_compute_buffer_reproduces_the_h200s_figures(twins, name, ngl, measured_mib, n_ctx):
    assert device_bytes(twins[name], ngl, n_ctx).compute / MIB == pytest.approx(measured_mib, rel=0.02)


def test_at_ngl_0_the_output_weight_is_copied_beside_its_logits(twins):
    """-ngl 0 on a device: op offload runs the output matmul there on a copy of its weight (tied Q8_0 151936 x 896:
    137.9 MiB), beside the logits (151936 x 512 x 4: 296.75 MiB) and the normed hidden state (896 x 512 x 4)."""
    shape = twins["qwen2.5-0.5b"]
    zero = device_bytes(shape, 0, 512)
    assert zero.weights == 0 and zero.compute == sum(shape.output_tensors) + output_stage(shape, 512)
    assert output_stage(shape, 512) == (151936 + 896) * 512 * 4
    assert device_bytes(shape, ALL_LAYERS, 512).compute == output_stage(shape, 512)  # the weight is there already


@pytest.mark.parametrize("n_ctx", [256, 512, 4096])
def test_the_logits_term_scales_with_vocabulary_times_ubatch(twins, n_ctx):
    shape = twins["llama3.2-1b"]
    double = dataclasses.replace(shape, n_vocab=2 * shape.n_vocab)
    tokens = min(n_ctx, 512)  # n_tokens = min(n_ctx, n_ubatch), every one an output
    assert ubatch_tokens(n_ctx) == tokens
    assert output_stage(double, n_ctx) - output_stage(shape, n_ctx) == shape.n_vocab * tokens * 4
    every = device_bytes(double, ALL_LAYERS, n_ctx).compute - device_bytes(shape, ALL_LAYERS, n_ctx).compute
    assert every == shape.n_vocab * tokens * 4


def test_a_small_vocabulary_leaves_the_blocks_activations_largest(twins):
    shape = dataclasses.replace(twins["llama3.2-1b"], n_vocab=1000)
    assert device_bytes(shape, ALL_LAYERS, 4096).compute == layer_stage(shape, 4096) > output_stage(shape, 4096)


def test_vulkans_largest_buffer_keeps_the_output_matmul_on_the_cpu(twins):
    """With max_alloc (lavapipe: 128 MiB) the output weight larger than it stays on the CPU, and so does its matmul
    whose logits are larger than it (ggml-vulkan supports_op): the device keeps only a block's activations."""
    shape = twins["qwen2.5-0.5b"]
    small = device_bytes(shape, ALL_LAYERS, 512, max_alloc=128 * MIB)
    assert small.compute == layer_stage(shape, 512)
    assert device_bytes(shape, ALL_LAYERS, 512, max_alloc=300 * MIB).compute == output_stage(shape, 512)


def test_the_output_stage_goes_with_the_output_layer_and_op_offload_to_the_first_device(twins):
    shape = twins["llama3.2-1b"]
    two = Budget((("Dev0", 10**11), ("Dev1", 10**11)))
    every = {d: compute for d, _, _, compute in device_bytes(shape, ALL_LAYERS, 512, budget=two).terms}
    assert every["Dev1"] == output_stage(shape, 512)  # the output layer is the last layer: on the last device
    assert every["Dev0"] == layer_stage(shape, 512)
    zero = {d: compute for d, _, _, compute in device_bytes(shape, 0, 512, budget=two).terms}
    assert zero == {"Dev0": compute_estimate(shape, 512, output=True, output_copied=True)}
    assert zero["Dev0"] == sum(shape.output_tensors) + output_stage(shape, 512)


def test_a_sliding_window_model_reserves_a_second_attention_mask(twins):
    """The KQ mask (f16, n_kv x n_tokens) over the cache; a model with sliding-window layers (Gemma 3) reserves a
    second one over its window's cache (build_attn_inp_kv_iswa), as large where it is loaded with swa_full."""
    shape = dataclasses.replace(twins["llama3.2-1b"], n_vocab=1000)  # a small vocabulary: the block stage decides
    mask = kv_cells(4096) * 512 * 2
    assert layer_stage(dataclasses.replace(shape, swa=True), 4096) - layer_stage(shape, 4096) == mask
    every = device_bytes(shape, ALL_LAYERS, 4096).compute - device_bytes(shape, ALL_LAYERS, 512).compute
    assert every == mask - kv_cells(512) * 512 * 2
