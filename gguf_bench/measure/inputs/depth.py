"""Context depth (llama-bench's -d/--n-depth): N tokens of real text already in the context before the prompt, as an
agent or a RAG pipeline has them, prefilled once per loaded pair and depth and not timed.

The filler is English prose that ships with every CPython: the Python documentation's topic pages
(`pydoc_data.topics`, PSF licence), in a fixed order, tokenized by the target and cut at the depth. Both models hold
it; each run then starts after it (`AtDepth`: the loop sees positions from 0, the models keep the first `depth`
entries of their KV cache), so every run at a depth reads the same long cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gguf_bench.errors import ConfigError


def filler_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k].strip() for k in sorted(topics))


def filler_tokens(vocab, depth: int) -> list[int]:
    """The first `depth` tokens of the filler as the target tokenizes it (BOS first where the model adds one)."""
    if depth <= 0:
        return []
    tokens = vocab.tokenize(filler_text())
    if len(tokens) < depth:
        raise ConfigError(f"--depth {depth} is more than the {len(tokens)} tokens of filler text this model makes of "
                          "the bundled corpus; choose a smaller depth")
    return tokens[:depth]


def padded(name: str, prompt_text: str, length: int, tokens_of, detokenize, tokenize) -> list[int]:
    """A prompt made `length` tokens long (`--prompt-tokens`): the filler's text, then a blank line, then the task, in
    one turn and all of it timed (unlike the depth's filler). `tokens_of(text)` is the prompt's own tokenization (its
    chat template included), so the count is the one the model processes; the filler's cut is corrected until it
    matches (a merge across the join can leave it a token off, then the closest is kept)."""
    plain = tokens_of(prompt_text)
    check_shorter(name, len(plain), length)
    filler = tokenize(filler_text()[:8 * length + 4096], False)
    if len(filler) < length:
        raise ConfigError(f"--prompt-tokens {length} is more than the {len(filler)} tokens of filler text this model "
                          "makes of the bundled corpus; choose fewer")

    def count(cut: int) -> tuple[int, list[int]]:
        tokens = tokens_of(detokenize(filler[:max(cut, 0)]) + "\n\n" + prompt_text)
        return len(tokens), tokens
    return closest(count, length, length - len(plain), lambda cut, n: 1.0)


def check_shorter(name: str, plain: int, length: int) -> None:
    """One line where the prompt is already `length` tokens or longer."""
    if plain >= length:
        raise ConfigError(f"prompt {name} is already {plain} tokens long, not shorter than --prompt-tokens "
                          f"{length}: choose more tokens or a shorter prompt")


def closest(count, length: int, cut: int, per_token, tries: int = 12):
    """What `count(cut)` = (tokens, it) gives at the cut of the filler that makes `length` tokens: the cut corrected
    by the tokens missing x per_token(cut, tokens) (the filler's units a token: 1 where the cut counts tokens), then,
    once one cut fell short and one went past, halving the gap between them (a cut in characters may land where the
    text is denser); the closest kept where no cut matches."""
    best, short, past = None, None, None
    for _ in range(tries):
        n, made = count(cut)
        if best is None or abs(n - length) < abs(best[0] - length):
            best = (n, made)
        if n == length:
            break
        if n < length:
            short = cut if short is None else max(short, cut)
        else:
            past = cut if past is None else min(past, cut)
        if short is not None and past is not None and past - short <= 1:
            break
        guess = cut + (round((length - n) * per_token(cut, n)) or (1 if n < length else -1))
        cut = guess if short is None or past is None or short < guess < past else (short + past) // 2
    return best[1]


def after_filler(prompt: list[int], filler: list[int]) -> list[int]:
    """The prompt to append after the filler: without its BOS, which the filler already begins with."""
    return prompt[1:] if filler and prompt and prompt[0] == filler[0] else prompt


class AtDepth:
    """A model whose first `depth` KV positions hold the filler, which every run keeps: rewinding to n keeps
    depth + n entries, and n_past counts from the end of the filler."""

    def __init__(self, model, depth: int):
        self.model, self.depth = model, depth

    @property
    def n_past(self) -> int:
        return self.model.n_past - self.depth

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def llama_decode_s(self) -> float:
        return self.model.llama_decode_s

    def eval(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        return self.model.eval(tokens, n_logits)

    def rewind(self, n_past: int) -> None:
        self.model.rewind(self.depth + n_past)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def __getattr__(self, name: str):  # tokenize, detokenize, path, ...: the model's own
        return getattr(self.model, name)


def fill(model, filler: list[int]) -> None:
    """Put the filler into the model's KV cache from position 0 (untimed: its llama_decode time is taken back)."""
    spent = model.llama_decode_s
    model.rewind(0)
    if filler:
        model.eval(filler, 1)
    model.llama_decode_s = spent
