"""A target that drafts for itself (issue 51): a tiny glm4moe with one MTP (NextN) head, written in the run
(models/tiny_heads.py), found by `drafts` from its header, measured end to end through llama-server's draft-mtp, and
refused in one line where it cannot draft."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_user_error, invoke, stored
from test_deploy import _serve_printed

from gguf_bench.measure.deploy import command_line
from gguf_bench.measure.engines.server import _has_nextn
from gguf_bench.models.candidates import _has_mtp
from gguf_bench.models.heads import chained_k_limit, mtp_heads
from gguf_bench.models.parts import tensor_table
from gguf_bench.models.tiny_heads import write_dflash_sidecar, write_eagle3_sidecar, write_mtp_target
from gguf_bench.results.schema.records import parse
from gguf_bench.runtimes.llama_cpp import Vocabulary

PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def mtp_models(tmp_path_factory) -> dict[int, object]:
    """heads -> file: 1 (runs), 0 (the same trunk without it), 2 (a header for the rules: chained heads)."""
    folder = tmp_path_factory.mktemp("mtp")
    return {n: write_mtp_target(folder / f"tiny-mtp-{n}.gguf", heads=n) for n in (0, 1, 2)}


def test_one_rule_for_mtp_heads(mtp_models):
    """The server engine's check and the drafts finder read heads by one rule (llama.cpp's): the header's
    nextn_predict_layers and the last block's nextn.eh_proj, both; a header that declares heads whose tensors are gone
    (a trunk-only file) has none, and so has a file with the tensors but no declaration."""
    for n, path in mtp_models.items():
        meta, tensors = tensor_table(path)
        assert mtp_heads(meta, [t.name for t in tensors]) == n
        assert _has_nextn(path) is _has_mtp(meta, tensors) is (n > 0)
    assert chained_k_limit(*_names(mtp_models[2])) == 2 and chained_k_limit(*_names(mtp_models[1])) is None
    meta, names = _names(mtp_models[1])
    assert mtp_heads(meta, [x for x in names if ".nextn." not in x]) == 0  # stripped heads
    assert mtp_heads({**meta, "glm4moe.nextn_predict_layers": 0}, names) == 0  # undeclared


def _names(path) -> tuple[dict, list[str]]:
    meta, tensors = tensor_table(path)
    return meta, [t.name for t in tensors]


def test_drafts_lists_draft_mtp_from_the_header(mtp_models):
    """`drafts` names the target's own heads as a candidate with no draft file, from its header, even where no draft
    file is found; without heads it finds nothing."""
    result = invoke("drafts", str(mtp_models[1]), "--offline", "--no-caches", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    mtp = [c for c in found["candidates"] if c["type"] == "draft-mtp"]
    assert len(mtp) == 1 and mtp[0]["origin"] == "target" and found["target_model"]["architecture"] == "glm4moe"
    # without heads and with no draft file anywhere (the test's caches are empty) there is nothing to list
    assert_user_error(invoke("drafts", str(mtp_models[0]), "--offline", "--no-caches"), "no draft candidate found")


def test_draft_mtp_end_to_end_through_llama_server(mtp_models, server_bin, isolated):
    """A server sweep at K = 1, 2, 4: every cell ran draft-mtp on the target alone (no -md), drafted, and stored its
    acceptance per position; the deploy command of a draft-mtp cell, started from its text, speculates and drafts what
    the record did. (Random heads never pay, so the line the sweep prints, if any, is never this one.)"""
    target = mtp_models[1]
    result = invoke("sweep", "--target", str(target), "--engine", "server", "--server-bin", str(server_bin),
                    "--spec-type", "draft-mtp", "-K", "1,2,4", "-n", "16", "-t", "2", "--prompt-ids", "code-short",
                    "--name", "mtp")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "mtp.jsonl")
    spec = [r for r in records if r["mode"] == "speculative"]
    assert sorted(r["config"]["k"] for r in spec) == [1, 2, 4]
    for r in spec:
        assert r["error"] is None and r["server"]["speculative"] is True, r
        cmd = r["server"]["command"]
        assert cmd[cmd.index("--spec-type") + 1] == "draft-mtp" and "-md" not in cmd
        m = r["metrics"]
        assert m["drafted"] > 0 and m["rounds"] > 0 and sum(m["accepted_at"]) == m["accepted"]
        assert len(m["accepted_at"]) == r["config"]["k"]
    record = next(r for r in spec if r["config"]["k"] == 2)
    line = command_line(parse(record))
    assert "--spec-type draft-mtp" in line and "--spec-draft-n-max 2" in line
    with Vocabulary(target) as vocab:
        tokens = vocab.tokenize(PROMPT)
    speculative, timings = _serve_printed(line, tokens, 16)
    assert speculative is True and timings["draft_n"] > 0


def test_a_chain_of_draft_mtp_and_ngram_mod_runs_in_one_server(mtp_models, server_bin, isolated):
    """--spec-type draft-mtp+ngram-mod: one llama-server with both drafters (its own comma list), each one's size flags
    once, that drafts, beside draft-mtp alone in the same sweep; a chain on a model without heads is the same one line
    as draft-mtp alone; tune refuses to calibrate a chain."""
    target = mtp_models[1]
    result = invoke("sweep", "--target", str(target), "--engine", "server", "--server-bin", str(server_bin),
                    "--spec-type", "draft-mtp+ngram-mod,draft-mtp", "-K", "2", "-n", "16", "-t", "2", "--prompt-ids",
                    "code-short", "--name", "chain")
    assert result.exit_code == 0, result.output
    spec = {r["config"]["strategy"]["spec_type"]: r for r in stored(isolated / "results" / "chain.jsonl")
            if r["mode"] == "speculative"}
    assert sorted(spec) == ["draft-mtp", "draft-mtp+ngram-mod"]
    chain = spec["draft-mtp+ngram-mod"]
    cmd = chain["server"]["command"]
    assert cmd[cmd.index("--spec-type") + 1] == "draft-mtp,ngram-mod" and cmd.count("--spec-type") == 1
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "2" and cmd[cmd.index("--spec-ngram-mod-n-max") + 1] == "2"
    assert chain["error"] is None and chain["server"]["speculative"] is True and chain["metrics"]["drafted"] > 0
    assert "draft-mtp+ngram-mod" in result.output
    assert_user_error(invoke("sweep", "--target", str(mtp_models[0]), "--engine", "server", "--server-bin",
                             str(server_bin), "--spec-type", "draft-mtp+ngram-mod", "-K", "2", "-n", "8",
                             "--prompt-ids", "code-short"), "draft-mtp", "has none")
    assert_user_error(invoke("tune", "--target", str(target), "--engine", "server", "--spec-type",
                             "draft-mtp+ngram-mod", "-K", "2"), "one type at a time")


def test_draft_mtp_refusals_are_one_line(mtp_models, server_bin):
    """No heads: today's refusal. Two chained heads: llama.cpp drafts at most two with them, so -K 3 is refused
    before any server starts (one head drafts any K)."""
    args = ["--engine", "server", "--server-bin", str(server_bin), "--spec-type", "draft-mtp", "-n", "8", "-t", "1",
            "--prompt-ids", "code-short"]
    assert_user_error(invoke("sweep", "--target", str(mtp_models[0]), "-K", "1", *args), "draft-mtp", "has none")
    assert_user_error(invoke("sweep", "--target", str(mtp_models[2]), "-K", "2,3", *args), "-K 3", "at most 2")


def test_eagle3_and_dflash_sidecars_draft_through_llama_server(tiny_pairs, server_bin, isolated, tmp_path):
    """Tiny EAGLE-3 and DFlash sidecars written for the tiny llama target (three of its layers' inputs through `fc`):
    `drafts` finds each by its architecture; one server sweep over both types drafts at every K; a K beyond the
    DFlash block (8: at most 7) is one line, not a cell recorded at a K llama.cpp did not run."""
    target = tiny_pairs["middle"][0]
    eagle3 = write_eagle3_sidecar(tmp_path / "tiny-eagle3.gguf")
    dflash = write_dflash_sidecar(tmp_path / "tiny-dflash.gguf", block_size=8)
    found = json.loads(invoke("drafts", str(target), "--search", str(tmp_path), "--offline", "--no-caches",
                              "--json").stdout)
    kinds = {c["name"]: c["type"] for c in found["candidates"]}
    assert kinds[str(eagle3)] == "draft-eagle3" and kinds[str(dflash)] == "draft-dflash"
    args = ["--target", str(target), "--engine", "server", "--server-bin", str(server_bin), "-n", "8", "-t", "2",
            "--prompt-ids", "code-short"]
    for sidecar, spec_type in ((eagle3, "draft-eagle3"), (dflash, "draft-dflash")):
        result = invoke("sweep", *args, "--draft", str(sidecar), "--spec-type", spec_type, "-K", "1,2",
                        "--name", spec_type)
        assert result.exit_code == 0, result.output
        spec = [r for r in stored(isolated / "results" / f"{spec_type}.jsonl") if r["mode"] == "speculative"]
        assert sorted(r["config"]["k"] for r in spec) == [1, 2]
        for r in spec:
            assert r["error"] is None and r["server"]["speculative"] is True, r
            assert r["metrics"]["drafted"] > 0 and len(r["metrics"]["accepted_at"]) == r["config"]["k"]
    assert_user_error(invoke("sweep", *args, "--draft", str(dflash), "--spec-type", "draft-dflash", "-K", "8"),
                      "-K 8", "at most 7")


def test_the_planner_counts_the_trunk_as_llama_cpp_does_and_the_heads_apart(mtp_models):
    """llama.cpp's layers are the trunk (n_layer() = block_count - nextn_predict_layers) plus the output; the NextN
    block is loaded only for draft-mtp: the planner keeps its bytes apart (mtp_bytes), out of every placement."""
    from gguf_bench.models.offload_plan import Shape, device_bytes, tensor_bytes
    from gguf_bench.runtimes.llama_cpp import Model, read_info

    meta, tensors = tensor_table(mtp_models[1])
    shape = Shape.from_header(meta, tensors)
    heads = sum(tensor_bytes(t.type_name, t.shape) for t in tensors if t.name.startswith("blk.2."))
    assert (shape.n_layers, shape.mtp_bytes) == (2, heads) and heads > 0
    trunk = Shape.from_header(*tensor_table(mtp_models[0]))  # the same trunk without its head
    assert (shape.block_bytes, shape.expert_bytes, shape.output_tensors) == (trunk.block_bytes, trunk.expert_bytes,
                                                                            trunk.output_tensors)
    assert device_bytes(shape, 99, 512).weights == device_bytes(trunk, 99, 512).weights
    assert read_info(mtp_models[1]).n_layers == 2
    with Model(mtp_models[1], 0, n_ctx=256) as model:
        assert model.placement.layers == f"0/{shape.total_layers}"  # llama.cpp's own count: 3
    result = invoke("plan", "--target", str(mtp_models[1]), "--draft", str(mtp_models[1]), "--vram", "1GB")
    assert result.exit_code == 0 and "3/3" in result.stdout and "4/4" not in result.stdout, result.output
    assert f"target's MTP heads: {heads / 2**20:.0f} MiB more" in result.stdout


def test_a_twin_of_a_synthesized_mtp_header_drafts_through_llama_server(server_bin, isolated, tmp_path):
    """models/shapes' glm4moe layout with its NextN block (GLM-4.5-Air's, at the smallest size): the header plans its
    head apart, its twin loads with the trunk's layers, and llama-server's draft-mtp drafts with it."""
    from gguf_bench.models.offload_plan import Shape
    from gguf_bench.models.shapes import write_header

    header = write_header(tmp_path / "tiny-glm4moe.gguf", "tiny-glm4moe")
    shape = Shape.from_header(*tensor_table(header))
    assert shape.n_layers == 2 and shape.mtp_bytes > 0 and mtp_heads(*_names(header)) == 1
    twin = tmp_path / "twin.gguf"
    assert invoke("twin", str(header), "-o", str(twin)).exit_code == 0
    result = invoke("sweep", "--target", str(twin), "--engine", "server", "--server-bin", str(server_bin),
                    "--spec-type", "draft-mtp", "-K", "2", "-n", "16", "-t", "2", "--prompt-ids", "code-short",
                    "--name", "mtp-twin")
    assert result.exit_code == 0, result.output
    spec = [r for r in stored(isolated / "results" / "mtp-twin.jsonl") if r["mode"] == "speculative"]
    assert len(spec) == 1 and spec[0]["error"] is None and spec[0]["metrics"]["drafted"] > 0, spec
    # llama.cpp's count, whether or not the build logs it: every block (the NextN one too) and the output
    assert spec[0]["offload"]["target"] == "0/4", spec[0]["offload"]


QWEN35_SHAPES = {"qwen3.5-27b": (64, 48), "qwen3.5-35b-a3b": (40, 30)}  # trunk blocks, gated delta-nets among them


@pytest.mark.parametrize("name", sorted(QWEN35_SHAPES))
def test_real_shape_qwen35_headers_plan_their_mtp_head_and_hybrid_caches(name, tmp_path):
    """Qwen3.5-27B and -35B-A3B at their published shapes: the hybrid trunk (every 4th block attends, the others are
    gated delta-nets with ssm_* tensors), one NextN block after it. The planner keeps the head's bytes apart
    (Shape.mtp_bytes, exactly the NextN block's tensors) and prints them with the head's own KV; the KV column counts
    attending blocks only, and each delta-net's fixed state instead (llama.cpp's n_embd_r + n_embd_s, F32)."""
    from gguf_bench.models.offload_plan import Shape, cache_bytes, kv_bytes_per_layer, mtp_kv_bytes, tensor_bytes
    from gguf_bench.models.shapes import SHAPES, write_header

    trunk, nets = QWEN35_SHAPES[name]
    header = write_header(tmp_path / f"{name}.gguf", name)
    meta, tensors = tensor_table(header)
    shape = Shape.from_header(meta, tensors)
    head = sum(tensor_bytes(t.type_name, t.shape) for t in tensors if t.name.startswith(f"blk.{trunk}."))
    assert (shape.n_layers, shape.n_nextn, shape.mtp_bytes) == (trunk, 1, head) and head > 100 * 2**20
    assert mtp_heads(meta, [t.name for t in tensors]) == 1
    assert sum(t.name.endswith("ssm_conv1d.weight") for t in tensors) == sum(shape.recurrent) == nets
    assert not any(shape.recurrent[3::4])  # blocks 3, 7, ... attend (full_attention_interval 4)
    s = SHAPES[name]
    inner, keys = s.linear_v_heads * s.linear_head_dim, s.linear_k_heads * s.linear_head_dim
    assert shape.state_bytes == 4 * ((s.ssm_conv - 1) * (inner + 2 * keys) + s.linear_head_dim * inner)
    assert sum(cache_bytes(shape, i, 4096) for i in range(trunk)) == \
        (trunk - nets) * kv_bytes_per_layer(shape, 4096) + nets * shape.state_bytes
    draft = write_header(tmp_path / "draft.gguf", "tiny-qwen2-draft")
    result = invoke("plan", "--target", str(header), "--draft", str(draft), "--vram", "48GB")
    assert result.exit_code == 0, result.output
    assert (f"target's MTP heads: {head / 2**20:.0f} MiB more, and {mtp_kv_bytes(shape, 4096) / 2**20:.0f} MiB of KV"
            in result.stdout), result.stdout
    assert "target's recurrent state:" in result.stdout


def _server_buffers(server_bin, model, spec_type: str, log, *, load: tuple[str, ...] = ("-lm", "none", "-c", "4096"),
                    ready_s: float = 120) -> dict[str, list[float]]:
    """llama-server started on `model` with --spec-type `spec_type`, weights read into memory (-lm none: a mapped
    file would count every byte, used or not) unless `load` says otherwise, until ready: its buffer lines (MiB by kind,
    in load order)."""
    import re
    import subprocess

    from gguf_bench.runtimes.llama_server import free_port, wait_healthy

    port = free_port()
    cmd = [str(server_bin), "-m", str(model), *load, "-t", "1", "-np", "1", "-lv", "4", "--no-repack",
           "--spec-type", spec_type, "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            ready = wait_healthy(f"http://127.0.0.1:{port}", ready_s, lambda: proc.poll() is None)
            assert proc.poll() is None, log.read_text()[-2000:]
            assert ready, "llama-server did not become ready"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    found: dict[str, list[float]] = {}
    for kind, mib in re.findall(r"CPU(?:_Mapped)? (model|KV|RS) buffer size =\s+([\d.]+) MiB", log.read_text()):
        found.setdefault(kind, []).append(float(mib))
    return found


@pytest.mark.parametrize("name", ["tiny-qwen35", "tiny-qwen35moe"])
def test_a_twin_of_a_synthesized_qwen35_header_loads_decodes_and_drafts(name, server_bin, isolated, tmp_path):
    """The Qwen3.5 layouts at the smallest size (3 delta-nets, 1 attending block, 1 NextN block): the twin loads with
    llama.cpp's count (the trunk and the output), decodes finite logits, and the planner's bytes are llama.cpp's
    buffers: weights without and with the MTP head loaded, the KV of the attending block and of draft-mtp's context,
    the delta-nets' state, kept 1 + K times (K = 3, llama-server's default) once draft-mtp runs. A server sweep drafts."""
    import numpy as np

    from gguf_bench.models.offload_plan import Shape, cache_bytes, mtp_kv_bytes, rollback_bytes
    from gguf_bench.models.shapes import write_header
    from gguf_bench.runtimes.llama_cpp import Model

    header = write_header(tmp_path / f"{name}.gguf", name)
    twin = tmp_path / "twin.gguf"
    assert invoke("twin", str(header), "-o", str(twin)).exit_code == 0
    shape = Shape.from_header(*tensor_table(twin))
    assert shape.n_layers == 4 and shape.recurrent == (True, True, True, False)
    with Model(twin, 0, n_ctx=256, n_threads=1) as model:
        assert model.placement.layers == "0/5"
        logits = model.eval(model.tokenize(PROMPT))
        for _ in range(4):
            logits = model.eval([int(np.argmax(logits[-1]))])
        assert np.isfinite(logits).all()
    weights = sum(w.bytes for w in shape.weights)  # untied: every weight once, the token embeddings included
    mib = 2**20
    alone = _server_buffers(server_bin, twin, "none", tmp_path / "none.log")
    mtp = _server_buffers(server_bin, twin, "draft-mtp", tmp_path / "mtp.log")
    caches = sum(cache_bytes(shape, i, 4096) for i in range(4))
    assert alone["model"] == pytest.approx([weights / mib], rel=0.01, abs=0.01)
    assert mtp["model"] == pytest.approx([(weights + shape.mtp_bytes) / mib], rel=0.01, abs=0.01)
    assert sum(alone["KV"]) + sum(alone["RS"]) == pytest.approx(caches / mib, rel=0.01, abs=0.01)
    assert mtp["KV"] == pytest.approx([alone["KV"][0], mtp_kv_bytes(shape, 4096) / mib], rel=0.01, abs=0.01)
    assert mtp["RS"] == pytest.approx([alone["RS"][0] + rollback_bytes(shape, 3) / mib], rel=0.01, abs=0.01)
    result = invoke("sweep", "--target", str(twin), "--engine", "server", "--server-bin", str(server_bin),
                    "--spec-type", "draft-mtp", "-K", "2", "-n", "16", "-t", "2", "--prompt-ids", "code-short",
                    "--name", "qwen35-twin")
    assert result.exit_code == 0, result.output
    spec = [r for r in stored(isolated / "results" / "qwen35-twin.jsonl") if r["mode"] == "speculative"]
    assert len(spec) == 1 and spec[0]["error"] is None and spec[0]["metrics"]["drafted"] > 0, spec
    assert spec[0]["offload"]["target"] == "0/6"  # 4 trunk blocks, the NextN block, the output: llama.cpp's count


def test_a_sidecar_made_for_another_target_is_one_line(server_bin, isolated, tmp_path):
    """EAGLE-3 and DFlash sidecars written for the tiny llama target (width 64, 4 layers, its vocabulary), given with
    a target they were not made for: llama.cpp checks nothing of it (llama-server starts, then aborts at the first
    request: 'get_sub_batch: failed to add embedding'), so the sweep refuses each before any server starts, in one
    line that says what differs, and `drafts` lists them as incompatible."""
    from gguf_bench.models.tiny import TinySpec, make_pair

    eagle3 = write_eagle3_sidecar(tmp_path / "sidecars" / "tiny-eagle3.gguf")
    dflash = write_dflash_sidecar(tmp_path / "sidecars" / "tiny-dflash.gguf")
    deep = write_eagle3_sidecar(tmp_path / "deep-eagle3.gguf", layers=(0, 2, 6))  # reads layer 6 of 4
    wide, _ = make_pair(tmp_path / "wide", spec=TinySpec(width=128))
    big, _ = make_pair(tmp_path / "big", spec=TinySpec(extra_tokens=200))
    usual, _ = make_pair(tmp_path / "usual")
    cases = [(wide, eagle3, "draft-eagle3", "width 64 (eagle3.target_hidden_size)", "128 wide"),
             (wide, dflash, "draft-dflash", "width 64 (dflash.embedding_length)", "128 wide"),
             (usual, deep, "draft-eagle3", "target layer 6", "has 4")]
    args = ["--engine", "server", "--server-bin", str(server_bin), "-K", "2", "-n", "8", "-t", "1", "--prompt-ids",
            "code-short"]
    for target, sidecar, spec_type, *words in cases:
        result = invoke("sweep", "--target", str(target), "--draft", str(sidecar), "--spec-type", spec_type, *args)
        assert_user_error(result, f"{sidecar.name} is not a sidecar for {target.name}", *words)
    # another vocabulary: the pair check every draft file gets comes first
    result = invoke("sweep", "--target", str(big), "--draft", str(eagle3), "--spec-type", "draft-eagle3", *args)
    assert_user_error(result, f"{eagle3.name} cannot draft for {big.name}", "vocab size (466 / 266")
    found = json.loads(invoke("drafts", str(wide), "--search", str(tmp_path / "sidecars"), "--offline", "--no-caches",
                              "--json").stdout)
    verdicts = {c["name"]: (c["type"], c["status"]) for c in found["candidates"]}
    assert verdicts[str(eagle3)] == ("draft-eagle3", "incompatible")
    assert verdicts[str(dflash)] == ("draft-dflash", "incompatible")
    found = json.loads(invoke("drafts", str(big), "--search", str(tmp_path / "sidecars"), "--offline", "--no-caches",
                              "--json").stdout)
    reasons = {c["name"]: c["reason"] for c in found["candidates"] if c["status"] == "incompatible"}
    assert "its vocabulary has 266 tokens, and the target's 466" in reasons[str(eagle3)]


@pytest.mark.parametrize("name", sorted(QWEN35_SHAPES))
def test_real_shape_qwen35_twins_load_with_their_heads_as_planned(name, server_bin, tmp_path):
    """The real-shape Qwen3.5 headers are llama.cpp's own layout: a twin of each (17 and 23 GB, sparse: 38 and 370 MB
    on disk) loads in llama-server with draft-mtp's context, and every buffer is the planner's figure: the weights with
    the head (the mapped file), the attending blocks' KV and draft-mtp's own, the delta-nets' state kept 1 + K times
    (K = 3). -c 512, one small ubatch and no warm-up: nothing is decoded (each 10 to 30 s here, on 2 CPU cores)."""
    from gguf_bench.models.offload_plan import Shape, cache_bytes, mtp_kv_bytes, rollback_bytes
    from gguf_bench.models.shapes import write_header

    twin = tmp_path / "twin.gguf"
    assert invoke("twin", str(write_header(tmp_path / f"{name}.gguf", name)), "-o", str(twin)).exit_code == 0
    shape = Shape.from_header(*tensor_table(twin))
    got = _server_buffers(server_bin, twin, "draft-mtp", tmp_path / "server.log", ready_s=300,
                          load=("-c", "512", "-b", "32", "-ub", "32", "--no-warmup"))
    mib = 2**20
    caches = sum(cache_bytes(shape, i, 512) for i in range(shape.n_layers))
    state = shape.state_bytes * sum(shape.recurrent)
    assert got["model"] == pytest.approx([(sum(w.bytes for w in shape.weights) + shape.mtp_bytes) / mib], rel=0.001)
    assert got["KV"] == pytest.approx([(caches - state) / mib, mtp_kv_bytes(shape, 512) / mib], rel=0.001)
    assert got["RS"] == pytest.approx([(state + rollback_bytes(shape, 3)) / mib], rel=0.001)
