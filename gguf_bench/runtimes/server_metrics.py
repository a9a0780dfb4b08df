"""llama.cpp's `/metrics` (Prometheus' text exposition, on where the server was started with --metrics), read in one
place for both server engines: a process gguf-bench started (runtimes/llama_server.Server.metrics) and someone else's
server (measure/engines/endpoint.counters).

The counters are per process, so a request's or a cell's figures are the change between a read before it and one
after: `spec_counters` (verification rounds, draft tokens, accepted draft tokens) and `accepted_at` (rounds that
accepted draft position i).
"""

from __future__ import annotations

import re

PREFIX = "llamacpp:"  # llama.cpp's metric names all start so: a server whose /metrics has none is not llama.cpp's
_SAMPLE = re.compile(r'^llamacpp:(\w+)(?:\{position="(\d+)"\})?\s+([-+\d.eE]+)$')
# the speculative counters: verification rounds, draft tokens, accepted draft tokens
SPEC_COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total")
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"  # rounds that accepted draft position i, as 'name[i]'


def parse(text: str) -> dict[str, float]:
    """The exposition's llama.cpp samples by name, without the `llamacpp:` prefix; a per-position one as 'name[i]'
    (apart from the totals). Comments (# HELP, # TYPE) and other programs' metrics are passed over."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if m := _SAMPLE.match(line.strip()):
            out[m[1] + (f"[{m[2]}]" if m[2] is not None else "")] = float(m[3])
    return out


def spec_counters(before: dict, after: dict) -> tuple[int, int, int] | tuple[None, None, None]:
    """(rounds, draft tokens, accepted draft tokens): the change of /metrics' speculative counters from `before` to
    `after`. All None where the server does not list one of them (a build that names them otherwise): not measured,
    which is not 0 drafts."""
    if not all(name in after for name in SPEC_COUNTERS):
        return None, None, None
    return tuple(int(after[name] - before.get(name, 0.0)) for name in SPEC_COUNTERS)


def accepted_at(before: dict, after: dict) -> list[int]:
    """The change of the per-position series from `before` to `after`: rounds that accepted draft position i, for
    every position `after` lists (none where the server has no such series)."""
    positions = [int(k[len(PER_POSITION) + 1:-1]) for k in after if k.startswith(PER_POSITION + "[")]
    keys = [f"{PER_POSITION}[{i}]" for i in range(max(positions, default=-1) + 1)]
    return [int(after[k] - before.get(k, 0.0)) if k in after else 0 for k in keys]
