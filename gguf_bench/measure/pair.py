"""Load a target/draft pair once and measure target alone, draft alone and speculative runs.

Shared by `run`, `sweep`, `eval` and `compare`; holds no printing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from gguf_bench import axes
from gguf_bench.decoding.loop import GenerationResult, OnRound, Verify, generate_regular, generate_speculative
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.schedules import Costs
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.errors import ConfigError
from gguf_bench.measure.costs import measure_costs, stored_costs
from gguf_bench.measure.inputs.depth import AtDepth, fill
from gguf_bench.models.gguf import check_compatible as check_vocabularies
from gguf_bench.models.pairs import PairChoice, PairFiles
from gguf_bench.options import layers_label
from gguf_bench.placing import Placing
from gguf_bench.results.schema.parts.offload import Offload
from gguf_bench.results.schema.records import Mode
from gguf_bench.runtimes.llama_cpp import Model, read_info


@dataclass(frozen=True)
class LoadConfig(axes.fields_of("LoadAxes", frozen=True)):
    """One load of a pair: offload, context size, threads, seed, placement, build, and a field per declared axis
    (gguf_bench/axes.py: -fa, -ctk, -ctv, -b, -ub, -td; None: not given, llama.cpp's default)."""

    ngl: int = 0  # target GPU layers (options.ALL_LAYERS = all)
    ngld: int = 0  # draft GPU layers
    n_ctx: int = 2048
    threads: int | None = None
    seed: int = 0
    placing: Placing = Placing()  # the target's experts, tensor overrides and devices (-ncmoe, -ot, -dev)
    placing_draft: Placing = Placing()  # the draft's (-ncmoed, -otd, -devd)
    # the llama.cpp build a server-engine load runs, where a sweep's --server-bin lists several (A,B: each binary a
    # setting of its own, like two -ngl values); None: the one binary of the sweep (or none: the Python loop)
    server_bin: Path | None = None
    # the llama.cpp build a Python-loop load runs, where a sweep gives --lib (the folder of its libllama.so, loaded in a
    # process of its own: measure/engines/lib_process.py); None: llama-cpp-python's library, in this process
    lib: Path | None = None

    @property
    def label(self) -> str:
        """'-ngl 10 -ngld all', then the placement, context settings and binary given ('-ncmoe 2 -fa on -ctk q8_0')."""
        builds = [f"{flag} {v}" for flag, v in (("--server-bin", self.server_bin), ("--lib", self.lib)) if v is not None]
        given = axes.labelled(self.get) + builds
        placed = [self.placement_label] if self.placement_label else []
        return " ".join([f"-ngl {layers_label(self.ngl)} -ngld {layers_label(self.ngld)}", *placed, *given])

    def get(self, name: str) -> object:
        """A field by its name (what axes.Axis reads a setting by)."""
        return getattr(self, name)

    @property
    def n_batch(self) -> int:
        """The most tokens one decode takes: -b as llama.cpp runs it."""
        return axes.AXIS["batch_size"].ran(self.get)

    @property
    def placement_label(self) -> str:
        """Both models' placement flags ('-ncmoe 2 -devd none'), '' for llama.cpp's default placement."""
        return " ".join(p for p in (self.placing.label(), self.placing_draft.label(draft=True)) if p)

    @property
    def default_placement(self) -> bool:
        """Neither model's weights placed beyond -ngl/-ngld."""
        return self.placing.is_default and self.placing_draft.is_default

    @property
    def draft_threads(self) -> int | None:
        return self.threads_draft or self.threads

    @property
    def context(self) -> dict:
        """The context settings as runtimes/llama_cpp.Model takes them (llama.cpp's names, defaults filled in)."""
        return {a.llama: a.ran(self.get) for a in axes.AXES if a.llama}

    @property
    def server_context(self) -> dict:
        """The axes as runtimes/llama_server.Launch takes them: those given, and those llama.cpp would run otherwise
        than its default (a clamp, a setting followed); the rest left to llama-server's own defaults."""
        def value(name: str) -> object:
            given, ran = self.get(name), axes.AXIS[name].ran(self.get)
            return ran if given is None and ran != axes.AXIS[name].default else given
        return axes.launch_fields(value)

    def stored(self) -> dict:
        """The axes as a run's record stores them: as llama.cpp ran them (defaults filled in)."""
        return {a.name: a.ran(self.get) for a in axes.AXES}

    @property
    def default_context(self) -> bool:
        """Whether every axis is what llama.cpp runs where none is given (tune's calibrations are measured so)."""
        return all(a.ran(self.get) == a.usual(self.get) for a in axes.AXES)

    def __post_init__(self) -> None:
        if self.n_ctx < 16:
            raise ConfigError(f"--ctx-size must be >= 16, got {self.n_ctx}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {self.threads}")
        for a in axes.AXES:
            a.check(self.get(a.name))

    def run_by(self, server_process: bool, first_bin: Path | None, first_lib: Path | None = None) -> LoadConfig | None:
        """This load as an engine runs it: each build axis is one engine's (--server-bin the server's, --lib the Python
        loop's), so the other engine runs the loads of that axis's first build only, without it; None for the others."""
        other, first = ("lib", first_lib) if server_process else ("server_bin", first_bin)
        if getattr(self, other) is None:
            return self
        return replace(self, **{other: None}) if getattr(self, other) == first else None

    def impossible(self) -> str | None:
        """Why llama.cpp cannot run these settings together, or None (a sweep leaves such combinations out)."""
        return axes.impossible(self.get)


class LoadedPair:
    """Both models loaded with their own offload; reused across draft lengths and prompts.
    files.draft None: the target alone (for the target-alone baseline and n-gram drafting); self.draft is None."""

    def __init__(self, files: PairFiles, load: LoadConfig):
        self.files = files
        self.load = load
        self.target = Model(files.target, load.ngl, load.n_ctx, load.threads, load.context, load.placing)
        self.draft: Model | None = None
        self.costs: Costs | None = None  # this machine's step costs, for the cost schedule (step_costs)
        self.depth = 0  # tokens of filler before every run's prompt (at_depth)
        try:
            if files.draft is not None:
                self.draft = Model(files.draft, load.ngld, load.n_ctx, load.draft_threads, load.context, load.placing_draft)
        except Exception:
            self.target.close()
            raise

    def at_depth(self, filler: list[int]) -> None:
        """Fill both models' context with `filler` (measure/inputs/depth.py: its first tokens; untimed): runs from now on
        start after it (a prompt goes after it without its BOS: depth.after_filler)."""
        target, draft = (getattr(m, "model", m) for m in (self.target, self.draft))
        depth = len(filler)
        for model in (target, draft):
            if model is not None:
                fill(model, filler)
        self.target = AtDepth(target, depth) if depth else target
        self.draft = AtDepth(draft, depth) if depth and draft is not None else draft
        self.costs = None  # the verify costs change with depth: measured again at this one when asked
        self.depth = depth

    def offload_label(self, role: str) -> str:
        """'N/total' as llama.cpp counts it (the output layer is one more layer)."""
        model = self.target if role == "target" else self.draft
        if model is None:
            return "-"
        return model.placement.layers

    def offload(self) -> Offload:
        """Layers and buffers of both models, as llama.cpp reported them."""
        return Offload(self.offload_label("target"), self.offload_label("draft"), self.target.placement,
                       self.draft.placement if self.draft is not None else None)

    def prompt_tokens(self, text: str, chat: bool = False) -> list[int]:
        if chat:
            text = self.target.chat_prompt(text)
        return self.target.tokenize(text)

    def check_fits(self, n_prompt: int, n_predict: int, k: int) -> None:
        if k + 1 > self.load.n_batch:
            raise ConfigError(f"a draft of {k} tokens is verified in one batch of {k + 1}, more than -b {self.load.n_batch}; "
                              "raise -b/--batch-size or lower -K")
        need = n_prompt + n_predict + k + 1
        if need > self.load.n_ctx:
            raise ConfigError(f"prompt ({n_prompt} tokens) + n_predict ({n_predict}) + draft ({k + 1}) = {need} "
                              f"tokens do not fit in --ctx-size {self.load.n_ctx}; raise --ctx-size or shorten them")

    def generate(self, mode: Mode | str, prompt: list[int], n_predict: int, k: int, cfg: SamplingConfig,
                 on_round: OnRound | None = None, verify: Verify = Verify.BATCHED,
                 strategy: Strategy = DEFAULT_STRATEGY) -> GenerationResult:
        """strategy: how a speculative run drafts (the draft model with fixed K by default)."""
        mode = Mode(mode)  # an unknown mode is a ValueError, never a silent speculative run
        if mode == Mode.TARGET:
            return generate_regular(self.target, prompt, n_predict, cfg, on_round)
        if mode == Mode.DRAFT:
            if self.draft is None:
                raise ConfigError("the draft alone needs a draft model (--draft FILE, or a pair)")
            return generate_regular(self.draft, prompt, n_predict, cfg, on_round)
        strategy.check(k, self.draft is not None)
        costs = self.step_costs(prompt, n_predict, strategy.max_k(k)) if strategy.k_schedule == "cost" else None
        res = generate_speculative(self.target, strategy.drafter(self.draft), prompt, n_predict, strategy.schedule(k, costs),
                                   cfg, on_round, verify)
        res.strategy = strategy.label(k)
        res.costs_source = costs.source if costs is not None else ""
        return res

    def step_costs(self, prompt: list[int], n_predict: int, k_max: int) -> Costs:
        """The draft's cost per token and the target's verify cost for batches of 1..k_max+1: tune's calibration when
        one is stored for this pair, host, offload and placement, else measured now (once per loaded pair, at the
        position a generation from `prompt` passes halfway; the sweep's warm-up asks first)."""
        if self.costs is None or self.costs.k_max < k_max:
            load = self.load
            stored = (stored_costs(self.files, load.ngl, load.ngld, load.threads, k_max, load.placement_label)
                      if load.default_context and not self.depth
                      else None)  # tune calibrates at the default context (its records do not say another), no depth
            self.costs = stored or measure_costs(self, prompt, n_predict, k_max)
        return self.costs

    def close(self) -> None:
        self.target.close()
        if self.draft is not None:
            self.draft.close()

    def __enter__(self) -> LoadedPair:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_compatible(files: PairFiles) -> None:
    """Whether the draft can draft for the target (llama.cpp's vocabulary rules); one line naming each failed rule."""
    check_vocabularies(read_info(files.target), read_info(files.draft))


def open_pair(files: PairFiles, load: LoadConfig) -> LoadedPair:
    """Check that the draft can draft for the target, then load both."""
    check_compatible(files)
    return LoadedPair(files, load)


def local_pairs(grid, choice: PairChoice, fetch: Callable) -> list[tuple[str, PairFiles]]:
    """What a sweep of the Python loop or llama-server measures, resolved from the command: the pairs on this machine,
    each found or fetched by `fetch` (the CLI's, with its progress bar: cli/progress.pair_files), with its name. grid: the
    sweep's plan.Grid (not imported here: plan imports this module), whose strategies say whether a draft is needed."""
    need_draft = any(s.uses_model for s in grid.strategies)
    files = ([fetch(None, choice.target, choice.draft, choice.registry, need_draft)] if (choice.target or choice.draft)
             else [fetch(p, None, None, choice.registry) for p in (choice.names or [None])])
    return [(f.name, f) for f in files]
