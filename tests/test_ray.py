"""Sweeps on Ray: a real local multi-node cluster (ray.cluster_utils.Cluster), no mocks.

The cluster lives on this machine only: a head node that runs no units (0 CPUs; the driver and the
ledger actor live there) and two worker nodes with 1 CPU and the custom resource `bench` each,
named node-a and node-b through $GGUF_BENCH_HOST, each with its own gguf-bench cache and HF_HOME
(no shared model cache). One cluster serves the whole module; the test that removes a node adds it back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from cli_helpers import stored
from ray.cluster_utils import Cluster
from typer.testing import CliRunner

from gguf_bench.cli.app import app
from gguf_bench.errors import ConfigError
from gguf_bench.measure.distributed import INSTALL_HINT, PairSource, RayOptions, parse_resources, run_ray_sweep, task_request
from gguf_bench.measure.inputs.prompts import builtin
from gguf_bench.measure.plan import Grid, cell_key, cells_for
from gguf_bench.measure.sweep import SweepEvents

runner = CliRunner()
HOSTS = ("node-a", "node-b")


@dataclass
class LocalCluster:
    cluster: Cluster
    nodes: dict  # host name -> ray._private.node.Node
    root: Path

    @property
    def address(self) -> str:
        return self.cluster.address

    def cache(self, host: str) -> Path:
        return self.root / host / "cache"

    def add(self, host: str) -> None:
        env = {"GGUF_BENCH_HOST": host, "GGUF_BENCH_CACHE": str(self.cache(host)), "HF_HOME": str(self.root / host / "hf")}
        self.nodes[host] = self.cluster.add_node(num_cpus=1, resources={"bench": 1}, env_vars=env)
        self.cluster.wait_for_nodes()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    made = LocalCluster(Cluster(initialize_head=True, head_node_args={"num_cpus": 0}), {}, root)
    try:
        for host in HOSTS:
            made.add(host)
        yield made
    finally:
        ray.shutdown()
        made.cluster.shutdown()


def ray_args(files, name, address, *extra, gpus=("--ray-gpus-per-task", "0")):
    return ["sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", name, "--prompt-ids", "code-short",
            "-n", "8", "-t", "1", "--ray", address, *gpus, "--ray-resources", "bench:1", *extra]


def node_of(record) -> str:
    """The host of a stored record (a dict) or of one the sweep hands its events (a RunRecord)."""
    return record["node"]["host"] if isinstance(record, dict) else record.host


# --- options, without a cluster -------------------------------------------------------------------


def test_parse_resources():
    assert parse_resources("gpu_box:1,fast:0.5") == ({"gpu_box": 1.0, "fast": 0.5}, None)
    assert parse_resources("accelerator_type:A100,bench") == ({"bench": 1.0}, "A100")
    assert parse_resources(None) == ({}, None)
    for bad, needle in [("box:0", "N > 0"), ("box:many", "N > 0"), ("GPU:1", "--ray-gpus-per-task"),
                        ("accelerator_type:", "needs a GPU model")]:
        with pytest.raises(ConfigError, match=needle):
            parse_resources(bad)


def test_task_request_follows_offload_threads_and_resources():
    grid = Grid(ks=[1], ngls=[0, 8], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short"]), threads=4)
    cpu_only, offloaded = grid.settings()
    assert task_request(cpu_only, grid, RayOptions()) == {"CPU": 4.0}
    assert task_request(offloaded, grid, RayOptions()) == {"CPU": 4.0, "GPU": 1.0}
    pinned = RayOptions(gpus_per_task=0.5, resources={"box": 1.0}, accelerator_type="A100")
    assert task_request(offloaded, grid, pinned) == {"CPU": 4.0, "GPU": 0.5, "box": 1.0, "accelerator_type:A100": 0.001}


def test_without_ray_the_flag_says_how_to_install_it(tiny_pairs):
    hide_ray = ("import sys; sys.modules['ray'] = None; from gguf_bench.cli.app import main; "
                f"sys.argv = ['gguf-bench'] + {ray_args(tiny_pairs['high'], 'noray', 'auto')!r}; main()")
    proc = subprocess.run([sys.executable, "-c", hide_ray], capture_output=True, text=True, env=os.environ.copy())
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"Error: {INSTALL_HINT}"]
    assert "pip install -e '.[ray]'" in proc.stderr


# --- sweeps on the cluster ----------------------------------------------------------------------------


def test_ray_sweep_runs_the_cells_of_a_local_sweep_once_each_on_both_nodes(cluster, tiny_pairs, isolated):
    files = tiny_pairs["middle"]
    on_ray = runner.invoke(app, ray_args(files, "on-ray", cluster.address, "-K", "1,2", "-ngl", "0,1"))
    assert on_ray.exit_code == 0, on_ray.output
    assert "on 2 hosts: node-a, node-b" in " ".join(on_ray.output.split())  # the title may wrap
    assert "cannot offload to a GPU, so -ngl/-ngld were ignored there" in on_ray.stderr  # -ngl 1 on a CPU build
    local = runner.invoke(app, ["sweep", "--target", str(files[0]), "--draft", str(files[1]), "--name", "local",
                                "--prompt-ids", "code-short", "-n", "8", "-t", "1", "-K", "1,2", "-ngl", "0,1"])
    assert local.exit_code == 0, local.output
    remote_records = stored(isolated / "results" / "on-ray.jsonl")
    local_records = stored(isolated / "results" / "local.jsonl")
    assert len(remote_records) == 2 * (2 + 2)  # two offload settings x (target, draft, K=1, K=2)
    assert Counter(r["cell"] for r in remote_records) == Counter(r["cell"] for r in local_records)
    assert set(Counter(r["cell"] for r in remote_records).values()) == {1}
    assert sorted((r["mode"], json.dumps(r["config"], sort_keys=True)) for r in remote_records) == \
        sorted((r["mode"], json.dumps(r["config"], sort_keys=True)) for r in local_records)
    assert all(r["error"] is None and r["metrics"]["n_tokens"] > 0 for r in remote_records)
    # each unit (offload setting) ran whole on one node, and the two units on the two nodes
    by_setting = {ngl: {node_of(r) for r in remote_records if r["config"]["ngl"] == ngl} for ngl in (0, 1)}
    assert all(len(hosts) == 1 for hosts in by_setting.values())
    assert set.union(*by_setting.values()) == set(HOSTS)
    node = remote_records[0]["node"]
    assert node["ip"] and node["hostname"] and len(node["ray_node_id"]) == 56
    assert node["llama_cpp_python"] == remote_records[0]["env"]["llama_cpp_python"] and node["gpu_offload"] is False
    assert local_records[0]["node"] is None


def test_a_unit_whose_node_is_removed_is_retried_elsewhere_without_loss_or_duplicates(cluster, tiny_pairs, isolated):
    files = tiny_pairs["low"]
    grid = Grid(ks=[1, 2, 3, 4], ngls=[0, 1], nglds=[0], temperatures=[0.0], prompts=builtin(["code-short", "chat-short"]),
                n_predict=48, threads=1)
    out = isolated / "results" / "removed.jsonl"
    removed: list[str] = []

    def cell(record):  # the first record from a node: take that node out of the cluster, its unit half done
        if not removed:
            removed.append(node_of(record))
            cluster.cluster.remove_node(cluster.nodes.pop(node_of(record)))

    try:
        summary = run_ray_sweep("removed", [PairSource.from_paths(*files)], grid, out, False,
                                RayOptions(cluster.address, gpus_per_task=0, resources={"bench": 1}), SweepEvents(cell=cell))
    finally:
        for host in HOSTS:
            if host not in cluster.nodes:
                cluster.add(host)
    records = stored(out)
    expected = {cell_key(f"{files[0].name}+{files[1].name}", _pair_files(files), c.config(grid, load), c.mode)
                for load in grid.settings() for c in cells_for(grid)}
    assert len(expected) == 2 * 2 * (2 + 4)
    assert Counter(r["cell"] for r in records) == Counter(expected)  # every cell, each exactly once
    assert summary.failures == [] and summary.written == len(expected)
    gone = removed[0]
    moved = [ngl for ngl in (0, 1) if {node_of(r) for r in records if r["config"]["ngl"] == ngl} == set(HOSTS)]
    assert len(moved) == 1, "the removed node's unit finishes on the other node"
    first_on_gone = [r for r in records if r["config"]["ngl"] == moved[0] and node_of(r) == gone]
    assert 1 <= len(first_on_gone) < 12


def _pair_files(files):
    from gguf_bench.measure.pair import PairFiles

    return PairFiles(files[0], files[1], f"{files[0].name}+{files[1].name}")


def test_resume_after_the_driver_is_killed_runs_only_the_missing_cells(cluster, tiny_pairs, isolated):
    args = ray_args(tiny_pairs["low"], "killed", cluster.address, "-K", "1-4", "-r", "2", "-n", "200", "--ctx-size", "512",
                    "-ngl", "0,1")
    out = isolated / "results" / "killed.jsonl"
    driver = subprocess.Popen([sys.executable, "-m", "gguf_bench.cli", *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=os.environ.copy())
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done_before = len(stored(out))
    total = 2 * 2 * (2 + 4)  # settings x repetitions x (target, draft, 4 K)
    assert 3 <= done_before < total, done_before
    resumed = runner.invoke(app, args + ["--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming: {done_before} cells already done, {total - done_before} to go" in resumed.output
    counts = Counter(r["cell"] for r in stored(out))
    assert len(counts) == total and set(counts.values()) == {1}


def test_registry_pairs_are_fetched_on_each_node_and_a_failing_unit_does_not_stop_the_sweep(cluster, tiny_pairs, isolated):
    """`good` has a derived draft (an F16 copy) that each node builds in its own cache; `bad` names a
    file that exists nowhere: its units fail with the node's name, the others' records are written."""
    target, draft = tiny_pairs["middle"]
    registry = isolated / "models.yaml"
    registry.write_text(f"""default: good
models:
  tiny: {{path: {target}}}
  tiny-draft: {{path: {draft}}}
  tiny-draft-f16: {{derive: {{from: tiny-draft, quant: F16}}}}
  missing: {{path: {isolated / 'missing.gguf'}}}
pairs:
  good: {{target: tiny, draft: tiny-draft-f16}}
  bad: {{target: missing, draft: tiny-draft}}
""")
    result = runner.invoke(app, ["sweep", "good", "bad", "--registry", str(registry), "--name", "reg", "--prompt-ids",
                                 "code-short", "-n", "8", "-t", "1", "-K", "2", "-ngl", "0,1", "--ray", cluster.address,
                                 "--ray-gpus-per-task", "0", "--ray-resources", "bench:1"])
    assert result.exit_code == 1
    assert "Error: 2 of 4 units failed (first: bad -ngl " in result.stderr
    assert "unit failed: bad -ngl 0 -ngld 0: on node-" in result.stderr and "--resume" in result.stderr
    assert f"file {isolated / 'missing.gguf'} does not exist" in result.stderr
    records = stored(isolated / "results" / "reg.jsonl")
    assert {r["pair"] for r in records} == {"good"} and len(records) == 2 * 3
    assert all(r["models"]["draft"]["file"] == "tiny-draft.F16.gguf" for r in records)
    for host in {node_of(r) for r in records}:  # built in the cache of the node that used it
        assert (cluster.cache(host) / "derived" / "tiny-draft.F16.gguf").is_file()
    assert not (isolated / "cache" / "derived").exists()  # the driver fetched nothing
    # resuming the good pair: the driver knows its file names from its records, so nothing is left to run
    again = runner.invoke(app, ["sweep", "good", "--registry", str(registry), "--name", "reg", "--prompt-ids", "code-short",
                                "-n", "8", "-t", "1", "-K", "2", "-ngl", "0,1", "--ray", "no-cluster-needed", "--resume"])
    assert again.exit_code == 0, again.output
    assert "resuming: 6 cells already done, 0 to go" in again.output and len(stored(isolated / "results" / "reg.jsonl")) == 6


def test_a_unit_no_node_can_run_is_refused_before_it_starts(cluster, tiny_pairs):
    result = runner.invoke(app, ray_args(tiny_pairs["high"], "nogpu", cluster.address, "-K", "1", "-ngl", "0,1", gpus=()))
    assert result.exit_code == 1
    assert "no node of the Ray cluster" in result.stderr and "GPU 1" in result.stderr
