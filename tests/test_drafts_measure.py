"""`gguf-bench drafts TARGET --measure N` (issue 39, item 5): the N best compatible drafts are downloaded (through the
real huggingface_hub client, against tests/hubserver.py), calibrated beside the target with tune's flow, stored as
calibration records that `report` reads, ranked by the tokens/s predicted from what was measured; --resume calibrates
nothing twice; a download cut off is one `Error:` line and leaves nothing half-written in the cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, stored

from gguf_bench.models.tiny import TinySpec, perturb, random_weights, vocabulary, write_gguf

from hubserver import COMMIT, HubServer

META = {"general.basename": "Tiny", "general.size_label": "7B",
        "general.description": "the target: a few bytes larger than its drafts (local files larger are no drafts)"}
FAST = ["-K", "1-3", "-n", "12", "--prompt-ids", "code-short", "--threads", "1", "-c", "256", "--reps", "1"]


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> dict[str, Path]:
    """A target; a draft of the same weights (its acceptance: all); one with noise 0.3 on every weight (little); and
    one with a token changed at id 260 (llama.cpp refuses it). All of one size: only the measurement tells them apart."""
    root = tmp_path_factory.mktemp("family")
    spec = TinySpec()
    tokens, types, bos, eos = vocabulary()
    weights = random_weights(spec, len(tokens), 0)
    changed = list(tokens)
    changed[260] = "CHANGED"
    (root / "drafts").mkdir()
    out = {"target": write_gguf(root / "tiny-7b-F32.gguf", spec, weights, metadata=META, name="target")}
    for key, w, vocab in (("same", weights, None), ("noisy", perturb(weights, 0.3, 1), None),
                          ("other", weights, (changed, types, bos, eos))):
        out[key] = write_gguf(root / "drafts" / f"tiny-0.5b-{key}.gguf", spec, w, vocab=vocab,
                              metadata={"general.basename": "Tiny", "general.size_label": "0.5B"}, name=key)
    return out


def _local(family: dict[str, Path], *args: str):
    return invoke("drafts", str(family["target"]), "--search", str(family["same"].parent), "--offline", "--no-caches",
                  *FAST, *args)


def test_measure_ranks_by_the_measured_acceptance_stores_records_and_resumes(family, isolated):
    result = _local(family, "--measure", "2", "--name", "m", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    names = [Path(r["name"]).name for r in out["measured"]]
    assert sorted(names) == ["tiny-0.5b-noisy.gguf", "tiny-0.5b-same.gguf"]
    speeds = [r["measured"]["predicted_tokens_per_s"] for r in out["measured"]]
    assert speeds == sorted(speeds, reverse=True)  # the rule; which is faster is a timing (on a busy machine, either)
    by_name = {Path(r["name"]).name: r["measured"] for r in out["measured"]}
    same, noisy = by_name["tiny-0.5b-same.gguf"], by_name["tiny-0.5b-noisy.gguf"]
    assert same["acceptance"] == 1.0 and noisy["acceptance"] < 0.5  # the sizes cannot tell them apart; acceptance can
    assert [r["from_sizes"]["cost_ratio"] for r in out["measured"]] == [1.0, 1.0]
    assert "llama-server" in out["deploy"] and str(family["target"]) in out["deploy"]
    verdicts = {Path(c["name"]).name: c for c in out["candidates"]}
    assert verdicts["tiny-0.5b-other.gguf"]["reason"].startswith("token text from id 5: token 260 differs")
    records = stored(isolated / "results" / "m.jsonl")
    assert [r["kind"] for r in records] == ["calibration"] * 2  # the incompatible draft is never calibrated
    assert {r["pair"] for r in records} == {"tiny-7b-F32+tiny-0.5b-same", "tiny-7b-F32+tiny-0.5b-noisy"}
    assert all(r["tune"] == "m" and r["config"]["prompts"] == ["code-short"] for r in records)
    shown = invoke("report", str(isolated / "results" / "m.jsonl"))
    assert shown.exit_code == 0, shown.output
    assert "tiny-7b-F32+tiny-0.5b-same" in shown.stdout and "tiny-7b-F32+tiny-0.5b-noisy" in shown.stdout
    assert "calibrations" in shown.stdout
    again = _local(family, "--measure", "2", "--name", "m", "--resume")
    assert again.exit_code == 0, again.output
    assert len(stored(isolated / "results" / "m.jsonl")) == 2  # nothing calibrated again
    assert again.stdout.count("(calibrated before)") == 2
    assert "winner: " in again.stdout or "no draft is predicted to beat the target alone" in again.stdout
    table = again.stdout.splitlines()
    assert [Path(ln.split()[1]).name for ln in table if ln[:4].strip() in ("1", "2")] == names  # the stored order
    assert "incompatible: " in again.stdout and "deploy (" in again.stdout
    other = _local(family, "--measure", "2", "--name", "m", "-n", "10", "--resume")  # other settings: calibrated
    assert other.exit_code == 0 and len(stored(isolated / "results" / "m.jsonl")) == 4


def test_every_model_name_is_read_once(family, isolated, monkeypatch):
    """The target's name is resolved once, at the command (issue 57, 4: it was read again for its twin and for its
    download), and each draft's where it was found: --twins and --measure take those values, never a name again."""
    import sys

    from gguf_bench.models import registry

    read, real = [], registry.name_model

    def counted(source, *args):
        read.append(source)
        return real(source, *args)

    for module in [m for name, m in sys.modules.items() if name.startswith("gguf_bench")]:
        if getattr(module, "name_model", None) is real:  # every module that imported it by name
            monkeypatch.setattr(module, "name_model", counted)
    result = _local(family, "--twins", "--measure", "1", "--name", "once")
    assert result.exit_code == 0, result.output
    assert "measured 1 drafts" in result.stdout
    assert read == [str(family["target"])]


def test_measured_drafts_rank_by_predicted_tokens_per_s_not_by_gain(tmp_path):
    """Each calibration times the target alone anew. A draft calibrated while the target ran slow shows the larger
    gain over that slow target alone, yet predicts fewer tokens/s: it ranks second (by gain it would be first). The
    gains shown are over one target alone for all: the median of the calibrations' own."""
    from gguf_bench.measure.flows.drafts import CalibratedDraft, MeasuredDrafts, best_first
    from gguf_bench.measure.pair import PairFiles
    from gguf_bench.models.candidates import Candidate
    from gguf_bench.results.predictions import costmodel as tn
    from gguf_bench.results.predictions.draft_ranking import Ranked

    text = tn.Text("p", (True,) * 24, 24, False)  # every draft token accepted

    def measured(name: str, t_target: float) -> CalibratedDraft:
        tm = tn.Timings(t_draft=0.01, t_draft2=0.01, t_verify=(t_target,) * 5, round_overhead=0.0)
        cals = [tn.Calibration(name, "0", "0", 24, (1, 2, 4), tm, (text,), (1.0,) * 4)]
        files = PairFiles(tmp_path / "t.gguf", tmp_path / f"{name}.gguf", name)
        return CalibratedDraft(Ranked(Candidate(name, "search", "draft-simple"), 0.1), files, cals, tn.recommend(cals), 256)

    slow, fast = measured("timed-slow", 0.2), measured("timed-fast", 0.1)
    assert slow.rec.fastest.gain_pct > fast.rec.fastest.gain_pct
    assert slow.rec.fastest.tokens_per_s < fast.rec.fastest.tokens_per_s
    assert [m.files.name for m in best_first([slow, fast])] == ["timed-fast", "timed-slow"]
    third = measured("timed-mid", 0.15)
    result = MeasuredDrafts(tmp_path / "t.gguf", best_first([slow, fast, third]))
    # the gains share one target alone: the median of the three calibrations' own (that of the middle one)
    assert result.baseline_tokens_per_s == pytest.approx(third.rec.baseline_tokens_per_s)
    assert result.gain_pct(fast) > result.gain_pct(third) > result.gain_pct(slow)
    assert result.gain_pct(third) == pytest.approx(third.rec.fastest.gain_pct)
    assert result.beats_target_alone(fast)


@pytest.mark.parametrize("args, needle", [
    (["--measure", "0"], "--measure takes how many drafts"),
    (["--measure", "-2"], "at least 1 (got -2)"),
    (["--measure", "1", "-n", "1"], "--n-predict must be >= 2"),
    (["--measure", "1", "--resume"], "--resume needs --name"),
    (["--measure", "1", "--prompt-ids", "nope"], "unknown built-in prompt 'nope'"),
])
def test_measure_bad_input_is_one_error_line(family, args, needle):
    assert_user_error(invoke("drafts", str(family["target"]), "--offline", "--no-caches", *args), needle)


def _hub_files(server: HubServer, family: dict[str, Path]) -> None:
    data = {k: p.read_bytes() for k, p in family.items()}
    server.state.files["acme/Tiny-7B-GGUF"] = {"tiny-7b-F32.gguf": data["target"], "tiny-7b-Q8_0.gguf": data["same"],
                                              "tiny-7b-Q2_K.gguf": data["noisy"]}
    server.state.files["other/Tiny-0.5B-GGUF"] = {"tiny-0.5b-Q8_0.gguf": data["other"]}


def _run(server: HubServer, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "GGUF_BENCH_HEADER_READ": "4096",
           "HF_HUB_DOWNLOAD_TIMEOUT": "5", "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "gguf_bench.cli", "drafts", "acme/Tiny-7B-GGUF:F32", "--no-caches",
                           "--measure", "2", *FAST, "--name", "hub", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_hub_drafts_downloaded_by_huggingface_hub_a_cut_download_resumed(family, isolated):
    """The target and its two lower quants come down through huggingface_hub into HF_HOME: the Q2_K's transfer breaks
    half way once (the client goes on), the Q8_0's breaks and the hub goes down (one Error line, nothing of it in the
    cache: its half never reached the disk, which the client writes 10 MiB at a time, so no partial file is kept
    either); the next call (--resume) skips the Q2_K's calibration and fetches the Q8_0."""
    snapshots = isolated / "hf" / "hub" / "models--acme--Tiny-7B-GGUF" / "snapshots" / COMMIT
    with HubServer() as server:
        _hub_files(server, family)
        server.state.truncate_once.add("tiny-7b-Q2_K.gguf")
        server.state.cut_then_down.add("tiny-7b-Q8_0.gguf")
        first = _run(server)
        assert first.returncode == 1, first.stdout + first.stderr
        errors = [ln for ln in first.stderr.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1 and "tiny-7b-Q8_0.gguf" in errors[0] and "--resume" in errors[0], first.stderr
        assert "Traceback" not in first.stderr
        assert not (snapshots / "tiny-7b-Q8_0.gguf").exists()  # nothing half-written where a later call looks
        assert not list((isolated / "hf").rglob("*.incomplete"))
        q2k = server.state.gets("tiny-7b-Q2_K.gguf")
        assert any(r and not r.startswith("bytes=0-") for r in q2k), q2k  # resumed where the transfer broke
        assert len(stored(isolated / "results" / "hub.jsonl")) == 1  # the Q2_K's calibration, kept
        server.state.down = False
        second = _run(server, "--resume")
        gets = server.state.file_gets()
    assert second.returncode == 0, second.stdout + second.stderr
    for name in ("tiny-7b-F32.gguf", "tiny-7b-Q8_0.gguf", "tiny-7b-Q2_K.gguf"):
        assert (snapshots / name).read_bytes() == server.state.files["acme/Tiny-7B-GGUF"][name]
    records = stored(isolated / "results" / "hub.jsonl")
    assert [r["pair"] for r in records] == ["tiny-7b-F32+tiny-7b-Q2_K", "tiny-7b-F32+tiny-7b-Q8_0"]
    # both ranked (their order is the tiny pairs' timing: the identical Q8_0 usually first, not on every run)
    ranked = dict(m.groups()[::-1] for ln in second.stdout.splitlines() if (m := re.match(r"^ ([12])  (acme/\S+)", ln)))
    assert set(ranked) == {"acme/Tiny-7B-GGUF:Q8_0", "acme/Tiny-7B-GGUF:Q2_K"} and set(ranked.values()) == {"1", "2"}
    assert "(calibrated before)" in second.stdout
    winner = next(name for name, rank in ranked.items() if rank == "1")
    assert f"winner: {winner}" in second.stdout or f"(the best, {winner}," in second.stdout
    assert "incompatible: other/Tiny-0.5B-GGUF:Q8_0 (hub): token text from id 5" in second.stdout
    other = [rng for path, rng in gets if path.endswith("tiny-0.5b-Q8_0.gguf")]
    assert other and all(rng and rng.split("-")[1] for rng in other)  # its header only, by bounded ranges
    assert not (isolated / "hf" / "hub" / "models--other--Tiny-0.5B-GGUF" / "snapshots").exists()


def test_the_measured_winner_is_recommended_only_above_the_target_alones_scatter():
    """drafts --measure gets tune's noise guard: a draft predicted 3% faster while the target alone's own timings
    scatter by 5% is not recommended (the line says so); 12% faster is; with no repeated timing the guard is off."""
    from types import SimpleNamespace

    from gguf_bench.measure.flows.drafts import MeasuredDrafts

    def measured(tps, scatter):
        rec = SimpleNamespace(fastest=SimpleNamespace(tokens_per_s=tps), baseline_tokens_per_s=100.0, scatter=scatter)
        return SimpleNamespace(rec=rec)

    small, big = measured(103.0, 0.05), measured(112.0, 0.05)
    result = MeasuredDrafts(target=None, measured=[small, big])
    assert result.beats_target_alone(small) and not result.recommends(small) and result.recommends(big)
    assert result.guard.line().startswith("scatter guard: no predicted gain under +5.0% is recommended")
    off = MeasuredDrafts(target=None, measured=[measured(103.0, None)])
    assert off.recommends(off.measured[0]) and off.guard.line().startswith("scatter guard off")
