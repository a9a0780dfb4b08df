"""What the page shows, as data: the rows of `report --format json` (the very text it prints), each workload's answer,
acceptance by draft position and the provenance of the files. Computes no figure: the rows are report.render's, the
answers deploy.lines', the positions plots.position_acceptance's; everything here only picks and names."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from gguf_bench.results.presentation import answer as deploy
from gguf_bench.results.presentation import report as rep
from gguf_bench.results.presentation.crossover import workload_part
from gguf_bench.results.presentation.plots import position_acceptance
from gguf_bench.results.presentation.summary import FAMILY, SETTING
from gguf_bench.results.schema.records import RunRecord

WORKLOAD = [c for c in FAMILY if c not in ("pair",)]  # what names a workload on the page (its pair is named apart)
SETTING_ONLY = [c for c in SETTING if c not in FAMILY]  # what tells settings apart within a workload


@dataclass
class Answer:
    """One workload's deploy line (answer.lines), with what it rests on and its other speculative rows by verdict."""

    row: int  # index into rows
    workload: str
    headline: str
    command: str
    rests_on: str
    same: list[int] = field(default_factory=list)  # rows the same as the target alone (≈)
    undecided: list[int] = field(default_factory=list)  # rows not decided (~)


@dataclass
class Document:
    """Everything the page draws: `json_text` is exactly what `report --format json` prints; `rows` its parse."""

    json_text: str
    rows: list[dict]
    answers: list[Answer]
    positions: list[dict]
    provenance: dict
    labels: dict[str, list[str]]  # per row: its workload's and its setting's name

    def extra(self) -> dict:
        """The page's second JSON block: what `--format json` does not carry (answers' text, positions, provenance)."""
        return {"answers": [asdict(a) for a in self.answers], "positions": self.positions,
                "provenance": self.provenance, "labels": self.labels}


def build(summary: pd.DataFrame, df: pd.DataFrame, runs: Sequence[RunRecord], sources: Sequence[str] = ()) -> Document:
    """summary: with deploy columns (deploy.with_deploy), as `report --format json` renders it."""
    json_text = rep.render(summary, "json")
    rows = json.loads(json_text)
    frame = pd.DataFrame(rows)  # the rows as the page reads them: from the json, not the summary
    labels = {"workload": [workload_label(frame, r) for _, r in frame.iterrows()],
              "setting": [setting_label(frame, r) for _, r in frame.iterrows()]}
    return Document(json_text, rows, answers(summary, frame, labels), _positions(df), provenance(runs, sources, summary),
                    labels)


def varying(frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    return [c for c in columns if c in frame and frame[c].astype(str).nunique(dropna=False) > 1]


def workload_label(frame: pd.DataFrame, row: pd.Series) -> str:
    """'T=0.7 · 2048-token prompts · 2 slots': what tells this row's workload from the others' ('all' where one)."""
    parts = [str(row["pair"])] if "pair" in varying(frame, ["pair"]) else []
    for c in varying(frame, WORKLOAD):
        if c == "parallel":
            parts.append("one request at a time" if pd.isna(row[c]) else f"{int(row[c])} slot{'s' if row[c] > 1 else ''}")
        elif c == "clients":
            parts.append("" if pd.isna(row[c]) else f"{int(row[c])} client{'s' if row[c] > 1 else ''}")
        else:
            parts.append(workload_part(c, row[c]))
    return " · ".join(p for p in parts if p) or "all runs"


def setting_label(frame: pd.DataFrame, row: pd.Series) -> str:
    """'engine server -ngl 99 K=4': the settings that differ between rows of a workload, then its drafting."""
    parts = [f"{rep.FLAGS.get(c, c)} {row[c]}" for c in varying(frame, SETTING_ONLY)]
    return " ".join([*parts, rep.row_label(row)])


def answers(summary: pd.DataFrame, frame: pd.DataFrame, labels: dict[str, list[str]]) -> list[Answer]:
    """answer.lines(): (headline, command) per workload, beside the row it deploys and the workload's other verdicts."""
    blocked = summary.get("deploy_busy", pd.Series(None, index=summary.index, dtype=object)).notna()
    chosen = [summary.index.get_loc(i) for i in summary.index[summary["deploy"].notna() | blocked]]
    workload = frame.groupby([c for c in FAMILY if c in frame], dropna=False, sort=False).ngroup()
    out = []
    for i, (headline, command) in zip(chosen, deploy.lines(summary)):
        row = frame.iloc[i]
        spec = frame[(workload == workload.iloc[i]) & (frame["mode"] == "speculative")]
        out.append(Answer(i, labels["workload"][i], headline, command, rests_on(row, spec),
                          same=[int(j) for j in spec.index[spec.get("verdict") == "same"]],
                          undecided=[int(j) for j in spec.index[spec.get("verdict") == "undecided"]]))
    return out


def rests_on(row: pd.Series, spec: pd.DataFrame) -> str:
    """'4 pairs of runs (paired), 16 runs': what the deployed row's verdict was read from."""
    if row["mode"] == "speculative":
        pairs = row.get("gain_pairs")
        paired = f" ({row['gain_test']})" if isinstance(row.get("gain_test"), str) else ""
        return (f"{int(pairs)} pair{'s' if pairs != 1 else ''} of runs{paired}, " if pd.notna(pairs) else "") + \
            f"{_runs(row['runs'])} of this setting"
    counts = spec["verdict"].value_counts() if "verdict" in spec else pd.Series(dtype=int)
    told = ", ".join(f"{n} {v}" for v, n in counts.items())
    return f"{_runs(row['runs'])} of the target alone; its {len(spec)} speculative rows: {told or 'none tested'}"


def _runs(n) -> str:
    return f"{int(n)} run{'s' if n != 1 else ''}"


def _positions(df: pd.DataFrame) -> list[dict]:
    """Acceptance by draft position (plots.position_acceptance: the runs of each line's largest K)."""
    if df is None or df.empty or "reached_at" not in df:
        return []
    pos = position_acceptance(df)
    return json.loads(pos.to_json(orient="records")) if not pos.empty else []


def provenance(runs: Sequence[RunRecord], sources: Sequence[str], summary: pd.DataFrame) -> dict:
    """The files read (with their sha256), the models they ran (with theirs), the builds and machines, how the runs were
    ordered and paired, and the busy runs left out (the terminal's lines, from the summary)."""
    files = [{"path": s, "sha256": _sha256(Path(s)), "runs": sum(1 for x in sources if x == s)}
             for s in dict.fromkeys(sources)]
    models, builds, machines = {}, {}, {}
    for r in runs:
        for role, m in (("target", r.models and r.models.target), ("draft", r.models and r.models.draft)):
            if m is not None and m.file:
                models[m.file] = {"file": m.file, "role": role, "size": m.size, "sha256": m.sha256}
        env = r.env
        if env is not None:
            build = {"gguf_bench": env.gguf_bench, "llama_cpp_python": env.llama_cpp_python, "engine": r.config.engine
                     or "python", "server": _server_build(r)}
            builds[json.dumps(build, sort_keys=True, default=str)] = build
            machine = {"host": (r.node.host if r.node else None) or "local", "cpu": env.cpu,
                       "cpu_count": env.cpu_count, "gpu": env.gpu, "platform": env.platform}
            machines[json.dumps(machine, sort_keys=True, default=str)] = machine
    orders = sorted({f"{r.order.design}" + (f", settings {r.order.settings}" if r.order.settings else "")
                     for r in runs if r.order is not None and r.order.design})
    return {"files": files, "models": list(models.values()), "builds": list(builds.values()),
            "machines": list(machines.values()), "order": orders or ["not stored (a file from before runs were "
                                                                      "interleaved)"],
            "pairing": rep.proof_lines(summary, varying(summary, list(rep.FLAGS))),
            "left_out": rep.left_out_lines(summary) or ["no run left out"]}


def _server_build(run: RunRecord) -> str | None:
    """llama-server's own version line and build (a server-engine run), else None."""
    if run.server is None:
        return None
    return " · ".join(p for p in (run.server.version, run.server.build_info) if p) or None


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
