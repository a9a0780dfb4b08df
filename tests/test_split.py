"""The split over several devices and RPC servers without a server: -ts/-sm/-mg/--rpc/--rpc-delay as placement values
(label, stored key, command line), the planner's share per device, each fault's one line, the RPC buffer names, and
the delaying proxy (runtimes/rpc_link.py) on an echo server."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, pair_args

from gguf_bench.errors import ConfigError
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import LoadConfig
from gguf_bench.measure.plan import Cell, Grid
from gguf_bench.models.offload_plan import Budget, Shape, device_bytes, kv_bytes_per_layer
from gguf_bench.models.parts import tensor_table
from gguf_bench.placing import Placing, Split, placing_axes, split_label
from gguf_bench.results.schema.records import Mode
from gguf_bench.runtimes.llama_server import Launch, Speculation
from gguf_bench.runtimes.rpc import Device, buffer_names, check_reachable
from gguf_bench.runtimes.rpc_link import Link, links

RPC = ("127.0.0.1:50052", "127.0.0.1:50053")


def test_split_flags_label_and_round_trip():
    """Every split option as llama-server takes it; --rpc and --rpc-delay in the label (what a record stores), and
    the label read back to the same value; a default placement stays unlabelled (older keys unchanged)."""
    p = Placing(devices=("RPC0", "RPC1"), tensor_split=(3, 1), split_mode="layer", main_gpu=0, rpc=RPC, rpc_delay_ms=3)
    assert p.flags() == ["-dev", "RPC0,RPC1", "-ts", "3,1", "-sm", "layer", "-mg", "0"]
    assert p.rpc_flags() == ["--rpc", ",".join(RPC)] and p.rpc_flags(("127.0.0.1:1",)) == ["--rpc", "127.0.0.1:1"]
    assert p.label() == f"--rpc {','.join(RPC)} -dev RPC0,RPC1 -ts 3,1 -sm layer -mg 0 --rpc-delay 3"
    assert split_label(p.label() + " -devd RPC1") == (p, Placing(devices=("RPC1",)))
    assert Placing(rpc=RPC).label() == f"--rpc {','.join(RPC)}"  # no delay: no --rpc-delay
    assert Placing().label() is None


def test_split_sweep_axes_are_every_combination():
    """A repeated -ts and a comma list of --rpc-delay are alternatives; -sm and -mg comma lists too."""
    axes = placing_axes(split=Split(["1,1", "3,1"], None, None, [",".join(RPC)], "0,1,3"))
    got = [(p.tensor_split, p.rpc_delay_ms) for p in axes["placings"]]
    assert got == [((1, 1), 0), ((1, 1), 1), ((1, 1), 3), ((3, 1), 0), ((3, 1), 1), ((3, 1), 3)]
    assert axes["placings_draft"] == [Placing()]
    with pytest.raises(ConfigError, match="take one value each here"):
        placing_axes(split=Split(["1,1", "3,1"]), single=True)


@pytest.mark.parametrize("split,needle", [
    (Split(rpc_delay="3"), "--rpc-delay delays the link to RPC servers: give them with --rpc"),
    (Split(rpc=["127.0.0.1"]), "--rpc takes HOST:PORT"),
    (Split(rpc=[RPC[0]], rpc_delay="2000"), "--rpc-delay takes 0 to 1000 ms"),
    (Split(tensor_split=["1,x"]), "bad -ts '1,x'"),
    (Split(tensor_split=["0,0"]), "-ts takes shares of 0 or more, not all 0"),
    (Split(split_mode="tensor"), "-sm takes layer, row, none"),
])
def test_bad_split_options_are_one_line(split, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        placing_axes(split=split)


def test_devices_checked_against_what_the_servers_give():
    """-ts one share per device (the -dev list's, else all), -mg within them, -dev/-devd only devices that exist."""
    names = ["RPC0", "RPC1"]
    Placing(tensor_split=(1, 1), rpc=RPC).check_devices(names)
    Placing(devices=("RPC1",), tensor_split=(1,)).check_devices(names)
    with pytest.raises(ConfigError, match=r"-ts 1,1,1 gives 3 shares for 2 devices \(RPC0, RPC1\)"):
        Placing(tensor_split=(1, 1, 1)).check_devices(names)
    with pytest.raises(ConfigError, match="-devd RPC2: llama-server has no device 'RPC2'; it has RPC0, RPC1"):
        Placing(devices=("RPC2",)).check_devices(names, draft=True, have="llama-server")
    with pytest.raises(ConfigError, match="-mg 2: there are 2 devices"):
        Placing(split_mode="none", main_gpu=2).check_devices(names)


def test_planner_shares_per_device(tiny_pairs):
    """-ts 3,1 over two devices puts 3 of 4 offloaded layers' weights and KV on the first; -sm none -mg 1 puts all on
    the second; without -ts the budgets are the shares (equal budgets: 1,1)."""
    shape = Shape.from_header(*tensor_table(tiny_pairs["high"][0]))
    budget = Budget((("RPC0", 2**30), ("RPC1", 2**30)))

    def terms(placing):
        got = device_bytes(shape, 4, 256, placing=placing, budget=budget)  # the last 3 blocks and the output layer
        return {d: (w, kv) for d, w, kv, _ in got.terms}

    equal, skewed = terms(Placing()), terms(Placing(tensor_split=(3, 1)))
    b, out, kv = shape.block_bytes, sum(shape.output_tensors), kv_bytes_per_layer(shape, 256)
    assert equal == {"RPC0": (b[1] + b[2], 2 * kv), "RPC1": (b[3] + out, kv)}
    assert skewed == {"RPC0": (b[1] + b[2] + b[3], 3 * kv), "RPC1": (out, 0)}
    assert terms(Placing(split_mode="none", main_gpu=1)) == {"RPC1": (b[1] + b[2] + b[3] + out, 3 * kv)}


def test_rpc_goes_right_after_the_model_and_the_record_stores_the_delay(tiny_pairs):
    """llama-server registers the RPC devices while it parses --rpc: it must come before -dev/-devd name them."""
    launch = Launch(Path("llama-server"), tiny_pairs["high"][0], tiny_pairs["high"][1],
                    Speculation("draft-simple", 4), "all", "0", 512, 2, placing=("-ts", "1,1"),
                    placing_draft=("-devd", "RPC1"), rpc=RPC)
    argv = launch.argv()
    assert argv[3:5] == ["--rpc", ",".join(RPC)] and argv.index("-devd") > 4 and argv[-2:] == ["-ts", "1,1"]
    grid = Grid(ks=[2], ngls=[99], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "x")], engines=("server",),
                placings=placing_axes(split=Split(["1,1"], rpc=[",".join(RPC)], rpc_delay="0,3"))["placings"])
    configs = [Cell(Mode.TARGET, 0, 0.0, grid.prompts[0], 0, engine="server").config(grid, lo) for lo in grid.settings()]
    assert [c.rpc_delay_ms for c in configs] == [0, 3]
    assert [c.cell_fields()["placement"] for c in configs] == [f"--rpc {','.join(RPC)} -ts 1,1",
                                                               f"--rpc {','.join(RPC)} -ts 1,1 --rpc-delay 3"]
    plain = Cell(Mode.TARGET, 0, 0.0, grid.prompts[0], 0).config(grid, LoadConfig())
    assert plain.rpc_delay_ms is None and "rpc_delay_ms" not in plain.cell_fields()


def test_buffer_names_map_the_servers_index_to_the_clients():
    """llama.cpp names a buffer by the server's own device index and endpoint: the second server's first device is
    the client's RPC1; through a proxy, by the proxy's endpoint."""
    devices = [Device("RPC0", RPC[0]), Device("RPC1", RPC[1])]
    assert buffer_names(devices, RPC) == {f"RPC0[{RPC[0]}]": "RPC0", f"RPC0[{RPC[1]}]": "RPC1"}
    assert buffer_names(devices, RPC, ("127.0.0.1:7", "127.0.0.1:8")) == {"RPC0[127.0.0.1:7]": "RPC0",
                                                                          "RPC0[127.0.0.1:8]": "RPC1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_named():
    port = _free_port()
    with pytest.raises(ConfigError, match=f"the RPC server 127.0.0.1:{port} is unreachable"):
        check_reachable((f"127.0.0.1:{port}",))


def test_cli_refuses_rpc_delay_without_rpc_and_the_python_engine_with_rpc(tiny_pairs):
    files = pair_args(tiny_pairs["high"])
    assert_user_error(invoke("run", *files, "--rpc-delay", "3"), "--rpc-delay delays the link", "--rpc HOST:PORT")
    assert_user_error(invoke("run", *files, "--rpc", RPC[0]), "--rpc runs with --engine server")


class _Echo:
    """A TCP server that sends back whatever it reads."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)


def _round_trip(endpoint: str, payload: bytes) -> tuple[float, bytes]:
    host, port = endpoint.split(":")
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.monotonic()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += s.recv(65536)
        return time.monotonic() - start, got


def test_link_delays_each_direction_and_forwards_every_byte():
    """A round trip through a 20 ms link takes 40 ms or a little more; 3 MiB arrive intact; delay 0 is no proxy."""
    echo = _Echo()
    with links((echo.endpoint,), 20) as (proxied,):
        assert proxied != echo.endpoint
        times = [_round_trip(proxied, b"x")[0] for _ in range(5)]
        assert 0.040 <= min(times) < 0.080, times
        payload = bytes(range(256)) * (3 * 4096)
        assert _round_trip(proxied, payload)[1] == payload
    with links((echo.endpoint,), 0) as endpoints:
        assert endpoints == (echo.endpoint,)
    with pytest.raises(ValueError, match="outside 0..1000"):
        Link(echo.endpoint, 1001)


def test_link_ends_the_client_when_the_server_is_gone():
    """No upstream: the client's connection ends at once (so llama.cpp fails fast instead of hanging)."""
    with links((f"127.0.0.1:{_free_port()}",), 5) as (proxied,):
        host, port = proxied.split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            assert s.recv(1) == b""


def test_python_engine_checks_the_split_against_its_own_devices(tiny_pairs):
    """The Python engine applies -ts/-sm/-mg to llama_model_params; on a build with no GPU device a -ts has nothing to
    split over: one line before anything loads."""
    from gguf_bench.runtimes.llama_cpp import check_placement, gpu_devices

    if gpu_devices():
        pytest.skip("this build sees a GPU device: the CPU-only message does not apply")
    with pytest.raises(ConfigError, match=r"-ts 1,1 gives 2 shares for 0 devices \(none\)"):
        check_placement(tiny_pairs["high"][0], Placing(tensor_split=(1, 1)))
    assert check_placement(tiny_pairs["high"][0], Placing(split_mode="none", main_gpu=0)) is None
    from gguf_bench.runtimes.llama_cpp import Model

    with Model(tiny_pairs["high"][0], 0, 256, 1, placing=Placing(tensor_split=(1,), split_mode="layer", main_gpu=0)) as m:
        assert m.placement.layers == "0/5"  # set in llama_model_params and loaded; nothing to split over here
