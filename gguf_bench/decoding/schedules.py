"""Draft length per round: `FixedK` (every round drafts up to K) or `HeuristicK` (Hugging Face's
"heuristic" schedule: K += 2 after a round whose every draft token was accepted, K -= 1 otherwise, within
[1, k_cap]; reset at the start of every generation, which HF calls "heuristic_transient")."""

from __future__ import annotations

from gguf_bench.options import draft_length


class FixedK:
    """Every round drafts up to k tokens."""

    def __init__(self, k: int):
        self.k = self.max_k = draft_length(k)

    def update(self, n_drafted: int, n_accepted: int) -> None:
        pass


class HeuristicK:
    """Hugging Face's heuristic: +2 after a round that accepted its whole (non-empty) draft, -1 after one
    that did not; between 1 and cap. Rounds without a draft leave K alone."""

    def __init__(self, k: int, cap: int):
        self.k, self.max_k = min(draft_length(k), cap), cap

    def update(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted:
            self.k = min(self.k + 2, self.max_k) if n_accepted == n_drafted else max(1, self.k - 1)
