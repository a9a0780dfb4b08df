"""Why a greedy speculative output parts from greedy regular generation, found by replaying it.

llama.cpp computes a token's logits with other kernels in a batch of K+1 tokens (speculative
verification) than in a one-token decode (regular generation), and which kernels depends on the
CPU's instruction set, the thread count and the batch size: the last bits differ, and where the
target's two best tokens are close the argmax can flip. That is batch numerics, not a bug. To tell
it from a loop error without guessing from a margin, the parting position is recomputed both ways
exactly as each run computed it:

- regular: the prompt in one decode, then one token at a time up to the parting position;
- speculative: the prompt, then every verify batch the run logged, from the same position with the
  same tokens, rewinding as a correct loop does, so the cache holds what it held in the run.

Batch numerics = the replay reproduces every speculative token up to and including the parting one,
and the one-token path gives the regular token there. Anything else is a loop error. The logit
margins are reported as information only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gguf_bench.decoding.loop import GenerationResult, Verify, verify_logits
from gguf_bench.decoding.protocols import LanguageModel

BATCH_NUMERICS = "batch numerics"
LOOP_ERROR = "loop error"


@dataclass(frozen=True)
class Identity:
    """Whether a greedy speculative output equals the target alone's; if not, where they part and why."""

    identical: bool
    position: int | None = None  # output index of the first differing token
    regular_token: int | None = None  # None: generation had ended there (end of generation token)
    speculative_token: int | None = None
    one_token_choice: int | None = None  # argmax of the one-token decode's row at the position
    replayed_choice: int | None = None  # argmax of the replayed verify batch's row (when the replay got there)
    verify: str | None = None  # the run's Verify mode
    margin_one_token: float | None = None  # logit of the regular choice minus the speculative one, one-token row
    margin_batched: float | None = None  # the same margin the other way round, batched row
    cause: str | None = None  # BATCH_NUMERICS or LOOP_ERROR
    why: str | None = None


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, counting a missing token as different; None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _matches(model: LanguageModel, tokens: Sequence[int], j: int, choice: int) -> bool:
    """Whether `choice` is what the output holds at j: its token, or end of generation past its end."""
    return tokens[j] == choice if j < len(tokens) else model.is_eog(choice)


def compare_greedy(target: LanguageModel, prompt: Sequence[int], regular: Sequence[int],
                   spec: GenerationResult) -> Identity:
    """Identical, or where and why the speculative output parts from the regular one."""
    j = first_difference(regular, spec.tokens)
    if j is None:
        return Identity(identical=True)
    return Identity(identical=False, **explain_divergence(target, prompt, regular, spec, j))


def describe(identity: Identity) -> str:
    """One line for a table footer."""
    if identity.identical:
        return "output identical to the target alone's"
    margin = f", logit margin {abs(identity.margin_one_token):.4g}" if identity.margin_one_token is not None else ""
    return (f"output parts from the target alone's at token {identity.position} ({identity.regular_token} vs "
            f"{identity.speculative_token}): {identity.cause}{margin}; {identity.why}")


def explain_divergence(target: LanguageModel, prompt: Sequence[int], regular: Sequence[int],
                       spec: GenerationResult, j: int) -> dict:
    """Replay position j both ways (see the module docstring). Leaves the target's cache dirty."""
    single = _one_token_row(target, prompt, regular, j)
    replay = _replay_speculative(target, prompt, spec, j)
    reg_choice = int(np.argmax(single))
    out = {"position": j, "regular_token": _token_at(regular, j), "speculative_token": _token_at(spec.tokens, j),
           "one_token_choice": reg_choice, "verify": spec.verify}
    if isinstance(replay, str):
        return out | {"cause": LOOP_ERROR, "why": replay}
    batched_row, spec_choice = replay
    out |= {"replayed_choice": spec_choice,
            "margin_one_token": float(single[reg_choice] - single[spec_choice]),
            "margin_batched": float(batched_row[spec_choice] - batched_row[reg_choice])}
    if not _matches(target, regular, j, reg_choice):
        return out | {"cause": LOOP_ERROR, "why": "regular generation did not pick the one-token decode's argmax"}
    if reg_choice == spec_choice:
        return out | {"cause": LOOP_ERROR, "why": "the replayed verify batch gives the regular token: the run's cache "
                                                  "or acceptance was wrong"}
    return out | {"cause": BATCH_NUMERICS,
                  "why": "the same verify batch on the same cache picks the speculative token, the one-token "
                         "decode the regular one"}


def _token_at(tokens: Sequence[int], j: int) -> int | None:
    return tokens[j] if j < len(tokens) else None  # None: generation had ended (end of generation token)


def _one_token_row(target: LanguageModel, prompt: Sequence[int], regular: Sequence[int], j: int) -> np.ndarray:
    """The logits regular generation read to choose token j: [V] (a copy)."""
    target.rewind(0)
    logits = target.eval(prompt, 1)
    for tok in regular[:j]:
        logits = target.eval([tok], 1)
    return np.array(logits[0])


def _replay_speculative(target: LanguageModel, prompt: Sequence[int], spec: GenerationResult,
                        j: int) -> tuple[np.ndarray, int] | str:
    """(logit row that chose token j, its argmax) from replaying the logged verify batches, or why
    the replay does not reproduce the run's output before j (a loop error)."""
    out = spec.tokens
    target.rewind(0)
    prompt_row = np.array(target.eval(prompt, 1)[0])  # token 0 comes from the prompt, as in regular generation
    if j == 0:
        return prompt_row, int(np.argmax(prompt_row))
    if not _matches(target, out, 0, int(np.argmax(prompt_row))):
        return "the first token differs from the prompt's argmax"
    for base, batch in spec.verify_log:
        start = base - len(prompt)  # output index of x0
        if start >= j or start < 0 or out[start] != batch[0]:
            return f"verify batch at position {base} does not start from the output's token there"
        target.rewind(base)
        rows = verify_logits(target, batch, Verify(spec.verify))
        for r in range(len(batch)):
            if r > 0 and (start + r >= len(out) or batch[r] != out[start + r]):
                break  # draft r was rejected: rows after it were never used
            pos = start + 1 + r  # output index row r chooses
            choice = int(np.argmax(rows[r]))
            if pos == j:
                return np.array(rows[r]), choice
            if not _matches(target, out, pos, choice):
                return f"replaying the verify batch at position {base} gives another token at output {pos}"
    return f"no logged verify batch chose output token {j}"
