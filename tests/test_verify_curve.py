"""The expert tax (issue 75): MoE shapes at real sizes (Qwen3-30B-A3B, OLMoE-1B-7B) and scripts/bench_verify_curve.py,
the verify curve of single models. Their tiny layouts' twins load in llama.cpp and decode; the script prints a row per
batch size with finite positive times, its batch is different tokens routed to more experts than one token's, and bad
input is one line. No speed is asserted."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from gguf_bench.models.offload_plan import Shape, tensor_bytes
from gguf_bench.models.parts import local_header, tensor_table
from gguf_bench.models.shapes import SHAPES, write_header
from gguf_bench.models.twin import TOKEN_BAND, write_twin

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_verify_curve.py"
# published: layers, experts, used, expert width, tensors, parameters (billions, one decimal), GiB in the Q4_K_M-like mix
MOE = {"qwen3-30b-a3b": (48, 128, 8, 768, 579, 30.5, (17, 19)), "olmoe-1b-7b": (16, 64, 8, 1024, 195, 6.9, (3.8, 4.5))}
TINY = ("tiny-qwen3moe", "tiny-olmoe", "tiny-llama")


def _script():
    """The script as a module (registered first: its dataclass looks its module up)."""
    if "bench_verify_curve" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_verify_curve", SCRIPT)
        sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["bench_verify_curve"]


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("verify-curve")
    out = {}
    for name in TINY:
        header = write_header(folder / f"{name}.header.gguf", name)
        out[name] = write_twin(local_header(header), folder / f"{name}.gguf", header.name).path
    return out


@pytest.mark.parametrize("name", sorted(MOE))
def test_moe_shapes_are_the_published_configurations(name, tmp_path):
    layers, experts, used, width, n_tensors, billions, gib = MOE[name]
    meta, tensors = tensor_table(write_header(tmp_path / f"{name}.gguf", name))
    arch = meta["general.architecture"]
    assert (meta[f"{arch}.block_count"], meta[f"{arch}.expert_count"], meta[f"{arch}.expert_used_count"]) == \
        (layers, experts, used)
    assert len(tensors) == n_tensors
    assert round(sum(math.prod(t.shape) for t in tensors) / 1e9, 1) == billions
    exps = [t for t in tensors if t.name.endswith("_exps.weight")]
    assert len(exps) == 3 * layers and all(t.shape[2] == experts and width in t.shape[:2] for t in exps)
    size = sum(tensor_bytes(t.type_name, t.shape) for t in tensors)
    assert gib[0] * 2**30 < size < gib[1] * 2**30
    shape = Shape.from_header(meta, tensors)  # the planner sees the experts as experts: most of the bytes
    assert shape.has_experts and sum(shape.expert_bytes) > 0.8 * size


def test_moe_twins_load_decode_and_give_a_row_per_batch_size(twins, capsys):
    args = [str(twins[n]) for n in TINY] + ["--reps", "1", "--threads", "1", "--prompt", "32", "--ctx", "256"]
    assert _script().main(args) == 0
    out = capsys.readouterr().out
    for name in TINY:
        kind = "dense" if name == "tiny-llama" else "8 experts (2 used per token)"
        block = out.split(f"\n{name} (" if name != TINY[0] else f"{name} (", 1)[1].split("\n\n", 3)
        assert block[0].startswith(f"{SHAPES[name].arch}, {kind})"), block[0]
        assert ("each token routes to its own experts" in block[0]) == (name != "tiny-llama")
        assert block[1].splitlines()[0] == "| k | ms | × one token | decode ms | decode × |"
        rows = [r.split("|")[1:6] for r in block[1].splitlines()[2:]]
        assert [int(r[0]) for r in rows] == list(range(1, 10))
        for col in (1, 3):  # the loop's verify step, then llama_decode's part of it
            ms = [float(r[col]) for r in rows]
            assert all(math.isfinite(m) and m > 0 for m in ms), rows
            assert [float(r[col + 1]) for r in rows] == pytest.approx([m / ms[0] for m in ms], rel=0.01, abs=0.01)
        assert all(float(r[3]) <= float(r[1]) for r in rows), rows
        assert re.search(rf"^{name}: 2 tokens cost \d+\.\d\d× one token \(\d+\.\d\d× inside llama_decode\)$", out, re.M)
    assert "| k | tiny-qwen3moe × | tiny-olmoe × | tiny-llama × |" in out


def test_the_batch_is_different_tokens_routed_to_more_experts_than_one_token(twins):
    import gguf

    from gguf_bench.measure.pair import LoadConfig

    path, spec = twins["tiny-qwen3moe"], SHAPES["tiny-qwen3moe"]
    curve = _script().verify_curve(path, LoadConfig(n_ctx=256, threads=1), [1, 2, 9], 1, 32)
    assert sorted(curve.ms) == list(range(1, 10)) and curve.position == 32
    batch = list(curve.batch)  # the tokens DecodeTimer decoded
    assert len(set(batch)) == 9 and max(batch) < min(TOKEN_BAND, spec.n_vocab)
    weights = {t.name: t for t in gguf.GGUFReader(path).tensors}
    emb = weights["token_embd.weight"]
    h = gguf.quants.dequantize(emb.data, emb.tensor_type)[batch]
    for layer in range(spec.n_layers):  # attention adds 0 (its weights are holes): the router sees rms_norm(embedding)
        x = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + 1e-6)
        chosen = np.argsort(-(x @ np.array(weights[f"blk.{layer}.ffn_gate_inp.weight"].data).T), axis=1)
        assert len(set(chosen[:, :spec.n_expert_used].ravel())) > spec.n_expert_used, (layer, chosen)


def test_bad_input_is_one_line(twins, capsys):
    script, twin = _script(), str(twins["tiny-llama"])
    for args, says in ((["missing.gguf"], "model file missing.gguf does not exist"),
                       ([twin, "--tokens", "0-2"], "--tokens must be batch sizes >= 1"),
                       ([twin, "--ctx", "256", "--prompt", "250"], "do not fit in --ctx 256"),
                       ([twin, "-ngl", "x"], "GPU layers must be a number or 'all'")):
        assert script.main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("Error: ") and says in err[0], err
