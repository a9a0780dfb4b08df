"""Trackers (measure/trackers/) and the fields they fill (results/schema/run_fields.RUN_FIELDS), without the hardware.

RAPL is read from a temporary folder laid out like /sys/class/powercap (energy_uj, max_energy_range_uj, name), a
wraparound included; NVML through a small stand-in for pynvml (bookkeeping only: nothing is claimed from its numbers).
The real machine's sweep (no NVML, no /sys/class/powercap here) stores no energy and says so once.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from cli_helpers import at_width, invoke, pair_args, stored

from gguf_bench.measure import trackers
from gguf_bench.measure.trackers import device_memory, devices, energy
from gguf_bench.measure.trackers.nvml import open_nvml
from gguf_bench.results.presentation.report import render, rich_table
from gguf_bench.results.presentation.summary import summarize, to_frame
from gguf_bench.results.schema.parts.energy_spent import Energy
from gguf_bench.results.schema.parts.memory import DeviceMemory
from gguf_bench.results.schema.parts.offload import Offload
from gguf_bench.results.schema.parts.provenance import ModelFile, Models
from gguf_bench.results.schema.records import Mode, RunConfig, RunMetrics, RunRecord, parse, to_dict
from gguf_bench.results.schema.run_fields import run_row
from gguf_bench.runtimes.placement import Placement


def zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def cpu_run(n_tokens: int = 10, decode_s: float = 1.0, offload=None, mode: Mode = Mode.TARGET) -> RunRecord:
    return RunRecord(mode=mode, metrics=RunMetrics(n_tokens=n_tokens, decode_s=decode_s), offload=offload)


def marked(tracker) -> object:
    """The tracker through one run whose loop marks the decode's start (Tracked.on_round), as the Python engine's."""
    tracked = trackers.Tracked([tracker])
    with tracker:
        tracked.on_round([1], [False])
        tracked.on_round([2], [False])  # only the first call marks
    return tracker


def test_rapl_adds_the_packages_and_unwraps_a_counter(tmp_path):
    pkg0 = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000, 10_000_000)
    pkg1 = zone(tmp_path, "intel-rapl:1", "package-1", 9_500_000, 10_000_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5, 10_000_000)  # a subzone: inside package-0's figure, not added again
    counter, why = energy.rapl_counter(tmp_path)
    assert why == "" and counter.domains == ["rapl:package-0", "rapl:package-1"]
    with energy.EnergyTracker(energy.Found([counter])) as t:
        (pkg0 / "energy_uj").write_text("3500000\n")  # +2.5 J
        (pkg1 / "energy_uj").write_text("500000\n")  # wrapped at 10 J: +1.0 J
    e = t.energy(cpu_run())
    assert e.joules is None and e.missing == "the run generated no token (no decode window)"  # never marked
    t.readings.insert(1, t.readings[0])  # as if marked at the start: the whole block is the decode
    e = t.energy(cpu_run())
    assert e.joules == pytest.approx(3.5) and e.prompt_joules == 0.0 and e.window == "decode"
    assert e.source == "rapl:package-0+rapl:package-1" and e.devices == ["CPU"] and e.missing is None


def test_rapl_missing_or_unreadable_is_no_counter(tmp_path):
    assert energy.rapl_counter(tmp_path / "nothing") == (None, f"no RAPL ({tmp_path / 'nothing'} does not exist: no CPU "
                                                               "energy counter on this machine, as on most virtual machines)")
    assert energy.rapl_counter(tmp_path)[0] is None  # no package zone
    z = zone(tmp_path, "intel-rapl:0", "package-0", 1, 10)
    (z / "max_energy_range_uj").unlink()
    (z / "max_energy_range_uj").mkdir()  # a range that cannot be read: no counter (a wrap could not be undone), no "0"
    counter, why = energy.rapl_counter(tmp_path)
    assert counter is None and why.startswith("RAPL is not readable here (IsADirectoryError")
    (z / "max_energy_range_uj").rmdir()
    (z / "max_energy_range_uj").write_text("10\n")
    (z / "energy_uj").unlink()
    (z / "energy_uj").mkdir()  # as unreadable as a root-only file (tests run as root, where chmod stops nothing)
    counter, why = energy.rapl_counter(tmp_path)
    assert counter is None and why.startswith("RAPL is not readable here")
    assert why.endswith(f"to count the CPU, run as root or `sudo chmod o+r {tmp_path}/intel-rapl:*/energy_uj` (until the "
                        "next boot))")  # what to do, in the sweep's line


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

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}abc-0000"

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.mj[h] += (1500, 500)[h]
        return self.mj[h]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(h + 1) * 1024 * 1024 * 100, total=1024 * 1024 * 1000)


class FakeRapl:
    """A stand-in for the RAPL packages: package-0's counter goes up by 0.25 J per reading."""

    kind, domains = "rapl", ["rapl:package-0"]

    def __init__(self):
        self.uj = 0.0

    def read(self) -> list[float]:
        self.uj += 250_000
        return [self.uj]

    def joules(self, before, after):
        return [(a - b) / 1e6 for b, a in zip(before, after)]


def on_gpu(device: str = "CUDA0") -> Offload:
    """An offload whose target has buffers on `device` (llama.cpp's read-back)."""
    return Offload("5/5", "-", Placement("5/5", model_mib={device: 30.0, "CPU_Mapped": 2.0}), None)


def test_counters_covering_every_used_device_store_the_decode_energy_of_those_only(monkeypatch):
    """A run on CUDA0 and the CPU: RAPL for the CPU and GPU0's counter; GPU1, idle, is read but not added."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    nv = open_nvml(FakeNvml())
    t = marked(energy.EnergyTracker(energy.Found([energy.NvmlCounter(nv), FakeRapl()], nv=nv)))
    e = t.fill(cpu_run(offload=on_gpu())).energy
    assert e.devices == ["CPU", "CUDA0"] and e.counters == ["nvml:GPU0", "nvml:GPU1", "rapl:package-0"]
    assert e.source == "rapl:package-0+nvml:GPU0" and e.window == "decode"
    assert e.joules == pytest.approx(1.5 + 0.25) and e.prompt_joules == pytest.approx(1.5 + 0.25)  # one reading each
    row = run_row(t.fill(cpu_run(offload=on_gpu())))
    assert row["joules_per_token"] == pytest.approx(0.175) and row["tokens_per_joule"] == pytest.approx(1 / 0.175)
    assert row["energy_source"] == "rapl:package-0+nvml:GPU0" and row["prompt_energy_j"] == pytest.approx(1.75)


def test_gpu_only_counters_on_a_cpu_run_store_no_energy_and_say_what_is_missing():
    nv = open_nvml(FakeNvml())
    found = energy.Found([energy.NvmlCounter(nv)], {"rapl": "RAPL is not readable here (PermissionError: needs root "
                                                           "on most kernels)"}, nv)
    record = marked(energy.EnergyTracker(found)).fill(cpu_run())
    e = record.energy
    assert e.joules is None and e.source is None and e.devices == ["CPU"] and e.counters == ["nvml:GPU0", "nvml:GPU1"]
    line = ("energy: not measured: the run used the CPU; RAPL is not readable here (PermissionError: needs root on "
            "most kernels)")
    said: set[str] = set()
    assert trackers.notes(record, said) == [line] and trackers.notes(record, said) == []  # once per sweep
    assert run_row(record)["joules_per_token"] is None and run_row(record)["tokens_per_joule"] is None
    cpu_only = marked(energy.EnergyTracker(energy.Found([FakeRapl()], {"nvml": "no NVML (not installed)"})))
    e = cpu_only.fill(cpu_run(offload=on_gpu())).energy  # the other way round: a GPU run, RAPL only
    assert e.joules is None and e.missing == "the run used CUDA0 and the CPU; no NVML (not installed)"


def test_devices_without_a_counter_here_store_no_energy():
    found = energy.Found([FakeRapl()], {"nvml": "no NVML"})
    for device, why in (("Vulkan0", "no counter here reads Vulkan0"), ("RPC0[127.0.0.1:50052]", "an RPC server's")):
        e = marked(energy.EnergyTracker(found)).fill(cpu_run(offload=on_gpu(device))).energy
        assert e.joules is None and e.devices == ["CPU", device] and why in e.missing
    draft_alone = cpu_run(mode=Mode.DRAFT, offload=on_gpu())  # the target's GPU buffers are not the draft's
    assert marked(energy.EnergyTracker(found)).fill(draft_alone).energy.joules == pytest.approx(0.25)


def test_a_cuda_device_is_its_visible_nvml_device():
    nv = open_nvml(FakeNvml())
    assert devices.nvml_index("CUDA0", nv, {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == (1, "")
    assert devices.nvml_index("CUDA0", nv, {"CUDA_VISIBLE_DEVICES": "GPU-1abc"}) == (1, "")
    index, why = devices.nvml_index("CUDA1", nv, {})
    assert index is None and "set CUDA_DEVICE_ORDER=PCI_BUS_ID" in why  # 2 GPUs in CUDA's default order
    assert devices.nvml_index("CUDA1", nv, {"CUDA_VISIBLE_DEVICES": "0"})[0] is None  # only one visible
    assert devices.nvml_index("CUDA0", nv, {"CUDA_VISIBLE_DEVICES": "GPU-9"})[1] == "no NVML device has the UUID GPU-9"


def test_llama_server_energy_is_the_requests_decode_share_and_zero_tokens_give_no_per_joule():
    """No mark (a request answered whole): the block's joules times decode time over the block's time, said so."""
    t = energy.EnergyTracker(energy.Found([FakeRapl()]), share=True)
    with t:
        pass
    t.readings[-1] = (t.readings[-1][0], t.readings[0][1] + 2.0)  # a 2-second request
    record = t.fill(cpu_run(decode_s=0.5))
    assert record.energy.window == "decode share" and record.energy.joules == pytest.approx(0.25 * 0.5 / 2.0)
    assert "the request's joules times its decode time's share" in run_row(record)["energy_source"]
    none = t.fill(cpu_run(n_tokens=0))
    assert run_row(none)["joules_per_token"] is None and run_row(none)["tokens_per_joule"] is None


def test_no_nvml_device_is_a_reason_not_an_error():
    class LibraryNotFound(Exception):
        pass
    nv = open_nvml(FakeNvml(fail=LibraryNotFound("NVML Shared Library Not Found")))
    assert nv.module is None and "no NVML device (LibraryNotFound" in nv.why_not
    assert energy.nvml_counter(nv) == (None, nv.why_not) and device_memory.MemoryTracker.if_available(nv) is None
    found = energy.find_counters(nv, Path("/nonexistent/powercap"))
    assert found.counters == [] and found.why == {"nvml": nv.why_not,
                                                  "rapl": "no RAPL (/nonexistent/powercap does not exist: no CPU "
                                                          "energy counter on this machine, as on most virtual machines)"}


def test_memory_is_each_used_devices_reading_after_the_run_never_a_sum(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    nv = open_nvml(FakeNvml())
    with device_memory.MemoryTracker(nv) as m:
        pass
    record = m.fill(cpu_run(offload=on_gpu()))  # CUDA0 is NVML's GPU1 here; GPU0 is not the run's
    assert [(d.device, d.used_after_mib, d.total_mib) for d in record.memory] == [("GPU1: Fake GPU", 200, 1000)]
    assert m.fill(cpu_run()).memory is None  # a CPU run used no GPU
    two = replace(record, memory=[DeviceMemory("GPU0: X", 10.0, 150.0, 1000.0), DeviceMemory("GPU1: X", 5.0, 120.0, 1.0)])
    assert run_row(two)["device_used_after_mib"] == 150.0  # the fullest device's, not 270


def test_energy_stored_before_issue_56_loads_and_shows_no_energy_per_token():
    """As the previous version's `to_dict` wrote it: every counter added up, around prompt and decode."""
    old = to_dict(cpu_run())
    old["energy"] = {"joules": 2.0, "source": "nvml", "domains": ["GPU0", "GPU1"], "wall_s": 0.5}
    old["memory"] = [{"device": "GPU0: Fake GPU", "used_before_mib": 100.0, "used_after_mib": 100.0, "total_mib": 1e3}]
    run = parse(old)
    assert run.energy.counters == ["nvml:GPU0", "nvml:GPU1"] and run.energy.window == "prompt+decode"
    assert run.energy.joules == 2.0 and run.energy.devices is None  # kept as stored
    row = run_row(run)
    assert row["energy_j"] is None and row["joules_per_token"] is None and row["energy_source"] is None
    assert row["device_used_after_mib"] == 100.0


def test_without_a_counter_the_run_stores_what_it_used_and_no_joules(monkeypatch):
    monkeypatch.setattr(energy, "counters", lambda: energy.Found([], {"nvml": "no NVML", "rapl": "no RAPL"}))
    with trackers.track(("load", "energy")) as tracked:
        pass
    record = tracked.fill(cpu_run())
    assert record.load is not None and record.energy.joules is None
    assert trackers.notes(record, set()) == ["energy: not measured: the run used the CPU; no RAPL"]


def spec_record(mode: Mode, tps: float, joules: float | None, prompt: str = "p", rep: int = 0) -> RunRecord:
    metrics = RunMetrics(n_tokens=10, decode_s=10 / tps, tokens_per_s=tps, accepted=6 if mode == Mode.SPECULATIVE else 0,
                         drafted=8 if mode == Mode.SPECULATIVE else 0)
    return RunRecord(pair="P", mode=mode, config=RunConfig(k=4 if mode == Mode.SPECULATIVE else 0, prompt_id=prompt,
                                                           repetition=rep), metrics=metrics,
                     energy=Energy(joules, "rapl:package-0", 1.0, ["rapl:package-0"], ["CPU"]) if joules is not None
                     else None)


def test_energy_fields_flatten_fold_and_show_a_gain_beside_the_speed_gain():
    records = [spec_record(Mode.TARGET, 10.0, 5.0), spec_record(Mode.SPECULATIVE, 15.0, 4.0)]
    assert parse(to_dict(records[1])) == records[1]  # stored and read back
    row = run_row(records[1])
    assert row["joules_per_token"] == pytest.approx(0.4) and row["joules_per_accepted"] == pytest.approx(4 / 6)
    assert row["tokens_per_joule"] == pytest.approx(2.5) and row["energy_source"] == "rapl:package-0"
    s = summarize(to_frame(records)).set_index("mode")
    assert s.loc["speculative", "tokens_per_joule_gain_pct"] == pytest.approx(25.0)  # 2.5 tokens/J against 2.0
    assert s.loc["speculative", "gain_pct"] == pytest.approx(50.0)
    from rich.console import Console
    console = Console(width=160, record=True)
    console.print(rich_table(s.reset_index(), width=160))
    text = console.export_text()
    assert "energy" in text and "J/tok" in text and "+25.0%" in text and "J/tok: joules per generated token" in text
    assert "from rapl:package-0 (whole devices" in " ".join(text.split())  # the caption names the counters
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
    pl = Placement("5/5", model_mib={"CUDA0": 30.0, "CPU_Mapped": 2.0}, kv_mib={"CUDA0": 4.0}, compute_mib={"CUDA0": 6.0})
    cpu = Placement("0/5", model_mib={"CPU_Mapped": 30.0})
    run = RunRecord(mode=Mode.TARGET, offload=Offload("5/5", "0/5", pl, cpu), metrics=RunMetrics(tokens_per_s=1.0),
                    memory=[DeviceMemory("GPU0: X", 100.0, 120.0, 1000.0)])
    row = run_row(run)
    assert row["buffers_mib"] == pytest.approx(40.0) and row["device_used_after_mib"] == pytest.approx(120.0)
    assert run_row(RunRecord(mode=Mode.DRAFT, offload=Offload("5/5", "0/5", pl, cpu)))["buffers_mib"] is None


def test_a_sweep_here_stores_no_energy_and_says_why_once(tiny_pairs, tmp_path):
    """This machine has no NVML device and no /sys/class/powercap: the records carry no joules, and the sweep prints one
    'energy: not measured' line, not one per cell."""
    if energy.counters().counters:
        pytest.skip("this machine has an energy counter")
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short",
                    "-r", "2", "--name", "energy")
    assert result.exit_code == 0, result.output
    assert result.output.count("energy: not measured: the run used the CPU; no RAPL (") == 1
    records = stored(tmp_path / "results" / "energy.jsonl")
    assert len(records) > 2 and all(r["load"] for r in records)
    assert all(r["energy"]["joules"] is None and r["energy"]["devices"] == ["CPU"] for r in records)
    frame = to_frame(records)
    assert frame["joules_per_token"].isna().all()
    assert not any("joule" in c for c in summarize(frame).columns)
    assert isinstance(frame, pd.DataFrame)


def test_a_server_sweep_measures_each_cell_inside_the_trackers(tiny_pairs, server_bin, tmp_path):
    """llama-server's cells go through the same trackers: the load tracker counts the server's CPU time, and one
    concurrent round is one tracked cell; no energy is stored here either."""
    if energy.counters().counters:
        pytest.skip("this machine has an energy counter")
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short",
                    "--engine", "server", "--server-bin", str(server_bin), "--parallel", "1,2", "--clients", "2",
                    "--name", "srv")
    assert result.exit_code == 0, result.output
    assert result.output.count("energy: not measured") == 1
    records = stored(tmp_path / "results" / "srv.jsonl")
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert all(r["load"]["cpu_s"] is not None and r["load"]["main_cpu_s"] is None for r in records)  # the server's
    assert all(r["energy"]["joules"] is None and r["memory"] is None for r in records)


def test_a_sweep_stores_energy_only_where_stand_in_counters_cover_the_cpu(tiny_pairs, tmp_path, monkeypatch):
    """The real Python engine on a CPU build, with stand-in counters: GPU-only ones store no joules and the sweep says
    so once; a CPU package's store each run's decode joules (read at the loop's first token) and the prompt's apart."""
    args = [*pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short", "-r", "1"]
    nv = open_nvml(FakeNvml())
    monkeypatch.setattr(energy, "counters", lambda: energy.Found([energy.NvmlCounter(nv)], {"rapl": "RAPL stand-in"}, nv))
    result = invoke("sweep", *args, "--name", "gpu-only")
    assert result.exit_code == 0, result.output
    assert result.output.count("energy: not measured: the run used the CPU; RAPL stand-in") == 1
    assert all(r["energy"]["joules"] is None for r in stored(tmp_path / "results" / "gpu-only.jsonl"))
    monkeypatch.setattr(energy, "counters", lambda: energy.Found([FakeRapl()]))
    result = invoke("sweep", *args, "--name", "cpu")
    assert result.exit_code == 0 and "energy: not measured" not in result.output, result.output
    runs = stored(tmp_path / "results" / "cpu.jsonl")
    assert len(runs) == 3 and all(r["energy"]["window"] == "decode" for r in runs)
    assert all(r["energy"]["joules"] == pytest.approx(0.25) and r["energy"]["prompt_joules"] == pytest.approx(0.25)
               for r in runs)  # one stand-in reading per window: the mark was taken between the two


# --- GPU only (issue 75): NVML reads every GPU the run used, nothing reads the CPU -------------------------------------

UNREADABLE = ("RAPL is not readable here (PermissionError: needs root on most kernels; to count the CPU, run as root or "
              "`sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj` (until the next boot))")


def gpu_only_found(monkeypatch) -> energy.Found:
    """NVML's two stand-in GPUs, RAPL readable by root only (a user's GPU machine); CUDA0 is NVML's GPU0."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    nv = open_nvml(FakeNvml())
    return energy.Found([energy.NvmlCounter(nv)], {"rapl": UNREADABLE}, nv)


def test_gpus_counted_without_the_cpu_store_the_gpus_joules_apart_never_as_the_runs(monkeypatch):
    found = gpu_only_found(monkeypatch)
    record = marked(energy.EnergyTracker(found)).fill(cpu_run(offload=on_gpu()))
    e = record.energy
    assert e.joules is None and e.source is None and e.prompt_joules is None  # the run's: not measured
    assert e.gpu_joules == pytest.approx(1.5) and e.gpu_prompt_joules == pytest.approx(1.5)  # GPU0's, one reading each
    assert e.gpu_source == "nvml:GPU0" and e.window == "decode" and e.wall_s is not None  # GPU1, unused, not added
    assert e.missing == f"the run used CUDA0 and the CPU; {UNREADABLE}"
    assert parse(to_dict(record)) == record  # stored and read back
    row = run_row(record)
    assert row["energy_j"] is None and row["joules_per_token"] is None and row["tokens_per_joule"] is None
    assert row["energy_source"] is None and row["prompt_energy_j"] is None
    assert row["gpu_energy_j"] == pytest.approx(1.5) and row["gpu_joules_per_token"] == pytest.approx(0.15)
    assert row["gpu_tokens_per_joule"] == pytest.approx(10 / 1.5) and row["gpu_energy_source"] == "nvml:GPU0"
    assert row["gpu_prompt_energy_j"] == pytest.approx(1.5)
    assert trackers.notes(record, set()) == [f"energy: GPU only (nvml:GPU0), the CPU not counted: the run used CUDA0 and "
                                             f"the CPU; {UNREADABLE}"]
    assert "sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj" in trackers.notes(record, set())[0]


def test_no_gpu_only_figure_where_the_run_used_no_gpu_or_one_no_counter_reads_or_the_cpu_is_counted(monkeypatch):
    found = gpu_only_found(monkeypatch)
    cpu = marked(energy.EnergyTracker(found)).fill(cpu_run()).energy  # the CPU alone: nothing of it is counted
    assert cpu.gpu_joules is None and cpu.joules is None and energy.note(cpu).startswith("energy: not measured: ")
    both = Offload("5/5", "-", Placement("5/5", model_mib={"CUDA0": 30.0, "Vulkan0": 30.0}), None)
    vulkan = marked(energy.EnergyTracker(found)).fill(cpu_run(offload=both)).energy
    assert vulkan.gpu_joules is None and vulkan.joules is None  # a GPU no counter reads: not CUDA0's as the GPUs' share
    assert vulkan.missing.startswith("the run used CUDA0, Vulkan0 and the CPU; ") and "not measured" in energy.note(vulkan)
    whole = marked(energy.EnergyTracker(replace(found, counters=[*found.counters, FakeRapl()], why={})))
    e = whole.fill(cpu_run(offload=on_gpu())).energy  # every device counted: the run's joules, as before issue 75
    assert e.joules == pytest.approx(1.75) and e.gpu_joules is None and e.missing is None and energy.note(e) is None
    assert run_row(whole.fill(cpu_run(offload=on_gpu())))["gpu_joules_per_token"] is None
    failed = marked(energy.EnergyTracker(found)).fill(RunRecord(mode=Mode.TARGET, offload=on_gpu()))
    assert failed.energy.gpu_joules is None  # a run without metrics: nothing to divide


def test_llama_server_gpu_only_energy_is_the_requests_decode_share_of_the_gpus(monkeypatch):
    t = energy.EnergyTracker(gpu_only_found(monkeypatch), share=True)
    with t:
        pass
    t.readings[-1] = (t.readings[-1][0], t.readings[0][1] + 2.0)  # a 2-second request
    record = t.fill(cpu_run(decode_s=0.5, offload=on_gpu()))
    e = record.energy
    assert e.window == "decode share" and e.joules is None and e.gpu_joules == pytest.approx(1.5 * 0.5 / 2.0)
    assert run_row(record)["gpu_energy_source"] == ("nvml:GPU0 (llama-server: the request's joules times its decode "
                                                    "time's share)") and run_row(record)["energy_source"] is None


def test_a_record_from_before_issue_75_reads_with_no_gpu_figure():
    stored_then = to_dict(spec_record(Mode.TARGET, 10.0, 5.0))
    for key in ("gpu_joules", "gpu_prompt_joules", "gpu_source"):
        del stored_then["energy"][key]
    run = parse(stored_then)
    assert run.energy.joules == 5.0 and run.energy.gpu_joules is None and run.energy.gpu_source is None
    assert run_row(run)["joules_per_token"] == pytest.approx(0.5) and run_row(run)["gpu_joules_per_token"] is None


def gpu_only_records(found: energy.Found, target: float = 10.0, spec: float = 15.0) -> list[RunRecord]:
    """The target alone and K=4, two repetitions each, on CUDA0, their energy filled by the tracker from `found`."""
    out = []
    for rep in (0, 1):
        for mode, tps in ((Mode.TARGET, target), (Mode.SPECULATIVE, spec)):
            run = replace(spec_record(mode, tps, None, rep=rep), offload=on_gpu(),
                          models=Models(ModelFile("t.gguf"), ModelFile("d.gguf")))
            out.append(marked(energy.EnergyTracker(found)).fill(run))
    return out


def write(path: Path, records: list[RunRecord]) -> Path:
    path.write_text("".join(json.dumps(to_dict(r), default=str) + "\n" for r in records))
    return path


def test_report_prints_gpu_only_joules_per_token_for_the_target_alone_and_each_k(monkeypatch, isolated, tmp_path):
    """The real `report` on runs whose energy is the GPUs' only: every format says so, no whole-run figure appears."""
    at_width(monkeypatch, 220)
    results = write(tmp_path / "gpu.jsonl", gpu_only_records(gpu_only_found(monkeypatch)))
    table = invoke("report", str(results))
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    header = next(line for line in lines if line.startswith("run ") and "tokens/s" in line)
    assert "J/tok (GPU only)" in header and "J/acc (GPU only)" in header and "energy (GPU only)" in header
    assert not re.search(r"J/tok(?! \(GPU only\))|J/acc(?! \(GPU only\))|energy(?! \(GPU only\))", header)

    def cell(row: str, heading: str) -> str:  # the table's cells are right-aligned under their heading
        end = header.index(heading) + len(heading)
        return next(line for line in lines if line.startswith(row))[:end].split()[-1]
    assert [cell(row, "J/tok (GPU only)") for row in ("target alone", "K=4")] == ["0.15", "0.15"]  # 1.5 J, 10 tokens
    assert cell("K=4", "J/acc (GPU only)") == "0.25" and "15.00 ± 0.00" in next(x for x in lines if x.startswith("K=4"))
    caption = " ".join(table.output.split())
    assert "J/tok (GPU only), J/acc (GPU only): joules per generated token" in caption and "from nvml:GPU0" in caption
    assert "never compare them with a whole-run J/tok" in caption
    data = json.loads(invoke("report", str(results), "--format", "json").output)
    assert [(r["mode"], r["gpu_joules_per_token"]) for r in data] == [("target", pytest.approx(0.15)),
                                                                      ("speculative", pytest.approx(0.15))]
    assert all(r["gpu_tokens_per_joule"] == pytest.approx(10 / 1.5) and r["gpu_energy_source"] == "nvml:GPU0"
               and "joules_per_token" not in r and "tokens_per_joule" not in r for r in data)
    assert data[1]["gpu_tokens_per_joule_gain_pct"] == pytest.approx(0.0) and data[1]["gpu_joules_per_accepted"] == 0.25
    csv = pd.read_csv(io.StringIO(invoke("report", str(results), "--format", "csv").output))
    assert list(csv["gpu_joules_per_token"]) == pytest.approx([0.15, 0.15]) and "joules_per_token" not in csv
    md = invoke("report", str(results), "--format", "md").output
    assert "| energy (GPU only) gain % |" in md.splitlines()[0] and "| energy gain % |" not in md


def test_a_report_never_sets_a_gpu_only_figure_against_a_whole_run_one(monkeypatch, isolated, tmp_path):
    """Whole-run records report as before (no GPU-only column); a file mixing the two keeps them in their own columns,
    and neither gain compares one with the other."""
    at_width(monkeypatch, 220)
    found = gpu_only_found(monkeypatch)
    whole = replace(found, counters=[*found.counters, FakeRapl()], why={})
    results = write(tmp_path / "whole.jsonl", gpu_only_records(whole))
    data = json.loads(invoke("report", str(results), "--format", "json").output)
    assert all(r["joules_per_token"] == pytest.approx(0.175) and not [k for k in r if k.startswith("gpu_")] for r in data)
    assert "(GPU only)" not in invoke("report", str(results)).output
    mixed = gpu_only_records(whole)[:1] + gpu_only_records(found)[1:2]  # the target alone whole, K=4 GPU only
    data = json.loads(invoke("report", str(write(tmp_path / "mixed.jsonl", mixed)), "--format", "json").output)
    target, spec = data
    assert target["joules_per_token"] == pytest.approx(0.175) and target["gpu_joules_per_token"] is None
    assert spec["gpu_joules_per_token"] == pytest.approx(0.15) and spec["joules_per_token"] is None
    assert spec["tokens_per_joule_gain_pct"] is None and spec["gpu_tokens_per_joule_gain_pct"] is None  # never across


def test_a_sweep_with_gpu_only_counters_on_a_cpu_run_stores_no_gpu_figure(tiny_pairs, tmp_path, monkeypatch):
    """The real Python engine on this CPU build through the counters' seam: NVML's GPUs read, RAPL not, and the run used
    no GPU: nothing stored as the GPUs' share (they did none of the work) and the line says not measured, once."""
    found = gpu_only_found(monkeypatch)
    monkeypatch.setattr(energy, "counters", lambda: found)
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "-t", "1", "--prompt-ids", "code-short",
                    "-r", "1", "--name", "gpu-cpu")
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).count(f"energy: not measured: the run used the CPU; {UNREADABLE}") == 1
    runs = stored(tmp_path / "results" / "gpu-cpu.jsonl")
    assert runs and all(r["energy"]["gpu_joules"] is None and r["energy"]["joules"] is None for r in runs)
