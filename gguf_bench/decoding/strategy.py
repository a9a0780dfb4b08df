"""A drafting strategy as the user sets it (--spec-type, n-gram sizes, p-min, n-min, K schedule): validated
once, stored in records, and turned into a Drafter and a Schedule for the loop."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gguf_bench import options
from gguf_bench.decoding.drafters import ChainDrafter, ModelDrafter, NgramDrafter
from gguf_bench.decoding.protocols import Drafter, LanguageModel, Schedule
from gguf_bench.decoding.schedules import CostK, Costs, FixedK, HeuristicK
from gguf_bench.errors import ConfigError

SPEC_TYPES = ("draft", "ngram", "ngram,draft")  # gguf-bench's loop (and llama-server: draft-simple, ngram-simple)
SPEC_ALIASES = {"ngram+draft": "ngram,draft"}  # the chain's name inside comma-separated sweep lists
# llama-server's own --spec-type values, spelled as it spells them (--engine server only); see runtimes/llama_server.py
# for the size flags each one gets from -K
SERVER_SPEC_TYPES = ("draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                     "draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")
SIDECAR_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")  # server types that read the draft file (-md)
SERVER_CHAIN = "+"  # llama-server's types chained in one server (draft-mtp+ngram-mod: --spec-type draft-mtp,ngram-mod)
K_SCHEDULES = ("fixed", "heuristic", "cost")  # cost: -K is the cap, each round sized by schedules.CostK


def _fmt(x: float) -> str:
    return f"{x:g}"


def server_parts(spec_type: str) -> tuple[str, ...]:
    """The llama-server types a --spec-type runs: one, or a chain's in order (draft-mtp+ngram-mod: llama-server builds
    both drafters and asks them in turn); () for the loop's own types."""
    parts = tuple(spec_type.split(SERVER_CHAIN))
    return parts if len(set(parts)) == len(parts) and all(p in SERVER_SPEC_TYPES for p in parts) else ()


@dataclass(frozen=True)
class Strategy:
    """--spec-type, --ngram-min/--ngram-max, --draft-p-min, --draft-min, --k-schedule, --k-cap."""

    spec_type: str = "draft"
    ngram_min: int = 1
    ngram_max: int = 4
    p_min: float = 0.0
    n_min: int = 0
    k_schedule: str = "fixed"
    k_cap: int = 16

    def __post_init__(self) -> None:
        spec = SPEC_ALIASES.get(self.spec_type, self.spec_type)
        if spec not in SPEC_TYPES and not server_parts(spec):
            raise ConfigError(f"unknown --spec-type '{self.spec_type}'; choose from {', '.join(SPEC_TYPES)} (in sweep "
                              f"lists write the chain as ngram+draft), or with --engine server {', '.join(SERVER_SPEC_TYPES)}"
                              f" (chain them with +, as draft-mtp+ngram-mod)")
        object.__setattr__(self, "spec_type", spec)
        if self.ngram_min < 1:
            raise ConfigError(f"--ngram-min must be >= 1, got {self.ngram_min}")
        if self.ngram_min > self.ngram_max:
            raise ConfigError(f"--ngram-min ({self.ngram_min}) must not exceed --ngram-max ({self.ngram_max})")
        if not 0.0 <= self.p_min < 1.0:
            raise ConfigError(f"--draft-p-min must be in [0, 1) (0 = off), got {_fmt(self.p_min)}")
        if self.n_min < 0:
            raise ConfigError(f"--draft-min must be >= 0, got {self.n_min}")
        if self.k_schedule not in K_SCHEDULES:
            raise ConfigError(f"unknown --k-schedule '{self.k_schedule}'; choose from {', '.join(K_SCHEDULES)}")
        if self.k_cap < 1:
            raise ConfigError(f"--k-cap must be >= 1, got {self.k_cap}")

    @property
    def server_only(self) -> bool:
        """One of llama-server's own types (ngram-mod, draft-mtp, ...): the Python loop cannot run it."""
        return bool(self.server_parts)

    @property
    def server_parts(self) -> tuple[str, ...]:
        return server_parts(self.spec_type)

    @property
    def uses_model(self) -> bool:
        """Whether it reads the pair's draft file: the loop's draft model, or llama-server's -md."""
        return "draft" in self.spec_type.split(",") or any(p in SIDECAR_TYPES for p in self.server_parts)

    @property
    def uses_ngram(self) -> bool:
        """Whether the loop's n-gram lookup (--ngram-min/--ngram-max) drafts; for llama-server's ngram-simple,
        ngram-map-k and ngram-map-k4v, --ngram-max is the lookup length."""
        return "ngram" in self.spec_type.split(",") or any(
            p in ("ngram-simple", "ngram-map-k", "ngram-map-k4v") for p in self.server_parts)

    @property
    def uses_p_min(self) -> bool:
        return self.uses_model or any(p in ("draft-mtp", "ngram-mod") for p in self.server_parts)

    def canonical(self) -> Strategy:
        """The same strategy with the settings it does not use at their defaults (so sweeps can dedupe)."""
        base = Strategy()
        return Strategy(self.spec_type,
                        self.ngram_min if self.uses_ngram and not self.server_only else base.ngram_min,
                        self.ngram_max if self.uses_ngram else base.ngram_max,
                        self.p_min if self.uses_model or "draft-mtp" in self.server_parts else 0.0,
                        self.n_min if self.uses_p_min else 0,
                        self.k_schedule,
                        self.k_cap if self.k_schedule == "heuristic" else base.k_cap)

    def check(self, k: int, has_draft_model: bool) -> None:
        """Errors that need the run's K and pair."""
        if self.uses_model and self.server_only and not has_draft_model:
            raise ConfigError(f"--spec-type {self.spec_type} needs a draft file (-md: --draft FILE, or a pair)")
        if self.uses_model and not has_draft_model:
            raise ConfigError(f"--spec-type {self.spec_type} needs a draft model (--draft FILE, or a pair); "
                              "--spec-type ngram drafts without one")
        if self.k_schedule == "heuristic" and k > self.k_cap:
            raise ConfigError(f"the heuristic schedule starts at K={k}, above --k-cap {self.k_cap}; lower -K or raise --k-cap")

    def check_server(self) -> None:
        """What llama-server can run; one line naming what it cannot."""
        if self.k_schedule != "fixed":
            raise ConfigError(f"llama-server drafts a fixed K: --k-schedule {self.k_schedule} runs on --engine python only")
        if self.spec_type == "ngram,draft":
            raise ConfigError("llama-server has no n-gram-then-draft-model chain: --spec-type ngram,draft runs on "
                              "--engine python only (llama-server chains its own types: draft-simple+ngram-simple)")

    def max_k(self, k: int) -> int:
        """The longest draft a round may make (for context checks and per-position counts)."""
        return self.k_cap if self.k_schedule == "heuristic" else k

    def drafter(self, model: LanguageModel | None) -> Drafter:
        if self.server_only:
            raise ConfigError(f"--spec-type {self.spec_type} is llama-server's own: run it with --engine server")
        ngram = NgramDrafter(self.ngram_min, self.ngram_max)
        if self.spec_type == "ngram":
            return ngram
        if model is None:
            self.check(1, False)
        drafter = ModelDrafter(model, self.p_min, self.n_min)
        return ChainDrafter(ngram, drafter) if self.uses_ngram else drafter

    def schedule(self, k: int, costs: Costs | None = None) -> Schedule:
        """costs: this machine's step costs, which the cost schedule needs (measure/costs.py finds or measures them)."""
        if self.k_schedule == "cost":
            if costs is None:
                raise ConfigError("--k-schedule cost needs this machine's verify costs: run it through a loaded pair "
                                  "(measure.pair.LoadedPair measures them), or pass Costs")
            return CostK(k, costs)
        return HeuristicK(k, self.k_cap) if self.k_schedule == "heuristic" else FixedK(k)

    @property
    def name(self) -> str:
        """The strategy without its K: 'draft', 'ngram(1-4)', 'ngram(1-4)+draft', 'draft p-min 0.8', 'draft heuristic',
        'ngram(1-4) cost'."""
        if self.server_only:  # llama-server's type, with the settings it was given beside K
            extra = f"({self.ngram_max})" if self.uses_ngram else ""
            extra += f" p-min {_fmt(self.p_min)}" if self.p_min > 0 else ""
            extra += f" n-min {self.n_min}" if self.n_min > 0 else ""
            return self.spec_type + extra + (f" {self.k_schedule}" if self.k_schedule != "fixed" else "")
        parts = []
        if self.uses_ngram:
            parts.append(f"ngram({self.ngram_min}-{self.ngram_max})")
        if self.uses_model:
            parts.append("draft")
        words = ["+".join(parts)]
        if self.uses_model and self.p_min > 0:
            words.append(f"p-min {_fmt(self.p_min)}")
        if self.uses_model and self.n_min > 1:
            words.append(f"n-min {self.n_min}")
        if self.k_schedule in ("heuristic", "cost"):
            words.append(self.k_schedule)
        return " ".join(words)

    def label(self, k: int) -> str:
        """A report row's name: 'draft K=8', 'ngram(1-4) K=16', 'draft p-min 0.8 K=16', 'draft heuristic K=4..16',
        'draft cost K=16' (K: the cost schedule's cap)."""
        if self.k_schedule == "heuristic":
            return f"{self.name} K={min(k, self.k_cap)}..{self.k_cap}"
        return f"{self.name} K={k}"

    @classmethod
    def from_params(cls, params: dict | None) -> Strategy:
        """The strategy a record's config stores (None: the default, as records made before strategies)."""
        return cls(**{f: v for f, v in (params or {}).items() if f in cls.__dataclass_fields__})

    def params(self) -> dict:
        """What a record stores about the strategy."""
        return asdict(self.canonical())


DEFAULT_STRATEGY = Strategy()


def parse_spec_types(text: str) -> list[str]:
    """A run's --spec-type ('draft', 'ngram', 'ngram,draft') or a sweep's list ('draft,ngram,ngram+draft')."""
    text = str(text).replace(" ", "")
    if text in SPEC_TYPES:
        return [text]
    return [Strategy(spec_type=s).spec_type for s in dict.fromkeys(text.split(","))]


def strategies(spec_types: str = "draft", ngram_min: int = 1, ngram_max: int = 4, p_min: str | float = "0",
               n_min: int = 0, k_schedule: str = "fixed", k_cap: int = 16) -> list[Strategy]:
    """Every combination of --spec-type, --draft-p-min and --k-schedule (lists in a sweep), with the settings a
    strategy does not use dropped, so `--spec-type draft,ngram --draft-p-min 0,0.8` gives 3 strategies, not 4.
    --spec-type ngram,draft alone is the chain (n-gram first, then the draft model); in longer lists write it ngram+draft."""
    schedules = list(dict.fromkeys(v for v in str(k_schedule).replace(" ", "").split(",") if v))
    found = [Strategy(t, ngram_min, ngram_max, p, n_min, s, k_cap).canonical()
             for t in parse_spec_types(spec_types) for p in options.p_mins(p_min) for s in schedules]
    return list(dict.fromkeys(found))
