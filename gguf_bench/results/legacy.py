"""Records as earlier versions wrote them, brought to today's fields before records.parse builds them.

Shapes read (tests/data/legacy/ holds one file of each):
- runs written before kinds existed: no `kind` (records.parse reads them as runs), no strategy, verify or
  category in their config, no draft_lengths/draft_sources/identity in their metrics;
- evaluations whose config kept -ngl/-ngld as typed ('max', '-1', '10'): stored as 'all' or a number now;
- calibrations of tune before n-gram prediction: no prompt/output tokens per prompt.
Anything else an old record lacks takes the field's default; fields no longer known are dropped.
"""

from __future__ import annotations

_ALL_WORDS = ("all", "max", "-1")


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
    return d
