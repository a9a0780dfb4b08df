"""The server engine: a grid's cells measured through llama.cpp's llama-server (engines/llama_server.py).

llama-server fixes its drafting when it starts, so the cells of one offload setting are grouped by what the process
needs (the target alone, or one strategy and K) and each group gets its own process; inside a group the prompts,
temperatures and repetitions go through `/completion` one after another, cold (no prompt cache). The prompts are the
loop's very token ids (tokenized here with the target's own vocabulary and chat template). Greedy speculative output
is compared with the same engine's target alone; the text of both engines is compared by `report`.

It runs every llama-server --spec-type (strategy.SERVER_SPEC_TYPES, sized from -K as llama_server.SIZE_FLAGS says;
the loop's `draft` and `ngram` are llama-server's draft-simple and ngram-simple). The types whose n-gram state outlives
a request (ngram-mod's pool, shared by all slots, and the map and cache types) get a new process per run unless
--warm-pool, so each run starts cold and its record says which. With --parallel/--clients a cell is a round: as many
clients as asked send their prompts at the same moment to a server with that many slots (engines/server_clients.py).

What it cannot do the way the Python loop does, and says so instead of measuring something else:
- only a fixed K (no adaptive schedule) and no n-gram-then-model chain;
- n-gram drafting is llama-server's own (ngram-simple: one pattern length, --ngram-max), not the loop's longest match;
- at T > 0 it verifies by sample-and-compare (`common_sampler_sample_and_accept_n`), not by rejection sampling:
  its acceptance at T > 0 is lower by design, and records say `verify: sample-and-compare`;
- no time split (llama_decode vs the rest), no draft-alone runs, no per-position "reached" counts.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gguf_bench.decoding.divergence import Identity, first_difference
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.engines.llama_cpp import Vocabulary, read_info, use_extra_buffers
from gguf_bench.engines.llama_server import Completion, Launch, Server, ServerError, Speculation, help_text, probe
from gguf_bench.engines.server_build import find_server
from gguf_bench.engines.server_clients import Round, run_round
from gguf_bench.errors import ConfigError
from gguf_bench.measure.depth import after_filler, filler_tokens
from gguf_bench.measure.loadmeter import ServerLoadMeter
from gguf_bench.measure.pair import LoadConfig, PairFiles
from gguf_bench.models.gguf import tensor_table
from gguf_bench.options import layers_label
from gguf_bench.results.records import Load, Mode, Offload, RunMetrics, RunRecord
from gguf_bench.results.records import Server as ServerRecord

SAMPLE_AND_COMPARE = "sample-and-compare"  # how llama-server verifies a draft


def check_strategy(strategy: Strategy) -> None:
    """What llama-server can run; one line naming what it cannot."""
    if strategy.k_schedule != "fixed":
        raise ConfigError(f"llama-server drafts a fixed K: --k-schedule {strategy.k_schedule} runs on --engine python only")
    if strategy.uses_model and strategy.uses_ngram:
        raise ConfigError("llama-server has no n-gram-then-draft-model chain: --spec-type ngram,draft runs on "
                          "--engine python only")


LOOP_TYPES = {"draft": "draft-simple", "ngram": "ngram-simple"}  # the loop's strategies as llama-server's types


def server_type(strategy: Strategy) -> str:
    return LOOP_TYPES.get(strategy.spec_type, strategy.spec_type)


def speculation(mode: Mode, strategy: Strategy | None, k: int) -> Speculation:
    if mode != Mode.SPECULATIVE:
        return Speculation()
    check_strategy(strategy)
    return Speculation(server_type(strategy), k, strategy.p_min, strategy.n_min, strategy.ngram_max)


def check_files(strategies: list[Strategy], files: PairFiles, server_help: str) -> None:
    """One line for a type this binary lacks or these files cannot serve."""
    for strategy in strategies:
        spec_type = server_type(strategy)
        if not re.search(rf"(?<![\w-]){re.escape(spec_type)}(?![\w-])", server_help):
            raise ConfigError(f"this llama-server has no --spec-type {spec_type} (its --help does not list it); build a "
                              "newer one with `gguf-bench build-server` or pass --server-bin")
        if spec_type == "draft-mtp" and not _has_nextn(files.target):
            raise ConfigError(f"--spec-type draft-mtp drafts with the target's MTP/NextN heads, and {files.target.name} "
                              "has none (no blk.N.nextn.* tensors); choose a model trained with MTP or another type")
        sidecar = {"draft-eagle3": "eagle3", "draft-dflash": "dflash"}.get(spec_type)
        if sidecar and files.draft is not None and (arch := _architecture(files.draft)) != sidecar:
            raise ConfigError(f"--spec-type {spec_type} needs a {sidecar} sidecar GGUF as the draft (--draft FILE); "
                              f"{files.draft.name} is a {arch} model")


def _has_nextn(path: Path) -> bool:
    return any(".nextn." in t.name for t in tensor_table(path)[1])


def _architecture(path: Path) -> str:
    return str(tensor_table(path)[0].get("general.architecture", "unknown"))


class ServerEngine:
    """Finds and checks the binary once; then measures cells setting by setting."""

    def __init__(self, binary: Path | None = None):
        self.binary, self.env = find_server(binary)
        self.version = probe(self.binary, self.env)
        self.help = help_text(self.binary, self.env)

    def run_setting(self, files: PairFiles, grid, load: LoadConfig, cells: list, make_record) -> Iterator[RunRecord]:
        """`make_record(cell, metrics, offload, error)` builds a cell's record (measure/sweep.py's)."""
        with Vocabulary(files.target) as vocab:
            chat_ok = vocab.has_chat_template()
            tokens = {p.id: vocab.tokenize(vocab.chat_prompt(p.text) if p.chat and chat_ok else p.text) for p in grid.prompts}
            filler = filler_tokens(vocab, max(c.depth for c in cells))
        layers = (read_info(files.target).n_layers, read_info(files.draft).n_layers if files.draft else None)
        greedy_target: dict[tuple, list[int]] = {}
        for (mode, strategy, k, parallel, *_), group in _groups(cells, grid.warm_pool).items():
            spec = speculation(mode, strategy, k)
            launch = self._launch(files, load, spec, parallel or 1)
            try:
                server = Server(launch, self.env)
            except ServerError as exc:
                for cell in group:
                    yield make_record(cell, None, None, f"llama-server failed to start: {exc}")
                continue
            pool = ("warm" if grid.warm_pool else "cold") if spec.pooled else None
            with server:
                run = _Group(server, grid, load, group, tokens, filler, greedy_target, make_record, pool)
                yield from run.measure(layers, self.version, warm_up=pool != "cold")
            server.remove_log()

    def _launch(self, files: PairFiles, load: LoadConfig, spec: Speculation, parallel: int = 1) -> Launch:
        return Launch(self.binary, files.target, files.draft, spec, str(layers_label(load.ngl)), str(layers_label(load.ngld)),
                      load.n_ctx, load.threads or os.cpu_count() or 1, repack=use_extra_buffers(), batch=load.n_batch,
                      ubatch=load.n_ubatch, threads_draft=load.threads_draft, flash_attn=load.flash_attn,
                      cache_type_k=load.cache_type_k, cache_type_v=load.cache_type_v, parallel=parallel)


@dataclass
class _Group:
    """The cells one server process measures, one after another."""

    server: Server
    grid: object
    load: LoadConfig
    cells: list
    tokens: dict  # prompt id -> token ids
    filler: list[int]  # the deepest cell's filler (measure/depth.py); a cell at depth d sends its first d tokens first
    greedy_target: dict  # (prompt id, slots, clients) -> the target alone's greedy tokens
    make_record: Callable
    pool: str | None

    def measure(self, layers: tuple, version: str, warm_up: bool) -> Iterator[RunRecord]:
        first, server = self.cells[0], self.server
        if first.mode == Mode.SPECULATIVE and not server.speculative:
            for cell in self.cells:  # never report a plain run as a speculative one
                yield self.make_record(cell, None, None, "llama-server started without a draft context (/slots: "
                                                         f"speculative false); its log: {server.log_path}")
            return
        target_pl, draft_pl = server.placements(*layers) if first.mode == Mode.SPECULATIVE else server.placements(layers[0], None)
        offload = Offload(target_pl.layers, draft_pl.layers if draft_pl else "-", target_pl, draft_pl)
        info = ServerRecord(command=server.argv, version=version, build_info=str(server.props.get("build_info")),
                            speculative=server.speculative, pool=self.pool)
        if warm_up:  # a cold n-gram pool is left cold: llama-server warms its compute graphs up at load by itself
            server.complete(self._prompt(first, first.prompt.id), min(16, self.grid.n_predict), *self._sampling(first),
                            cache_prompt=first.depth > 0)
        for i, cell in enumerate(self.cells):
            measured, error, load = self._one(cell) if cell.parallel is None else self._round(cell)
            yield replace(self.make_record(cell, measured, offload, error), server=info, load=load)
            if error and not server.alive():
                for rest in self.cells[i + 1:]:
                    yield replace(self.make_record(rest, None, offload, f"llama-server died earlier in this group: {error}"),
                                  server=info)
                return

    def _prompt(self, cell, prompt_id: str) -> list[int]:
        """The prompt's tokens after the cell's depth of filler (sent with the prompt cache on, so that the filler a
        slot already holds is not processed again; prompt processing is never in the decode time either way)."""
        filler = self.filler[:cell.depth]
        return filler + after_filler(self.tokens[prompt_id], filler)

    def _sampling(self, cell) -> tuple:
        cfg = cell.config(self.grid, self.load).sampling()
        return cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed

    def _one(self, cell) -> tuple[RunMetrics | None, str | None, Load | None]:
        """One request, alone on one slot."""
        temperature, top_k, top_p, seed = self._sampling(cell)
        try:
            with ServerLoadMeter(self.server.proc.pid) as meter:
                comp = self.server.complete(self._prompt(cell, cell.prompt.id), self.grid.n_predict, temperature, top_k, top_p,
                                            seed, cache_prompt=cell.depth > 0)
        except ServerError as exc:
            return None, str(exc), None
        return metrics(comp, cell, self._identity(cell, comp.tokens, temperature)), None, meter.load

    def _round(self, cell) -> tuple[RunMetrics | None, str | None, Load]:
        """`cell.clients` requests at the same moment: the cell's prompt and the ones after it, in turn."""
        temperature, top_k, top_p, seed = self._sampling(cell)
        ids = [p.id for p in self.grid.prompts]
        start = ids.index(cell.prompt.id)
        prompts = [(pid, self._prompt(cell, pid)) for pid in (ids[(start + i) % len(ids)] for i in range(cell.clients))]
        try:
            with ServerLoadMeter(self.server.proc.pid) as meter:
                rnd = run_round(self.server, prompts, self.grid.n_predict, temperature, top_k, top_p, seed,
                                self.grid.request_timeout_s, cache_prompt=cell.depth > 0)
        except ServerError as exc:  # it was gone before the round began
            return None, str(exc), None
        failed = [r for r in rnd.requests if r.error]
        first = rnd.requests[0]
        identity = self._identity(cell, first.tokens, temperature) if not first.error else None
        measured = round_metrics(rnd, cell, identity)
        if failed:  # the finished requests' figures stay in the record; --resume runs the round again
            return measured, f"{len(failed)} of {len(rnd.requests)} requests failed: {failed[0].error}", meter.load
        return measured, None, meter.load

    def _identity(self, cell, tokens: list[int], temperature: float) -> Identity | None:
        if temperature > 0:
            return None
        key = (cell.prompt.id, cell.parallel, cell.clients, cell.depth)
        if cell.mode == Mode.TARGET:
            self.greedy_target[key] = tokens
            return None
        return _identity(self.greedy_target[key], tokens) if key in self.greedy_target else None


def _groups(cells: list, warm_pool: bool) -> dict:
    """Cells by the server process they need: (mode, strategy, K, slots), in the order they first appear; a type
    whose n-gram state outlives a request gets a process per cell (a cold pool) unless warm_pool."""
    out: dict = {}
    for n, cell in enumerate(cells):
        strategy = cell.strategy if cell.mode == Mode.SPECULATIVE else None
        key = (cell.mode, strategy, cell.k, cell.parallel)
        if strategy is not None and not warm_pool and speculation(cell.mode, strategy, cell.k).pooled:
            key += (n,)
        out.setdefault(key, []).append(cell)
    return dict(sorted(out.items(), key=lambda kv: kv[0][0] != Mode.TARGET))  # the target alone first (identity)


def metrics(comp: Completion, cell, identity: Identity | None) -> RunMetrics:
    speculative = cell.mode == Mode.SPECULATIVE
    decode_s = comp.predicted_ms / 1000.0
    return RunMetrics(
        prompt_tokens=comp.prompt_n, prompt_s=comp.prompt_ms / 1000.0, n_tokens=comp.predicted_n, decode_s=decode_s,
        tokens_per_s=comp.tokens_per_s, ms_per_token=1000.0 * decode_s / comp.predicted_n if comp.predicted_n else None,
        end_to_end_s=(comp.prompt_ms + comp.predicted_ms) / 1000.0, stopped_by_eog=comp.stop_type == "eos",
        verify=SAMPLE_AND_COMPARE if speculative else None, rounds=comp.rounds, drafted=comp.drafted,
        accepted=comp.accepted, acceptance=comp.accepted / comp.drafted if comp.drafted else None,
        tokens_per_round=(comp.accepted + comp.rounds) / comp.rounds if comp.rounds else None,
        accepted_at=comp.accepted_at, text=comp.text,
        strategy=cell.strategy.label(cell.k) if speculative else None, identity=identity)


def round_metrics(rnd: Round, cell, identity: Identity | None) -> RunMetrics:
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


def _identity(regular: list[int], speculative: list[int]) -> Identity:
    at = first_difference(regular, speculative)
    if at is None:
        return Identity(True)
    return Identity(False, at, regular[at] if at < len(regular) else None,
                    speculative[at] if at < len(speculative) else None, verify=SAMPLE_AND_COMPARE,
                    why="llama-server's output parts from its own target alone here (not replayed: the server's "
                        "batches are not logged)")

