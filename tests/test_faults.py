"""Faults around files, made for real: a results folder that cannot be made, writes that fail part
way (a file-size limit gives EFBIG, /dev/full gives ENOSPC), a folder removed mid-sweep, truncated and
corrupted GGUF files, and a download killed half way. Each ends in one `Error:` line, never a
traceback, and loses nothing already measured or stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import GGUF_BENCH, assert_user_error, pair_args, run_cli
from typer.testing import CliRunner

from gguf_bench.cli.app import app
from gguf_bench.errors import ModelError, ResultsError
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import append_record, ensure_results_dir, read_records

from hubserver import COMMIT, HubServer, _Handler

runner = CliRunner()


def cli(*args: str, fsize_limit: int | None = None, **env: str) -> subprocess.CompletedProcess:
    """The real CLI in a child process; `fsize_limit` caps the size of every file it writes (RLIMIT_FSIZE)."""

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

    return run_cli(*args, env={**os.environ, **env}, preexec_fn=limit_file_size if fsize_limit else None)


def strict_records(path: Path) -> list[dict]:
    """Every line of `path` must parse: a torn line is a failure here, not something to skip."""
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- 1. the results folder is checked before any work ------------------------------------------


@pytest.mark.parametrize("folder, why", [("/proc/nope", "No such file or directory"), ("/dev/null/x", "Not a directory")])
@pytest.mark.parametrize("command", ["sweep", "eval", "run"])
def test_results_folder_that_cannot_be_made_stops_before_loading(tiny_pairs, folder, why, command):
    extra = {"sweep": ["-K", "1", "-n", "4", "--prompt-ids", "code-short"], "eval": ["--nb-prompts", "2", "-n", "4"],
             "run": ["-n", "4"]}[command]
    proc = cli(command, *pair_args(tiny_pairs["high"]), *extra, GGUF_BENCH_RESULTS=folder, GGUF_BENCH_LLAMA_LOG="1")
    assert_user_error(proc, f"cannot store results in {folder}", why, "$GGUF_BENCH_RESULTS")
    assert "llama_model_load" not in proc.stdout  # no model was loaded (llama.cpp's log goes to stdout here)


def test_results_folder_that_is_a_file(tmp_path, tiny_pairs):
    blocker = tmp_path / "results"
    blocker.write_text("not a folder")
    result = runner.invoke(app, ["sweep", *pair_args(tiny_pairs["high"]), "-K", "1", "-n", "4", "--prompt-ids", "code-short"],
                           env={"GGUF_BENCH_RESULTS": str(blocker)})
    assert result.exit_code == 1 and "it is a file, not a folder" in result.stderr, result.output
    assert blocker.read_text() == "not a folder"


def test_ensure_results_dir_creates_and_leaves_no_probe(tmp_path):
    folder = ensure_results_dir(tmp_path / "a" / "b")
    assert folder.is_dir() and list(folder.iterdir()) == []
    with pytest.raises(ResultsError, match="given folder"):
        ensure_results_dir(Path("/proc/nope"))


# --- 2. a failed write never loses work --------------------------------------------------------


def sweep_args(files, name: str, *extra: str) -> list[str]:
    return ["sweep", *pair_args(files), "--name", name, "-K", "1-3", "-n", "16", "--prompt-ids", "code-short,chat-short",
            *extra]


def test_sweep_hitting_a_file_size_limit_stops_cleanly_then_resumes(tiny_pairs, isolated):
    """RLIMIT_FSIZE makes a real write fail part way (EFBIG): the sweep stops with one line naming the
    file, every whole record stays, and --resume without the limit finishes every cell once."""
    args = sweep_args(tiny_pairs["middle"], "capped")
    out = isolated / "results" / "capped.jsonl"
    total = 2 * (2 + 3)  # 2 prompts x (target + draft + K=1..3)
    proc = cli(*args, fsize_limit=8000)
    line = assert_user_error(proc, str(out), "File too large (EFBIG)", "--name capped --resume")
    assert "records already in it are kept" in line
    kept = strict_records(out)  # whole lines only: the record that did not fit was cut back off
    assert 1 <= len(kept) < total and out.stat().st_size <= 8000
    resumed = cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {len(kept)} cells already done" in resumed.stdout
    records = strict_records(out)
    assert records[:len(kept)] == kept
    counts = Counter(r["cell"] for r in records)
    assert len(counts) == total and set(counts.values()) == {1}


@pytest.mark.parametrize("as_json", [False, True])
def test_eval_that_cannot_store_prints_its_result_then_fails(tiny_pairs, isolated, as_json):
    out = isolated / "results" / "ev.jsonl"
    proc = cli("eval", *pair_args(tiny_pairs["low"]), "--nb-prompts", "6", "-n", "6", "--name", "ev",
               *(["--json"] if as_json else []), fsize_limit=1500)
    assert_user_error(proc, str(out), "File too large (EFBIG)", "the result printed above was not stored")
    if as_json:
        record = json.loads(proc.stdout)
        assert record["kind"] == "eval" and len(record["rows"]) == 6
    else:
        assert "multiplication benchmark" in proc.stdout and "identical outputs (greedy): 6/6" in proc.stdout
        assert "stored in" not in proc.stdout
    assert out.read_text() == ""  # the part that got written was cut back off


@pytest.mark.parametrize("as_json", [False, True])
def test_run_that_cannot_store_prints_its_result_then_fails(tiny_pairs, isolated, as_json):
    out = isolated / "results" / "r.jsonl"
    proc = cli("run", *pair_args(tiny_pairs["high"]), "-n", "8", "--name", "r", *(["--json"] if as_json else []),
               fsize_limit=1500)
    assert_user_error(proc, str(out), "File too large (EFBIG)", "the result printed above was not stored")
    if as_json:
        assert [r["mode"] for r in json.loads(proc.stdout)] == ["target", "draft", "speculative"]
    else:
        assert "target alone" in proc.stdout and "tokens/s" in proc.stdout
    assert strict_records(out) == []  # a run record is larger than the limit: nothing torn is left


def test_eval_on_a_full_disk(tiny_pairs, isolated):
    """ENOSPC for real: the results file is a link to /dev/full."""
    folder = isolated / "results"
    folder.mkdir()
    (folder / "full.jsonl").symlink_to("/dev/full")
    result = runner.invoke(app, ["eval", *pair_args(tiny_pairs["low"]), "--nb-prompts", "3", "-n", "6", "--name", "full"])
    assert result.exit_code == 1, result.output
    assert "multiplication benchmark" in result.stdout
    assert "No space left on device (ENOSPC)" in result.stderr and "full.jsonl" in result.stderr


def test_results_folder_removed_during_a_sweep(tiny_pairs, isolated):
    """The folder vanishes after the first record: the sweep stops instead of quietly starting a new
    file that would look complete."""
    from gguf_bench.measure.inputs.prompts import builtin
    from gguf_bench.measure.pair import PairFiles
    from gguf_bench.measure.plan import Grid
    from gguf_bench.measure.sweep import SweepEvents, run_sweep

    folder = isolated / "results"
    out = folder / "gone.jsonl"
    grid = Grid(ks=[1, 2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), n_predict=8)
    seen = []

    def remove_folder_once(record):
        seen.append(record)
        if len(seen) == 1:
            shutil.rmtree(folder)

    files = PairFiles(*tiny_pairs["high"], "p")
    with pytest.raises(ResultsError, match="removed during the run") as exc:
        run_sweep("gone", files, grid, out, False, SweepEvents(cell=remove_folder_once))
    assert str(out) in str(exc.value) and len(seen) == 1 and not folder.exists()


def test_append_after_a_torn_line_keeps_both_records(tmp_path):
    """A crash that left half a line (power cut) must not swallow the next record."""
    out = tmp_path / "r.jsonl"
    append_record(out, RunRecord(pair="a"))
    with open(out, "a") as fh:
        fh.write('{"pair": "b", "half')
    append_record(out, RunRecord(pair="c"))
    assert [r.pair for r in read_records(out)] == ["a", "c"]


# --- 3. load errors that say why ---------------------------------------------------------------


def cut(src: Path, dst: Path, n_bytes: int) -> Path:
    dst.write_bytes(src.read_bytes()[:n_bytes])
    return dst


def patched(src: Path, dst: Path, old: bytes, new: bytes) -> Path:
    """A copy of `src` with the first `old` replaced by `new` (same length: the layout stays valid)."""
    assert len(old) == len(new)
    data = src.read_bytes()
    assert data.count(old) >= 1
    dst.write_bytes(data.replace(old, new, 1))
    return dst


def test_truncated_model_says_the_file_is_cut_short(tmp_path, tiny_pairs):
    target, draft = tiny_pairs["high"]
    short = cut(target, tmp_path / "short.gguf", int(target.stat().st_size * 0.8))  # header whole, tensor data cut
    proc = cli("run", "--target", str(short), "--draft", str(draft), "-n", "4")
    assert_user_error(proc, "short.gguf", "not within the file bounds", "cut short")
    assert "failed to load model\n" not in proc.stderr


def test_header_cut_short_says_why_in_info_and_run(tmp_path, tiny_pairs):
    target, draft = tiny_pairs["high"]
    short = cut(target, tmp_path / "head.gguf", 3000)  # inside the vocabulary strings
    for args in (["info", str(short)], ["run", "--target", str(short), "--draft", str(draft)]):
        line = assert_user_error(cli(*args), "head.gguf")
        assert "exceeds remaining file size" in line or "failed to read" in line, line
        assert not line.endswith("failed to load model"), line


@pytest.mark.parametrize("command", ["info", "run"])
def test_bad_magic_says_not_gguf(tmp_path, tiny_pairs, command):
    target, draft = tiny_pairs["high"]
    bad = patched(target, tmp_path / "magic.gguf", b"GGUF", b"GGUX")
    args = [str(bad)] if command == "info" else ["--target", str(bad), "--draft", str(draft)]
    assert_user_error(cli(command, *args), "magic.gguf", "not a GGUF file")


def test_bad_magic_through_llama_cpp(tmp_path, tiny_pairs):
    """The loader itself (no GGUF pre-check) names the magic too."""
    from gguf_bench.runtimes.llama_cpp import Model

    bad = patched(tiny_pairs["high"][0], tmp_path / "magic.gguf", b"GGUF", b"GGUX")
    with pytest.raises(ModelError) as exc:
        Model(bad)
    assert "invalid magic characters" in str(exc.value) and "not a GGUF file" in str(exc.value)


ARCH_VALUE = b"\x05\x00\x00\x00\x00\x00\x00\x00llama"  # general.architecture's string: length, then bytes


@pytest.mark.parametrize("command, old, new, needle", [
    # `info` reads the vocabulary only, which does not need the context length: `run` does
    ("run", b"llama.context_length", b"llama.context_lengtX", "key not found in model: llama.context_length"),
    ("run", ARCH_VALUE, ARCH_VALUE[:-1] + b"X", "unknown model architecture: 'llamX'"),
    ("info", ARCH_VALUE, ARCH_VALUE[:-1] + b"X", "unknown model architecture: 'llamX'"),
])
def test_corrupted_key_says_which(tmp_path, tiny_pairs, command, old, new, needle):
    target, draft = tiny_pairs["high"]
    bad = patched(target, tmp_path / "key.gguf", old, new)
    args = [str(bad)] if command == "info" else ["--target", str(bad), "--draft", str(draft)]
    assert_user_error(cli(command, *args), "key.gguf", needle)


@pytest.mark.slow
def test_real_gemma_cut_at_100_mb(tmp_path, real_cache):
    gemma = real_cache / "pypi" / "gemma-3-270m-q4_k_m.gguf"
    if not gemma.is_file():
        pytest.skip(f"{gemma} is not cached (run `gguf-bench download` or the slow suite first)")
    short = tmp_path / "gemma-100mb.gguf"
    with open(gemma, "rb") as src, open(short, "wb") as dst:
        dst.write(src.read(100_000_000))
    proc = cli("run", "--target", str(short), "--draft", str(gemma), "-n", "4")
    assert_user_error(proc, "gemma-100mb.gguf", "not within the file bounds", "cut short")


# --- 4. a download killed half way -------------------------------------------------------------


class _Throttled:
    """The socket writer of one response, slowed down so a download can be killed half way."""

    def __init__(self, raw, server: SlowHub):
        self.raw, self.server = raw, server

    def write(self, data: bytes) -> int:
        step = 256 << 10
        for i in range(0, len(data), step):
            try:
                self.raw.write(data[i:i + step])
            except (BrokenPipeError, ConnectionResetError):  # the client was killed: expected here
                return len(data)
            self.server.sent += len(data[i:i + step])
            if self.server.bytes_per_s:
                time.sleep(step / self.server.bytes_per_s)
        return len(data)

    def __getattr__(self, name):
        return getattr(self.raw, name)


class SlowHub(HubServer):
    """tests/hubserver.py's hub, sending at most `bytes_per_s` (None: full speed) and counting bytes sent."""

    def __init__(self, bytes_per_s: int | None):
        super().__init__()
        self.bytes_per_s, self.sent = bytes_per_s, 0
        hub = self

        class Handler(_Handler):
            state = self.state

            def setup(self):
                super().setup()
                self.wfile = _Throttled(self.wfile, hub)

        self.httpd.RequestHandlerClass = Handler


def registry_for(name: str) -> str:
    return f"""
default: big
models:
  t: {{hf: {{repo: acme/big-GGUF, file: {name}}}}}
  d: {{hf: {{repo: acme/big-GGUF, file: {name}}}}}
pairs:
  big: {{target: t, draft: d}}
"""


def test_download_killed_half_way_resumes_where_it_stopped(tmp_path):
    """What a user meets after a download is killed (SIGKILL, a crash, a power cut): the next call asks the hub for
    the rest only (models/resumable.py), and the file ends whole, with no partial file left."""
    data = os.urandom(24 << 20)  # above the client's 10 MiB write chunk, so a partial file reaches the disk
    reg = tmp_path / "models.yaml"
    reg.write_text(registry_for("big.gguf"))
    blobs = tmp_path / "hf" / "hub" / "models--acme--big-GGUF" / "blobs"
    with SlowHub(bytes_per_s=6 << 20) as hub:
        hub.state.files["acme/big-GGUF"] = {"big.gguf": data}
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
        cmd = [*GGUF_BENCH, "download", "big", "--registry", str(reg)]
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not any(p.stat().st_size for p in blobs.glob("*.incomplete")):
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        partials = list(blobs.glob("*.incomplete"))
        assert [p.name for p in partials] == [f"{hashlib.sha256(data).hexdigest()}.gguf-bench.incomplete"], partials
        kept = partials[0].stat().st_size
        assert 0 < kept < len(data)
        sent_first = hub.sent

        hub.bytes_per_s = None
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert hub.state.gets("big.gguf") == [None, f"bytes={kept}-"]  # the second transfer asked for the rest only
        assert hub.sent - sent_first < len(data)
        snapshot = tmp_path / "hf" / "hub" / "models--acme--big-GGUF" / "snapshots" / COMMIT / "big.gguf"
        assert snapshot.read_bytes() == data
        assert list(blobs.glob("*.incomplete")) == []


def test_a_download_that_cannot_finish_says_what_it_kept_and_the_next_call_resumes(tmp_path):
    data = os.urandom(24 << 20)  # half of it holds one whole 10 MiB write chunk
    reg = tmp_path / "models.yaml"
    reg.write_text(registry_for("big.gguf"))
    with HubServer() as hub:
        hub.state.files["acme/big-GGUF"] = {"big.gguf": data}
        hub.state.cut_then_down.add("big.gguf")  # the transfer breaks half way, then the hub answers 503
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
        first = cli("download", "big", "--registry", str(reg), **env)
        assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr
        errors = [ln for ln in first.stderr.splitlines() if ln.startswith("Error: ")]  # below the progress line
        assert len(errors) == 1 and "big.gguf" in errors[0] and "10 MB of it kept: the next call resumes" in errors[0]
        hub.state.down = False
        again = cli("download", "big", "--registry", str(reg), **env)
        assert again.returncode == 0, again.stderr
        gets = hub.state.gets("big.gguf")
    assert gets[0] is None and gets[-1] == f"bytes={10 << 20}-", gets  # the client's own retry between them
    snapshot = tmp_path / "hf" / "hub" / "models--acme--big-GGUF" / "snapshots" / COMMIT / "big.gguf"
    assert snapshot.read_bytes() == data and not list(snapshot.parents[2].rglob("*.incomplete"))


def test_a_damaged_partial_is_deleted_and_the_next_call_downloads_the_whole_file(tmp_path):
    data = os.urandom(1 << 20)
    reg = tmp_path / "models.yaml"
    reg.write_text(registry_for("big.gguf"))
    blobs = tmp_path / "hf" / "hub" / "models--acme--big-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / f"{hashlib.sha256(data).hexdigest()}.gguf-bench.incomplete"
    partial.write_bytes(b"\0" * 1000)  # kept from an earlier call, but not the file's first bytes
    with HubServer() as hub:
        hub.state.files["acme/big-GGUF"] = {"big.gguf": data}
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
        first = cli("download", "big", "--registry", str(reg), **env)
        assert_user_error(first, "big.gguf", "do not match the hub's size and sha256", "deleted them")
        assert not partial.exists() and not list(blobs.iterdir())
        again = cli("download", "big", "--registry", str(reg), **env)
        assert again.returncode == 0, again.stderr
        assert hub.state.gets("big.gguf") == ["bytes=1000-", None]
    snapshot = tmp_path / "hf" / "hub" / "models--acme--big-GGUF" / "snapshots" / COMMIT / "big.gguf"
    assert snapshot.read_bytes() == data and list(blobs.glob("*.incomplete")) == []


def test_a_partial_file_being_downloaded_is_kept(tmp_path, monkeypatch):
    """A partial file whose download lock is held (another process downloading it now) stays."""
    from gguf_bench.models.download import ORPHAN_AGE_S, drop_orphaned_partials

    hub_cache = tmp_path / "hf" / "hub"
    blobs = hub_cache / "models--acme--x" / "blobs"
    blobs.mkdir(parents=True)
    busy, dead = blobs / "aaaa.1234abcd.incomplete", blobs / "bbbb.5678abcd.incomplete"
    ours = blobs / "dddd.gguf-bench.incomplete"  # resumed by the next download (models/resumable.py), however old
    for p in (busy, dead, ours):
        p.write_bytes(b"x" * 1000)
        old = time.time() - 2 * ORPHAN_AGE_S
        os.utime(p, (old, old))
    (hub_cache / ".locks" / "models--acme--x").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from filelock import FileLock; "
                               "l = FileLock(sys.argv[1]); l.acquire(); print('held', flush=True); time.sleep(60)",
                               str(hub_cache / ".locks" / "models--acme--x" / "aaaa.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import huggingface_hub.constants

        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
        assert drop_orphaned_partials("acme/x") == 1000
        assert busy.exists() and not dead.exists() and ours.exists()
        fresh = blobs / "cccc.9abcdef0.incomplete"
        fresh.write_bytes(b"y")
        assert drop_orphaned_partials("acme/x") == 0 and fresh.exists()  # written to just now: kept
    finally:
        holder.kill()
        holder.wait()
