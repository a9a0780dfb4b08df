"""The Python engine: gguf-bench's own loop over llama-cpp-python (measure/pair.py loads the pair once per setting; a
setting on a build of its own, --lib, in a child process bound to it: lib_process.py).

Cells run depth by depth (the filler is prefilled once per depth, untimed); a greedy speculative run is compared with
the target alone's text (made untimed where the target alone has not run yet) and, where they part, replayed to say why
(decoding/divergence.py).
"""

from __future__ import annotations

from gguf_bench.decoding.divergence import Identity, compare_greedy
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.engine_registry import of
from gguf_bench.errors import BenchError
from gguf_bench.measure.engines.lib_process import LibrarySession, serve
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.pair import LoadedPair, local_pairs
from gguf_bench.measure.plan import Cell, Setting, shuffled
from gguf_bench.measure.trackers import track
from gguf_bench.results.schema.parts.provenance import Build
from gguf_bench.results.schema.records import PYTHON_ENGINE, Mode, RunMetrics, RunRecord
from gguf_bench.runtimes.llama_cpp import library_build


class PythonEngine:
    name = PYTHON_ENGINE
    capabilities = of(PYTHON_ENGINE)

    measured = staticmethod(local_pairs)  # what a sweep measures: the pairs on this machine

    @classmethod
    def for_grid(cls, grid, files) -> PythonEngine:
        """Nothing to check before a setting loads: the loop runs in this process."""
        return cls()

    def open(self, setting: Setting, prompts: PreparedPrompts) -> PythonSession | LibrarySession:
        """The setting loaded in this process; one on a build of its own (--lib) in a child process bound to it."""
        if setting.load.lib is not None:
            return LibrarySession(setting, prompts, child=__spec__.name)  # this module, run as the child's main
        return PythonSession(setting, prompts)


class PythonSession:
    """The pair loaded with the setting's offload and context, warmed up; a load that fails fails each cell."""

    def __init__(self, setting: Setting, prompts: PreparedPrompts):
        self.setting, self.prompts, self.grid = setting, prompts, setting.grid
        self.pair: LoadedPair | None = None
        self.failure: str | None = None
        self.depth: int | None = None  # the filler now in both models' context
        self.build: Build | None = None  # the libllama this process loaded (hashed once per process)
        try:
            self.build = Build(**library_build())
            self.pair = LoadedPair(setting.files, setting.load)
        except (BenchError, MemoryError, OSError) as exc:
            self.failure = f"model load failed: {exc}"
            return
        try:
            for p in self.grid.prompts:
                self.pair.check_fits(max(self.grid.depths) + len(prompts.tokens[p.id]), self.grid.n_predict,
                                     self.grid.k_max)
            self._warm_up(prompts.tokens[self.grid.prompts[0].id])
            self.offload = self.pair.offload()
        except BaseException:
            self.pair.close()
            raise

    design = "shuffled"

    def order(self, cells: list[Cell]) -> list[Cell]:
        """Block by block (one fill per depth), each block's cells in a seeded random order (plan.shuffled)."""
        return shuffled(cells, self.grid.seed)

    def measure(self, cell: Cell) -> RunRecord:
        if self.failure:
            return self.setting.record(cell, error=self.failure, build=self.build)
        if cell.depth != self.depth:
            self.pair.at_depth(self.prompts.filler_at(cell.depth))  # the same filler in both models, untimed
            self.depth = cell.depth
        prompt = self.prompts.after(cell.prompt.id, cell.depth)
        cfg = cell.sampling(self.grid)
        try:
            with track(self.grid.trackers) as tracked:  # load, device memory, energy (measure/trackers/)
                res = self.pair.generate(cell.mode, prompt, self.grid.n_predict, cell.k, cfg, verify=self.grid.verify,
                                         strategy=cell.strategy, on_round=tracked.on_round)  # its first: the decode's start
            identity = None
            if cfg.greedy and cell.mode == Mode.TARGET:
                self.prompts.greedy[self.setting.load, cell.baseline] = res.tokens
            if cfg.greedy and cell.mode == Mode.SPECULATIVE:
                identity = self._identity(cell, prompt, res)
            measured = RunMetrics.from_result(res, self.pair.target.detokenize(res.tokens), identity)
            return tracked.fill(self.setting.record(cell, measured, self.offload, build=self.build))
        except (BenchError, MemoryError) as exc:
            return self.setting.record(cell, None, self.offload, str(exc), build=self.build)

    def _identity(self, cell: Cell, prompt: list[int], spec) -> Identity:
        """Whether a greedy speculative run gave the target alone's text; if not, where and why (after timing). The
        target alone's text, where no run of it came yet (plan.shuffled forces no cell first, and a resumed sweep's
        target ran in an earlier process), is made here once, untimed and not recorded."""
        greedy, key = self.prompts.greedy, (self.setting.load, cell.baseline)
        if key not in greedy:
            greedy[key] = self.pair.generate(Mode.TARGET, prompt, self.grid.n_predict, 0, SamplingConfig()).tokens
        return compare_greedy(self.pair.target, prompt, greedy[key], spec)

    def _warm_up(self, prompt: list[int]) -> None:
        """One short run through both models (every drafter), so the first measured cell pays no start-up costs."""
        grid, pair = self.grid, self.pair
        cfg = SamplingConfig(grid.temperatures[0], grid.top_k, grid.top_p, grid.seed)
        costly = [s for s in grid.strategies if s.k_schedule == "cost"]
        if costly:  # the cost schedule's step costs: tune's calibration, else measured here, before any cell is timed
            pair.step_costs(prompt, grid.n_predict, max(s.max_k(k) for s in costly for k in grid.ks))
        for strategy in {s.spec_type: s for s in grid.strategies}.values():  # each drafter once (the n-gram decodes nothing)
            pair.generate(Mode.SPECULATIVE, prompt, min(16, grid.n_predict), max(grid.ks), cfg, strategy=strategy)

    def close(self) -> None:
        if self.pair is not None:
            self.pair.close()


if __name__ == "__main__":  # a --lib setting's child process (lib_process.LibrarySession): this session, over pipes
    serve(PythonSession)
