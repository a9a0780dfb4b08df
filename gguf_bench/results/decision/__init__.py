"""The decision, between the records and every printer: runs -> units (sweep, invocation, load) -> estimates ->
comparisons -> verdicts at a margin. Prints nothing; reads no model (docs/verdicts.md)."""
