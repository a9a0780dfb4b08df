"""Load a target/draft pair once and measure target alone, draft alone and speculative runs.

Shared by `run`, `sweep`, `eval` and `compare`; holds no printing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gguf_bench.backend import Model, gpu_offload_supported
from gguf_bench.drafters import DEFAULT_STRATEGY, Strategy
from gguf_bench.errors import ConfigError
from gguf_bench.options import layers_label
from gguf_bench.pairs import PairFiles  # noqa: F401 (where callers have always found it)
from gguf_bench.records import Mode
from gguf_bench.sampling import SamplingConfig
from gguf_bench.speculative import GenerationResult, OnRound, Verify, generate_regular, generate_speculative


@dataclass(frozen=True)
class LoadConfig:
    ngl: int = 0  # target GPU layers (options.ALL_LAYERS = all)
    ngld: int = 0  # draft GPU layers
    n_ctx: int = 2048
    threads: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_ctx < 16:
            raise ConfigError(f"--ctx-size must be >= 16, got {self.n_ctx}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {self.threads}")


class LoadedPair:
    """Both models loaded with their own offload; reused across draft lengths and prompts.
    files.draft None: the target alone (for the target-alone baseline and n-gram drafting); self.draft is None."""

    def __init__(self, files: PairFiles, load: LoadConfig):
        self.files = files
        self.load = load
        self.target = Model(files.target, load.ngl, load.n_ctx, load.threads)
        self.draft: Model | None = None
        try:
            if files.draft is not None:
                self.draft = Model(files.draft, load.ngld, load.n_ctx, load.threads)
        except Exception:
            self.target.close()
            raise
        self.gpu = gpu_offload_supported()

    def offload_label(self, role: str) -> str:
        """'N/total' as llama.cpp counts it (the output layer is one more layer)."""
        model = self.target if role == "target" else self.draft
        if model is None:
            return "-"
        wanted = self.load.ngl if role == "target" else self.load.ngld
        total = model.n_layers + 1
        return f"{min(wanted, total) if self.gpu else 0}/{total}"

    def prompt_tokens(self, text: str, chat: bool = False) -> list[int]:
        if chat:
            text = self.target.chat_prompt(text)
        return self.target.tokenize(text)

    def check_fits(self, n_prompt: int, n_predict: int, k: int) -> None:
        need = n_prompt + n_predict + k + 1
        if need > self.load.n_ctx:
            raise ConfigError(f"prompt ({n_prompt} tokens) + n_predict ({n_predict}) + draft ({k + 1}) = {need} "
                              f"tokens do not fit in --ctx-size {self.load.n_ctx}; raise --ctx-size or shorten them")

    def generate(self, mode: Mode | str, prompt: list[int], n_predict: int, k: int, cfg: SamplingConfig,
                 on_round: OnRound | None = None, verify: Verify = Verify.BATCHED,
                 strategy: Strategy = DEFAULT_STRATEGY) -> GenerationResult:
        """strategy: how a speculative run drafts (drafters.Strategy; the draft model with fixed K by default)."""
        mode = Mode(mode)  # an unknown mode is a ValueError, never a silent speculative run
        if mode == Mode.TARGET:
            return generate_regular(self.target, prompt, n_predict, cfg, on_round)
        if mode == Mode.DRAFT:
            if self.draft is None:
                raise ConfigError("the draft alone needs a draft model (--draft FILE, or a pair)")
            return generate_regular(self.draft, prompt, n_predict, cfg, on_round)
        strategy.check(k, self.draft is not None)
        res = generate_speculative(self.target, strategy.drafter(self.draft), prompt, n_predict, strategy.schedule(k), cfg,
                                   on_round, verify)
        res.strategy = strategy.label(k)
        return res

    def close(self) -> None:
        self.target.close()
        if self.draft is not None:
            self.draft.close()

    def __enter__(self) -> LoadedPair:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def metrics(res: GenerationResult) -> dict:
    """The measurements stored for one run."""
    return {
        "prompt_tokens": res.prompt_tokens,
        "prompt_s": res.prompt_s,
        "n_tokens": res.n_tokens,
        "decode_s": res.decode_s,
        "tokens_per_s": res.tokens_per_s,
        "ms_per_token": res.ms_per_token,
        "end_to_end_s": res.prompt_s + res.decode_s,
        # where decode time goes: inside llama_decode (target, draft), sampling and acceptance, the rest
        "target_decode_s": res.target_decode_s,
        "draft_decode_s": res.draft_decode_s,
        "sample_s": res.sample_s,
        "other_s": res.other_s,
        "overhead_pct": res.overhead_pct,
        "verify": res.verify or None,
        "stopped_by_eog": res.stopped_by_eog,
        "rounds": res.rounds,
        "drafted": res.drafted,
        "accepted": res.accepted,
        "acceptance": res.acceptance if res.drafted else None,
        "tokens_per_round": res.tokens_per_round if res.rounds else None,
        "accepted_at": res.accepted_at,
        "reached_at": res.reached_at,
    }


def load_config_dict(load: LoadConfig) -> dict:
    d = asdict(load)
    d["ngl"], d["ngld"] = layers_label(load.ngl), layers_label(load.ngld)
    return d


def open_pair(files: PairFiles, load: LoadConfig) -> LoadedPair:
    """Check that the draft can draft for the target (llama.cpp's vocabulary rules), then load both."""
    files.check_compatible()
    return LoadedPair(files, load)
