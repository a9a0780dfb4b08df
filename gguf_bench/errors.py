"""User-facing errors. The CLI prints `Error: <message>` for these and exits 1."""


class BenchError(Exception):
    """Base class: the message says what went wrong and what to do about it."""


class RegistryError(BenchError):
    """models.yaml is missing, malformed, or names something unknown."""


class DownloadError(BenchError):
    """A model could not be fetched, assembled, derived or verified."""


class ModelError(BenchError):
    """A model file is missing, is not GGUF, or does not load."""


class IncompatiblePairError(BenchError):
    """The draft cannot be used with the target (vocabularies differ)."""


class ConfigError(BenchError):
    """A run or sweep setting is out of range."""


class ResultsError(BenchError):
    """The results folder cannot be made or written, or appending a record failed."""


class BusyError(BenchError):
    """Another gguf-bench process is writing the same results file."""
