"""Twins (models/twin.py): the real header with synthetic weights. Their header and tensor table equal the source's,
they are sparse, load and generate in llama.cpp without stopping or NaN, llama.cpp allocates the same buffers for
them, a hub twin reads only ranges, a MoE twin spreads a batch over experts, and bad input is one line with nothing
left behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_user_error, invoke

from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.models import twin as twin_mod
from gguf_bench.models.parts import local_header, tensor_table
from gguf_bench.models.tiny import TinySpec, make_pair, random_weights, vocabulary, write_gguf
from gguf_bench.models.twin import MARKER, check_room, is_twin_file, write_twin

from hubserver import HubServer


def _twin(src: Path, out: Path) -> Path:
    return write_twin(local_header(src), out, src.name).path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".part" in p.name or p.name.startswith(".twin"))


def test_twin_copies_the_header_and_is_sparse(tiny_pairs, tmp_path):
    src = tiny_pairs["middle"][0]
    w = write_twin(local_header(src), tmp_path / "twin.gguf", src.name)
    meta, tensors = tensor_table(src)
    twin_meta, twin_tensors = tensor_table(w.path)
    assert twin_tensors == tensors  # names, types, shapes and offsets
    assert {k: v for k, v in twin_meta.items() if k != MARKER} == meta and twin_meta[MARKER] == src.name
    assert is_twin_file(w.path) and not is_twin_file(src)
    assert 0 < w.size - src.stat().st_size <= 8 + len(MARKER) + 12 + len(src.name) + 31  # the marker key, padded
    if not w.sparse:
        pytest.skip(f"the file system of {tmp_path} keeps no holes")
    # the tiny model's rows all fall inside the token band, so its embedding and output are written in full
    assert w.on_disk < src.stat().st_size / 2 and w.on_disk == os.stat(w.path).st_blocks * 512


def test_twin_loads_generates_without_stopping_and_allocates_the_same_buffers(tmp_path):
    from gguf_bench.decoding.loop import generate_regular
    from gguf_bench.decoding.sampling import SamplingConfig
    from gguf_bench.runtimes.llama_cpp import Model, Vocabulary

    real, _ = make_pair(tmp_path / "a", noise=0.0)
    probe = _twin(real, tmp_path / "probe.gguf")
    with Model(probe, n_ctx=256) as m:  # the twin's first greedy token, made the source's end-of-generation token
        first = int(np.argmax(m.eval(m.tokenize("hello"), 1)[0]))
    real, _ = make_pair(tmp_path / "b", noise=0.0, eos_id=first)
    twin = _twin(real, tmp_path / "twin.gguf")
    with Vocabulary(real) as v:
        assert v.is_eog(first) and not v.twin
    with Model(real, n_ctx=256) as r, Model(twin, n_ctx=256) as t:
        assert t.twin and not t.is_eog(first)
        res = generate_regular(t, t.tokenize("hello"), 40, SamplingConfig())
        assert len(res.tokens) == 40 and not res.stopped_by_eog and res.tokens[0] == first
        assert np.isfinite(t.eval([first], 1)).all()
        assert len(set(res.tokens)) > 1  # generated tokens vary (a batch holds different tokens)
        for part in ("model_mib", "kv_mib", "compute_mib", "output_mib"):
            assert getattr(t.placement, part) == getattr(r.placement, part), part


def test_moe_twin_routes_a_batch_to_more_than_top_k_experts(tmp_path):
    import gguf

    from gguf_bench.runtimes.llama_cpp import Model

    spec = TinySpec(n_experts=8, n_experts_used=2)
    src = write_gguf(tmp_path / "moe.gguf", spec, random_weights(spec, len(vocabulary()[0]), 0))
    twin = _twin(src, tmp_path / "moe-twin.gguf")
    with Model(twin, n_ctx=256) as m:  # llama.cpp runs it; its batch: generated tokens
        logits = m.eval(m.tokenize("routing"), 1)
        batch = []
        for _ in range(9):  # K + 1 for K = 8
            batch.append(int(np.argmax(logits[0])))
            logits = m.eval([batch[-1]], 1)
        assert np.isfinite(logits).all()
    weights = {t.name: np.array(t.data) for t in gguf.GGUFReader(twin).tensors}
    assert len(set(batch)) > 1
    for layer in range(spec.n_layers):  # the router sees rms_norm(embedding) x ffn_norm (attention and FFNs add 0)
        h = weights["token_embd.weight"][batch]
        x = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + 1e-5) * weights[f"blk.{layer}.ffn_norm.weight"]
        router = weights[f"blk.{layer}.ffn_gate_inp.weight"]  # [n_expert, n_embd]
        chosen = np.argsort(-(x @ router.T), axis=1)[:, :spec.n_experts_used]
        assert len(set(chosen.ravel())) > spec.n_experts_used, (layer, chosen)


def test_twin_command_and_a_hub_twin_reads_only_ranges(tiny_pairs, tmp_path):
    src = tiny_pairs["middle"][0]
    result = invoke("twin", str(src), "-o", str(tmp_path / "local.gguf"))
    assert result.exit_code == 0, result.output
    assert "tensors" in result.output and "on disk" in result.output and is_twin_file(tmp_path / "local.gguf")
    with HubServer() as server:
        server.state.files["acme/tiny-GGUF"] = {"tiny-F32.gguf": src.read_bytes()}
        env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "GGUF_BENCH_HEADER_READ": "1024"}
        for ref, out in (("acme/tiny-GGUF:f32", "by-quant.gguf"), ("acme/tiny-GGUF/tiny-F32.gguf", "by-file.gguf")):
            proc = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "twin", ref, "-o", str(tmp_path / out)],
                                  capture_output=True, text=True, env=env, timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            (meta, tensors), (local_meta, local_tensors) = tensor_table(tmp_path / out), tensor_table(tmp_path / "local.gguf")
            assert tensors == local_tensors and meta[MARKER].startswith("acme/tiny-GGUF/tiny-F32.gguf")
            assert {k: v for k, v in meta.items() if k != MARKER} == {k: v for k, v in local_meta.items() if k != MARKER}
        gets = server.state.gets("tiny-F32.gguf")
    assert gets and all(rng and rng.startswith("bytes=") for rng in gets), gets  # never a full GET
    ranges = [tuple(int(x) for x in rng.removeprefix("bytes=").split("-")) for rng in gets[:len(gets) // 2]]
    assert ranges[0][0] == 0 and all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:])), gets  # each goes on
    assert not list((tmp_path / "hf").rglob("tiny-F32.gguf"))  # nothing downloaded


def test_bad_sources_are_one_line_and_leave_nothing(tiny_pairs, tmp_path, monkeypatch):
    src = tiny_pairs["middle"][0]
    out = tmp_path / "out" / "twin.gguf"
    out.parent.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    assert_user_error(invoke("twin", str(text), "-o", str(out)), "is not a GGUF file")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(src.read_bytes()[:300])
    assert_user_error(invoke("twin", str(cut), "-o", str(out)), "the header goes on past")
    data = bytearray(src.read_bytes())  # the first tensor's ggml type made one the gguf package does not know
    pos = data.index(b"token_embd.weight") + len(b"token_embd.weight") + 4 + 8 * 2
    data[pos:pos + 4] = (250).to_bytes(4, "little")
    (tmp_path / "odd.gguf").write_bytes(bytes(data))
    assert_user_error(invoke("twin", str(tmp_path / "odd.gguf"), "-o", str(out)), "ggml type 250")
    assert_user_error(invoke("twin", "no-such-model", "-o", str(out)), "is not a file")
    monkeypatch.setattr(twin_mod.shutil, "disk_usage", lambda _: type("U", (), {"free": 1000})())
    assert_user_error(invoke("twin", str(src), "-o", str(out)), "no room for the twin")
    assert list(out.parent.iterdir()) == [] and not _leftovers(tmp_path)


def test_room_check_counts_the_whole_file_where_holes_are_not_kept(tmp_path):
    gib = 2**30
    check_room(tmp_path, gib, 2 * gib, sparse=False)
    with pytest.raises(twin_mod.ModelError, match="does not keep sparse files"):
        check_room(tmp_path, 3 * gib, 2 * gib, sparse=False)


def test_unwritable_random_type_is_refused_before_writing(tmp_path):
    from gguf_bench.models.gguf import TensorInfo

    fill = twin_mod.Fill(TensorInfo("blk.0.ffn_gate_inp.weight", "IQ1_M", (256, 4)), 4, "random")
    with pytest.raises(twin_mod.ModelError, match="cannot write random data of ggml type IQ1_M"):
        twin_mod.synthetic_rows(fill, 0, 1, np.random.default_rng(0))


def test_random_blocks_are_finite_with_the_asked_spread():
    import gguf

    rng = np.random.default_rng(0)
    for name in ("Q4_K", "Q6_K", "Q8_0", "Q2_K", "IQ4_XS"):
        raw = twin_mod._random_blocks(name, 64 * twin_mod.row_bytes(name, 256), 0.5, rng)
        values = gguf.quants.dequantize(np.frombuffer(raw, np.uint8).reshape(1, -1), gguf.GGMLQuantizationType[name])
        assert np.isfinite(values).all() and 0.4 < values.std() < 0.6, (name, values.std())


@pytest.mark.slow
def test_gemma_twin_allocates_the_real_buffers(gemma_q4_q2, tmp_path):
    from gguf_bench.runtimes.llama_cpp import Model

    real = gemma_q4_q2[0]
    w = write_twin(local_header(real), tmp_path / "gemma-twin.gguf", real.name)
    assert w.seconds < 10 and (not w.sparse or w.on_disk < real.stat().st_size / 10)
    with Model(real, n_ctx=512) as r, Model(w.path, n_ctx=512) as t:
        for part in ("model_mib", "kv_mib", "compute_mib", "output_mib"):
            assert getattr(t.placement, part) == getattr(r.placement, part), part
        assert np.isfinite(t.eval(t.tokenize("def f(x):"), 1)).all()


def test_records_made_with_twins_say_so(tiny_pairs, isolated):
    from cli_helpers import pair_args, stored

    from gguf_bench.results.schema.records import parse
    from gguf_bench.results.schema.run_fields import run_row

    target, draft = tiny_pairs["middle"]
    twins = (_twin(target, isolated / "t-twin.gguf"), draft)  # a twin target, a real draft
    result = invoke("sweep", *pair_args(twins), "--name", "tw", "-K", "2", "--prompt-ids", "code-short", "-n", "4",
                    "--no-draft-alone")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "tw.jsonl")
    assert records and all(r["models"]["target"]["twin"] and not r["models"]["draft"]["twin"] for r in records)
    assert all(run_row(parse(r))["twin"] for r in records)
    # the report labels the twin's rows and shows no acceptance, gain or best K for its speculative rows
    shown = invoke("report", str(isolated / "results" / "tw.jsonl"), "--format", "json")
    rows = json.loads(shown.stdout)
    spec = [r for r in rows if r["mode"] == "speculative"]
    assert all(r["twin"] for r in rows) and spec
    assert all(r["acceptance"] is None and r["gain_pct"] is None and not r["best_k"] for r in spec)
    assert spec[0]["tokens_per_s"] > 0  # the speed stays
    table = invoke("report", str(isolated / "results" / "tw.jsonl")).stdout
    assert re.search(r"K=2( !)? ⧉", table) and "⧉ twin: synthetic weights" in table  # "!": a busy machine


def test_llama_server_generates_a_twin_past_its_end_token(tmp_path, server_bin):
    """The server engine asks llama-server to ignore EOS for a twin, whose first greedy token is here the source's
    end-of-generation token (as test_twin_loads_generates_without_stopping... builds it)."""
    from gguf_bench.decoding.strategy import Strategy
    from gguf_bench.measure.inputs.prompts import Prompt
    from gguf_bench.measure.pair import PairFiles
    from gguf_bench.measure.plan import Grid
    from gguf_bench.measure.sweep import iter_records
    from gguf_bench.runtimes.llama_cpp import Model

    real, _ = make_pair(tmp_path / "a", noise=0.0)
    probe = _twin(real, tmp_path / "probe.gguf")
    with Model(probe, n_ctx=256) as m:
        first = int(np.argmax(m.eval(m.tokenize("hello"), 1)[0]))
    real, _ = make_pair(tmp_path / "b", noise=0.0, eos_id=first)
    twin = _twin(real, tmp_path / "twin.gguf")
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "hello")], n_predict=12,
                threads=2, engines=("server",), engine_options=(ServerOptions(server_bin=server_bin),), with_target_alone=True,
                strategies=[Strategy("ngram-simple")])
    target = next(r for r in iter_records("tw", PairFiles(twin, None, "twin"), grid) if r.mode.value == "target")
    assert target.error is None and target.metrics.n_tokens == 12 and not target.metrics.stopped_by_eog


def test_tune_on_twins_predicts_at_named_acceptance_then_uses_the_real_pairs(tiny_pairs, isolated):
    """tune --twin: timings from twins; with no real calibration, tokens/s at --acceptance and no recommendation;
    after a tune of the real files, their acceptance (said so) and a recommendation; --check refused."""
    from cli_helpers import pair_args

    args = [*pair_args(tiny_pairs["middle"]), "-K", "1-2", "-n", "8", "--prompt-ids", "code-short", "--reps", "1"]
    alone = invoke("tune", "--twin", *args, "--acceptance", "0.6,0.9", "--json")
    assert alone.exit_code == 0, alone.output
    doc = json.loads(alone.stdout)
    assert doc["acceptance_from"] is None and {r["k"] for r in doc["at_acceptance"]} == {1, 2}
    assert all(set(r["at"]) == {"0.6", "0.9"} and r["at"]["0.9"] > r["at"]["0.6"] for r in doc["at_acceptance"])
    assert "rows" not in doc  # no prediction of a K without the pair's acceptance
    assert invoke("tune", *args).exit_code == 0  # the real pair: its acceptance is stored
    known = invoke("tune", "--twin", *args)
    assert known.exit_code == 0, known.output
    assert "acceptance measured on" in known.stdout and "recommended:" in known.stdout
    assert_user_error(invoke("tune", "--twin", *args, "--check"), "--check", "twin")


def test_break_even_is_where_a_draft_starts_to_pay():
    from gguf_bench.results.predictions.costmodel import Timings, at_acceptance, break_even

    tm = Timings(t_draft=0.01, t_draft2=0.012, t_verify=(0.1, 0.11, 0.12), round_overhead=0.001)
    for k in (1, 2):
        a = break_even(tm, k)
        assert 0 < a < 1 and at_acceptance(tm, a, k) == pytest.approx(1 / tm.t_target, rel=1e-3)
    slow = Timings(t_draft=0.2, t_draft2=0.2, t_verify=(0.1, 0.3), round_overhead=0.0)
    assert break_even(slow, 1) is None  # a draft dearer than the target never pays



def _resident_pages(path: Path) -> int:
    """Pages of the file in the page cache: mincore over a read-only mapping (a mapping faults nothing in)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size, page = path.stat().st_size, os.sysconf("SC_PAGE_SIZE")
    vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            assert libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this system")
def test_drop_page_cache_empties_a_files_pages(tmp_path):
    """The benchmarks' drop (models/files.drop_page_cache) leaves none of a just-written file's pages cached, dirty
    ones included, and the bytes are unchanged (tmp_path is on a disk here; on tmpfs pages cannot be dropped)."""
    from gguf_bench.models.files import drop_page_cache

    path = tmp_path / "f.bin"
    data = os.urandom(4 << 20)
    path.write_bytes(data)
    if _resident_pages(path) == 0:
        pytest.skip("this file system does not keep a written file's pages in the page cache")
    if subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip() == "tmpfs":
        pytest.skip("tmp_path is on tmpfs, whose pages are the file and cannot be dropped")
    drop_page_cache(path)
    assert _resident_pages(path) < 16  # of 1024
    assert path.read_bytes() == data
