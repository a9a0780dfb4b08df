"""runtimes/sse.py, the one streaming client both server engines use: events in order, and each way a stream can end
without its answer as its own kind, against a real local HTTP server (the standard library's)."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from gguf_bench.runtimes import sse


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the standard library's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/status":
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"loading model")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b": a comment line\n\ndata: {\"n\": 1}\n\ndata: {\"n\": 2}\n\n")
        self.wfile.flush()
        if self.path == "/slow":
            time.sleep(1.5)
        if self.path in ("/ok", "/slow"):
            self.wfile.write(b"data: [DONE]\n\n")
        # /closed: the connection ends here, without the last event

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def base():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def collect(url: str, timeout_s: float = 5.0) -> list[bytes]:
    seen: list[bytes] = []

    def event(data: bytes) -> bool:
        seen.append(data)
        return data == b"[DONE]"
    sse.post_events(url, {"prompt": "x"}, timeout_s, event)
    return seen


def test_events_reach_the_parser_in_order_until_it_says_the_end(base):
    assert collect(base + "/ok") == [b'{"n": 1}', b'{"n": 2}', b"[DONE]"]


@pytest.mark.parametrize("path, kind, status, words", [
    ("/status", sse.STATUS, 503, "loading model"),
    ("/closed", sse.CLOSED, None, "closed the connection"),
    ("/slow", sse.TIMEOUT, None, "no answer within 0.5 s"),
])
def test_each_way_a_stream_ends_without_its_answer_is_its_own_kind(base, path, kind, status, words):
    with pytest.raises(sse.StreamFailed, match=words) as failed:
        collect(base + path, timeout_s=0.5)
    assert (failed.value.kind, failed.value.status) == (kind, status)


def test_a_server_that_is_not_there_is_a_broken_stream():
    with pytest.raises(sse.StreamFailed) as failed:
        collect("http://127.0.0.1:9/none", timeout_s=1.0)
    assert failed.value.kind == sse.BROKEN and str(failed.value)
