"""One streamed completion request as its client records it: the one record both server engines keep of a request,
filled by a parser of the API's own as its events come (runtimes/sse.py streams them): llama-server's /completion
(runtimes/server_clients) and OpenAI's /v1 completions (measure/engines/endpoint).

Client times are seconds from the start of the request's round. The figures are the server's own where it gave them
(llama.cpp's `timings` on the last chunk), else an OpenAI-compatible server's `usage`, else the client's (the stream's
first chunk to its last; -n where it stopped at the length asked); None where nobody said, never a guess. A record keeps
`stored()` of each request (RunMetrics.requests; the keys are STORED).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench import decode_window

# what a record keeps of a request, in this order (RunMetrics.requests' keys: stored files have them all)
STORED = ("client", "prompt_id", "sent_s", "first_token_s", "end_s", "prompt_n", "prompt_ms", "predicted_n",
          "predicted_ms", "draft_n", "draft_n_accepted", "text", "error")


@dataclass
class StreamedRequest:
    """One client's streamed request: its times as the client saw them, its answer, and what the server said of it."""

    client: int
    prompt_id: str
    n_predict: int | None = None  # the tokens asked for (-n): the count where it stopped at that length, untold
    sent_s: float = 0.0
    first_token_s: float | None = None  # the first chunk carrying generated text
    end_s: float | None = None  # the chunk that finished it
    tokens: list[int] = field(default_factory=list)  # the token ids, where the API gives them (llama-server's)
    text: str = ""
    finish: str | None = None  # OpenAI's finish_reason ('stop', 'length')
    usage: dict | None = None  # OpenAI's usage
    timings: dict | None = None  # llama.cpp's
    error: str | None = None

    def _timing(self, key: str):
        return self.timings.get(key) if self.timings else None

    @property
    def predicted_n(self) -> int | None:
        """Its generated tokens (tokens_from says who counted them)."""
        return self._counted()[0]

    @property
    def tokens_from(self) -> str:
        """Who counted its tokens: 'timings' (llama.cpp), 'usage', 'length' (-n, where it stopped at the length
        asked), or '' (nobody)."""
        return self._counted()[1]

    def _counted(self) -> tuple[int | None, str]:
        if self._timing("predicted_n") is not None:
            return int(self.timings["predicted_n"]), "timings"
        if self.usage and self.usage.get("completion_tokens") is not None:
            return int(self.usage["completion_tokens"]), "usage"
        return (self.n_predict, "length") if self.finish == "length" and self.n_predict is not None else (None, "")

    @property
    def decode_s(self) -> float | None:
        """llama.cpp's predicted_ms (first generated token to last), else the client's first chunk to its last."""
        if self._timing("predicted_ms") is not None:
            return float(self.timings["predicted_ms"]) / 1000.0
        return self.end_s - self.first_token_s if self.first_token_s is not None and self.end_s is not None else None

    @property
    def predicted_ms(self) -> float | None:
        if self._timing("predicted_ms") is not None:
            return float(self.timings["predicted_ms"])
        return 1000.0 * self.decode_s if self.decode_s is not None else None

    @property
    def prompt_n(self) -> int | None:
        """The prompt's tokens: llama.cpp's prompt_n, else usage.prompt_tokens."""
        n = self._timing("prompt_n")
        n = n if n is not None else (self.usage or {}).get("prompt_tokens")
        return int(n) if n is not None else None

    @property
    def prompt_ms(self) -> float | None:
        ms = self._timing("prompt_ms")
        return float(ms) if ms is not None else None

    @property
    def draft_n(self) -> int | None:
        """llama.cpp's drafted tokens (absent from its timings when nothing was drafted: 0); None without timings."""
        return int(self.timings.get("draft_n", 0)) if self.timings is not None else None

    @property
    def draft_n_accepted(self) -> int | None:
        return int(self.timings.get("draft_n_accepted", 0)) if self.timings is not None else None

    @property
    def ttft_s(self) -> float | None:
        return self.first_token_s - self.sent_s if self.first_token_s is not None else None

    @property
    def latency_s(self) -> float | None:
        return self.end_s - self.sent_s if self.end_s is not None else None

    @property
    def tokens_per_s(self) -> float | None:
        """The server's decode speed for this request (predicted_n over predicted_ms, as the single-stream engine)."""
        n, ms = self.predicted_n, self.predicted_ms
        rate = decode_window.tokens_per_s(n, ms / 1000.0) if n is not None and ms else None
        return rate if rate == rate else None  # nan: a window without tokens

    def stored(self) -> dict:
        """What a record keeps of it: the STORED figures (the text is enough to read: no token ids)."""
        return {key: getattr(self, key) for key in STORED}
