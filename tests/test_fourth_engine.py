"""A fourth engine, written only here: it replays timings from a table instead of generating, registers with its one
line in the registry (monkeypatched for the test), and runs `sweep` (a fixed -r, -r auto, --resume) and `report`
through the one sweep every engine shares, with no other file touched. If adding an engine needed an edit elsewhere
(a name compared, a record part, a sweep loop of its own), this test could not pass."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from cli_helpers import invoke, pair_args, stored

from gguf_bench import engine_registry
from gguf_bench.engine_registry import Capabilities, EngineKind
from gguf_bench.measure.pair import local_pairs
from gguf_bench.measure.plan import Cell, Setting, shuffled
from gguf_bench.results.schema.records import Mode, RunMetrics, RunRecord

N_TOKENS = 32
SPEED = {0: 100.0, 2: 140.0, 4: 120.0}  # tokens/s the table replays: the target alone (K=0), K=2, K=4


class ReplayEngine:
    """Replays SPEED with 1% of seeded noise per run: K=2 +40%, K=4 +20% over the target alone."""

    name = "replay"
    capabilities = Capabilities("stored timings")
    measured = staticmethod(local_pairs)  # what it sweeps: the pair given, on this machine

    @classmethod
    def for_grid(cls, grid, files) -> ReplayEngine:
        return cls()

    def open(self, setting: Setting, prompts) -> ReplaySession:
        return ReplaySession(setting)


class ReplaySession:
    design = "shuffled"

    def __init__(self, setting: Setting):
        self.setting = setting

    def order(self, cells: list[Cell]) -> list[Cell]:
        return shuffled(cells, self.setting.grid.seed)

    def measure(self, cell: Cell) -> RunRecord:
        noise = random.Random(f"{cell.prompt.id}/{cell.repetition}/{cell.mode}/{cell.k}").gauss(1.0, 0.01)
        speed = SPEED[cell.k if cell.mode == Mode.SPECULATIVE else 0] * noise
        spec = cell.mode == Mode.SPECULATIVE
        rounds = N_TOKENS // 2 if spec else 0
        metrics = RunMetrics(n_tokens=N_TOKENS, decode_s=N_TOKENS / speed, tokens_per_s=speed, ms_per_token=1000 / speed,
                             rounds=rounds, drafted=rounds * cell.k if spec else 0, accepted=rounds if spec else 0,
                             acceptance=1 / cell.k if spec else None, text="replayed")
        return self.setting.record(cell, metrics)

    def close(self) -> None:
        pass


@pytest.fixture
def replay(monkeypatch):
    """The engine's one line in the registry."""
    kind = EngineKind("replay", ReplayEngine.capabilities, "replay", "rp", f"{__name__}:ReplayEngine")
    monkeypatch.setattr(engine_registry, "KINDS", (*engine_registry.KINDS, kind))
    monkeypatch.setitem(engine_registry.ENGINES, "replay", kind)


def _sweep(pair, *args: str):
    result = invoke("sweep", *pair_args(pair), "--engine", "replay", "-K", "2,4", "--prompt-ids", "code-short,chat-short",
                    "-n", str(N_TOKENS), *args)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_fourth_engine_sweeps_resumes_repeats_and_reports(replay, tiny_pairs, isolated):
    pair = tiny_pairs["high"]
    _sweep(pair, "-r", "2", "--name", "rp")
    first = stored(isolated / "results" / "rp.jsonl")
    assert {r["config"]["engine"] for r in first} == {"replay"} and len(first) == 2 * 2 * 3  # prompts x reps x (alone, K=2, K=4)
    _sweep(pair, "-r", "3", "--name", "rp", "--resume")
    again = stored(isolated / "results" / "rp.jsonl")
    assert again[:len(first)] == first and len(again) == 3 * 2 * 3  # only the third repetition ran
    rows = json.loads(invoke("report", str(isolated / "results" / "rp.jsonl"), "--format", "json").stdout)
    gains = {r["k"]: r for r in rows if r["mode"] == "speculative"}
    assert gains[2]["verdict"] == "faster" and 38 < gains[2]["gain_pct"] < 42 and gains[2]["best_k"]
    assert gains[4]["verdict"] == "faster" and 18 < gains[4]["gain_pct"] < 22

    out = _sweep(pair, "-r", "auto", "--name", "auto")
    assert "-r auto: the verdicts the deploy lines rest on are decided" in out, out
    assert "deploy" in out and "K=2" in out


def test_the_fourth_engine_changes_nothing_for_the_others(replay):
    """Its line adds a name and nothing else: the others keep theirs, and `both` stays the two it was."""
    assert engine_registry.chosen("both") == ("python", "server")
    assert replace(engine_registry.kind("replay"), name="x").engine_class() is ReplayEngine
