"""Every stored record, in one place: its kind, its fields, to and from a dict.

Writers build a record here and append `to_dict()` (results.append_record); readers get records back
with `parse` (`read_file` for a whole file, naming each line it cannot read). A line without `kind`
is a run: files written before kinds existed read as they did. `run_row` flattens a run for pandas
with every column `report` knows, the way llama-bench keeps one field list that every printer reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path


class Kind(StrEnum):
    RUN = "run"  # one generation measured: target alone, draft alone or speculative
    EVAL = "eval"  # a multiplication benchmark, regular against speculative
    CALIBRATION = "calibration"  # what `tune` measured to predict tokens/s


class Mode(StrEnum):
    TARGET = "target"  # the target alone: the baseline
    DRAFT = "draft"  # the draft alone
    SPECULATIVE = "speculative"


def gain_pct(tokens_per_s, baseline_tokens_per_s):
    """Speed-up over the baseline in percent (+28 means 1.28x); numbers or pandas columns."""
    return 100.0 * (tokens_per_s / baseline_tokens_per_s - 1.0)


@dataclass
class RunRecord:
    pair: str
    mode: Mode
    config: dict  # k, ngl, ngld, temperature, top_k, top_p, n_predict, prompt_id, chat, repetition, seed, ...
    metrics: dict | None = None  # None when the run failed; see bench.metrics for its keys
    error: str | None = None
    offload: dict | None = None  # {"target": "N/total", "draft": "N/total"} as llama.cpp counts layers
    sweep: str | None = None
    cell: str | None = None  # key of the grid cell, for --resume
    time: str = ""
    env: dict = field(default_factory=dict)  # results.environment() of the machine that measured it
    models: dict = field(default_factory=dict)  # results.models_record(target, draft)
    node: dict | None = None  # where a distributed sweep ran it
    kind: Kind = Kind.RUN


@dataclass
class EvalRecord:
    pair: str
    config: dict
    metrics: dict  # n, regular_ok, speculative_ok, identical, batch_numerics, loop_errors, p_value, acceptance
    rows: list[dict] = field(default_factory=list)
    time: str = ""
    env: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    kind: Kind = Kind.EVAL


@dataclass
class OtherRecord:
    """A kind `report` does not tabulate (calibration, and kinds of later versions): kept as it is."""

    kind: str
    data: dict


Record = RunRecord | EvalRecord | OtherRecord


def to_dict(record: RunRecord | EvalRecord) -> dict:
    return {**asdict(record), "kind": str(record.kind)}


def parse(d: dict) -> Record:
    """A stored dict as its record. Unknown keys are dropped (kept for OtherRecord); missing ones default."""
    kind = d.get("kind", Kind.RUN)
    cls = {Kind.RUN: RunRecord, Kind.EVAL: EvalRecord}.get(kind)
    if cls is None:
        return OtherRecord(str(kind), d)
    names = {f.name for f in fields(cls)} - {"kind"}
    record = cls(**{k: v for k, v in d.items() if k in names})
    if isinstance(record, RunRecord):
        record.mode = Mode(record.mode)
    return record


def read_file(path: Path) -> tuple[list[dict], list[str]]:
    """The dicts of one JSONL file, and 'FILE line N' for each line that is not a JSON object."""
    good, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError:
                d = None
            if isinstance(d, dict):
                good.append(d)
            else:
                bad.append(f"{path} line {n}")
    return good, bad


def host_of(run: RunRecord | dict) -> str:
    """The machine a run was measured on: $GGUF_BENCH_HOST of its Ray node, else the node's hostname;
    'local' for a run that did not go through Ray."""
    node = (run.node if isinstance(run, RunRecord) else run.get("node")) or {}
    return str(node.get("host") or node.get("hostname") or "local")


def run_row(run: RunRecord) -> dict:
    """One flat row per run: every column `report` reads."""
    cfg, m = run.config, run.metrics or {}
    models, offload = run.models or {}, run.offload or {}
    return {
        "sweep": run.sweep, "time": run.time, "pair": run.pair, "mode": str(run.mode),
        "k": cfg.get("k") if run.mode == Mode.SPECULATIVE else 0,
        "strategy": strategy_name(run),
        "ngl": str(cfg.get("ngl")), "ngld": str(cfg.get("ngld")),
        "temperature": cfg.get("temperature"), "n_predict": cfg.get("n_predict"),
        "prompt_id": cfg.get("prompt_id"), "repetition": cfg.get("repetition"), "threads": cfg.get("threads"),
        "tokens_per_s": m.get("tokens_per_s"), "ms_per_token": m.get("ms_per_token"),
        "acceptance": m.get("acceptance"), "tokens_per_round": m.get("tokens_per_round"),
        "overhead_pct": m.get("overhead_pct"), "n_tokens": m.get("n_tokens"),
        "accepted_at": m.get("accepted_at"), "reached_at": m.get("reached_at"),
        "draft_lengths": m.get("draft_lengths"), "category": cfg.get("category"),
        "identical": (m.get("identity") or {}).get("identical"), "error": run.error,
        "target_offload": offload.get("target"), "draft_offload": offload.get("draft"),
        "target_file": (models.get("target") or {}).get("file"), "draft_file": (models.get("draft") or {}).get("file"),
        "host": host_of(run), "cpu": (run.env or {}).get("cpu"), "gpu": (run.env or {}).get("gpu"),
    }


def strategy_name(run: RunRecord) -> str:
    """A speculative run's drafting strategy without its K ('draft', 'ngram(1-4)', 'draft p-min 0.8', ...); '' for the
    other modes. Runs stored before strategies, and default-strategy runs (config without "strategy"), are 'draft'."""
    if run.mode != Mode.SPECULATIVE:
        return ""
    from gguf_bench.drafters import Strategy

    return Strategy.from_params(run.config.get("strategy")).name


def eval_row(ev: EvalRecord) -> dict:
    cfg, m = ev.config, ev.metrics
    return {"pair": ev.pair, "time": ev.time, "temperature": cfg.get("temperature"), "k": cfg.get("k"),
            "verify": cfg.get("verify", "batched"), "n": m.get("n"), "regular_ok": m.get("regular_ok"),
            "speculative_ok": m.get("speculative_ok"), "p_value": m.get("p_value"),
            "identical": m.get("identical"), "batch_numerics": m.get("batch_numerics"),
            "loop_errors": m.get("loop_errors"), "acceptance": m.get("acceptance")}
