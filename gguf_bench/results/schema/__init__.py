"""The results schema: what a run record holds (records, fields), how it is stored and named on disk (store, naming),
read from older files (legacy), and numbers as text."""
