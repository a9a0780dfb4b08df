"""Fields declared once (results/schema/fields.py, run_fields.RUN_FIELDS: the record's own and each part's,
parts.RUN_PARTS): what run_row, summarize and the run table walk."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_bench.results.schema.fields import Field, folds
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.run_fields import RUN_FIELDS, run_row

PACKAGE = Path(__file__).resolve().parent.parent / "gguf_bench"


def spelled(name: str) -> dict[str, int]:
    """Occurrences of `name` per module of the package."""
    counts = {str(p.relative_to(PACKAGE)): p.read_text().count(name) for p in PACKAGE.rglob("*.py")}
    return {path: n for path, n in counts.items() if n}


def test_a_fold_is_one_pandas_knows():
    with pytest.raises(ValueError, match="fold 'median' is not one of"):
        Field("x", lambda r: None, fold="median")
    declared = [Field("a", lambda r: 1, fold="mean", spread=True), Field("b", lambda r: 2), Field("c", lambda r: 3, fold="max")]
    assert folds(declared) == {"a": ("a", "mean"), "a_std": ("a", "std"), "c": ("c", "max")}


def test_every_flat_column_is_declared_once():
    names = [f.name for f in RUN_FIELDS]
    assert len(names) == len(set(names))
    assert list(run_row(RunRecord())) == names


def test_a_measured_quantity_is_spelled_where_it_is_declared_and_measured_only():
    """The issue's targets: a server figure in the record, its declaration and the engine that measures it; the energy
    fields in their part's module only (their tracker fills parts.energy_spent.Energy, which they read)."""
    where = spelled("latency_p95_s")  # declared in the record and its field; each engine that measures it, once
    assert where.pop("results/schema/records.py") == 1 and where.pop("results/schema/run_fields.py") <= 2
    assert where == {"measure/engines/server_figures.py": 1, "measure/engines/endpoint_figures.py": 1}
    for name in ("joules_per_token", "joules_per_accepted", "tokens_per_joule", "energy_j"):
        assert set(spelled(name)) == {"results/schema/parts/energy_spent.py"}, name


def test_the_record_walks_its_table_of_parts():
    """Every optional part of a run's record is a RUN_PARTS entry (its type, its columns in RUN_FIELDS), and every
    entry is a RunRecord attribute of that type: a new part is its module and its line."""
    import typing

    from gguf_bench.results.schema.parts import RUN_PARTS

    hints = typing.get_type_hints(RunRecord)
    for part in RUN_PARTS:
        assert part.cls in typing.get_args(hints[part.name]) or any(
            part.cls in typing.get_args(a) for a in typing.get_args(hints[part.name])), part.name
        assert all(f in RUN_FIELDS for f in part.fields), part.name
    parts = {p.cls for p in RUN_PARTS}
    typed = {name for name, tp in hints.items() if parts & set(typing.get_args(tp))
             or any(parts & set(typing.get_args(a)) for a in typing.get_args(tp))}
    assert typed == {p.name for p in RUN_PARTS}
