"""`gguf-bench drafts` (issue 39): candidates from the registry, local folders and a local hub (HfApi.list_models and
range reads against tests/hubserver.py), each judged from its header by llama.cpp's rule with the same first failing
condition llama.cpp's own vocabulary load gives, ranked by the cost model, and every fault as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke

from gguf_bench.models.candidates import HeaderReader, quant_of, size_of
from gguf_bench.models.gguf import first_failure
from gguf_bench.models.tiny import TinySpec, random_weights, vocabulary, write_gguf
from gguf_bench.results.predictions.draft_ranking import outlook

from hubserver import HubServer

TARGET_META = {"general.basename": "Tiny", "general.size_label": "7B", "general.organization": "acme"}


def _spm_vocab() -> tuple[list[str], list[int], int, int]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁t", "h", "e", "▁", "a", "b", "c"]
    types = [2, 3, 3] + [6] * 256 + [1] * 7
    return tokens, types, 1, 2


def _variants() -> dict[str, tuple[list[str], list[int], int, int] | str]:
    """The vocabularies of the test set: the target's, one token changed at a high id, another BOS, 200 extra tokens
    (after BOS/EOS: ids kept), and another vocabulary type."""
    tokens, types, bos, eos = vocabulary()
    changed = list(tokens)
    changed[260] = "CHANGED"
    extra = (tokens + [f"<extra_{i}>" for i in range(200)], types + [1] * 200, bos, eos)
    return {"same": (tokens, types, bos, eos), "changed": (changed, types, bos, eos), "bos": (tokens, types, eos, eos),
            "extra": extra, "spm": _spm_vocab()}


def _model(path: Path, vocab, layers: int, meta: dict | None = None, seed: int = 0) -> Path:
    spec = TinySpec(n_layers=layers)
    tokenizer = "llama" if vocab[0][0] == "<unk>" else "gpt2"
    return write_gguf(path, spec, random_weights(spec, len(vocab[0]), seed), vocab=vocab, tokenizer=tokenizer,
                      metadata=meta, name=path.stem)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("drafts")
    v = _variants()
    out = {"target": _model(root / "tiny-7b-instruct-F32.gguf", v["same"], 6, TARGET_META)}
    for name, vocab in v.items():
        out[name] = _model(root / f"draft-{name}.gguf", vocab, 2, {"general.basename": "Tiny"}, seed=1)
    import gguf

    side = gguf.GGUFWriter(str(root / "eagle3.gguf"), "eagle3")  # a sidecar: llama.cpp's eagle3 architecture
    side.add_block_count(1)
    side.add_tensor("fc.weight", random_weights(TinySpec(), 10, 0)["blk.0.attn_q.weight"])
    side.write_header_to_file()
    side.write_kv_data_to_file()
    side.write_tensors_to_file()
    side.close()
    out["eagle3"] = root / "eagle3.gguf"
    return out


def test_header_verdicts_equal_llama_cpps_with_the_same_first_failure(models):
    """Each vocabulary llama.cpp loads (vocab_only) equals the one read from the header, and so does the verdict."""
    from gguf_bench.runtimes.llama_cpp import read_info

    reader = HeaderReader()
    target = read_info(models["target"])
    expected = {"same": None, "changed": "token text from id 5", "bos": "BOS id", "extra": "vocab size",
                "spm": "vocab type"}
    for name, want in expected.items():
        real, ours = read_info(models[name]), reader.info(reader.local(models[name]))
        for f in ("vocab_type", "n_vocab", "bos_id", "eos_id", "add_bos", "add_eos", "tokens"):
            assert getattr(ours, f) == getattr(real, f), (name, f)
        by_llama, by_header = first_failure(target, real), first_failure(reader.info(reader.local(models["target"])), ours)
        assert (by_llama and by_llama.name) == (by_header and by_header.name) == want, name
        assert (by_llama and by_llama.detail) == (by_header and by_header.detail), name
    assert "token 260 differs" in first_failure(target, read_info(models["changed"])).detail


def test_names_sizes_and_the_cost_models_outlook():
    assert size_of("Qwen2.5-Coder-0.5B-Instruct-GGUF") == 0.5e9 and size_of("gemma-3-270m-it") == 270e6
    assert size_of("Qwen2.5-Coder-GGUF") is None and size_of("Meta-Llama-3.1-8B") == 8e9
    assert quant_of("qwen2.5-coder-7b-instruct-q4_k_m.gguf") == "Q4_K_M" and quant_of("x-Q8_0.gguf") == "Q8_0"
    cheap, dear = outlook(0.05), outlook(0.4)
    assert cheap[0] < dear[0]  # a cheaper draft pays from a lower acceptance
    assert cheap[1][0.7][0] > dear[1][0.7][0] > 0 and cheap[1][0.9][0] > cheap[1][0.5][0]
    assert outlook(1.5)[0] is None or outlook(1.5)[0] > 0.5  # a draft dearer than the target barely pays


def test_local_drafts_ranked_with_fit_and_json(models, tmp_path):
    result = invoke("drafts", str(models["target"]), "--search", str(models["same"].parent), "--offline",
                    "--no-caches", "--vram", "1GB", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    by_name = {Path(c["name"]).name: c for c in out["candidates"]}
    assert by_name["draft-same.gguf"]["status"] == "compatible"
    assert by_name["draft-changed.gguf"]["reason"].startswith("token text from id 5: token 260 differs")
    assert by_name["draft-bos.gguf"]["reason"].startswith("BOS id") and by_name["draft-spm.gguf"]["reason"].startswith(
        "vocab type: bpe / spm")
    assert by_name["draft-extra.gguf"]["reason"].startswith("vocab size: 266 / 466")
    assert by_name["eagle3.gguf"]["type"] == "draft-eagle3"
    ranked = {Path(r["name"]).name: r for r in out["ranking"]}
    assert list(ranked) == ["eagle3.gguf", "draft-same.gguf"]  # the one-matrix sidecar costs least
    assert ranked["draft-same.gguf"]["fits"] is True and 0 < ranked["draft-same.gguf"]["cost_ratio"] < 1
    assert "tiny-7b-instruct-F32.gguf" not in by_name  # the target itself is no candidate
    table = invoke("drafts", str(models["target"]), "--search", str(models["same"].parent), "--offline", "--no-caches")
    assert table.exit_code == 0 and "draft-same.gguf" in table.stdout and "incompatible: " in table.stdout
    assert "eagle3 " in table.stdout and "ngram-mod" in table.stdout


def _hub(server: HubServer, models: dict[str, Path], n_filler: int) -> None:
    files = server.state.files
    data = {k: p.read_bytes() for k, p in models.items()}
    files["acme/Tiny-7B-Instruct-GGUF"] = {"tiny-7b-instruct-F32.gguf": data["target"],
                                           "tiny-7b-instruct-Q4_K_M.gguf": data["same"],
                                           "tiny-7b-instruct-Q2_K.gguf": data["same"]}
    files["acme/Tiny-1B-Instruct-GGUF"] = {"tiny-1b-Q8_0.gguf": data["same"], "tiny-1b-Q4_K_M.gguf": data["same"],
                                           "tiny-1b-Q2_K.gguf": data["same"]}
    files["other/Tiny-0.5B-GGUF"] = {"tiny-0.5b-Q8_0.gguf": data["changed"]}
    files["acme/Tiny-2B-GGUF"] = {"tiny-2b-Q8_0.gguf": data["bos"]}
    files["acme/Tiny-3B-GGUF"] = {"tiny-3b-Q8_0.gguf": data["extra"]}
    files["acme/Tiny-1.5B-spm-GGUF"] = {"tiny-1.5b-Q8_0.gguf": data["spm"]}
    files["acme/Tiny-13B-GGUF"] = {"tiny-13b-Q8_0.gguf": data["same"]}  # larger than the target: never read
    files["acme/Tiny-7B-eagle3-GGUF"] = {"tiny-7b-eagle3.gguf": data["eagle3"]}
    files["acme/Tiny-0.3B-broken-GGUF"] = {"tiny-0.3b-Q8_0.gguf": b"not a gguf file at all" * 10}
    files["acme/Tiny-0.4B-gated-GGUF"] = {"tiny-0.4b-Q8_0.gguf": data["same"]}
    server.state.gated.add("acme/Tiny-0.4B-gated-GGUF")
    for i in range(n_filler):
        files[f"fill{i}/Tiny-0.{i + 1}B-GGUF"] = {f"tiny-0.{i + 1}b-Q4_K_M.gguf": data["same"]}


def _run(server: HubServer, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "GGUF_BENCH_HEADER_READ": "4096",
           "COLUMNS": "80", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "gguf_bench.cli", "drafts", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_hub_candidates_from_headers_only_then_from_the_cache(models, isolated):
    with HubServer() as server:
        _hub(server, models, n_filler=11)  # 20 candidate repositories (and the target's own, and a larger one)
        ref = "acme/Tiny-7B-Instruct-GGUF:F32"
        first = _run(server, ref, "--no-caches", "--verbose", "--json")
        gets = server.state.file_gets()
        server.state.requests.clear()
        second = _run(server, ref, "--no-caches", "--verbose")
        again = server.state.file_gets()
        sent = server.state.sent
    assert first.returncode == 0, first.stdout + first.stderr
    out = json.loads(first.stdout)
    status = {c["name"]: (c["status"], c["reason"]) for c in out["candidates"]}
    assert status["acme/Tiny-1B-Instruct-GGUF:Q8_0"][0] == status["acme/Tiny-1B-Instruct-GGUF:Q4_K_M"][0] == "compatible"
    assert "acme/Tiny-1B-Instruct-GGUF:Q2_K" not in status  # one or two quants each: --quants
    assert status["other/Tiny-0.5B-GGUF:Q8_0"] == ("incompatible", "token text from id 5: token 260 differs: "
                                                   "b'er' / b'CHANGED'")
    assert status["acme/Tiny-2B-GGUF:Q8_0"][1].startswith("BOS id")
    assert status["acme/Tiny-3B-GGUF:Q8_0"][1].startswith("vocab size")
    assert status["acme/Tiny-1.5B-spm-GGUF:Q8_0"][1].startswith("vocab type")
    assert status["acme/Tiny-0.3B-broken-GGUF:Q8_0"][0] == "unreadable"
    assert status["acme/Tiny-0.4B-gated-GGUF:Q8_0"][0] == "unreadable" and "HF_TOKEN" in status[
        "acme/Tiny-0.4B-gated-GGUF:Q8_0"][1]
    assert {c["name"]: c["origin"] for c in out["candidates"]}["acme/Tiny-7B-Instruct-GGUF:Q4_K_M"] == "self"
    assert [c["type"] for c in out["candidates"] if c["origin"] == "sidecar"] == ["draft-eagle3"]
    assert not any("13B" in name for name in status)
    ranked = [r["name"] for r in out["ranking"]]
    assert len(ranked) >= 14 and all(status[n][0] == "compatible" for n in ranked)
    assert gets and all(rng and rng.startswith("bytes=") and rng.split("-")[1] for _, rng in gets), gets  # ranges only
    assert not list((isolated / "hf").rglob("*.gguf"))  # nothing downloaded
    assert "ranged requests" in first.stderr and "MB from the hub" in first.stderr
    assert second.returncode == 0, second.stderr
    # the second run reads no vocabulary: only what could not be read is asked again (the gated and the broken file,
    # and a registry draft of the family, by its name, that this hub does not have)
    unreadable = {"tiny-0.4b-Q8_0.gguf", "tiny-0.3b-Q8_0.gguf", "tinyllama-1.1b-chat-v1.0.Q4_0.gguf"}
    assert {p.rsplit("/", 1)[1] for p, _ in again} <= unreadable, again
    assert sent < 50 * 2**20
    assert all(len(line) <= 80 for line in second.stdout.splitlines() if not line.startswith(
        ("incompatible", "unreadable", "draft-", "no draft file", "not checked", "target"))), second.stdout


def test_faults_are_one_line(models, tmp_path):
    assert_user_error(invoke("drafts", str(tmp_path / "missing.gguf"), "--offline"), "not found")
    assert_user_error(invoke("drafts", str(models["target"]), "--search", str(tmp_path / "nope")), "no such folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_user_error(invoke("drafts", str(models["target"]), "--search", str(empty), "--offline", "--no-caches"),
                      "no draft candidate found", f"search {empty}")
    assert_user_error(invoke("drafts", str(models["target"]), "--quants", ","), "--quants")
    with HubServer() as server:
        pass  # stopped: its port now refuses connections, as an unreachable hub does
    down = _run(server, str(models["target"]), "--no-caches", "--search", str(empty))
    local = _run(server, str(models["target"]), "--no-caches", "--search", str(models["same"].parent))
    assert down.returncode == 1 and down.stderr.count("\n") == 1 and down.stderr.startswith("Error: no draft candidate")
    assert f"search {empty}" in down.stderr and "hub" in down.stderr, down.stderr
    assert local.returncode == 0, local.stderr
    assert local.stderr.startswith("Note: ") and "searched locally" in local.stderr
    assert "could not be searched" in local.stderr and "draft-same.gguf" in "".join(local.stdout.split())


def _dflash(path: Path, markov: bool) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "dflash")
    w.add_block_count(1)
    w.add_tensor("fc.weight", random_weights(TinySpec(), 10, 0)["blk.0.attn_q.weight"])
    if markov:
        w.add_tensor("markov_w1.weight", random_weights(TinySpec(), 10, 0)["blk.0.attn_k.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_dspark_is_a_server_type_checked_for_its_markov_head(models, tmp_path):
    """draft-dspark (the vendored llama-server has it): a dflash sidecar with a Markov head; drafts names it too."""
    from gguf_bench.decoding.strategy import Strategy
    from gguf_bench.errors import ConfigError
    from gguf_bench.measure.engines.server import check_files
    from gguf_bench.models.pairs import PairFiles

    dspark, dflash = _dflash(tmp_path / "dspark.gguf", True), _dflash(tmp_path / "dflash.gguf", False)
    check_files([Strategy("draft-dspark")], PairFiles(models["target"], dspark, "p"), "--spec-type draft-dspark")
    for draft, needle in ((dflash, "no Markov head"), (models["same"], "is a llama model")):
        with pytest.raises(ConfigError, match=needle):
            check_files([Strategy("draft-dspark")], PairFiles(models["target"], draft, "p"), "--spec-type draft-dspark")
    reader = HeaderReader()
    assert (reader.local(dspark).sidecar, reader.local(dflash).sidecar) == ("draft-dspark", "draft-dflash")


def test_twins_measure_the_cost_ratio_and_the_verify_curve_on_this_machine(models, tmp_path):
    """--twins: each draft-model candidate's c and the target's verify curve from twins (nothing downloaded, no twin
    left behind); a sidecar keeps its size-based c (it loads only beside its target)."""
    args = ["drafts", str(models["target"]), "--search", str(models["same"].parent), "--offline", "--no-caches",
            "--twins", "-t", "1"]
    out = json.loads(invoke(*args, "--json").stdout)
    ranked = {Path(r["name"]).name: r for r in out["ranking"]}
    assert ranked["draft-same.gguf"]["cost_ratio_from"] == "twins" and 0 < ranked["draft-same.gguf"]["cost_ratio"] < 10
    assert ranked["eagle3.gguf"]["cost_ratio_from"] == "sizes"
    table = invoke(*args)
    assert table.exit_code == 0 and "measured on twins on this machine, with the target's verify curve" in table.stdout
    assert not list((tmp_path / "cache").rglob("*.twin.gguf"))
