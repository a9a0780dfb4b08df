"""A loopback forwarding proxy with a one-way delay each way: `--rpc-delay MS` in front of each RPC server.

This machine's kernel has no `netem` qdisc, so a network hop's latency is made in user space: a `Link` listens on
127.0.0.1 and forwards every connection to its upstream rpc-server; each chunk read from one side is written to the
other `delay_ms` after it was read (so a request and its answer pay 2 x delay_ms, as over a link of that one-way
latency; bandwidth is not limited). Bounded: the delay at most placing.MAX_RPC_DELAY_MS, and at most `MAX_BUFFERED`
bytes held per direction (a reader waits while its direction holds that much). Threads of this process, daemonic:
a link dies with gguf-bench. Loopback only, like the rpc-servers it fronts.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from contextlib import contextmanager

from gguf_bench.placing import MAX_RPC_DELAY_MS, endpoint_parts

MAX_BUFFERED = 64 * 2**20  # bytes held per direction
CHUNK = 2**20
_EOF = b""


class Link:
    """127.0.0.1:<port> -> upstream, every byte delayed `delay_ms` in each direction."""

    def __init__(self, upstream: str, delay_ms: float):
        if not 0 <= delay_ms <= MAX_RPC_DELAY_MS:
            raise ValueError(f"delay {delay_ms} ms is outside 0..{MAX_RPC_DELAY_MS}")
        self.upstream, self.delay_s = endpoint_parts(upstream), delay_ms / 1000.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"rpc-link {self.endpoint}").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()  # the client sees the connection end, as with the server gone
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            _Pipe(client, server, self.delay_s)
            _Pipe(server, client, self.delay_s)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._sockets:
            _shut(s)


class _Pipe:
    """One direction: a reader thread stamps each chunk, a writer thread sends it once its delay has passed."""

    def __init__(self, src: socket.socket, dst: socket.socket, delay_s: float):
        self.src, self.dst, self.delay_s = src, dst, delay_s
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.held = 0
        self.done = False  # the writer has ended: nothing more is sent
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.src.recv(CHUNK)
            except OSError:
                data = _EOF
            with self.cond:
                while self.held >= MAX_BUFFERED and not self.done:
                    self.cond.wait()
                self.queue.append((time.monotonic() + self.delay_s, data))
                self.held += len(data)
                self.cond.notify_all()
            if data == _EOF:
                return

    def _write(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                due, data = self.queue.popleft()
                self.held -= len(data)
                self.cond.notify_all()
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            try:
                if data == _EOF:
                    raise OSError
                self.dst.sendall(data)
            except OSError:  # either end gone: end both, so the other side sees it at once
                with self.cond:
                    self.done = True
                    self.cond.notify_all()
                _shut(self.dst)
                _shut(self.src)
                return


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


@contextmanager
def links(endpoints: tuple[str, ...], delay_ms: float):
    """The endpoints to connect to instead: each one's Link (delay_ms > 0), else the endpoints themselves."""
    opened = [Link(e, delay_ms) for e in endpoints] if delay_ms > 0 else []
    try:
        yield tuple(link.endpoint for link in opened) if opened else endpoints
    finally:
        for link in opened:
            link.close()
