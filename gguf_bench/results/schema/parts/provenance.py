"""What every record carries besides its measurement: the environment it ran in (store.environment), the model
files it ran (store.models_record) and, on a run, the llama.cpp build it went through (`Build`, a part of RUN_PARTS)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench.results.schema.fields import Field


@dataclass
class Environment:
    """What a measurement depends on besides its configuration (store.environment)."""

    gguf_bench: str | None = None
    llama_cpp_python: str | None = None
    gpu_offload: bool | None = None
    system_info: str | None = None
    python: str | None = None
    platform: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    gpu_count: int | None = None
    devices: list[str] = field(default_factory=list)  # the backends' own device list ('Vulkan0: llvmpipe (...)')


@dataclass
class ModelFile:
    file: str | None = None
    path: str | None = None
    size: int | None = None
    sha256: str | None = None  # one file's; None for a twin and for a split GGUF (part_sha256)
    twin: bool = False  # a twin (models/twin.py): synthetic weights, its figures are speed only, never acceptance
    twin_agrees: bool = False  # an agreeing twin (twin --agree): token 0 everywhere, acceptance 1 by construction
    part_sha256: list[str] | None = None  # a split GGUF: one sha256 per part, in order (size: every part's together)


@dataclass
class Models:
    target: ModelFile | None = None
    draft: ModelFile | None = None  # None: the target alone (n-gram drafting)

    @property
    def files(self) -> list[ModelFile]:
        return [f for f in (self.target, self.draft) if f is not None]

    @property
    def twin(self) -> bool:
        """A twin ran (models/twin.py): the run's figures are speed only."""
        return any(f.twin for f in self.files)

    @property
    def agreeing(self) -> bool:
        """Every model of the run is an agreeing twin (twin --agree): acceptance 1 by construction."""
        return bool(self.files) and all(f.twin_agrees for f in self.files)


@dataclass
class Build:
    """The llama.cpp build a run went through, as it says of itself (runtimes/build_id.py): the Python loop's libllama
    (measure/engines/python.py) or llama-server's binary (measure/engines/server.py)."""

    version: str | None = None  # llama.cpp's version: '0.5.0-dev'
    build_number: int | None = None  # `--version`'s build number (llama-server; libllama does not say it)
    commit: str | None = None  # the commit it was built from ('0c1e570'; '-dirty': changed sources)
    system_info: str | None = None  # llama_print_system_info(): the CPU features and backends compiled in
    path: str | None = None  # the binary (llama-server, llama) or library (libllama.so) that ran
    sha256: str | None = None  # of that file

    @property
    def label(self) -> str:
        """'0.5.0-dev b1234 0c1e570 f534ca71': what tells two builds apart in a table."""
        parts = [self.version, f"b{self.build_number}" if self.build_number is not None else None, self.commit,
                 self.sha256[:8] if self.sha256 else None]
        return " ".join(p for p in parts if p)


BUILD_FIELDS = (
    Field("build", lambda r: r.build.label if r.build else None, fold="first", optional=True),
    Field("build_sha256", lambda r: r.build.sha256 if r.build else None, fold="first", optional=True),
)
