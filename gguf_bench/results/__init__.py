"""Results, split by job: schema (records and files), predictions (cost models), presentation (summaries, verdicts, tables)."""
