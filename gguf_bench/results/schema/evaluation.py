"""`gguf-bench eval`'s record: the multiplication benchmark, regular against speculative."""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench.decoding.divergence import Identity
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.results.schema.kinds import Kind
from gguf_bench.results.schema.parts.provenance import Environment, Models


@dataclass
class EvalConfig:
    nb_prompts: int = 0
    seed: int = 0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    k: int = 0
    ngl: int | str = 0
    ngld: int | str = 0
    n_predict: int = 12
    chat: bool = False
    verify: str = "batched"

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p, self.seed)


@dataclass
class EvalMetrics:
    n: int = 0
    regular_ok: int = 0
    speculative_ok: int = 0
    identical: int = 0
    batch_numerics: int = 0  # greedy differences the replay shows are batch numerics (decoding/divergence.py)
    loop_errors: int = 0  # greedy differences the replay does not explain: the loop is wrong
    p_value: float | None = None
    acceptance: float | None = None


@dataclass
class EvalRow:
    """One multiplication prompt, answered both ways."""

    a: int = 0
    b: int = 0
    answer: int = 0
    regular: str = ""
    speculative: str = ""
    regular_ok: bool = False
    speculative_ok: bool = False
    identical: bool = False
    divergence: Identity | None = None  # greedy rows whose outputs differ: where and why


@dataclass
class EvalRecord:
    pair: str = ""
    config: EvalConfig = field(default_factory=EvalConfig)
    metrics: EvalMetrics = field(default_factory=EvalMetrics)
    rows: list[EvalRow] = field(default_factory=list)
    time: str = ""
    env: Environment = field(default_factory=Environment)
    models: Models = field(default_factory=Models)
    kind: Kind = Kind.EVAL

    @property
    def greedy(self) -> bool:
        return self.config.sampling().greedy
