"""What the user reads: the summary and its verdicts, tables and report formats, plots, tuning tables, crossover and
deploy candidates, evals, Spec-Bench's view and tune --check."""
