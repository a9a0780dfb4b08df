"""`drafts --twins`: the costs the ranking needs, measured on this machine on twins (models/twin.py: each model's real
header with synthetic weights, written from its header alone; nothing is downloaded): the target's verify curve
t(K+1)/t(1) and each draft's one-token step over the target's (its cost ratio c). Acceptance cannot come from a twin:
the ranking still predicts at the acceptance rates it names.

Each pair is placed as the real pair would be: with --vram, where the offload planner puts it in that memory
(models/offload_plan.plan's best row over the draft placements `plan` weighs, in the memory the ranking's fit check uses:
--vram itself, no margin), on the CPU when nothing fits; without --vram, every layer offloaded where the build can. A candidate
whose twin cannot be written or loaded is set aside with its reason (measure/flows/drafts.one_candidate, as --measure does);
the others are measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gguf_bench.errors import ModelError
from gguf_bench.measure.costs import measure_costs
from gguf_bench.measure.flows.drafts import MeasureEvents, one_candidate
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.models.candidates import Candidate, Header
from gguf_bench.models.offload_plan import Shape, best_row, plan
from gguf_bench.models.twin import named_twin, twin_folder
from gguf_bench.options import ALL_LAYERS

TEXT = "def add(a, b):\n    return a + b\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n"
TWIN_CTX = 512  # the twins' context: enough for TEXT and the timed batches


@dataclass(frozen=True)
class TwinSetting:
    """How the twins run: threads, and the device memory the pairs are placed in."""

    threads: int | None = None
    budget: int | None = None  # --vram in bytes: each pair placed as the planner places it there; None: every layer
    n_ctx: int = 4096  # the context the planner places for (--ctx-size, as the ranking's fit check)


@dataclass
class TwinCosts:
    verify: tuple[float, ...]  # t(k+1)/t(1) of the target, k = 0..k_max (the first pair measured)
    ratios: dict[str, float]  # draft name -> its one-token step over the target's
    placements: dict[str, str] = field(default_factory=dict)  # draft name -> the pair's placement ('-ngl 3 -ngld 3')
    failed: list[tuple[Candidate, str]] = field(default_factory=list)  # not measured, and why


def twin_costs(target: Candidate, drafts: list[Candidate], setting: TwinSetting = TwinSetting(), k_max: int = 8,
               n_predict: int = 32, events: MeasureEvents = MeasureEvents()) -> TwinCosts:
    """Twins of the target and of each draft (each written from what find resolved: Candidate.named), under the cache,
    deleted afterwards, each pair placed by `placed`,
    timed as the loop runs them: measure/costs.measure_costs (tune's decode timer on a loaded pair: the draft's token
    and the target's batches of 1..k_max+1, interleaved, medians). A draft whose twin cannot be written or loaded is
    in `failed`; a ModelError when none could be measured."""
    out = TwinCosts((1.0,), {})
    if not drafts:
        return out
    with twin_folder("drafts-twins-") as tmp:
        folder = Path(tmp)
        twin_target = named_twin(target.named, _sub(folder, 0))
        for i, c in enumerate(drafts, 1):
            with one_candidate(c.name, c, out.failed, events.note, "could not be measured on twins"):
                load = placed(target.header, c.header, setting)
                files = PairFiles(twin_target, named_twin(c.named, _sub(folder, i)), c.name)
                _measure(out, c.name, files, load, k_max, n_predict)
    if not out.ratios:
        first, why = out.failed[0]
        raise ModelError(f"no draft could be measured on twins ({first.name}: {why})")
    return out


def _measure(out: TwinCosts, name: str, files: PairFiles, load: LoadConfig, k_max: int, n_predict: int) -> None:
    with LoadedPair(files, load) as pair:
        costs = measure_costs(pair, pair.prompt_tokens(TEXT), n_predict, k_max)
    if not out.ratios:  # the first pair measured gives the verify curve
        out.verify = tuple(t / costs.t_verify[0] for t in costs.t_verify)
    out.ratios[name] = costs.t_draft / costs.t_verify[0]
    out.placements[name] = load.label


def placed(target: Header, draft: Header | None, setting: TwinSetting) -> LoadConfig:
    """Where a pair's twins go: with a budget, the planner's best row for the real pair (the most weight bytes of both
    on the devices: -ngl, -ncmoe for a MoE target, -ngld), from the headers, or nothing offloaded where not even the
    target's output layer fits; without a budget, or for a header the planner cannot read, every layer of both."""
    t_shape, d_shape = target.planner_shape(), draft.planner_shape() if draft else None
    if setting.budget is None or t_shape is None or d_shape is None:
        return LoadConfig(ALL_LAYERS, ALL_LAYERS, TWIN_CTX, setting.threads)
    row = best_row(plan(t_shape, d_shape, setting.budget, setting.n_ctx, _nglds(d_shape)))
    if row is None:
        return LoadConfig(0, 0, TWIN_CTX, setting.threads)
    return LoadConfig(row.target.layers, row.ngld, TWIN_CTX, setting.threads, placing=row.placing,
                      placing_draft=row.placing_draft)


def _nglds(draft: Shape) -> list[int]:
    """The draft placements the planner weighs, as `plan` does: none, one layer, half, all."""
    return [0, 1, draft.total_layers // 2, ALL_LAYERS]


def _sub(folder: Path, i: int) -> Path:
    path = folder / str(i)  # two candidates may share a file name
    path.mkdir()
    return path
