"""The server engine's figures of a cell (measure/engines/server.py): one llama-server completion, or a round of
several clients at once (runtimes/server_clients.py), as a record's RunMetrics, and where its greedy text parts from
its own target alone's."""

from __future__ import annotations

import statistics

import numpy as np

from gguf_bench import decode_window
from gguf_bench.decoding.divergence import Identity, first_difference
from gguf_bench.measure.plan import Cell
from gguf_bench.results.schema.records import Mode, RunMetrics
from gguf_bench.runtimes.llama_server import Completion
from gguf_bench.runtimes.server_clients import Round

SAMPLE_AND_COMPARE = "sample-and-compare"  # how llama-server verifies a draft


def metrics(comp: Completion, cell: Cell, identity: Identity | None) -> RunMetrics:
    speculative = cell.mode == Mode.SPECULATIVE
    decode_s = comp.predicted_ms / 1000.0
    return RunMetrics(
        prompt_tokens=comp.prompt_n, prompt_s=comp.prompt_ms / 1000.0, n_tokens=comp.predicted_n, decode_s=decode_s,
        tokens_per_s=comp.tokens_per_s, ms_per_token=decode_window.ms_per_token(comp.predicted_n, decode_s),
        end_to_end_s=(comp.prompt_ms + comp.predicted_ms) / 1000.0, stopped_by_eog=comp.stop_type == "eos",
        verify=SAMPLE_AND_COMPARE if speculative else None, rounds=comp.rounds, drafted=comp.drafted,
        accepted=comp.accepted, acceptance=comp.accepted / comp.drafted if comp.drafted else None,
        tokens_per_round=(comp.accepted + comp.rounds) / comp.rounds if comp.rounds else None,
        accepted_at=comp.accepted_at, text=comp.text,
        strategy=cell.strategy.label(cell.k) if speculative else None, identity=identity)


def round_metrics(rnd: Round, cell: Cell, identity: Identity | None) -> RunMetrics:
    """A concurrent round: the aggregate (every finished request's tokens over the round's wall time, prompt processing
    and queueing included), each request's own figures, and the latency percentiles seen by the clients."""
    done = [r for r in rnd.requests if not r.error]
    n_tokens = sum(r.predicted_n for r in done)
    speeds = [r.tokens_per_s for r in done if r.tokens_per_s]
    latencies = [r.latency_s for r in done if r.latency_s is not None]
    ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
    drafted, accepted = sum(r.draft_n for r in done), sum(r.draft_n_accepted for r in done)
    speculative = cell.mode == Mode.SPECULATIVE
    per_request = statistics.fmean(speeds) if speeds else None
    return RunMetrics(
        prompt_tokens=sum(r.prompt_n for r in done), prompt_s=sum(r.prompt_ms for r in done) / 1000.0, n_tokens=n_tokens,
        decode_s=rnd.wall_s, tokens_per_s=n_tokens / rnd.wall_s if rnd.wall_s > 0 and done else None,
        ms_per_token=1000.0 / per_request if per_request else None, end_to_end_s=rnd.wall_s,
        verify=SAMPLE_AND_COMPARE if speculative else None, rounds=rnd.rounds, drafted=drafted, accepted=accepted,
        acceptance=accepted / drafted if drafted else None,
        tokens_per_round=(accepted + rnd.rounds) / rnd.rounds if rnd.rounds and len(done) == len(rnd.requests) else None,
        text=done[0].text if done else None, strategy=cell.strategy.label(cell.k) if speculative else None,
        identity=identity, requests=[r.stored() for r in rnd.requests], per_request_tokens_per_s=per_request,
        ttft_s=statistics.fmean(ttfts) if ttfts else None, latency_p50_s=_percentile(latencies, 50),
        latency_p95_s=_percentile(latencies, 95))


def _percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile, linearly interpolated (numpy's default), None for no values."""
    return float(np.percentile(values, q)) if values else None


def greedy_identity(regular: list[int], speculative: list[int]) -> Identity:
    at = first_difference(regular, speculative)
    if at is None:
        return Identity(True)
    return Identity(False, at, regular[at] if at < len(regular) else None,
                    speculative[at] if at < len(speculative) else None, verify=SAMPLE_AND_COMPARE,
                    why="llama-server's output parts from its own target alone here (not replayed: the server's "
                        "batches are not logged)")

