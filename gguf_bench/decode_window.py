"""What a decode window holds, declared once for every engine: the window runs from the first generated token to the
last, and the first token comes from the prompt's logits (the prompt's evaluation, timed apart), so a run of n tokens
decodes n - 1 of them inside its window. llama-server counts the same way (server-common.h: n_gen_steps = n_gen - 1,
its predicted_per_second); tokens/s and ms/token divide by those steps, so -n 8 and -n 64 read one speed."""

from __future__ import annotations


def steps(n_tokens: int | None) -> int:
    """The tokens a run of n_tokens decoded inside its window: all but the first."""
    return max(0, (n_tokens or 0) - 1)


def tokens_per_s(n_tokens: int | None, seconds: float | None) -> float:
    """Decode speed: the window's tokens over its seconds; nan where it holds none (a run of one token) or no time."""
    n = steps(n_tokens)
    return n / seconds if n and seconds and seconds > 0 else float("nan")


def ms_per_token(n_tokens: int | None, seconds: float | None) -> float:
    """Milliseconds per token inside the window; nan where it holds none."""
    n = steps(n_tokens)
    return 1000.0 * seconds / n if n and seconds is not None else float("nan")
