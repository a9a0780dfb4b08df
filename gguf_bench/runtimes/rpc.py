"""llama.cpp's RPC servers: one started here (`gguf-bench rpc-server`, and the tests), each server checked before a
setting with --rpc loads anything, and their devices as the client names them.

An rpc-server (tools/rpc, `build-server --rpc`) offers its host's devices over TCP, one client at a time; with no
accelerator it offers one CPU device. A client given `--rpc A,B` names the devices RPC0, RPC1, ... in the order of the
servers (and of each server's devices), before its own GPUs (llama_model_load's device order), while the buffers it
logs carry the server's own device index and endpoint: `RPC0[127.0.0.1:50053]` is the first device of the server
at 127.0.0.1:50053, which may be the client's RPC1. `buffer_names` maps one to the other.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.placing import endpoint_parts, rpc_flag
from gguf_bench.runtimes.llama_server import die_with_parent, server_command, stop
from gguf_bench.runtimes.server_build import RPC_SERVER, rpc_binary

CONNECT_TIMEOUT_S = 3.0
_DEVICE = re.compile(r"^\s+(\S+): (.*) \((\d+) MiB, (\d+) MiB free\)$")


@dataclass(frozen=True)
class Device:
    name: str  # as the client names it: RPC0, Vulkan0
    description: str  # an RPC device's: its server's HOST:PORT


def check_reachable(endpoints: tuple[str, ...]) -> None:
    """One line naming the first server that does not accept a connection."""
    for endpoint in endpoints:
        try:
            socket.create_connection(endpoint_parts(endpoint), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            raise ConfigError(f"the RPC server {endpoint} is unreachable ({why.lower()}): start it there "
                              f"(`gguf-bench rpc-server --port {endpoint_parts(endpoint)[1]}` on that machine) or "
                              "fix --rpc") from None


def list_devices(binary: Path, env: dict[str, str], endpoints: tuple[str, ...]) -> list[Device]:
    """The devices a llama-server given `--rpc endpoints` would use, in its order (`--list-devices`: the CPU aside)."""
    argv = [*server_command(binary), *rpc_flag(endpoints), "--list-devices"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, **env},
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"`{binary.name} --list-devices` failed: {exc}") from None
    text = out.stdout + out.stderr
    if "RPC not supported" in text:
        raise ConfigError(f"{binary} has no RPC backend: build one with `gguf-bench build-server --rpc` (and leave "
                          "--server-bin out), or pass --server-bin of a llama-server built with -DGGML_RPC=ON")
    if out.returncode != 0:
        lines = [line for line in text.splitlines() if line.strip()]
        raise BenchError(f"`{binary.name} --rpc ... --list-devices` failed (exit {out.returncode}): "
                         f"{lines[-1] if lines else 'no output'}")
    return [Device(m[1], m[2]) for line in text.splitlines() if (m := _DEVICE.match(line))]


def buffer_names(devices: list[Device], endpoints: tuple[str, ...], connected: tuple[str, ...] | None = None) -> dict[str, str]:
    """llama.cpp's buffer names of RPC devices ('RPC0[HOST:PORT]': the server's own index) -> the client's device
    names (RPC1). connected: the endpoints the client was given in place of `endpoints` (a delaying proxy's)."""
    out: dict[str, str] = {}
    for endpoint, used in zip(endpoints, connected or endpoints):
        names = [d.name for d in devices if d.description == endpoint]
        out.update({f"RPC{j}[{used}]": name for j, name in enumerate(names)})
    return out


class RpcServer:
    """A ggml-rpc-server on 127.0.0.1 (a context manager): it dies with this process (PR_SET_PDEATHSIG), and `close`
    stops it on every way out."""

    def __init__(self, port: int, threads: int | None = None, binary: Path | None = None, log: Path | None = None,
                 timeout_s: float = 30.0):
        self.binary = binary or rpc_binary(RPC_SERVER)
        self.endpoint = f"127.0.0.1:{port}"
        self.argv = [str(self.binary), "-H", "127.0.0.1", "-p", str(port), "-t", str(threads or os.cpu_count() or 1)]
        self._log = open(log, "w") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent)
        try:
            self._wait_listening(port, timeout_s)
        except BaseException:
            self.close()
            raise

    def _wait_listening(self, port: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{RPC_SERVER} on port {port} exited with code {self.proc.returncode} (is the port "
                                 "taken?)")
            try:  # a connection it accepts and drops (no handshake): harmless
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise BenchError(f"{RPC_SERVER} did not listen on port {port} within {timeout_s:.0f} s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        stop(self.proc)
        if self._log is not subprocess.DEVNULL:
            self._log.close()

    def __enter__(self) -> RpcServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
