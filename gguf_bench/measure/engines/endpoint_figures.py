"""The endpoint engine's figures of a cell (measure/engines/endpoint.py): what its streamed requests
(runtimes/streamed.StreamedRequest) and llama.cpp's /metrics counters around them say, as a record's RunMetrics.

What the server did not say stays None (acceptance, drafted tokens and rounds of a server without llama.cpp's timings),
never a guess; /metrics' rounds and per-position acceptance count only where its counters over the cell equal the
requests' own timings (another client's requests would be in them otherwise).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from gguf_bench import decode_window
from gguf_bench.results.schema.records import RunMetrics
from gguf_bench.runtimes import server_metrics
from gguf_bench.runtimes.streamed import StreamedRequest

# --- the server's counters -------------------------------------------------------------------


@dataclass(frozen=True)
class Counted:
    """What /metrics adds for a cell, where its counters over the cell are the cell's own requests'."""

    rounds: int | None = None
    accepted_at: list[int] = field(default_factory=list)  # rounds that accepted draft position i


def counted(before: dict | None, after: dict | None, answers: list[StreamedRequest]) -> Counted:
    """The cell's verification steps and per-position acceptance, where /metrics' draft and accepted tokens over the
    cell equal its requests' timings (else another client's requests are in them: not the cell's, not read)."""
    if before is None or after is None:
        return Counted()
    rounds, drafted, accepted = server_metrics.spec_counters(before, after)
    mine = [a.draft_n for a in answers], [a.draft_n_accepted for a in answers]
    if rounds is None or None in mine[0] + mine[1] or (drafted, accepted) != (sum(mine[0]), sum(mine[1])):
        return Counted()
    return Counted(rounds, server_metrics.accepted_at(before, after))


# --- a cell's figures -------------------------------------------------------------------------


def _sum(values: list[int | None]) -> int | None:
    return None if None in values else sum(values)


def _drafts(answers: list[StreamedRequest], got: Counted) -> dict:
    """The speculative figures every record shares: None where the server did not give them."""
    drafted, accepted = _sum([a.draft_n for a in answers]), _sum([a.draft_n_accepted for a in answers])
    return {"rounds": got.rounds, "drafted": drafted, "accepted": accepted, "accepted_at": got.accepted_at,
            "acceptance": accepted / drafted if drafted else None,
            "tokens_per_round": (accepted + got.rounds) / got.rounds if got.rounds and accepted is not None else None}


def single_metrics(a: StreamedRequest, got: Counted, label: str | None) -> RunMetrics:
    """One request alone: the server's decode speed (or the client's, where it gives no timings)."""
    n = a.predicted_n
    return RunMetrics(
        prompt_tokens=a.prompt_n or 0, prompt_s=(a.prompt_ms or 0.0) / 1000.0, n_tokens=n,
        decode_s=a.decode_s, tokens_per_s=decode_window.tokens_per_s(n, a.decode_s),
        ms_per_token=decode_window.ms_per_token(n, a.decode_s),
        end_to_end_s=a.latency_s, stopped_by_eog=a.finish == "stop", text=a.text, strategy=label,
        ttft_s=a.ttft_s, **_drafts([a], got))


def round_metrics(answers: list[StreamedRequest], wall_s: float, got: Counted, label: str | None) -> RunMetrics:
    """A round of clients: every finished request's tokens over the round's wall time (prompt processing and queueing
    included), each request's own figures, and the latencies the clients saw."""
    done = [a for a in answers if not a.error]
    n_tokens = sum(a.predicted_n for a in done)
    speeds = [a.tokens_per_s for a in done if a.tokens_per_s]
    latencies = sorted(a.latency_s for a in done)
    ttfts = [a.ttft_s for a in done if a.ttft_s is not None]
    per_request = statistics.fmean(speeds) if speeds else None
    return RunMetrics(
        prompt_tokens=sum(a.prompt_n or 0 for a in done), n_tokens=n_tokens, decode_s=wall_s,
        tokens_per_s=n_tokens / wall_s if done else None, ms_per_token=1000.0 / per_request if per_request else None,
        end_to_end_s=wall_s, text=done[0].text if done else None, strategy=label,
        requests=[a.stored() for a in answers], per_request_tokens_per_s=per_request,
        ttft_s=statistics.fmean(ttfts) if ttfts else None,
        latency_p50_s=statistics.median(latencies) if latencies else None,
        latency_p95_s=statistics.quantiles(latencies, n=20, method="inclusive")[-1] if len(latencies) > 1 else
        (latencies[0] if latencies else None), **_drafts(done, got))


def why_unmeasured(answers: list[StreamedRequest]) -> str | None:
    """Why a cell has no figures: a failed request, or a server that told neither its token count nor its time."""
    failed = [a for a in answers if a.error]
    if failed:
        return (failed[0].error if len(answers) == 1 else
                f"{len(failed)} of {len(answers)} requests failed: {failed[0].error}")
    for a in answers:
        if a.predicted_n is None:
            return (f"the server gave no token count (no usage in its stream, and it stopped before -n: finish "
                    f"'{a.finish}'): its tokens/s is not known")
        if not a.decode_s:
            return "the answer came in one chunk: no time between its first token and its last to divide by"
    return None
