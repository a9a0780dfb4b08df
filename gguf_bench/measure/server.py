"""The server engine: a grid's cells measured through llama.cpp's llama-server (engines/llama_server.py).

llama-server fixes its drafting when it starts, so the cells of one offload setting are grouped by what the process
needs (the target alone, or one strategy and K) and each group gets its own process; inside a group the prompts,
temperatures and repetitions go through `/completion` one after another, cold (no prompt cache). The prompts are the
loop's very token ids (tokenized here with the target's own vocabulary and chat template). Greedy speculative output
is compared with the same engine's target alone; the text of both engines is compared by `report`.

What it cannot do the way the Python loop does, and says so instead of measuring something else:
- only a fixed K (no adaptive schedule) and no n-gram-then-model chain;
- n-gram drafting is llama-server's `ngram-simple` (one pattern length, --ngram-max), not the loop's longest match;
- at T > 0 it verifies by sample-and-compare (`common_sampler_sample_and_accept_n`), not by rejection sampling:
  its acceptance at T > 0 is lower by design, and records say `verify: sample-and-compare`;
- no time split (llama_decode vs the rest), no draft-alone runs, no per-position "reached" counts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from gguf_bench.decoding.divergence import Identity, first_difference
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.engines.llama_cpp import Vocabulary, read_info, use_extra_buffers
from gguf_bench.engines.llama_server import Completion, Launch, Server, ServerError, Speculation, probe
from gguf_bench.engines.server_build import find_server
from gguf_bench.errors import ConfigError
from gguf_bench.measure.loadmeter import ServerLoadMeter
from gguf_bench.measure.pair import LoadConfig, PairFiles
from gguf_bench.options import layers_label
from gguf_bench.results.records import Mode, Offload, RunMetrics, RunRecord
from gguf_bench.results.records import Server as ServerRecord

SAMPLE_AND_COMPARE = "sample-and-compare"  # how llama-server verifies a draft


def check_strategy(strategy: Strategy) -> None:
    """What llama-server can run; one line naming what it cannot."""
    if strategy.k_schedule != "fixed":
        raise ConfigError(f"llama-server drafts a fixed K: --k-schedule {strategy.k_schedule} runs on --engine python only")
    if strategy.uses_model and strategy.uses_ngram:
        raise ConfigError("llama-server has no n-gram-then-draft-model chain: --spec-type ngram,draft runs on "
                          "--engine python only")


def speculation(mode: Mode, strategy: Strategy | None, k: int) -> Speculation:
    if mode != Mode.SPECULATIVE:
        return Speculation()
    check_strategy(strategy)
    if strategy.uses_model:
        return Speculation("draft-simple", k, strategy.p_min, n_min=strategy.n_min)
    return Speculation("ngram-simple", k, ngram_n=strategy.ngram_max)


class ServerEngine:
    """Finds and checks the binary once; then measures cells setting by setting."""

    def __init__(self, binary: Path | None = None):
        self.binary, self.env = find_server(binary)
        self.version = probe(self.binary, self.env)

    def run_setting(self, files: PairFiles, grid, load: LoadConfig, cells: list, make_record) -> Iterator[RunRecord]:
        """`make_record(cell, metrics, offload, error)` builds a cell's record (measure/sweep.py's)."""
        with Vocabulary(files.target) as vocab:
            chat_ok = vocab.has_chat_template()
            tokens = {p.id: vocab.tokenize(vocab.chat_prompt(p.text) if p.chat and chat_ok else p.text) for p in grid.prompts}
        layers = (read_info(files.target).n_layers, read_info(files.draft).n_layers if files.draft else None)
        greedy_target: dict[str, list[int]] = {}
        for (mode, strategy, k), group in _groups(cells).items():
            launch = self._launch(files, load, speculation(mode, strategy, k))
            try:
                server = Server(launch, self.env)
            except ServerError as exc:
                for cell in group:
                    yield make_record(cell, None, None, f"llama-server failed to start: {exc}")
                continue
            with server:
                yield from self._measure(server, grid, load, group, tokens, layers, greedy_target, make_record)
            server.remove_log()

    def _launch(self, files: PairFiles, load: LoadConfig, spec: Speculation) -> Launch:
        return Launch(self.binary, files.target, files.draft, spec, str(layers_label(load.ngl)), str(layers_label(load.ngld)),
                      load.n_ctx, load.threads or os.cpu_count() or 1, repack=use_extra_buffers(), batch=load.n_batch,
                      ubatch=load.n_ubatch, threads_draft=load.threads_draft, flash_attn=load.flash_attn,
                      cache_type_k=load.cache_type_k, cache_type_v=load.cache_type_v)

    def _measure(self, server: Server, grid, load: LoadConfig, group: list, tokens: dict, layers: tuple, greedy_target: dict,
                 make_record) -> Iterator[RunRecord]:
        first = group[0]
        if first.mode == Mode.SPECULATIVE and not server.speculative:
            for cell in group:  # never report a plain run as a speculative one
                yield make_record(cell, None, None, "llama-server started without a draft context (/slots: speculative "
                                                    f"false); its log: {server.log_path}")
            return
        target_pl, draft_pl = server.placements(*layers) if first.mode == Mode.SPECULATIVE else server.placements(layers[0], None)
        offload = Offload(target_pl.layers, draft_pl.layers if draft_pl else "-", target_pl, draft_pl)
        info = ServerRecord(command=server.argv, version=self.version, build_info=str(server.props.get("build_info")),
                            speculative=server.speculative)
        cfg0 = first.config(grid, load).sampling()
        server.complete(tokens[first.prompt.id], min(16, grid.n_predict), cfg0.temperature, cfg0.top_k, cfg0.top_p, cfg0.seed)
        for cell in group:
            cfg = cell.config(grid, load).sampling()
            try:
                with ServerLoadMeter(server.proc.pid) as meter:
                    comp = server.complete(tokens[cell.prompt.id], grid.n_predict, cfg.temperature, cfg.top_k,
                                           cfg.top_p, cfg.seed)
            except ServerError as exc:
                yield replace(make_record(cell, None, offload, str(exc)), server=info)
                if not server.alive():
                    for rest in group[group.index(cell) + 1:]:
                        yield replace(make_record(rest, None, offload, f"llama-server died earlier in this group: {exc}"),
                                      server=info)
                    return
                continue
            identity = None
            if cfg.greedy and cell.mode == Mode.TARGET:
                greedy_target[cell.prompt.id] = comp.tokens
            elif cfg.greedy and cell.prompt.id in greedy_target:
                identity = _identity(greedy_target[cell.prompt.id], comp.tokens)
            yield replace(make_record(cell, metrics(comp, cell, identity), offload, None), server=info, load=meter.load)


def _groups(cells: list) -> dict:
    """Cells by the server process they need: (mode, strategy, K), in the order they first appear."""
    out: dict = {}
    for cell in cells:
        key = (cell.mode, cell.strategy if cell.mode == Mode.SPECULATIVE else None, cell.k)
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


def _identity(regular: list[int], speculative: list[int]) -> Identity:
    at = first_difference(regular, speculative)
    if at is None:
        return Identity(True)
    return Identity(False, at, regular[at] if at < len(regular) else None,
                    speculative[at] if at < len(speculative) else None, verify=SAMPLE_AND_COMPARE,
                    why="llama-server's output parts from its own target alone here (not replayed: the server's "
                        "batches are not logged)")

