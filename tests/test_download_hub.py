"""`gguf-bench download` through the real huggingface_hub client against a local hub server.

huggingface_hub reads HF_ENDPOINT/HF_HOME when imported, so each call runs the real CLI in a
fresh process, as a user would.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, run_cli

from hubserver import COMMIT, HubServer

TARGET = "tiny-target.gguf"
DRAFT = "tiny-draft.gguf"


def registry_text(draft_sha: str | None = None, target_file: str = TARGET, repo: str = "acme/tiny-GGUF",
                  target_pattern: str | None = None) -> str:
    sha = f", sha256: '{draft_sha}'" if draft_sha else ""
    which = f"pattern: '{target_pattern}'" if target_pattern else f"file: {target_file}"
    return f"""
default: tiny
models:
  t: {{hf: {{repo: {repo}, {which}}}}}
  d: {{hf: {{repo: acme/tiny-GGUF, file: {DRAFT}{sha}}}}}
pairs:
  tiny: {{target: t, draft: d}}
"""


@pytest.fixture
def hub(tiny_pairs):
    target, draft = tiny_pairs["middle"]
    with HubServer() as server:
        server.state.files["acme/tiny-GGUF"] = {TARGET: target.read_bytes(), DRAFT: draft.read_bytes()}
        yield server


def cli(tmp_path: Path, hub_url: str, registry: str, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    reg = tmp_path / "models.yaml"
    reg.write_text(registry)
    env = {**os.environ, "HF_ENDPOINT": hub_url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_ETAG_TIMEOUT": "5",
           "HF_HUB_DOWNLOAD_TIMEOUT": "5", **env_extra}
    return run_cli("download", *args, "--registry", str(reg), env=env, timeout=120)


def snapshot(tmp_path: Path, name: str) -> Path:
    return tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF" / "snapshots" / COMMIT / name


def test_fresh_download_then_cached(tmp_path, hub, tiny_pairs):
    proc = cli(tmp_path, hub.url, registry_text(), "tiny")
    assert proc.returncode == 0, proc.stderr
    target, draft = tiny_pairs["middle"]
    assert snapshot(tmp_path, TARGET).read_bytes() == target.read_bytes()
    assert snapshot(tmp_path, DRAFT).read_bytes() == draft.read_bytes()
    assert "fetched" in proc.stdout

    gets_before = len(hub.state.gets(TARGET)) + len(hub.state.gets(DRAFT))
    again = cli(tmp_path, hub.url, registry_text(), "tiny")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already cached, nothing to do") == 2
    assert len(hub.state.gets(TARGET)) + len(hub.state.gets(DRAFT)) == gets_before  # no new transfer


def test_cached_pair_works_offline(tmp_path, hub):
    assert cli(tmp_path, hub.url, registry_text(), "tiny").returncode == 0
    proc = cli(tmp_path, "http://127.0.0.1:9", registry_text(), "tiny", HF_HUB_OFFLINE="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("already cached") == 2


def test_interrupted_download_resumes_with_range(tmp_path, hub):
    # The client writes 10 MiB chunks and resumes from what it wrote: serve more than that.
    data = os.urandom(24 << 20)
    hub.state.files["acme/tiny-GGUF"]["big.gguf"] = data
    hub.state.truncate_once.add("big.gguf")  # the first GET breaks off half way
    first = cli(tmp_path, hub.url, registry_text(target_file="big.gguf"), "tiny")
    if first.returncode != 0:  # the client gave up on the broken transfer: a second call resumes it
        assert_user_error(first)
        assert cli(tmp_path, hub.url, registry_text(target_file="big.gguf"), "tiny").returncode == 0
    ranges = hub.state.gets("big.gguf")
    assert ranges[0] is None, ranges
    assert any(r and r.startswith("bytes=") and not r.startswith("bytes=0-") for r in ranges[1:]), ranges
    assert snapshot(tmp_path, "big.gguf").read_bytes() == data


def test_missing_file(tmp_path, hub):
    proc = cli(tmp_path, hub.url, registry_text(target_file="nope-Q4_K_M.gguf"), "tiny")
    assert_user_error(proc, "nope-Q4_K_M.gguf", "not found in acme/tiny-GGUF")


def test_missing_repo(tmp_path, hub):
    proc = cli(tmp_path, hub.url, registry_text(repo="acme/ghost-GGUF"), "tiny")
    assert_user_error(proc, "acme/ghost-GGUF", "not found")


def test_gated_repo_says_hf_token(tmp_path, hub):
    hub.state.gated.add("acme/tiny-GGUF")
    proc = cli(tmp_path, hub.url, registry_text(), "tiny")
    assert_user_error(proc, "HF_TOKEN", "licence")


def test_server_unreachable(tmp_path, hub):
    proc = cli(tmp_path, "http://127.0.0.1:9", registry_text(), "tiny")
    assert_user_error(proc, "could not be reached")


def test_offline_and_not_cached(tmp_path, hub):
    proc = cli(tmp_path, hub.url, registry_text(), "tiny", HF_HUB_OFFLINE="1")
    assert_user_error(proc, "HF_HUB_OFFLINE")


def test_checksum_mismatch(tmp_path, hub):
    proc = cli(tmp_path, hub.url, registry_text(draft_sha="0" * 64), "tiny")
    assert_user_error(proc, "checksum mismatch")


def test_checksum_match_is_accepted(tmp_path, hub, tiny_pairs):
    sha = hashlib.sha256(tiny_pairs["middle"][1].read_bytes()).hexdigest()
    proc = cli(tmp_path, hub.url, registry_text(draft_sha=sha), "tiny")
    assert proc.returncode == 0, proc.stderr


def test_split_gguf_fetches_every_part(tmp_path, hub, tiny_pairs):
    data = tiny_pairs["middle"][0].read_bytes()
    parts = {f"big-0000{i}-of-00003.gguf": data[(i - 1) * 1000:i * 1000] for i in (1, 2, 3)}
    hub.state.files["acme/tiny-GGUF"].update(parts)
    proc = cli(tmp_path, hub.url, registry_text(target_file="big-00001-of-00003.gguf"), "tiny")
    assert proc.returncode == 0, proc.stderr
    for name, content in parts.items():
        assert snapshot(tmp_path, name).read_bytes() == content


def test_unknown_pair_suggests_close_names(tmp_path, hub):
    proc = cli(tmp_path, hub.url, registry_text(), "tinny")
    assert_user_error(proc, "unknown pair 'tinny'", "Did you mean: tiny")


def test_quant_pattern_picks_the_one_matching_file(tmp_path, hub, tiny_pairs):
    data = tiny_pairs["middle"][0].read_bytes()
    hub.state.files["acme/tiny-GGUF"].update({"tiny-Q4_K_M.gguf": data, "tiny-Q8_0.gguf": b"other"})
    proc = cli(tmp_path, hub.url, registry_text(target_pattern="*q4_k_m*.gguf"), "tiny")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(tmp_path, "tiny-Q4_K_M.gguf").read_bytes() == data
    assert not snapshot(tmp_path, "tiny-Q8_0.gguf").exists()
    offline = cli(tmp_path, hub.url, registry_text(target_pattern="*q4_k_m*.gguf"), "tiny", HF_HUB_OFFLINE="1")
    assert offline.returncode == 0 and offline.stdout.count("already cached") == 2, offline.stderr


def test_quant_pattern_takes_the_first_part_of_a_split_file(tmp_path, hub):
    parts = {f"big-q4_k_m-0000{i}-of-00002.gguf": bytes([i]) * 100 for i in (1, 2)}
    hub.state.files["acme/tiny-GGUF"].update(parts)
    proc = cli(tmp_path, hub.url, registry_text(target_pattern="big-q4_k_m*.gguf"), "tiny")
    assert proc.returncode == 0, proc.stderr
    assert all(snapshot(tmp_path, name).read_bytes() == data for name, data in parts.items())


def test_quant_pattern_that_matches_several_files(tmp_path, hub):
    hub.state.files["acme/tiny-GGUF"].update({"a-Q4_K_M.gguf": b"a", "b-Q4_K_M.gguf": b"b"})
    proc = cli(tmp_path, hub.url, registry_text(target_pattern="*Q4_K_M*.gguf"), "tiny")
    assert_user_error(proc, "matches a-Q4_K_M.gguf, b-Q4_K_M.gguf", "exactly one")


def test_quant_pattern_with_the_hub_unreachable(tmp_path, hub):
    proc = cli(tmp_path, "http://127.0.0.1:9", registry_text(target_pattern="*q4_k_m*.gguf"), "tiny")
    assert_user_error(proc, "could not be reached")


def test_run_takes_hub_files_and_registry_names_as_target_and_draft(tiny_pairs, tmp_path):
    """--target/--draft named as llama.cpp names models (REPO/FILE.gguf, REPO:QUANT): downloaded through the real
    huggingface_hub client into HF_HOME, then run; the pair is named by the files, as when the paths are given."""
    target, draft = tiny_pairs["high"]
    with HubServer() as server:
        server.state.files["acme/tiny-GGUF"] = {"tiny-target-F32.gguf": target.read_bytes(),
                                                "tiny-draft-F16.gguf": draft.read_bytes()}
        env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1"}
        args = [sys.executable, "-m", "gguf_bench.cli", "run", "--target", "acme/tiny-GGUF/tiny-target-F32.gguf",
                "--draft", "acme/tiny-GGUF:f16", "-K", "2", "-n", "8", "--name", "hub"]
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        bad = subprocess.run([*args[:5], "acme/tiny-GGUF:Q9_X", *args[6:]], capture_output=True, text=True, env=env,
                             timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny-target-F32.gguf+tiny-draft-F16.gguf" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "hf").rglob("*.gguf")) == ["tiny-draft-F16.gguf", "tiny-target-F32.gguf"]
    assert bad.returncode == 1 and bad.stderr.count("Error:") == 1 and "Traceback" not in bad.stderr
