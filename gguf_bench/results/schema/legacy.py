"""Records as earlier versions wrote them, brought to today's fields before records.parse builds them.

Shapes read (tests/data/legacy/ holds one file of each):
- runs written before kinds existed: no `kind` (records.parse reads them as runs), no strategy, verify or
  category in their config, no draft_lengths/draft_sources/identity in their metrics;
- evaluations whose config kept -ngl/-ngld as typed ('max', '-1', '10'): stored as 'all' or a number now;
- calibrations of tune before n-gram prediction: no prompt/output tokens per prompt;
- runs whose energy was read before issue 56 (`domains`, no `window`; tests/test_trackers.py holds one as that version
  wrote it): around prompt and decode, from every counter readable whatever the run used; kept, marked as that window
  (ENERGY_WINDOW), and shown as no energy per token.
Anything else an old record lacks takes the field's default; fields no longer known are dropped.
"""

from __future__ import annotations

_ALL_WORDS = ("all", "max", "-1")
ENERGY_WINDOW = "prompt+decode"  # records.LEGACY_WINDOW


def layers_value(value):
    """A stored -ngl/-ngld as records keep it now: 'all' or a number (older evals stored the text typed)."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _ALL_WORDS:
            return "all"
        if text.isdigit():
            return int(text)
    if value == -1:
        return "all"
    return value


def upgrade(kind: str, d: dict) -> dict:
    """`d` with the fields of today's record of `kind` (a shallow copy; `d` is left as it was)."""
    config = d.get("config")
    if isinstance(config, dict) and ("ngl" in config or "ngld" in config):
        config = {**config, **{key: layers_value(config[key]) for key in ("ngl", "ngld") if key in config}}
        d = {**d, "config": config}
    energy = d.get("energy")
    if isinstance(energy, dict) and "window" not in energy:
        d = {**d, "energy": energy_before_56(energy)}
    return d


def energy_before_56(energy: dict) -> dict:
    """A run's energy as stored before issue 56: its `domains` ('GPU0', 'package-0') named as counters are now."""
    counters = [f"{'rapl' if str(name).startswith('package') else 'nvml'}:{name}" for name in energy.get("domains", [])]
    return {**energy, "counters": counters, "window": ENERGY_WINDOW}
