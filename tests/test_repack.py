"""repack.py: the weights llama.cpp would repack on x86, chosen from a real Q4_K_M file, and a model
loaded with them in CPU_REPACK computing what the plain layout computes."""

from __future__ import annotations

import numpy as np
import pytest

from gguf_bench.models.parts import tensor_table
from gguf_bench.runtimes import repack
from gguf_bench.runtimes.llama_cpp import Model

X86 = "CPU : AVX2 = 1 | AVX512 = 1 | REPACK = 1 |"


def tensors(path):
    return {t.name: t for t in tensor_table(path)[1]}


@pytest.mark.slow
def test_repackable_weights_follow_llama_cpps_x86_rules(gemma_q4_q2):
    q4, q2 = gemma_q4_q2
    info = tensors(q4)
    names = repack.repackable(q4, X86)
    assert names and "token_embd.weight" not in names
    for name in names:
        t = info[name]
        assert t.type_name in repack.X86_REPACK and len(t.shape) == 2 and t.shape[1] % 8 == 0
    left = [t for n, t in info.items() if n not in names and t.type_name in ("Q4_0", "Q4_K") and len(t.shape) == 2]
    assert all(t.shape[1] % 8 or t.name == "token_embd.weight" for t in left)
    # Q2_K needs AVX512 in llama.cpp's rules; no AVX2 at all: nothing
    avx2_only = repack.repackable(q2, "AVX2 = 1")
    assert set(avx2_only) <= set(repack.repackable(q2, X86))
    assert "Q2_K" not in {tensors(q2)[n].type_name for n in avx2_only}
    assert repack.repackable(q4, "CPU : SSE3 = 1 |") == []


@pytest.mark.slow
def test_offloaded_blocks_are_not_repacked(gemma_q4_q2):
    q4 = gemma_q4_q2[0]
    n_blocks = 1 + max(int(n.split(".")[1]) for n in tensors(q4) if n.startswith("blk."))
    all_cpu = repack.repackable(q4, X86)
    half = repack.repackable(q4, X86, n_gpu_layers=n_blocks // 2 + 1)  # the output layer and the last blocks
    assert half and set(half) < set(all_cpu)
    assert {int(n.split(".")[1]) for n in half} == set(range(n_blocks - n_blocks // 2))
    assert repack.repackable(q4, X86, n_gpu_layers=n_blocks + 1) == []


@pytest.mark.slow
def test_repacked_model_computes_what_the_plain_one_does(gemma_q4_q2, monkeypatch):
    """Whatever this CPU is: with the override (where backend applies it) the logits of a batch are the
    plain layout's up to rounding (as large here as between a batched and a one-token decode: a few units
    on rows of +-70, so compare the shape of each row, not its values)."""
    q4 = gemma_q4_q2[0]
    prompt = list(range(2, 40))
    rows = {}
    for env in ("0", "1"):
        monkeypatch.setenv("GGUF_BENCH_REPACK", env)
        monkeypatch.setenv("GGUF_BENCH_EXTRA_BUFFERS", "0")  # the AMX machines' setting, on every machine
        model = Model(q4, n_ctx=128, n_threads=2)
        rows[env] = model.eval(prompt, n_logits=8).copy()
        assert (model._overrides is not None) == (env == "1" and bool(repack.repackable(q4, _system_info())))
    for plain, repacked in zip(rows["0"], rows["1"]):
        assert np.corrcoef(plain, repacked)[0, 1] > 0.99


def _system_info() -> str:
    from gguf_bench.runtimes.llama_cpp import llama_versions

    return llama_versions()["system_info"]
