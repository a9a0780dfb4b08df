"""Prompts prepared once, for every engine: token ids in the target's vocabulary (the chat template applied where a
prompt asks for it and the model has one), the depth filler, the context they need, and the target alone's greedy
output that speculative runs are compared with.

Both engines send the very same token ids: the Python loop feeds them to llama.cpp, the server engine sends them to
llama-server's /completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gguf_bench.errors import ConfigError
from gguf_bench.measure.inputs.depth import after_filler, filler_tokens, padded
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.runtimes.llama_cpp import Vocabulary, read_info


def prompt_tokens(vocab, prompt: Prompt) -> list[int]:
    """The prompt's token ids: through the model's chat template when the prompt is a chat turn and the model has a
    template (a model without one gets the plain text), made `prompt.length` tokens long where it has one
    (depth.padded). The one place that decides."""
    chat = prompt.chat and vocab.has_chat_template()

    def tokens_of(text: str) -> list[int]:
        return vocab.tokenize(vocab.chat_prompt(text) if chat else text)
    if prompt.length:
        return padded(prompt.id.rsplit("@", 1)[0], prompt.text, prompt.length, tokens_of, vocab.detokenize,
                      vocab.tokenize)
    return tokens_of(prompt.text)


@dataclass
class PreparedPrompts:
    tokens: dict[str, list[int]]  # prompt id -> token ids
    filler: list[int]  # the deepest depth's filler; depth d uses its first d tokens
    # (setting's LoadConfig, Cell.baseline) -> the target alone's greedy tokens under that setting
    greedy: dict[tuple, list[int]] = field(default_factory=dict)

    @classmethod
    def prepare(cls, vocab, prompts: Sequence[Prompt], max_depth: int = 0) -> PreparedPrompts:
        """Tokenize with `vocab` (a Vocabulary, or a loaded Model: both are the target's tokenizer)."""
        return cls({p.id: prompt_tokens(vocab, p) for p in prompts}, filler_tokens(vocab, max_depth))

    @classmethod
    def for_target(cls, target: Path, prompts: Sequence[Prompt], max_depth: int = 0) -> PreparedPrompts:
        with Vocabulary(target) as vocab:
            return cls.prepare(vocab, prompts, max_depth)

    def filler_at(self, depth: int) -> list[int]:
        return self.filler[:depth]

    def after(self, prompt_id: str, depth: int) -> list[int]:
        """The prompt as it follows `depth` tokens of filler already in the context (without its BOS then)."""
        return after_filler(self.tokens[prompt_id], self.filler_at(depth))

    def whole(self, prompt_id: str, depth: int) -> list[int]:
        """Filler and prompt as one request (llama-server keeps the filler in its prompt cache between requests)."""
        return self.filler_at(depth) + self.after(prompt_id, depth)

    def longest(self) -> int:
        return max(len(t) for t in self.tokens.values())


def sized_context(files, prepared: PreparedPrompts, *, n_ctx: int, depth: int, n_predict: int,
                  verify: int) -> tuple[int, str | None]:
    """The context that holds the deepest filler (`depth`), the longest prompt, the output (`n_predict`) and a verify
    batch of `verify` drafted tokens: `n_ctx` (--ctx-size) when it already does, rounded up to 256 tokens otherwise,
    with a line saying so; an error when the models (`files`: a target and maybe a draft) were trained on less."""
    longest = prepared.longest()
    need = depth + longest + n_predict + verify + 1
    if need <= n_ctx:
        return n_ctx, None
    trained = min([n for f in (files.target, files.draft) if f and (n := read_info(f).context_length)], default=None)
    if trained and need > trained:
        raise ConfigError(f"depth {depth} + the longest prompt ({longest} tokens) + -n {n_predict} + a "
                          f"verify batch need {need} tokens of context, more than the models were trained on ({trained}); "
                          "lower -d/--depth or -n")
    sized = -(-need // 256) * 256
    at_depth = f"depth {depth} + " if depth else ""
    note = (f"--ctx-size {n_ctx} cannot hold {at_depth}the longest prompt ({longest} tokens) + -n {n_predict} + "
            f"a verify batch: running with -c {sized}")
    return sized, note
