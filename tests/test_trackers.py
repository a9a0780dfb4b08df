"""Trackers (measure/trackers/) and the fields they fill (results/records.RUN_FIELDS), without the hardware.

RAPL is read from a temporary folder laid out like /sys/class/powercap (energy_uj, max_energy_range_uj, name), a
wraparound included; NVML through a small stand-in for pynvml (bookkeeping only: nothing is claimed from its numbers).
The real machine's sweep (no NVML, no /sys/class/powercap here) stores no energy and says so once.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from cli_helpers import invoke, pair_args, stored

from gguf_bench.measure import trackers
from gguf_bench.measure.trackers import energy, memory
from gguf_bench.measure.trackers.nvml import open_nvml
from gguf_bench.results.records import DeviceMemory, Energy, Mode, RunConfig, RunMetrics, RunRecord, parse, run_row, to_dict
from gguf_bench.results.report import render, rich_table
from gguf_bench.results.summary import summarize, to_frame


def zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_adds_the_packages_and_unwraps_a_counter(tmp_path):
    pkg0 = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000, 10_000_000)
    pkg1 = zone(tmp_path, "intel-rapl:1", "package-1", 9_500_000, 10_000_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5, 10_000_000)  # a subzone: inside package-0's figure, not added again
    counter, why = energy.rapl_counter(tmp_path)
    assert why == "" and counter.domains == ["package-0", "package-1"]
    with energy.EnergyTracker([counter]) as t:
        (pkg0 / "energy_uj").write_text("3500000\n")  # +2.5 J
        (pkg1 / "energy_uj").write_text("500000\n")  # wrapped at 10 J: +1.0 J
    assert t.energy.joules == pytest.approx(3.5)
    assert t.energy.source == "rapl" and t.energy.domains == ["package-0", "package-1"]


def test_rapl_missing_or_unreadable_is_no_counter(tmp_path):
    assert energy.rapl_counter(tmp_path / "nothing") == (None, f"no RAPL ({tmp_path / 'nothing'} does not exist)")
    assert energy.rapl_counter(tmp_path)[0] is None  # no package zone
    z = tmp_path / "intel-rapl:0"
    z.mkdir()
    (z / "energy_uj").mkdir()  # as unreadable as a root-only file (tests run as root, where chmod stops nothing)
    counter, why = energy.rapl_counter(tmp_path)
    assert counter is None and why.startswith("RAPL not readable")


class FakeNvml:
    """A stand-in for pynvml: two devices whose energy counters (mJ) go up by 1500 and 500 per reading."""

    def __init__(self, fail: Exception | None = None):
        self.fail, self.mj = fail, [1000, 2000]

    def nvmlInit(self):
        if self.fail:
            raise self.fail

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"Fake GPU"

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.mj[h] += (1500, 500)[h]
        return self.mj[h]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(h + 1) * 1024 * 1024 * 100, total=1024 * 1024 * 1000)


def test_nvml_energy_and_memory_bookkeeping_with_a_stand_in():
    nv = open_nvml(FakeNvml())
    assert nv.names == ("GPU0: Fake GPU", "GPU1: Fake GPU")
    counter, why = energy.nvml_counter(nv)
    assert why == "" and counter.domains == ["GPU0", "GPU1"]
    with energy.EnergyTracker([counter]) as e, memory.MemoryTracker(nv) as m:
        pass
    assert e.energy.joules == pytest.approx(2.0) and e.energy.source == "nvml"  # (1500 + 500) mJ
    assert [(d.device, d.peak_mib, d.total_mib) for d in m.memory] == [("GPU0: Fake GPU", 100, 1000),
                                                                       ("GPU1: Fake GPU", 200, 1000)]
    record = m.fill(e.fill(RunRecord()))
    assert record.energy == e.energy and record.memory == m.memory


def test_no_nvml_device_is_a_reason_not_an_error():
    class LibraryNotFound(Exception):
        pass
    nv = open_nvml(FakeNvml(fail=LibraryNotFound("NVML Shared Library Not Found")))
    assert nv.module is None and "no NVML device (LibraryNotFound" in nv.why_not
    assert energy.nvml_counter(nv) == (None, nv.why_not) and memory.MemoryTracker.if_available(nv) is None
    found, why = energy.find_counters(nv, Path("/nonexistent/powercap"))
    assert found == [] and why == f"{nv.why_not}; no RAPL (/nonexistent/powercap does not exist)"


def test_without_a_counter_the_energy_tracker_is_left_out_and_nothing_is_stored(monkeypatch):
    monkeypatch.setattr(energy, "counters", lambda: ([], "no NVML; no RAPL"))
    assert trackers.notes() == ["energy: not measured, no energy counter on this machine (no NVML; no RAPL)"]
    with trackers.track(("load", "energy")) as tracked:
        pass
    assert [t.name for t in tracked.trackers] == ["load"]
    record = tracked.fill(RunRecord())
    assert record.load is not None and record.energy is None


def spec_record(mode: Mode, tps: float, joules: float | None, prompt: str = "p", rep: int = 0) -> RunRecord:
    metrics = RunMetrics(n_tokens=10, decode_s=10 / tps, tokens_per_s=tps, accepted=6 if mode == Mode.SPECULATIVE else 0,
                         drafted=8 if mode == Mode.SPECULATIVE else 0)
    return RunRecord(pair="P", mode=mode, config=RunConfig(k=4 if mode == Mode.SPECULATIVE else 0, prompt_id=prompt,
                                                           repetition=rep), metrics=metrics,
                     energy=Energy(joules, "rapl", ["package-0"], 1.0) if joules is not None else None)


def test_energy_fields_flatten_fold_and_show_a_gain_beside_the_speed_gain():
    records = [spec_record(Mode.TARGET, 10.0, 5.0), spec_record(Mode.SPECULATIVE, 15.0, 4.0)]
    assert parse(to_dict(records[1])) == records[1]  # stored and read back
    row = run_row(records[1])
    assert row["joules_per_token"] == pytest.approx(0.4) and row["joules_per_accepted"] == pytest.approx(4 / 6)
    assert row["tokens_per_joule"] == pytest.approx(2.5) and row["energy_source"] == "rapl"
    s = summarize(to_frame(records)).set_index("mode")
    assert s.loc["speculative", "tokens_per_joule_gain_pct"] == pytest.approx(25.0)  # 2.5 tokens/J against 2.0
    assert s.loc["speculative", "gain_pct"] == pytest.approx(50.0)
    from rich.console import Console
    console = Console(width=160, record=True)
    console.print(rich_table(s.reset_index(), width=160))
    text = console.export_text()
    assert "energy" in text and "J/tok" in text and "+25.0%" in text and "J/tok: joules per generated token" in text
    narrow = Console(width=60, record=True)
    narrow.print(rich_table(s.reset_index(), width=60))
    header = next(line for line in narrow.export_text().splitlines() if "tokens/s" in line)
    assert "energy" in header and "J/tok" not in header  # too narrow: the per-token columns go first, the gain last
    md = render(s.reset_index(), "md")
    assert "| gain % | energy gain % |" in md.splitlines()[0] and "+25.0%" in md


def test_runs_without_energy_have_no_energy_columns_and_never_a_zero():
    records = [spec_record(Mode.TARGET, 10.0, None), spec_record(Mode.SPECULATIVE, 15.0, None)]
    assert run_row(records[0])["joules_per_token"] is None
    s = summarize(to_frame(records))
    assert not [c for c in s.columns if "joule" in c or c.startswith("energy") or "mib" in c]


def test_device_buffers_come_from_the_offload_read_back():
    from gguf_bench.engines.placement import Placement
    from gguf_bench.results.records import Offload
    pl = Placement("5/5", model_mib={"CUDA0": 30.0, "CPU_Mapped": 2.0}, kv_mib={"CUDA0": 4.0}, compute_mib={"CUDA0": 6.0})
    cpu = Placement("0/5", model_mib={"CPU_Mapped": 30.0})
    run = RunRecord(mode=Mode.TARGET, offload=Offload("5/5", "0/5", pl, cpu), metrics=RunMetrics(tokens_per_s=1.0),
                    memory=[DeviceMemory("GPU0: X", 100.0, 120.0, 1000.0)])
    row = run_row(run)
    assert row["buffers_mib"] == pytest.approx(40.0) and row["device_peak_mib"] == pytest.approx(120.0)
    assert run_row(RunRecord(mode=Mode.DRAFT, offload=Offload("5/5", "0/5", pl, cpu)))["buffers_mib"] is None


def test_a_sweep_here_stores_no_energy_and_says_why_once(tiny_pairs, tmp_path):
    """This machine has no NVML device and no /sys/class/powercap: the records carry no energy, and the sweep prints one
    'energy: not measured' line, not one per cell."""
    if energy.counters()[0]:
        pytest.skip("this machine has an energy counter")
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short",
                    "-r", "2", "--name", "energy")
    assert result.exit_code == 0, result.output
    assert result.output.count("energy: not measured, no energy counter on this machine") == 1
    records = stored(tmp_path / "results" / "energy.jsonl")
    assert len(records) > 2 and all(r["energy"] is None for r in records) and all(r["load"] for r in records)
    frame = to_frame(records)
    assert frame["joules_per_token"].isna().all()
    assert not any("joule" in c for c in summarize(frame).columns)
    assert isinstance(frame, pd.DataFrame)


def test_a_server_sweep_measures_each_cell_inside_the_trackers(tiny_pairs, server_bin, tmp_path):
    """llama-server's cells go through the same trackers: the load tracker counts the server's CPU time, and one
    concurrent round is one tracked cell; no energy is stored here either."""
    if energy.counters()[0]:
        pytest.skip("this machine has an energy counter")
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short",
                    "--engine", "server", "--server-bin", str(server_bin), "--parallel", "1,2", "--clients", "2",
                    "--name", "srv")
    assert result.exit_code == 0, result.output
    assert result.output.count("energy: not measured") == 1
    records = stored(tmp_path / "results" / "srv.jsonl")
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert all(r["load"]["cpu_s"] is not None and r["load"]["main_cpu_s"] is None for r in records)  # the server's
    assert all(r["energy"] is None and r["memory"] is None for r in records)
