"""One streaming HTTP request: a POST whose answer is server-sent events, each event's data handed to a parser of the
API's own (llama-server's /completion: runtimes/server_clients; OpenAI's /v1 completions: measure/engines/endpoint).

The one client both engines stream with: the request is bounded by a socket timeout per read and a deadline for the
whole answer; a request past its deadline is closed by the client (llama-server cancels the slot's task when its
client goes). Every way it can end without the answer is a `StreamFailed` whose `kind` says which, so that each caller
writes its own line (it knows the server: a process it started, or someone else's URL).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable

STATUS, LATE, TIMEOUT, CLOSED, BROKEN = "status", "late", "timeout", "closed", "broken"


class StreamFailed(Exception):
    """A stream that ended without its answer. kind: STATUS (the server answered `status`: the message is the start
    of its body), LATE (no full answer before the deadline: the client disconnected), TIMEOUT (no byte within the
    socket timeout), CLOSED (the server closed the connection before the end), BROKEN (the socket failed, or an event
    could not be read: the message says how)."""

    def __init__(self, kind: str, message: str = "", status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


def post_events(url: str, body: dict, timeout_s: float, on_event: Callable[[bytes], bool]) -> None:
    """POST `body` as JSON to `url` and hand each event's data (what follows 'data:', stripped) to `on_event` until it
    returns True (the API's last event). Raises StreamFailed; an error `on_event` raises (ValueError: an event it
    cannot read) is one of BROKEN."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = connection(parts.hostname, parts.port, timeout=timeout_s)
    deadline = time.perf_counter() + timeout_s
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise StreamFailed(STATUS, resp.read()[:200].decode("utf-8", "replace"), resp.status)
        while True:
            if time.perf_counter() > deadline:
                raise StreamFailed(LATE, f"no full answer within {timeout_s:g} s")
            line = resp.readline()
            if not line:
                raise StreamFailed(CLOSED, "the server closed the connection")
            if line.startswith(b"data:") and on_event(line[5:].strip()):
                return
    except StreamFailed:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if isinstance(exc, TimeoutError) or "timed out" in str(exc):
            raise StreamFailed(TIMEOUT, f"no answer within {timeout_s:g} s") from None
        raise StreamFailed(BROKEN, str(exc) or type(exc).__name__) from None
    finally:
        conn.close()
