"""The endpoint engine: a server someone else started (llama-server with the flags its owner chose, ik_llama.cpp,
llama-cpp-python's server, vLLM, ...), measured over HTTP the way an OpenAI-compatible client sees it.

Two servers of the same model: --url, with speculation, and --baseline-url, without. In each repetition block the
requests go to the two in a seeded random order (plan.shuffled: 'alternate'), so each speculative run has the
baseline's run of the same prompt next to it in time; the baseline's records are the target alone (mode target) and
--url's the speculative runs, so the paired verdicts read them as they read any engine's. Prompts go as text
(/v1/completions) or as chat messages (/v1/chat/completions): the server tokenizes with its own vocabulary and
template. Every request streams; --clients sends that many at the same moment.

What a record holds is what the server gives, and the record says what it did not give (parts.endpoint_identity.Endpoint):
- llama.cpp's servers (they answer /props): the last chunk's `timings` (predicted_n over predicted_ms, the server
  engine's tokens/s; draft_n and draft_n_accepted), /slots' draft context and types, and /metrics' verification steps
  and acceptance per draft position, where /metrics is on and its counters over the cell equal the requests' own
  timings (another client's requests would be in them otherwise); the per-position series is read apart, never added
  to the totals;
- any other server: its `usage`, or -n where it stopped at the length asked, timed by the client from the stream's
  first chunk to its last; acceptance, drafted tokens and rounds None, never a guess.
"""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import Strategy
from gguf_bench.engine_registry import of
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.measure.engines.endpoint_figures import counted, round_metrics, single_metrics, why_unmeasured
from gguf_bench.measure.inputs.depth import check_shorter, closest, filler_text
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Cell, Grid, Plan, ServedModel, Setting, Unit, shuffled, with_baselines
from gguf_bench.models.pairs import PairChoice
from gguf_bench.results.schema.parts.endpoint_identity import Endpoint
from gguf_bench.results.schema.parts.provenance import ModelFile, Models
from gguf_bench.results.schema.records import Mode, RunRecord
from gguf_bench.results.schema.store import environment
from gguf_bench.runtimes import server_metrics, sse
from gguf_bench.runtimes.server_clients import together
from gguf_bench.runtimes.streamed import StreamedRequest

NAME = "endpoint"  # its name in engine_registry.KINDS
CHARS_PER_TOKEN = 4  # the first guess of --prompt-tokens' cut in characters a token (English prose: about 4)
PROBE_TOKENS = 8  # the greedy request each server answers first: a warm-up, and the same-model check where ids differ


class EndpointError(BenchError):
    """A server that cannot be reached, does not speak the API, or is not what the sweep needs."""


# --- what a server says it is -------------------------------------------------------------------


@dataclass
class Served:
    """One server as it described itself: llama.cpp's servers answer /props (and /slots, /metrics where on)."""

    url: str  # its root, without /v1
    model: str  # /v1/models' first id
    props: dict | None = None  # /props, llama.cpp's servers only
    speculative: bool | None = None  # /slots: a draft context (None: not told)
    metrics: bool = False  # its /metrics answers with llama.cpp's counters
    spec_types: str | None = None  # /slots after a request: the types it drafted with ('draft-simple')

    @property
    def llama_cpp(self) -> bool:
        return self.props is not None

    @property
    def slots(self) -> int | None:
        return self.props.get("total_slots") if self.props else None

    def not_available(self, speculative: bool) -> list[str]:
        """The figures this server does not give (the records leave them None)."""
        if not self.llama_cpp:
            return ["acceptance, drafted and accepted tokens, rounds (no llama.cpp timings or /metrics)",
                    "prompt time (no server timings: the client times the stream)"]
        return [] if self.metrics or not speculative else ["rounds and acceptance per position (no /metrics: start it "
                                                           "with --metrics)"]

    def record(self, timed_by: str, tokens_from: str, speculative: bool) -> Endpoint:
        props = self.props or {}
        return Endpoint(self.url, self.model, self.llama_cpp, props.get("build_info"), self.slots, self.speculative,
                        self.spec_types, timed_by, tokens_from, self.not_available(speculative))


def base_url(url: str) -> str:
    """The server's root: 'http://host:8080/v1/' and 'http://host:8080' are the same server."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/]+", url):
        raise ConfigError(f"'{url}' is not an http:// or https:// URL (give the server's address, http://HOST:PORT)")
    return url.removesuffix("/v1")


def _http(url: str, path: str, timeout_s: float = 10.0, body: dict | None = None) -> tuple[int, bytes]:
    """(status, body) of GET url+path, or of a POST of `body` as JSON; one line where the server cannot be reached."""
    data = json.dumps(body).encode() if body is not None else None
    call = urllib.request.Request(url + path, data, {"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(call, timeout=timeout_s) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointError(f"cannot reach {url}: {reason}") from None


def _json(url: str, path: str):
    """GET url+path as JSON, None where it answers otherwise (not found, not JSON)."""
    status, body = _http(url, path)
    try:
        return json.loads(body) if status == 200 else None
    except ValueError:
        return None


def describe(url: str, option: str) -> Served:
    """The server at `url` (given as `option`): its model, and what llama.cpp's servers say about themselves."""
    url = base_url(url)
    status, body = _http(url, "/v1/models")
    try:
        model = str(json.loads(body)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise EndpointError(f"{option} {url} is not an OpenAI-compatible server: GET /v1/models answered {status} "
                            f"without a model list") from None
    props = _json(url, "/props")
    props = props if isinstance(props, dict) and "build_info" in props else None
    served = Served(url, model, props)
    if served.llama_cpp:
        slots = _json(url, "/slots")
        served.speculative = any(s.get("speculative") for s in slots) if isinstance(slots, list) and slots else None
        status, body = _http(url, "/metrics")
        served.metrics = status == 200 and server_metrics.PREFIX.encode() in body
    return served


def spec_types(served: Served) -> str | None:
    """The types a llama.cpp server drafted its last request with (/slots; /props always says none)."""
    slots = _json(served.url, "/slots") if served.llama_cpp else None
    found = [t for s in slots or [] for t in str((s.get("params") or {}).get("speculative.types", "")).split(",")]
    return "+".join(t for t in dict.fromkeys(found) if t not in ("", "none")) or None


def check_pair(spec: Served, base: Served, prompt: Prompt, timeout_s: float) -> None:
    """One line where the two cannot be compared: one server twice, a baseline that drafts, a --url that does not, or
    a baseline serving another model (ids differ, and so do the first tokens at temperature 0). Each server answers
    the greedy probe first: its warm-up."""
    if spec.url == base.url:
        raise ConfigError(f"--url and --baseline-url are the same server ({spec.url}): the baseline is the same model "
                          "served without speculation, by another server")
    if base.speculative:
        raise ConfigError(f"the baseline {base.url} drafts (its /slots hold a draft context): start it without -md and "
                          "--spec-type, the same model without speculation")
    if spec.speculative is False:
        raise ConfigError(f"{spec.url} does not speculate (its /slots hold no draft context): start it with "
                          "--spec-type (and -md DRAFT), or measure another --url")
    texts = [probe(s, prompt, timeout_s) for s in (spec, base)]
    if spec.model != base.model and texts[0] != texts[1]:
        raise ConfigError(f"the baseline serves another model: {base.model!r} at {base.url}, {spec.model!r} at "
                          f"{spec.url}, and their first {PROBE_TOKENS} tokens at temperature 0 differ "
                          f"({texts[1][:30]!r} vs {texts[0][:30]!r})")


def probe(served: Served, prompt: Prompt, timeout_s: float) -> str:
    """The server's text for `prompt` (as plain text) at temperature 0, PROBE_TOKENS tokens; one line where it fails."""
    answer = run_round(served, [Prompt(prompt.id, prompt.text)], PROBE_TOKENS, SamplingConfig(), timeout_s)[0][0]
    if answer.error:
        raise EndpointError(f"{served.url} failed its first request: {answer.error}")
    return answer.text


# --- one streamed request (runtimes/streamed.StreamedRequest) ---------------------------------


def request(served: Served, prompt: Prompt, n_predict: int, cfg: SamplingConfig) -> tuple[str, dict]:
    """(path, body): chat messages for a chat prompt, else its text; every sampler field the API has; llama.cpp's
    servers cold (no cached prefix, which would also reuse a greedy draft)."""
    body = {"model": served.model, "max_tokens": n_predict, "temperature": cfg.temperature, "top_p": cfg.top_p,
            "seed": cfg.seed, "stream": True, "stream_options": {"include_usage": True}}
    body |= {"top_k": cfg.top_k} if cfg.top_k else {}
    body |= {"cache_prompt": False} if served.llama_cpp else {}
    if prompt.chat:
        return "/v1/chat/completions", body | {"messages": [{"role": "user", "content": prompt.text}]}
    return "/v1/completions", body | {"prompt": prompt.text}


def stream(served: Served, prompt: Prompt, n_predict: int, cfg: SamplingConfig, timeout_s: float,
           answer: StreamedRequest, start: float) -> None:
    """One streaming request into `answer` (runtimes/sse.py); a failure is its error (never raised)."""
    path, body = request(served, prompt, n_predict, cfg)
    answer.sent_s = time.perf_counter() - start
    try:
        sse.post_events(served.url + path, body, timeout_s, lambda data: _chunk(data, answer, start))
    except sse.StreamFailed as exc:
        if exc.kind == sse.STATUS:
            answer.error = f"{served.url} answered {exc.status}: {exc}"
        elif exc.kind != sse.CLOSED:
            answer.error = f"the request to {served.url} failed after {len(answer.text)} characters: {exc}"
    if answer.error is None and answer.end_s is None:
        answer.error = f"{served.url} ended its stream without finishing the answer"


def _chunk(data: bytes, answer: StreamedRequest, start: float) -> bool:
    """One server-sent event's data into `answer`; True at the end of the stream."""
    if data == b"[DONE]":
        return True
    chunk = json.loads(data)
    if chunk.get("error"):
        raise ValueError(f"the server's stream says: {chunk['error']}")
    now = time.perf_counter() - start
    for choice in chunk.get("choices") or []:
        piece = choice["text"] if "text" in choice else (choice.get("delta") or {}).get("content")
        if piece is not None and answer.first_token_s is None and not choice.get("finish_reason"):
            answer.first_token_s = now
        answer.text += piece or ""
        if choice.get("finish_reason"):
            answer.finish, answer.end_s = choice["finish_reason"], now
    answer.usage = chunk.get("usage") or answer.usage
    answer.timings = chunk.get("timings") or answer.timings
    return False


def run_round(served: Served, prompts: list[Prompt], n_predict: int, cfg: SamplingConfig,
              timeout_s: float) -> tuple[list[StreamedRequest], float]:
    """Every prompt at the same moment, one client each, released together; (the answers, the round's wall time)."""
    answers = [StreamedRequest(i, p.id, n_predict) for i, p in enumerate(prompts)]
    calls = [functools.partial(stream, served, p, n_predict, cfg, timeout_s, a) for a, p in zip(answers, prompts)]
    return answers, together(calls, timeout_s)


# --- the server's counters -------------------------------------------------------------------


def counters(served: Served) -> dict | None:
    """/metrics' llamacpp counters (a per-position one as 'name[i]', apart from the totals); None where it has none."""
    if not served.metrics:
        return None
    try:
        status, body = _http(served.url, "/metrics")
    except EndpointError:  # gone: the cell's request says so
        return None
    return (server_metrics.parse(body.decode("utf-8", "replace")) if status == 200 else None) or None


# --- the engine -------------------------------------------------------------------------------


class EndpointEngine:
    """Two servers someone else started: --url (speculative) and --baseline-url (the target alone)."""

    name = NAME
    capabilities = of(NAME)

    def __init__(self, spec: Served, base: Served):
        self.spec, self.base = spec, base

    def open(self, setting: Setting, prompts: PreparedPrompts) -> EndpointSession:
        return EndpointSession(self, setting)

    @staticmethod
    def measured(grid: Grid, choice: PairChoice, fetch=None) -> list[tuple[str, Servers]]:
        """What the sweep measures, resolved from the command: the two servers of its options (--url, --baseline-url),
        named by --url; one line where one is missing or a pair is given. The one sweep loop runs it."""
        given = grid.options_of(NAME)
        if not (given.url and given.baseline_url):
            raise ConfigError(f"--engine {NAME} measures two servers someone else started: give --url (with "
                              "speculation) and --baseline-url (the same model without)")
        if choice.names or choice.target or choice.draft:
            raise ConfigError(f"--engine {NAME} measures the servers at --url and --baseline-url: give no pair, "
                              "--target or --draft")
        return [(given.url, Servers((given.url, given.baseline_url)))]


class EndpointSession:
    """The cells of one sweep: the speculative ones to --url, the target alone's to --baseline-url, block by block."""

    design = "alternate"  # both servers up at once: the requests go to them in turn

    def __init__(self, engine: EndpointEngine, setting: Setting):
        self.engine, self.setting, self.grid = engine, setting, setting.grid
        self.prompts = list(setting.grid.prompts)

    def order(self, cells: list[Cell]) -> list[Cell]:
        return shuffled(cells, self.grid.seed)

    def measure(self, cell: Cell) -> RunRecord:
        speculative = cell.mode == Mode.SPECULATIVE
        served = self.engine.spec if speculative else self.engine.base
        before = counters(served) if speculative else None
        answers, wall = run_round(served, self._round(cell), self.grid.n_predict, cell.sampling(self.grid),
                                  self.grid.options_of(NAME).request_timeout_s)
        got = counted(before, counters(served) if speculative else None, answers)
        error = why_unmeasured(answers)
        label = cell.strategy.name if speculative and served.spec_types else None
        metrics = None if error else (single_metrics(answers[0], got, label) if cell.clients is None
                                      else round_metrics(answers, wall, got, label))
        record = self.setting.record(cell, metrics, error=error)
        counts = [a.tokens_from for a in answers if not a.error]
        record.endpoint = served.record("server timings" if served.llama_cpp else "client",
                                        counts[0] if counts else "", speculative)
        return record

    def _round(self, cell: Cell) -> list[Prompt]:
        """The cell's prompt, and with --clients the ones after it in turn (a client each)."""
        start = next(i for i, p in enumerate(self.prompts) if p.id == cell.prompt.id)
        return [self.prompts[(start + i) % len(self.prompts)] for i in range(cell.clients or 1)]

    def close(self) -> None:
        """Nothing to stop: the servers are someone else's."""


# --- prompts of a length (--prompt-tokens), as the server counts them ------------------------------


def at_length(served: Served, prompt: Prompt, timeout_s: float) -> Prompt:
    """The prompt made `prompt.length` tokens long as `served` counts them (prompt_tokens), its chat template included:
    the depth's filler text before the task, as depth.padded puts it, the cut in characters corrected until the count
    matches (the closest kept). The sweep asks the baseline: the same model, whose prompts are processed without a
    drafter."""
    def count(text: str) -> int:
        return prompt_tokens(served, replace(prompt, text=text), timeout_s)
    plain, corpus = count(prompt.text), filler_text()
    check_shorter(prompt.id.rsplit("@", 1)[0], plain, prompt.length)

    def made(cut: int) -> tuple[int, str]:
        if cut > len(corpus):
            raise ConfigError(f"--prompt-tokens {prompt.length} is more than the filler text makes at {served.url}; "
                              "choose fewer")
        text = corpus[:max(cut, 0)] + "\n\n" + prompt.text
        return count(text), text
    first = min(CHARS_PER_TOKEN, len(prompt.text) / plain)  # characters a token: the prompt's own where fewer
    text = closest(made, prompt.length, round(first * (prompt.length - plain)), lambda cut, n: cut / max(n - plain, 1))
    return replace(prompt, text=text)


def prompt_tokens(served: Served, prompt: Prompt, timeout_s: float) -> int:
    """The tokens `served` processes for `prompt`: those of a one-token request, not streamed (usage.prompt_tokens, which
    OpenAI-compatible servers give in an answer more widely than in a stream; llama.cpp's timings.prompt_n else); one
    line where it fails or does not say."""
    path, body = request(served, prompt, 1, SamplingConfig())
    body = {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}
    status, answer = _http(served.url, path, timeout_s, body)
    if status != 200:
        raise EndpointError(f"--prompt-tokens {prompt.length}: a request that sizes prompt {prompt.id} at {served.url} "
                            f"answered {status}: {answer[:300].decode(errors='replace')}")
    try:
        said = json.loads(answer)
        n = (said.get("usage") or {}).get("prompt_tokens") or (said.get("timings") or {}).get("prompt_n")
    except (ValueError, AttributeError):
        n = None
    if not n:
        raise EndpointError(f"--prompt-tokens needs the server to count a prompt's tokens, and {served.url} gave no "
                            "usage.prompt_tokens: give long prompts as they are (--prompts FILE.jsonl)")
    return int(n)


# --- the sweep --------------------------------------------------------------------------------


def check_grid(grid: Grid) -> None:
    """One line for an axis a client of someone else's server cannot set."""
    if grid.depths != [0]:
        raise ConfigError(f"-d/--depth counts the target's tokens, which a client of an --engine {NAME} does not have")
    if grid.parallels not in (None, [1]) or (grid.parallels and not grid.clients):
        raise ConfigError("the server's slots are its owner's (-np when it was started): give --clients, the requests "
                          "sent at the same moment")


def check_same_servers(stored: list, out: Path, url: str, baseline_url: str) -> None:
    """One line where --resume would add these servers' runs to a file that holds other servers' (or another engine's):
    the resume keys name the served model, not the server, so the two would be silently mixed."""
    runs = [r for r in stored if isinstance(r, RunRecord)]
    if any(r.endpoint is None for r in runs):
        raise ConfigError(f"{out} holds runs of another engine: --engine {NAME} continues only its own sweeps; choose "
                          "another --name")
    theirs = {(r.mode == Mode.SPECULATIVE, r.endpoint.url) for r in runs}
    if theirs - {(True, url), (False, baseline_url)}:
        spec = sorted({u for speculative, u in theirs if speculative}) or ["-"]
        base = sorted({u for speculative, u in theirs if not speculative}) or ["-"]
        raise ConfigError(f"{out} measured --url {', '.join(spec)} against --baseline-url {', '.join(base)}: resuming it "
                          f"with {url} and {baseline_url} would mix two servers' runs; give those URLs, or another --name")


def pair_of(spec: Served) -> str:
    """The results' pair name: the served model ('/models/x.gguf' as 'x.gguf')."""
    return Path(spec.model).name if spec.model.endswith(".gguf") else spec.model


def strategy_of(spec: Served) -> Strategy:
    """What the records name the speculative runs by: the types a llama.cpp server reports, else the default (their
    label is 'speculative': records.run_label with no K)."""
    try:
        return Strategy(spec.spec_types) if spec.spec_types else Strategy()
    except ConfigError:  # a type this gguf-bench does not know
        return Strategy()


def endpoint_cells(grid: Grid, spec: Served, base: Served) -> list[Cell]:
    """Per client count, temperature, prompt and repetition: the baseline's run (target alone) and --url's (K 0: the
    server's draft length is its own)."""
    slots = spec.slots if spec.slots == base.slots else None
    strategy, cells = strategy_of(spec), []
    for clients in grid.clients or [None]:
        where = {"engine": NAME, "parallel": slots if clients else None, "clients": clients}
        for temp in grid.temperatures:
            for prompt in grid.prompts:
                for rep in range(grid.repetitions):
                    cells += [Cell(Mode.TARGET, 0, temp, prompt, rep, **where),
                              Cell(Mode.SPECULATIVE, 0, temp, prompt, rep, strategy, **where)]
    return cells


def served_pair(urls: tuple[str, str], grid: Grid) -> tuple[Served, Served]:
    """Both servers described, warmed up and checked to be comparable."""
    spec, base = describe(urls[0], "--url"), describe(urls[1], "--baseline-url")
    check_pair(spec, base, grid.prompts[0], grid.options_of(NAME).request_timeout_s)
    spec.spec_types = spec_types(spec)
    return spec, base


class Servers:
    """What an endpoint sweep measures (measure/measured.SweepSubject): the two servers, described once they are checked;
    their cells, one setting (the servers as their owner started them)."""

    def __init__(self, urls: tuple[str, str]):
        self.urls, self.name = urls, ""
        self.spec: Served | None = None
        self.engine_: EndpointEngine | None = None

    def check_stored(self, stored: list, out: Path) -> None:
        check_same_servers(stored, out, base_url(self.urls[0]), base_url(self.urls[1]))

    def prepare(self, grid: Grid, note) -> tuple[Grid, PreparedPrompts]:
        check_grid(grid)
        spec, base = served_pair(self.urls, grid)
        for line in spec.not_available(speculative=True):
            note(f"{spec.url} gives no {line}: those figures stay empty")
        self.spec, self.name, self.engine_ = spec, pair_of(spec), EndpointEngine(spec, base)
        timeout_s = grid.options_of(NAME).request_timeout_s
        sized = [at_length(base, p, timeout_s) if p.length else p for p in grid.prompts]  # the faster: no drafter
        return replace(grid, prompts=sized), PreparedPrompts({}, [])

    def static(self, sweep: str) -> dict:
        return {"sweep": sweep, "pair": self.name, "env": environment(), "models": Models(ModelFile(file=self.spec.model))}

    def plan(self, grid: Grid, static: dict, skip: set[str], only) -> Plan:
        # no files and no load of gguf-bench's: the served model names the cells (plan.cell_key), the servers' owner
        # chose their offload, context and threads (the records leave those empty)
        setting = Setting(None, grid, None, NAME, static, served=ServedModel(self.name, self.spec.model))
        cells = endpoint_cells(grid, self.spec, self.engine_.base)
        todo = with_baselines(cells, [c for c in cells if setting.key(c) not in skip
                                      and (only is None or only(setting, c))])  # a pair lives in one invocation
        return Plan([Unit(setting, todo)] if todo else [], len(cells), len(todo), sum(setting.key(c) in skip for c in todo))

    def engine(self, name: str, grid: Grid) -> EndpointEngine:
        return self.engine_

    def does_not_fit(self, load, n_ctx: int) -> None:
        return None  # the servers' memory is their owner's

    def side_by_side(self, loads, n_ctx: int) -> bool:
        return False  # one setting
