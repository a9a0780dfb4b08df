"""`drafts --twins` (issue 48, 4): a candidate whose twin cannot be written or loaded is a line with its reason while the
others are measured, and each pair of twins is placed as the planner places the real pair in --vram."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke

from gguf_bench.models.candidates import HeaderReader
from gguf_bench.models.offload_plan import best_row, device_bytes, plan
from gguf_bench.models.tiny import TinySpec, random_weights, vocabulary, write_gguf
from gguf_bench.options import ALL_LAYERS


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> dict[str, Path]:
    """A 6-layer target and three 2-layer drafts of its vocabulary, every header readable: a good one; one with a norm
    weight in I8 (a type the twin writer does not write); one lacking a tensor (its twin is written, llama.cpp refuses
    to load it)."""
    root = tmp_path_factory.mktemp("twins")
    for folder in ("drafts", "i8"):  # apart: llama.cpp aborts decoding with an I8 norm weight (--measure would load it)
        (root / folder).mkdir()
    n_vocab, meta = len(vocabulary()[0]), {"general.basename": "Tiny"}
    target = TinySpec(n_layers=6)
    out = {"target": write_gguf(root / "tiny-7b-F32.gguf", target, random_weights(target, n_vocab, 0),
                                metadata={**meta, "general.size_label": "7B"})}
    spec = TinySpec(n_layers=2)
    good = random_weights(spec, n_vocab, 1)
    i8 = {**good, "blk.0.attn_norm.weight": np.ones_like(good["blk.0.attn_norm.weight"], dtype=np.int8)}
    missing = {k: v for k, v in good.items() if k != "blk.1.ffn_down.weight"}
    for key, weights in (("good", good), ("i8", i8), ("missing", missing)):
        out[key] = write_gguf(root / ("i8" if key == "i8" else "drafts") / f"draft-{key}.gguf", spec, weights, metadata=meta)
    return out


def _twins(family: dict[str, Path], *args: str):
    return invoke("drafts", str(family["target"]), "--search", str(family["good"].parent), "--search",
                  str(family["i8"].parent), "--offline", "--no-caches", "--twins", "-t", "1", *args)


def test_a_candidate_whose_twin_cannot_be_written_or_loaded_is_a_row_with_its_reason(family, isolated):
    result = _twins(family, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    ranked = {Path(r["name"]).name: r for r in out["ranking"]}
    assert set(ranked) == {"draft-good.gguf", "draft-i8.gguf", "draft-missing.gguf"}  # every header is fine
    assert ranked["draft-good.gguf"]["cost_ratio_from"] == "twins" and 0 < ranked["draft-good.gguf"]["cost_ratio"] < 10
    assert ranked["draft-i8.gguf"]["cost_ratio_from"] == ranked["draft-missing.gguf"]["cost_ratio_from"] == "sizes"
    why = {Path(r["name"]).name: r["reason"] for r in out["twins"]["not_measured"]}
    assert why["draft-i8.gguf"].startswith("the twin writer cannot write ones data of ggml type I8 (tensor "
                                           "blk.0.attn_norm.weight)")
    assert "could not load" in why["draft-missing.gguf"] and "blk.1.ffn_down.weight" in why["draft-missing.gguf"]
    assert set(why) == {"draft-i8.gguf", "draft-missing.gguf"} and len(out["twins"]["verify"]) == 9
    table = _twins(family)
    assert table.exit_code == 0, table.output
    lines = [ln for ln in table.stdout.splitlines() if ln.startswith("not measured on twins (c from sizes): ")]
    assert len(lines) == 2 and any(f"{family['i8']}: the twin writer cannot write" in ln for ln in lines), lines
    assert "each pair at -ngl all -ngld all (every layer)" in " ".join(table.stdout.split())
    assert not list((isolated / "cache").rglob("*.twin.gguf"))


def test_twins_are_placed_as_the_planner_places_the_pair_in_vram(family, isolated):
    """--vram: the pair of twins at the planner's best row for the real pair, as the ranking's fit check budgets it
    (--vram, at --ctx-size); all of it where it fits; the CPU where not even the target's output layer does."""
    reader = HeaderReader()
    shapes = [reader.local(family[k]).planner_shape() for k in ("target", "good")]
    nglds = [0, 1, shapes[1].total_layers // 2, ALL_LAYERS]
    # budgets just below the target's every layer beside the draft's smallest placement (whole MiB, rounded down)
    whole = (device_bytes(shapes[0], ALL_LAYERS, 4096).total + device_bytes(shapes[1], 0, 4096).total) // 2**20
    for vram, margin, mib in ((f"{whole}MiB", "0", whole), (f"{whole - 2}MiB", "0", whole - 2),
                              (f"{whole + 512}MiB", "512MiB", whole)):
        row = best_row(plan(*shapes, mib * 2**20, 4096, nglds))
        out = json.loads(_twins(family, "--vram", vram, "--margin", margin, "--json").stdout)["twins"]
        assert out["placements"] == {str(family["good"]): f"-ngl {row.target.layers} -ngld {row.ngld}"}, vram
        assert row.target.layers < shapes[0].total_layers  # some layers left on the CPU: not the all-layers default
    # plan's default margin is kept free here too: 512 MiB more places as the budget alone did
    assert json.loads(_twins(family, "--vram", f"{whole + 512}MiB", "--json").stdout)["twins"]["placements"] == \
        out["placements"]
    assert json.loads(_twins(family, "--vram", "8GB", "--json").stdout)["twins"]["placements"] == {
        str(family["good"]): f"-ngl {shapes[0].total_layers} -ngld {shapes[1].total_layers}"}
    nothing = _twins(family, "--vram", "5MiB")
    assert nothing.exit_code == 0, nothing.output
    assert ("each pair at -ngl 0 -ngld 0 (as the planner places it in --vram 5MiB, 512MiB kept free)"
            in " ".join(nothing.stdout.split()))


def test_measure_goes_on_past_a_draft_that_does_not_load_through_the_same_mechanism(family, isolated):
    """--measure and --twins set a candidate aside by one mechanism (measure/flows/drafts.one_candidate)."""
    result = invoke("drafts", str(family["target"]), "--search", str(family["good"].parent), "--offline", "--no-caches",
                    "--measure", "2", "-K", "1-2", "-n", "8", "--prompt-ids", "code-short", "-t", "1", "-c", "256",
                    "--reps", "1", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [Path(r["name"]).name for r in out["measured"]] == ["draft-good.gguf"]
    (failed,) = out["not_measured"]
    assert Path(failed["name"]).name == "draft-missing.gguf" and "blk.1.ffn_down.weight" in failed["reason"]
