"""Several clients at once against one running llama-server (runtimes/llama_server.py).

A round sends one streaming /completion request per client, all released together by a barrier, and waits for every
answer. Each request is recorded as runtimes/streamed.StreamedRequest: timed from the client's side (time to first
token, end-to-end latency) and by the server (its `timings`: predicted_n, predicted_ms, prompt_ms, draft_n,
draft_n_accepted). The server's /metrics counters are
per process, so with requests in flight they are read around the whole round only (its verification steps).

Every request is bounded: a socket timeout per read and a deadline for the whole answer. A request that passes its
deadline is closed by the client (a disconnect mid-response, which llama-server answers by cancelling the slot's
task); a connection the server drops, or a server that dies, ends that request with one line. Nothing is retried.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gguf_bench.runtimes import sse
from gguf_bench.runtimes.llama_server import Sampling, Server, ServerError, completion_body
from gguf_bench.runtimes.server_metrics import spec_counters
from gguf_bench.runtimes.streamed import StreamedRequest


@dataclass
class Round:
    requests: list[StreamedRequest]
    wall_s: float  # from the release to the last answer
    rounds: int | None = 0  # verification steps of all requests (the server's counters over the round); None: not read


class RequestFailed(Exception):
    pass


def together(calls: Sequence[Callable[[float], None]], timeout_s: float) -> float:
    """Each call in its own client thread, all released at the same moment (each is given that moment); the wall time
    until the last returns (each bounded by timeout_s: a client gives up by itself at its deadline)."""
    barrier, start = threading.Barrier(len(calls) + 1), [0.0]

    def run(call: Callable[[float], None]) -> None:
        barrier.wait()
        call(start[0])

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in calls]
    for t in threads:
        t.start()
    start[0] = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join(timeout_s + 30)
    return time.perf_counter() - start[0]


def run_round(server: Server, prompts: Sequence[tuple[str, list[int]]], n_predict: int, sampling: Sampling,
              timeout_s: float, cache_prompt: bool = False) -> Round:
    """Send every prompt at the same moment, one client each, and wait for all of them (each bounded by timeout_s)."""
    before = server.metrics()
    requests = [StreamedRequest(i, pid, n_predict) for i, (pid, _) in enumerate(prompts)]

    def client(req: StreamedRequest, tokens: list[int], start: float) -> None:
        body = completion_body(tokens, n_predict, sampling, stream=True, cache_prompt=cache_prompt)
        try:
            _stream(server, body, req, start, timeout_s)
        except RequestFailed as exc:
            req.error = str(exc)

    wall = together([functools.partial(client, r, t) for r, (_, t) in zip(requests, prompts)], timeout_s)
    try:
        rounds = spec_counters(before, server.metrics())[0]  # None where /metrics lacks the counters
    except ServerError:  # it died during the round: every request says so already, and its rounds were not read
        rounds = None
    return Round(requests, wall, rounds)


def _stream(server: Server, body: dict, req: StreamedRequest, start: float, timeout_s: float) -> None:
    """One streaming /completion (runtimes/sse.py): an event per chunk of tokens, the last one with stop and timings."""
    req.sent_s = time.perf_counter() - start

    def event(data: bytes) -> bool:
        chunk = json.loads(data)
        if chunk.get("tokens"):
            req.first_token_s = req.first_token_s or time.perf_counter() - start
            req.tokens += chunk["tokens"]
            req.text += chunk.get("content", "")
        if chunk.get("stop"):
            req.end_s = time.perf_counter() - start
            req.timings = chunk.get("timings") or {}
        return bool(chunk.get("stop"))
    try:
        sse.post_events(server.base + "/completion", body, timeout_s, event)
    except sse.StreamFailed as exc:
        raise RequestFailed(_failed(server, exc, len(req.tokens))) from None


def _failed(server: Server, exc: sse.StreamFailed, n_tokens: int) -> str:
    """A stream's failure as one line, and whether llama-server is still running."""
    exited = "" if server.alive() else f" (llama-server exited with code {server.proc.returncode})"
    if exc.kind == sse.STATUS:
        return f"llama-server answered {exc.status}: {exc}"
    if exc.kind in (sse.LATE, sse.TIMEOUT):
        return f"{exc}: disconnected after {n_tokens} tokens"
    if exc.kind == sse.CLOSED:
        return (f"llama-server closed the connection after {n_tokens} tokens"
                + ("" if server.alive() else f" (it exited with code {server.proc.returncode})"))
    return f"the request failed after {n_tokens} tokens: {exc}{exited}"


def fill_slots(server: Server, filler: list[int], slots: int, sampling: Sampling) -> None:
    """At a depth (`filler` not empty), the filler alone in the prompt cache of each of the first `slots` slots: a
    one-token request of it on each (id_slot), untimed. Each timed request then finds the filler cached and processes
    its own prompt, every time; without this a slot held the last request's whole text (the warm-up sends the same)
    and llama-server processed one token of the prompt."""
    for slot in range(slots if filler else 0):
        server.complete(filler, 1, sampling, cache_prompt=True, slot=slot)
