"""Every flat column of a run, declared once (`RUN_FIELDS`: the record's own and each part's), the figures derived
from a run's record (its decode steps, bytes read per token, time to first token, request latency), and `run_row`, the
flat row `report` reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from gguf_bench import axes, engine_registry
from gguf_bench.models import reads
from gguf_bench.results.schema.fields import SPEED, Field, flat
from gguf_bench.results.schema.kinds import Mode
from gguf_bench.results.schema.parts import RUN_PARTS
from gguf_bench.results.schema.records import RunMetrics, RunRecord


def _m(run: RunRecord) -> RunMetrics:
    return run.metrics or _NO_METRICS


def _metric(name: str) -> Callable[[RunRecord], object]:
    """A RunMetrics attribute of the same name (None for a failed run's default-less figures)."""
    return lambda run: getattr(_m(run), name)


def _measured(get: Callable[[RunRecord], object]) -> Callable[[RunRecord], object]:
    """A figure only a measured run has (None for a failed run)."""
    return lambda run: get(run) if run.metrics else None


def decode_steps(run: RunRecord) -> int | None:
    """The target's decode steps over the run's decode (each a verify batch, or one token alone): the Python loop's
    speculative rounds, which it counts; elsewhere the tokens less the accepted drafts less each request's first token
    (it comes from the prompt's evaluation), as llama-server's draft_n_accepted gives them (its /metrics drafts counter
    counts only the steps that drafted). A plain run: one token a step. None where not known."""
    m = run.metrics
    if m is None or not m.n_tokens:
        return None
    if run.mode == Mode.SPECULATIVE and engine_registry.of(run.config.engine_name).counts_rounds:
        return m.rounds or None
    if run.mode == Mode.SPECULATIVE and m.accepted is None:
        return None
    requests = sum(1 for q in m.requests if not q.get("error")) if m.requests else 1
    steps = m.n_tokens - (m.accepted or 0) - requests
    return steps if steps > 0 else None


def _steps_per_s(run: RunRecord) -> float | None:
    """Decode steps per second over tokens/s's window: tokens/s = steps/s x tokens per step."""
    steps, m = decode_steps(run), run.metrics
    return steps / m.decode_s if steps and m.decode_s and m.decode_s > 0 else None


def _tokens_per_step(run: RunRecord) -> float | None:
    """tokens/s over steps/s (so that their product is the run's tokens/s): the tokens of the decode window over its
    steps, the prompt's first token included (tok/rnd leaves it out)."""
    per_s = _steps_per_s(run)
    return run.metrics.tokens_per_s / per_s if per_s and run.metrics.tokens_per_s else None


def bytes_per_token(run: RunRecord, steps: int | None) -> float | None:
    """Bytes the run's decode read per generated token (models/reads.py on the headers; steps: decode_steps). The
    context is the depth, the prompt and half the generated tokens (the mean position a step attends over). A
    speculative step verifies its drafted tokens + 1 and yields tau = (accepted + steps) / steps tokens; a draft model
    drafts them where the strategy names one, in the share of rounds draft_sources gives (a chain with an n-gram
    drafter). None where its model files are not on this machine, it measured nothing, or several requests shared its
    steps (slots batch their steps: one weight read serves them all, which this per-request arithmetic does not count)."""
    m = run.metrics
    if m is None or not m.n_tokens or (m.requests and len(m.requests) > 1):
        return None
    ctk, ctv, models = run.config.cache_type_k, run.config.cache_type_v, run.models
    context = (run.config.depth or 0) + (m.prompt_tokens or 0) + m.n_tokens / 2
    alone = models.draft if run.mode == Mode.DRAFT else models.target
    first = reads.file_bytes(alone.path if alone else None, ctk, ctv)
    if first is None or run.mode != Mode.SPECULATIVE:
        return first.step(context) if first else None
    if not steps or m.accepted is None or m.drafted is None:
        return None
    modelled = models.draft is not None and "draft" in run.strategy_name  # not an n-gram type's row
    draft = reads.file_bytes(models.draft.path, ctk, ctv) if modelled else None
    if modelled and draft is None:
        return None
    rounds = sum((m.draft_sources or {}).values())
    share = (m.draft_sources or {}).get("model", 0) / rounds if rounds else 1.0
    return reads.per_token(reads.speculative_round(target=first, draft=draft, context=context, drafted=m.drafted / steps,
                                                   draft_share=share), (m.accepted + steps) / steps)


def stored_bytes_per_token(run: RunRecord) -> float | None:
    """The bytes per token the run stored where it ran (plan.Setting.record), else computed here where its files are
    (records from before it was stored)."""
    m = run.metrics
    if m is not None and m.bytes_per_token is not None:
        return m.bytes_per_token
    return bytes_per_token(run, decode_steps(run))


def time_to_first_token(run: RunRecord) -> float | None:
    """Seconds from the request to its first token: the client's stopwatch where the engine kept it (llama-server's
    rounds of clients, the endpoint), else the prompt's processing as the engine timed it (the Python loop: the target's
    prompt evaluation and first token plus the drafter's start; llama-server one request at a time: its prompt_ms, the
    draft's prefill in it). None where neither was measured."""
    m = run.metrics
    if m is None:
        return None
    if m.ttft_s is not None:
        return m.ttft_s
    return m.prompt_s if m.prompt_s and m.prompt_s > 0 else None


def request_latency(run: RunRecord) -> float | None:
    """The time from sending a request to its last token for -n tokens: a round of clients' mean of the latencies its
    requests stored (sent to last byte, client side); else its time to first token plus -n tokens at its decode
    speed."""
    m = run.metrics
    stored = [r["end_s"] - r["sent_s"] for r in (m.requests or []) if isinstance(r, dict) and not r.get("error")
              and r.get("end_s") is not None and r.get("sent_s") is not None] if m else []
    if stored:
        return sum(stored) / len(stored)
    ttft = time_to_first_token(run)
    speed = (m.per_request_tokens_per_s or m.tokens_per_s) if m else None
    if ttft is None or not speed or speed != speed or not run.config.n_predict:
        return None
    return ttft + run.config.n_predict / speed


def request_tokens_per_s(run: RunRecord) -> float | None:
    """-n tokens over the request's latency (request_latency): higher is better, and its ratio to the target alone's is
    the inverse of the latencies' (the --objective request figure)."""
    latency = request_latency(run)
    return run.config.n_predict / latency if latency else None


def _served_tokens_per_s(run: RunRecord) -> float | None:
    """Every token the server gave over the wall time, prompts included (the --objective throughput figure): a round of
    clients' own tokens/s (its tokens over its wall time); one request: its tokens over its first token's wait and its
    decode."""
    m, ttft = run.metrics, time_to_first_token(run)
    if m is None or not m.n_tokens:
        return None
    if m.requests:
        return m.tokens_per_s
    return m.n_tokens / (ttft + m.decode_s) if ttft is not None and m.decode_s and m.decode_s > 0 else None


_NO_METRICS = RunMetrics()

def _axis_value(axis: axes.Axis, r: RunRecord) -> object:
    """An axis as the run used it: stored, else llama.cpp's default, else the setting it follows (--threads, where not
    given this machine's cores)."""
    value = getattr(r.config, axis.name)
    if value is None:
        value = axis.default if axis.follows is None else getattr(r.config, axis.follows) or r.env.cpu_count or 0
    return value


# Every flat column of a run, declared once: run_row walks them, report.summarize folds the ones with a fold
# (in this order: the summary's columns), and the run table shows the ones with a header (by `place`).
RUN_FIELDS: tuple[Field, ...] = (
    # the setting and the run: keys, not folded
    Field("sweep", lambda r: r.sweep), Field("time", lambda r: r.time), Field("pair", lambda r: r.pair),
    Field("engine", lambda r: r.config.engine_name), Field("mode", lambda r: str(r.mode)), Field("k", lambda r: r.k),
    Field("strategy", lambda r: r.strategy_name), Field("ngl", lambda r: str(r.config.ngl)),
    Field("ngld", lambda r: str(r.config.ngld)), Field("temperature", lambda r: r.config.temperature),
    Field("greedy", lambda r: r.greedy), Field("n_predict", lambda r: r.config.n_predict),
    Field("prompt_id", lambda r: r.config.prompt_id), Field("repetition", lambda r: r.config.repetition),
    Field("threads", lambda r: r.config.threads), Field("n_ctx", lambda r: r.config.n_ctx),
    Field("verify", lambda r: r.config.verify), Field("top_k", lambda r: r.config.top_k),
    Field("top_p", lambda r: r.config.top_p),
    *(Field(a.name, functools.partial(_axis_value, a)) for a in axes.AXES),  # each declared axis (gguf_bench/axes.py)
    Field("parallel", lambda r: r.config.parallel), Field("clients", lambda r: r.config.clients),
    Field("depth", lambda r: r.config.depth or 0), Field("prompt_length", lambda r: r.config.prompt_length or 0),
    Field("placement", lambda r: r.config.placement_label),
    # the build (the setting column `build`): the server's binary where a sweep's --server-bin lists several, the Python
    # loop's libllama folder where it gives --lib; one column, so both engines' builds are compared by the same code
    Field("server_bin", lambda r: r.config.server_bin or r.config.lib or ""),
    Field("host", lambda r: r.host),
    # what a setting's runs measured, folded into its summary row
    Field("tokens_per_s", _metric("tokens_per_s"), "tokens/s", "mean", spread=True),
    Field("ms_per_token", _metric("ms_per_token"), "ms", "mean", header="ms/tok", place=80),
    Field("pp_tokens_per_s", lambda r: r.metrics.prompt_tokens / r.metrics.prompt_s if r.metrics and r.metrics.prompt_s > 0
          else None, "tokens/s", "mean", numeric=True, header="pp t/s", fmt=SPEED, place=50),
    Field("acceptance", _metric("acceptance"), "", "mean", header="accept", md="acceptance", fmt="{:.1%}", place=90),
    Field("tokens_per_round", _metric("tokens_per_round"), "tokens", "mean", header="tok/rnd", place=100),
    Field("overhead_pct", _metric("overhead_pct"), "%", "mean", header="ovh", fmt="{:.1f}%", place=120),
    Field("target_file", lambda r: r.models.target.file if r.models.target else None, "", "first"),
    Field("draft_file", lambda r: r.models.draft.file if r.models.draft else None, "", "first"),
    Field("cpu", lambda r: r.env.cpu, "", "first"), Field("gpu", lambda r: r.env.gpu, "", "first"),
    Field("per_request_tokens_per_s", _metric("per_request_tokens_per_s"), "tokens/s", "mean", header="req t/s",
          shown_with="parallel", fmt=SPEED, place=60),
    Field("ttft_s", time_to_first_token, "s", "mean", numeric=True),  # every run of every engine (time_to_first_token)
    # a server that reports no prompt tokens (llama-cpp-python's stream): its --prompt-tokens length, which that server
    # counted when the prompt was sized (endpoint.at_length)
    Field("prompt_tokens", _measured(lambda r: r.metrics.prompt_tokens or r.config.prompt_length or 0), "tokens", "mean",
          numeric=True),
    # the figures of the other objectives (summary.OBJECTIVES), higher is better: -n tokens over the request's latency,
    # and every token over the wall time, prompts included
    Field("request_latency_s", request_latency, "s", "mean", numeric=True),
    Field("request_tokens_per_s", request_tokens_per_s, "tokens/s", "mean", numeric=True),
    Field("served_tokens_per_s", _served_tokens_per_s, "tokens/s", "mean", numeric=True),
    Field("latency_p95_s", _metric("latency_p95_s"), "s", "mean", header="p95 s", shown_with="parallel", place=70),
    Field("schedule_predicted_tokens_per_s", _metric("predicted_tokens_per_s"), "tokens/s", "mean", numeric=True),
    # speed as two factors (tokens/s = steps/s x tokens per step), and the bytes a token's decode reads (--format json)
    Field("steps_per_s", _steps_per_s, "steps/s", "mean", numeric=True, optional=True),
    Field("tokens_per_step", _tokens_per_step, "tokens", "mean", numeric=True, optional=True),
    Field("bytes_per_token", stored_bytes_per_token, "bytes", "mean", numeric=True,
          optional=True),  # from the GGUF headers (results/predictions/ceiling.py's numerator)
    # each part's own (parts.RUN_PARTS: the offload, load, server, energy, memory, order): the trackers' columns
    # only where some run has them
    *(f for part in RUN_PARTS for f in part.fields),
    # per run only
    Field("n_tokens", _measured(lambda r: r.metrics.n_tokens), "tokens"),
    Field("accepted_at", _measured(lambda r: r.metrics.accepted_at)),
    Field("reached_at", _measured(lambda r: r.metrics.reached_at)),
    Field("draft_lengths", _metric("draft_lengths")), Field("category", lambda r: r.config.category),
    Field("identical", lambda r: _m(r).identity.identical if _m(r).identity else None),
    Field("differs_at", lambda r: _m(r).identity.position if _m(r).identity else None),  # where it parts from the
    # target alone's text
    Field("error", lambda r: r.error), Field("text", _metric("text")),
    Field("drafted", lambda r: r.metrics.drafted if r.metrics and r.metrics.n_tokens else None),  # (no tokens: no proof)
    Field("no_drafts", _metric("no_drafts")),
    Field("twin", lambda r: r.models.twin),  # speed only
    Field("twin_agrees", lambda r: r.models.agreeing),  # agreeing twins: acceptance 1 by construction
)


def run_row(run: RunRecord) -> dict:
    """One flat row per run: every column `report` reads (RUN_FIELDS)."""
    return flat(run, RUN_FIELDS)
