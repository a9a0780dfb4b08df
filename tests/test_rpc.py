"""A model split over two llama.cpp RPC servers on loopback (`build-server --rpc`), through the server engine: the
target at -ngl all -ts 1,1 over RPC0 and RPC1, the draft local; both servers hold weights (read back), greedy text
equals the local run's, speculation equals its target alone, the planner matches llama.cpp per device; each fault is
one line; a server dying mid-sweep fails the later cells fast and --resume runs only those; no process is left."""

from __future__ import annotations

import os
import time

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, processes_running

from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Grid, cells_done
from gguf_bench.measure.sweep import SweepEvents, iter_records, run_sweep
from gguf_bench.models.offload_plan import MIB, Budget, Shape, device_bytes
from gguf_bench.models.pairs import PairFiles
from gguf_bench.models.parts import tensor_table
from gguf_bench.placing import Placing, Split, placing_axes
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import read_records
from gguf_bench.runtimes.llama_server import free_port
from gguf_bench.runtimes.rpc import RpcServer

PROMPT = "def fibonacci(n):"


@pytest.fixture
def two_servers(rpc_bins):
    """Two rpc-servers on loopback, one thread each; both must be gone afterwards."""
    servers = [RpcServer(free_port(), threads=1, binary=rpc_bins[1]) for _ in range(2)]
    yield servers
    for s in servers:
        s.close()
    mine = os.getpid()
    assert not processes_running(rpc_bins[1], parent=mine) and not processes_running(rpc_bins[0], parent=mine)


def _grid(rpc_bins, servers, **kw) -> Grid:
    split = Split(kw.pop("ts", ["1,1"]), rpc=[",".join(s.endpoint for s in servers)], rpc_delay=kw.pop("delay", None))
    return Grid(ks=kw.pop("ks", [2]), ngls=[99], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", PROMPT)],
                n_predict=12, threads=1, with_draft_alone=False, engines=("server",),
                engine_options=(ServerOptions(server_bin=rpc_bins[0]),),
                **placing_axes(split=split), **kw)


def test_target_split_over_two_rpc_servers(tiny_pairs, rpc_bins, two_servers):
    """-ngl all -ts 1,1 over RPC0 and RPC1, the draft local, with and without a 2 ms link: both servers hold weights
    and KV, as the planner predicts per device; the greedy text is the local run's, speculation equals its target
    alone; every record stores its delay, and its command line the servers' own addresses."""
    target, draft = tiny_pairs["high"]
    files = PairFiles(target, draft, "tiny")
    records = list(iter_records("rpc", files, _grid(rpc_bins, two_servers, delay="0,2")))
    local = list(iter_records("local", files, Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0],
                                                   prompts=[Prompt("p", PROMPT)], n_predict=12, threads=1,
                                                   with_draft_alone=False, engines=("server",),
                                                   engine_options=(ServerOptions(server_bin=rpc_bins[0]),))))
    assert [r.error for r in records + local] == [None] * 6
    assert [(r.mode.value, r.config.rpc_delay_ms) for r in records] == [("target", 0), ("speculative", 0),
                                                                         ("target", 2), ("speculative", 2)]
    assert {r.metrics.text for r in records} == {local[0].metrics.text}  # over RPC, delayed or not, = local
    assert all(r.metrics.identity.identical for r in records if r.mode.value == "speculative")
    endpoints = ",".join(s.endpoint for s in two_servers)
    for r in records:
        command = r.server.command
        assert command[3:5] == ["--rpc", endpoints] and command[command.index("-ts") + 1] == "1,1"
    shape = Shape.from_header(*tensor_table(target))
    planned = device_bytes(shape, 99, records[0].config.n_ctx, placing=Placing(tensor_split=(1, 1)),
                           budget=Budget((("RPC0", 2**30), ("RPC1", 2**30))))
    for r in records:
        placed = r.offload.target_placement
        assert placed.layers == f"{shape.total_layers}/{shape.total_layers}"
        assert set(placed.model_mib) >= {"RPC0", "RPC1"} and all(placed.model_mib[d] > 0 for d in ("RPC0", "RPC1"))
        for device, weights, kv, _ in planned.terms:
            assert placed.model_mib[device] == pytest.approx(weights / MIB, abs=0.02), device
            assert placed.kv_mib.get(device, 0) == pytest.approx(kv / MIB, abs=0.02), device
        if r.offload.draft_placement is not None:  # the draft stayed local
            assert not any(d.startswith("RPC") for d in r.offload.draft_placement.model_mib)


def test_rpc_faults_are_one_line_before_anything_loads(tiny_pairs, rpc_bins, two_servers):
    """An unreachable server is named; -ts not one share per device; -devd naming a device no server gave."""
    base = ["sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "--engine", "server", "--server-bin",
            str(rpc_bins[0]), "-ngl", "all", "--prompt-ids", "code-short"]
    gone = f"127.0.0.1:{free_port()}"
    assert_user_error(invoke(*base, "--rpc", f"{two_servers[0].endpoint},{gone}", "--name", "a"),
                      f"the RPC server {gone} is unreachable")
    endpoints = ",".join(s.endpoint for s in two_servers)
    assert_user_error(invoke(*base, "--rpc", endpoints, "-ts", "1,1,1", "--name", "b"),
                      "-ts 1,1,1 gives 3 shares for 2 devices (RPC0, RPC1)")
    assert_user_error(invoke(*base, "--rpc", endpoints, "-devd", "RPC2", "--name", "c"),
                      "-devd RPC2:", "has no device 'RPC2'; it has RPC0, RPC1")


def test_server_dying_mid_sweep_fails_fast_and_resume_runs_only_that(tiny_pairs, rpc_bins, two_servers, isolated):
    """Kill one rpc-server after the first record: every later cell fails with one line within seconds, the finished
    record stays; with the server back, --resume runs only the failed cells (and their block's target alone again)."""
    target, draft = tiny_pairs["high"]
    files, out = PairFiles(target, draft, "tiny"), isolated / "dies.jsonl"
    grid = _grid(rpc_bins, two_servers, ks=[1, 2, 3])
    seen, killed_at = [], None

    def cell(record):
        nonlocal killed_at
        seen.append(record)
        if len(seen) == 1:
            two_servers[1].proc.kill()
            two_servers[1].proc.wait()
            killed_at = time.monotonic()

    run_sweep("dies", files, grid, out, resume=False, events=SweepEvents(cell=cell))
    assert time.monotonic() - killed_at < 30
    first = [r for r in read_records(out) if isinstance(r, RunRecord)]
    assert len(first) == 4 and first[0].error is None
    gone = two_servers[1].endpoint
    assert all(f"the RPC server {gone} is unreachable" in r.error and "\n" not in r.error for r in first[1:]), first
    port = int(two_servers[1].endpoint.rsplit(":", 1)[1])
    two_servers[1] = RpcServer(port, threads=1, binary=rpc_bins[1])
    run_sweep("dies", files, grid, out, resume=True)
    again = [r for r in read_records(out) if isinstance(r, RunRecord)][4:]
    # the failed K's, and the target alone measured again beside them: a pair lives in one invocation
    assert sorted(r.k for r in again) == [0, 1, 2, 3] and all(r.error is None for r in again)
    assert len(cells_done(read_records(out))) == 4
