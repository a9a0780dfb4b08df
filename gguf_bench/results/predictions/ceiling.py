"""The memory-bandwidth ceiling of decoding: tokens/s <= bandwidth / bytes read per generated token.

    ceiling_pct = 100 x tokens/s x bytes per token / bandwidth

A row near 65-97% is a setup that uses the memory it has; far below leaves speed unused (launch overhead, too few
threads); above 100% is not a measurement of decoding (a prompt cache hit, a wrong token count). The bytes per token
are each run's (records.py's bytes_per_token: models/reads.py's arithmetic on the GGUF headers and the run's own
counts, at report time); the bandwidth is what `gguf-bench machine` measured and stored for the host
(measure/flows/bandwidth.py), kept here in the gguf-bench cache.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import pandas as pd

from gguf_bench.models.files import cache_dir

GB = 1e9  # bandwidth in GB/s (decimal, as STREAM and likwid-bench print it)


def ceiling_pct(tokens_per_s: float | None, bytes_per_token: float | None, bandwidth_gbs: float | None) -> float | None:
    """The share of the memory-bandwidth ceiling a row's tokens/s reaches, in percent (100: every byte the steps need
    read at the machine's full bandwidth); None where a figure is missing."""
    if not tokens_per_s or not bytes_per_token or not bandwidth_gbs:
        return None
    if any(isinstance(x, float) and math.isnan(x) for x in (tokens_per_s, bytes_per_token, bandwidth_gbs)):
        return None
    return 100.0 * tokens_per_s * bytes_per_token / (bandwidth_gbs * GB)


def ceiling_tokens_per_s(bytes_per_token: float, bandwidth_gbs: float) -> float:
    """The tokens/s the bandwidth allows at that many bytes per token."""
    return bandwidth_gbs * GB / bytes_per_token


# --- the machines' bandwidth, and the summary's columns -------------------------------------------------

MACHINE_FILE = "machine.json"  # in the gguf-bench cache: {"hosts": {hostname: what `gguf-bench machine` measured}}
LOCAL = "local"  # a record's host when it did not go through Ray: the machine the report runs on, if its CPU matches


def machine_file() -> Path:
    return cache_dir() / MACHINE_FILE


def stored_machines() -> dict[str, dict]:
    """hostname -> the stored measurement (bandwidth_gbs, threads, cpu, ...); {} where none was stored or the file is
    not readable."""
    try:
        hosts = json.loads(machine_file().read_text(encoding="utf-8")).get("hosts", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {h: e for h, e in hosts.items() if isinstance(e, dict) and isinstance(e.get("bandwidth_gbs"), (int, float))}


def store_machine(host: str, entry: dict) -> Path:
    """Keep `entry` (with bandwidth_gbs) as `host`'s measurement, beside the other hosts'; the file's path."""
    path = machine_file()
    hosts = stored_machines()
    hosts[host] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"hosts": hosts}, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def this_host() -> str:
    return socket.gethostname() or LOCAL


def machine_for(host, cpu, machines: dict[str, dict]) -> dict | None:
    """The stored measurement that applies to a row: its host's; for a row measured here ('local'), this machine's,
    where the CPU the record names is the one measured (a results file from elsewhere gets none)."""
    if host == LOCAL or host is None:
        entry = machines.get(this_host())
        ok = entry is not None and (not isinstance(cpu, str) or not entry.get("cpu") or entry["cpu"] == cpu)
        return entry if ok else None
    return machines.get(str(host))


def _on_gpu(placed) -> bool:
    """'N/total' with N > 0: layers llama.cpp put on a device (their reads are the device's memory's, not this one's)."""
    try:
        return int(str(placed).split("/")[0]) > 0
    except ValueError:
        return False


def with_ceiling(summary, machines: dict[str, dict] | None = None):
    """The summary (a DataFrame with bytes_per_token) with bandwidth_gbs and ceiling_pct on each row whose host has a
    stored bandwidth and whose models ran on the CPU; unchanged where no row has one (no columns added)."""
    if "bytes_per_token" not in summary or summary.empty:
        return summary
    machines = stored_machines() if machines is None else machines
    if not machines:
        return summary

    def bandwidth(row) -> float | None:
        models = [row.get("target_offload")] if row.get("mode") != "draft" else []
        models += [row.get("draft_offload")] if row.get("mode") != "target" else []
        if any(_on_gpu(p) for p in models) or pd.isna(row.get("bytes_per_token")):
            return None
        entry = machine_for(row.get("host"), row.get("cpu"), machines)
        return float(entry["bandwidth_gbs"]) if entry else None

    gbs = summary.apply(bandwidth, axis=1).astype(float)
    if gbs.isna().all():
        return summary
    decode = summary["decode_tokens_per_s"] if "decode_tokens_per_s" in summary else summary["tokens_per_s"]  # never the
    # --objective's figure (for_objective keeps the decode speed apart): the share does not move with a flag
    pct = [ceiling_pct(t, b, g) for t, b, g in zip(decode, summary["bytes_per_token"], gbs)]
    return summary.assign(bandwidth_gbs=gbs, ceiling_pct=pd.Series(pct, index=summary.index, dtype=float))


def footer_lines(summary, label, machines: dict[str, dict] | None = None) -> list[str]:
    """The run table's line under it where a bandwidth is known: 'target alone at 62% of 18.4 GB/s (the memory-bandwidth
    ceiling: gguf-bench machine)', and the rows above 100% flagged as not measurements of decoding. label: a row ->
    its name (report.row_label)."""
    s = with_ceiling(summary, machines)
    if "ceiling_pct" not in s or s["ceiling_pct"].isna().all():
        return []
    known = s[s["ceiling_pct"].notna()]
    gbs = sorted(set(known["bandwidth_gbs"].round(1)))
    of = f"{gbs[0]:.1f}" if len(gbs) == 1 else f"{gbs[0]:.1f}-{gbs[-1]:.1f}"
    alone = known[known["mode"] == "target"]["ceiling_pct"]
    shown = (f"target alone at {_pct_range(alone)}" if not alone.empty else
             ", ".join(f"{label(r)} at {r['ceiling_pct']:.0f}%" for _, r in known.head(3).iterrows()))
    lines = [f"{shown} of {of} GB/s (the memory-bandwidth ceiling: gguf-bench machine; --format json: every row's "
             "ceiling_pct)"]
    over = known[known["ceiling_pct"].round() > 100]  # as printed: a row shown at 100% is not flagged above it
    if not over.empty:
        names = ", ".join(f"{label(r)} {r['ceiling_pct']:.0f}%" for _, r in over.iterrows())
        lines.append(f"above 100% of the ceiling: {names}: not a measurement of decoding (a prompt cache hit, or a "
                     "wrong token count), or the bandwidth moved since it was measured, as a VM's does with its "
                     "neighbours: run gguf-bench machine again beside the sweep")
    return lines


def _pct_range(values) -> str:
    lo, hi = values.min(), values.max()
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"
