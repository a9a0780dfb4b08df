"""`drafts --twins`: the costs the ranking needs, measured on this machine on twins (models/twin.py: each model's real
header with synthetic weights, written from its header alone; nothing is downloaded): the target's verify curve
t(K+1)/t(1) and each draft's one-token step over the target's (its cost ratio c). Acceptance cannot come from a twin:
the ranking still predicts at the acceptance rates it names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf_bench.measure.costs import measure_costs
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.models.twin import twin_folder, twin_of
from gguf_bench.options import ALL_LAYERS

TEXT = "def add(a, b):\n    return a + b\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n"


@dataclass(frozen=True)
class TwinCosts:
    verify: tuple[float, ...]  # t(k+1)/t(1) of the target, k = 0..k_max
    ratios: dict[str, float]  # draft name -> its one-token step over the target's


def twin_costs(target: str, drafts: list[str], k_max: int = 8, threads: int | None = None,
               registry: Path | None = None, n_predict: int = 32) -> TwinCosts:
    """Twins of the target and of each draft (under the cache, deleted afterwards), every layer offloaded where the
    build can, timed as the loop runs them: measure/costs.measure_costs (tune's decode timer on a loaded pair: the
    draft's token and the target's batches of 1..k_max+1, interleaved, medians). The verify curve is the first
    pair's."""
    if not drafts:
        return TwinCosts((1.0,), {})
    load = LoadConfig(ALL_LAYERS, ALL_LAYERS, 512, threads)
    ratios, verify = {}, (1.0,)
    with twin_folder("drafts-twins-") as tmp:
        folder = Path(tmp)
        twin_target = twin_of(target, _sub(folder, 0), registry)
        for i, name in enumerate(drafts, 1):
            with LoadedPair(PairFiles(twin_target, twin_of(name, _sub(folder, i), registry), name), load) as pair:
                costs = measure_costs(pair, pair.prompt_tokens(TEXT), n_predict, k_max)
            ratios[name] = costs.t_draft / costs.t_verify[0]
            if i == 1:
                verify = tuple(t / costs.t_verify[0] for t in costs.t_verify)
    return TwinCosts(verify, ratios)


def _sub(folder: Path, i: int) -> Path:
    path = folder / str(i)  # two candidates may share a file name
    path.mkdir()
    return path
