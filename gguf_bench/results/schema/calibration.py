"""`gguf-bench tune`'s record: one offload setting's calibration (measure/flows/calibrate.py writes it,
results/predictions/costmodel.Calibration reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench.results.schema.kinds import Kind
from gguf_bench.results.schema.parts.offload import Offload
from gguf_bench.results.schema.parts.provenance import Environment, Models


@dataclass
class CalibrationConfig:
    ngl: int | str = 0
    ngld: int | str = 0
    n_ctx: int = 2048
    threads: int | None = None
    seed: int = 0
    temperature: float = 0.0
    prompts: list[str] = field(default_factory=list)
    n_predict: int = 0
    ks: list[int] = field(default_factory=list)
    k_max: int = 0
    reps: int = 0  # decode timing samples per batch size
    position: int = 0  # context position the decode timings were taken at (after the depth's filler)
    depth: int = 0  # tokens of filler before every prompt (measure/inputs/depth.py)
    placement: str | None = None  # both models' placement flags beyond -ngl (RunConfig.placement_label); None: default


@dataclass
class InLoop:
    """What the calibration's own K_max runs measured (a check of the timings' prediction)."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_s: float = 0.0
    target_decode_s: float = 0.0
    draft_decode_s: float = 0.0
    sample_s: float = 0.0
    other_s: float = 0.0
    overhead_s_per_round: float | None = None
    draft_decode_s_per_token: float | None = None
    target_decode_s_per_round: float | None = None
    tokens_per_s: list[float] = field(default_factory=list)
    predicted_decode_s: float | None = None


@dataclass
class CalibrationTimings:
    t_draft_s: float = 0.0
    t_draft2_s: float = 0.0
    t_verify_s: list[float] = field(default_factory=list)  # t_verify(b) for b = 1..k_max+1
    round_overhead_s: float = 0.0
    round_overhead_raw_s: float | None = None
    regular_overhead_s: float | None = None
    draft_python_s: float | None = None
    verify_python_s: list[float] = field(default_factory=list)
    in_loop: InLoop = field(default_factory=InLoop)
    # per calibration prompt (acceptance.prompts' order): the target's and the draft's evaluation of it, median of a
    # few (the request-latency prediction's first-token term); empty in records before it
    prompt_target_s: list[float] = field(default_factory=list)
    prompt_draft_s: list[float] = field(default_factory=list)


@dataclass
class PromptText:
    """One calibration prompt's greedy text (measure.calibrate.Text, stored)."""

    prompt_id: str = ""
    n_tokens: int = 0
    stopped_by_eog: bool = False
    matches: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@dataclass
class CalibrationAcceptance:
    a: list[float | None] = field(default_factory=list)  # acceptance of draft position j once reached
    reached_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    prompts: list[PromptText] = field(default_factory=list)


@dataclass
class CalibrationRecord:
    pair: str = ""
    config: CalibrationConfig = field(default_factory=CalibrationConfig)
    offload: Offload | None = None
    timings: CalibrationTimings = field(default_factory=CalibrationTimings)
    acceptance: CalibrationAcceptance = field(default_factory=CalibrationAcceptance)
    tune: str | None = None  # the tune's results name
    calibration_s: float | None = None
    time: str = ""
    env: Environment = field(default_factory=Environment)
    models: Models = field(default_factory=Models)
    kind: Kind = Kind.CALIBRATION
