"""llama.cpp's llama-server as an engine: one process per setting, driven over HTTP.

What the server does with a request is fixed when it starts (per-request `speculative.*` fields are compiled out in
llama.cpp's server-schema.cpp), so every draft length, p-min, strategy and offload is its own process. A `Server`
starts one (`Launch.argv`: only the flag names llama.cpp uses since its 2026 rename), waits for `/health`, confirms
through `/slots` that a draft context exists when one was asked for, and answers `/completion` requests with token-id
prompts, every sampler field set (the server's defaults are temperature 0.8 and a penalty chain) and the prompt cache
off. Each completion diffs `/metrics` around itself: the speculative counters give its rounds and accepted tokens per
draft position. The process dies with its parent (PR_SET_PDEATHSIG), and `close` stops it on every path out.

Timing: `timings.predicted_ms` runs from the first generated token to the last, and `predicted_n` counts the first
token, which the prompt's logits gave: the window holds `predicted_n - 1` tokens (decode_window.py), as the server's own
`predicted_per_second` and the loop's decode time count them.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gguf_bench import decode_window
from gguf_bench.errors import BenchError
from gguf_bench.placing import rpc_flag
from gguf_bench.runtimes import placement, server_metrics

SPEC_FLAGS = ("--spec-type", "--spec-draft-n-max")
UNIFIED = "llama"  # llama.cpp's one binary, as its installers ship it: `llama serve` takes llama-server's flags
SERVE = "serve"  # its llama-server subcommand (app/llama.cpp: 'serve', alias 'server')
BENCH_ONLY = ("-lv", "4", "--metrics", "--cache-ram", "0", "--no-webui")  # what a benchmark needs and a deployment does not
DEPLOY_PORT = 8080  # llama-server's own default port: a deploy line's --port (a benchmark's is a free one)
START_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 600.0
_PORT_IN_USE = re.compile(r"couldn't bind|address already in use|bind.*failed", re.IGNORECASE)



def wait_healthy(base: str, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Whether llama-server at `base` answered /health with 200 within `timeout_s` (503 while it loads, refused before
    its socket is bound); False at once where `alive()` turns False (its process exited). The one /health wait."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return False

class ServerError(BenchError):
    """llama-server is missing, too old, could not start, or failed a request."""


class PortInUse(ServerError):
    """The port llama-server was told to listen on is taken."""


NGRAM_CACHE_K = 8  # ngram-cache drafts at most 8 tokens (hard-coded in llama.cpp's common/speculative.cpp)
NGRAM_MOD_MATCH = 24  # ngram-mod's lookup length: llama.cpp's default (it warns below 16)
POOL_TYPES = ("ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache")  # keep n-gram state across requests
# what each --spec-type gets from -K and the n-gram options (shown in --help and the docs)
SIZE_FLAGS = {
    "draft-simple": "--spec-draft-n-max K --spec-draft-n-min N (--draft-min) --spec-draft-p-min P (--draft-p-min); -md DRAFT",
    "draft-mtp": "--spec-draft-n-max K --spec-draft-n-min N --spec-draft-p-min P; the target's own MTP/NextN heads, no -md",
    "draft-eagle3": "--spec-draft-n-max K --spec-draft-n-min N --spec-draft-p-min P; -md EAGLE3-SIDECAR",
    "draft-dflash": "--spec-draft-n-max K --spec-draft-n-min N --spec-draft-p-min P; -md DFLASH-SIDECAR",
    "draft-dspark": "--spec-draft-n-max K --spec-draft-n-min N --spec-draft-p-min P; -md DSPARK-SIDECAR (a dflash "
                    "GGUF with a Markov head; llama.cpp refuses p-min > 0 when it has no confidence head)",
    "ngram-simple": "--spec-ngram-simple-size-n NGRAM_MAX --spec-ngram-simple-size-m K --spec-ngram-simple-min-hits 1",
    "ngram-map-k": "--spec-ngram-map-k-size-n NGRAM_MAX --spec-ngram-map-k-size-m K --spec-ngram-map-k-min-hits 1",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-n NGRAM_MAX --spec-ngram-map-k4v-size-m K --spec-ngram-map-k4v-min-hits 1",
    "ngram-mod": f"--spec-ngram-mod-n-match {NGRAM_MOD_MATCH} --spec-ngram-mod-n-min N (--draft-min; 0: 3/4 of K, "
                 "llama.cpp's 48/64) --spec-ngram-mod-n-max K",
    "ngram-cache": f"no size flags: it drafts at most {NGRAM_CACHE_K} tokens, so a sweep runs it once, at K={NGRAM_CACHE_K}",
}


@dataclass(frozen=True)
class Sampling:
    """A request's sampler settings: top-k, then the temperature, then top-p (the loop's order), seeded."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False  # a twin's (models/twin.py): synthetic weights end anywhere, and a run must not


GREEDY = Sampling()


@dataclass(frozen=True)
class Speculation:
    """How the server drafts: llama-server's --spec-type and the size flags that go with it (SIZE_FLAGS)."""

    spec_type: str = "none"  # none, one of strategy.SERVER_SPEC_TYPES, or a chain of them as llama-server spells it (a,b)
    n_max: int = 0  # the longest draft (-K)
    p_min: float = 0.0  # draft-*: stop drafting below this draft probability
    n_min: int = 0  # draft-*: a shorter draft is thrown away; ngram-mod: likewise (0: 3/4 of n_max)
    ngram_n: int = 0  # ngram-simple, ngram-map-k(4v): the length of the pattern it looks up

    @property
    def needs_draft_file(self) -> bool:
        return any(t in ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark") for t in self.types)

    @property
    def pooled(self) -> bool:
        """Whether its n-gram state outlives a request inside one process (ngram-mod's pool is shared by all slots)."""
        return any(t in POOL_TYPES for t in self.types)

    @property
    def types(self) -> list[str]:
        """Its drafters: one type, or a chain's in the order llama-server asks them."""
        return self.spec_type.split(",")

    def flags(self) -> list[str]:
        if len(self.types) > 1:  # one --spec-type naming the chain, then each drafter's size flags once
            sizes = [f for t in self.types for f in _pairs(replace(self, spec_type=t).flags()[2:])]
            return ["--spec-type", self.spec_type, *[x for f in dict.fromkeys(sizes) for x in f]]
        t = self.spec_type
        if t == "none":
            return ["--spec-type", "none"]
        if t.startswith("draft-"):
            return ["--spec-type", t, "--spec-draft-n-max", str(self.n_max), "--spec-draft-n-min", str(self.n_min),
                    "--spec-draft-p-min", f"{self.p_min:g}"]
        if t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            return ["--spec-type", t, f"--spec-{t}-size-n", str(self.ngram_n), f"--spec-{t}-size-m", str(self.n_max),
                    f"--spec-{t}-min-hits", "1"]
        if t == "ngram-mod":
            n_min = self.n_min or (3 * self.n_max) // 4
            return ["--spec-type", t, "--spec-ngram-mod-n-match", str(NGRAM_MOD_MATCH), "--spec-ngram-mod-n-min",
                    str(min(n_min, self.n_max)), "--spec-ngram-mod-n-max", str(self.n_max)]
        if t == "ngram-cache":
            return ["--spec-type", t]
        raise ServerError(f"the server engine cannot draft with --spec-type {t}")


def _pairs(flags: list[str]) -> list[tuple[str, str]]:
    """['--a', '1', '--b', '2'] -> [('--a', '1'), ('--b', '2')]: size flags, each with its value."""
    return list(zip(flags[::2], flags[1::2]))


@dataclass(frozen=True)
class Launch:
    """One server process: the files, the speculation and the settings, as llama-server's command line."""

    binary: Path
    target: Path
    draft: Path | None
    speculation: Speculation
    ngl: str  # 'all' or a number, as llama-server takes it
    ngld: str
    n_ctx: int
    threads: int
    repack: bool = True  # False: --no-repack (where gguf-bench turns llama.cpp's extra buffer types off)
    port: int = 0
    batch: int = 512
    ubatch: int = 512
    threads_draft: int | None = None  # None: threads
    flash_attn: str | None = None  # 'on', 'off', 'auto'; None: the server's default (auto), no flag
    cache_type_k: str | None = None  # None: the server's default (f16), no flag
    cache_type_v: str | None = None
    parallel: int = 1  # -np: slots (the context grows with them, so each slot holds n_ctx)
    placing: tuple[str, ...] = ()  # the target's placement flags beyond -ngl (placing.Placing.flags: -ncmoe, -ot, -dev)
    placing_draft: tuple[str, ...] = ()  # the draft's (-ncmoed, -otd, -devd)
    rpc: tuple[str, ...] = ()  # rpc-servers' HOST:PORT (placing.Placing.rpc_flags): right after -m, so -dev/-devd can
    # name their devices

    def argv(self) -> list[str]:
        cmd = [*server_command(self.binary), "-m", str(self.target), *rpc_flag(self.rpc)]
        if self.draft is not None and self.speculation.needs_draft_file:
            cmd += ["-md", str(self.draft), "-ngld", self.ngld, "-td", str(self.threads_draft or self.threads)]
            cmd += self.placing_draft
            for flag, value in (("-ctkd", self.cache_type_k), ("-ctvd", self.cache_type_v)):  # the loop's draft: the same
                if value is not None:
                    cmd += [flag, value]
        cmd += self.speculation.flags()
        # -np slots of n_ctx each (llama-server splits -c between its slots), nothing fitted or cached behind our back,
        # the sliding-window cache kept whole (as the loop does); -lv 4: llama.cpp's load lines (layers, buffers per
        # device), which placement.parse reads
        cmd += ["-ngl", self.ngl, "-c", str(self.n_ctx * self.parallel), "-b", str(self.batch), "-ub", str(self.ubatch),
                "-np", str(self.parallel), "-fit", "off", "--swa-full", "-t", str(self.threads), *BENCH_ONLY,
                "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += self.placing
        for flag, value in (("-fa", self.flash_attn), ("-ctk", self.cache_type_k), ("-ctv", self.cache_type_v)):
            if value is not None:
                cmd += [flag, value]
        if not self.repack:
            cmd.append("--no-repack")
        return cmd


def deploy_argv(argv: Sequence[str], target_layers: int | None = None, draft_layers: int | None = None) -> list[str]:
    """A benchmark's command line as one to deploy: the benchmark-only flags (BENCH_ONLY) out, port DEPLOY_PORT, and
    -ngl/-ngld 'all' as the layer counts llama.cpp placed (where known), so the line says what it does."""
    with_value = {BENCH_ONLY[0], BENCH_ONLY[3]}  # -lv 4, --cache-ram 0
    switches = {BENCH_ONLY[2], BENCH_ONLY[5]}  # --metrics, --no-webui
    out, args = [], iter(argv)
    for arg in args:
        if arg in with_value:
            next(args, None)
        elif arg not in switches:
            out.append(arg)
            if arg in ("-ngl", "-ngld", "--port"):
                value = next(args, "")
                layers = {"-ngl": target_layers, "-ngld": draft_layers}.get(arg)
                out.append(str(DEPLOY_PORT) if arg == "--port" else str(layers) if value == "all" and layers else value)
    return out


@dataclass
class Completion:
    """One /completion request's answer, with the server's counters over it."""

    tokens: list[int]
    text: str
    prompt_n: int
    prompt_ms: float
    cache_n: int
    predicted_n: int
    predicted_ms: float
    stop_type: str
    # verification steps (spec_decode_num_drafts_total over the request), draft tokens, accepted ones; None: the
    # server's /metrics lacks a speculative counter (server_metrics.spec_counters), so they were not measured (never 0 drafts)
    rounds: int | None = 0
    drafted: int | None = 0
    accepted: int | None = 0
    accepted_at: list[int] = field(default_factory=list)  # rounds that accepted draft position i

    @property
    def tokens_per_s(self) -> float:
        return decode_window.tokens_per_s(self.predicted_n, self.predicted_ms / 1000.0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when gguf-bench dies (kill -9 included), so no server outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    """A running llama-server (a context manager: the process stops on every way out)."""

    def __init__(self, launch: Launch, env: dict[str, str] | None = None, timeout_s: float = START_TIMEOUT_S):
        """launch.port 0: a free port, and another one if something takes it before the server binds it."""
        for attempt in range(3):
            try:
                self._start(launch if launch.port else replace(launch, port=free_port()), env, timeout_s)
                return
            except PortInUse:
                if launch.port or attempt == 2:
                    raise

    def _start(self, launch: Launch, env: dict[str, str] | None, timeout_s: float) -> None:
        self.launch = launch
        self.argv = self.launch.argv()
        self._log_file = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
        self.log_path = Path(self._log_file.name)
        self.base = f"http://127.0.0.1:{self.launch.port}"
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, preexec_fn=die_with_parent)
        try:
            self._wait_ready(timeout_s)
            self.props = self._get("/props")
            self.speculative = bool(self._get("/slots")[0].get("speculative"))
        except BaseException:
            self.close()
            raise

    # --- lifecycle ---

    def _wait_ready(self, timeout_s: float) -> None:
        if wait_healthy(self.base, timeout_s, lambda: self.proc.poll() is None):
            return
        if self.proc.poll() is not None:
            raise self._exit_error()
        raise ServerError(f"llama-server did not become ready within {timeout_s:.0f} s; its log: {self.log_path}")

    def _exit_error(self) -> ServerError:
        tail = self.log_tail()
        if any(_PORT_IN_USE.search(line) for line in tail):
            return PortInUse(f"llama-server could not listen on port {self.launch.port}: another program uses it")
        errors = [line for line in tail if re.search(r"error|failed|invalid|unknown", line, re.IGNORECASE)]
        why = errors[-1] if errors else (tail[-1] if tail else "no output")
        return ServerError(f"llama-server exited with code {self.proc.returncode}: {_strip_time(why)} (log: {self.log_path})")

    def log_tail(self, n: int = 40) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return []

    def load_log(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """SIGTERM (a graceful shutdown), SIGKILL after 10 s; the log file is kept only when the server failed."""
        stop(self.proc)
        self._log_file.close()

    def remove_log(self) -> None:
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- requests ---

    def _request(self, path: str, body: dict | None = None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                return r.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise ServerError(f"llama-server answered {exc.code} to {path}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            if self.proc.poll() is not None:
                raise self._exit_error() from None
            raise ServerError(f"llama-server did not answer {path}: {exc}") from None

    def _get(self, path: str):
        return json.loads(self._request(path))

    def metrics(self) -> dict[str, float]:
        """The Prometheus counters, without the `llamacpp:` prefix; per-position ones as 'name[i]' (server_metrics)."""
        return server_metrics.parse(self._request("/metrics").decode())

    def complete(self, prompt: Sequence[int], n_predict: int, sampling: Sampling = GREEDY,
                 cache_prompt: bool = False, slot: int | None = None) -> Completion:
        """Generate from a token-id prompt, cold (no prompt cache), with every sampler field set: top-k, then the
        temperature, then top-p on the tempered distribution (the loop's order), nothing else; on `slot` (id_slot)
        where given, else on the slot llama-server picks."""
        before = self.metrics()
        body = completion_body(prompt, n_predict, sampling, cache_prompt=cache_prompt) | (
            {} if slot is None else {"id_slot": slot})
        answer = json.loads(self._request("/completion", body))
        after = self.metrics()
        t = answer["timings"]
        rounds, drafted, accepted = server_metrics.spec_counters(before, after)
        return Completion(
            tokens=list(answer.get("tokens") or []), text=answer.get("content", ""), prompt_n=int(t["prompt_n"]),
            prompt_ms=float(t["prompt_ms"]), cache_n=int(t.get("cache_n", 0)), predicted_n=int(t["predicted_n"]),
            predicted_ms=float(t["predicted_ms"]), stop_type=str(answer.get("stop_type", "")),
            rounds=rounds, drafted=drafted, accepted=accepted,
            accepted_at=server_metrics.accepted_at(before, after))

    def placements(self, target_layers: int, draft_layers: int | None) -> tuple[placement.Placement, placement.Placement | None]:
        """Where llama.cpp put each model, from the server's load log (the target loads first, then the draft)."""
        lines = self.load_log()
        starts = [i for i, line in enumerate(lines) if "llama_model_loader: loaded meta data" in line]
        if draft_layers is None or len(starts) < 2:
            return placement.parse(lines, target_layers), None
        return placement.parse(lines[:starts[1]], target_layers), placement.parse(lines[starts[1]:], draft_layers)


def completion_body(prompt: Sequence[int], n_predict: int, sampling: Sampling = GREEDY, stream: bool = False,
                    cache_prompt: bool = False) -> dict:
    """A /completion request, cold by default (no prompt cache; cache_prompt: a prefix the slot already holds, a
    context depth's filler, is not processed again), with every sampler field set: top-k, then the temperature, then
    top-p on the tempered distribution (the loop's order), nothing else (the server's defaults: temperature 0.8 and a
    penalty chain)."""
    return {"prompt": list(prompt), "n_predict": n_predict, "cache_prompt": cache_prompt, "return_tokens": True,
            "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p, "min_p": 0.0,
            "typical_p": 1.0, "seed": sampling.seed, "samplers": ["top_k", "temperature", "top_p"], "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
            "top_n_sigma": -1.0, "n_probs": 0, "stream": stream, **({"ignore_eos": True} if sampling.ignore_eos else {})}


def _strip_time(line: str) -> str:
    """'0.00.346.055 E srv    load_model: failed to ...' -> 'srv    load_model: failed to ...'."""
    return re.sub(r"^[\d.]+ [A-Z] ", "", line.strip())


def is_unified(binary: Path) -> bool:
    """Whether `binary` is llama.cpp's unified `llama` (by its name, as its installers and its CMake target
    `llama-app` name it), whose llama-server is `llama serve`."""
    return binary.name in (UNIFIED, UNIFIED + ".exe")


def server_command(binary: Path) -> list[str]:
    """What starts llama-server with `binary`: itself, or `llama serve` (is_unified); every flag follows it."""
    return [str(binary), SERVE] if is_unified(binary) else [str(binary)]


def unified_on_path() -> Path | None:
    """A `llama` on PATH that is llama.cpp's unified binary (its `--help` lists the `serve` command: another program
    called llama, such as llama-stack's, is passed over), else None."""
    found = shutil.which(UNIFIED)
    if found is None:
        return None
    try:
        out = subprocess.run([found, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(found) if _lists_serve(out.stdout + out.stderr) else None


def _lists_serve(help_out: str) -> bool:
    """Whether a `--help` is the unified binary's list of commands, `serve` among them."""
    return "Available commands:" in help_out and re.search(rf"^\s+{SERVE}\s", help_out, re.MULTILINE) is not None


def help_text(binary: Path, env: dict[str, str] | None = None) -> str:
    """`llama-server --help` (or `llama serve --help`), which lists the flags and --spec-type values this build
    knows."""
    try:
        out = subprocess.run([*server_command(binary), "--help"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **(env or {})})
    except OSError as exc:
        raise ServerError(f"cannot run {binary}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise ServerError(f"{binary} --help did not finish within 60 s") from None
    return out.stdout + out.stderr


def probe(binary: Path, env: dict[str, str] | None = None) -> str:
    """Check that `binary` runs and knows the flags gguf-bench passes; return its version line."""
    text = help_text(binary, env)
    lacking = [f for f in SPEC_FLAGS if f not in text]
    if lacking and not is_unified(binary) and _lists_serve(text):
        raise ServerError(f"{binary} looks like llama.cpp's unified binary (its --help lists `{SERVE}`): name it, or a "
                          f"link to it, `{UNIFIED}`, and gguf-bench runs `{UNIFIED} {SERVE}`")
    if lacking:
        raise ServerError(f"{binary} is too old or not llama-server: its --help lacks {', '.join(lacking)} (llama.cpp "
                          "renamed the speculative flags in 2026); run `gguf-bench build-server` or pass a newer --server-bin")
    version = subprocess.run([*server_command(binary), "--version"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **(env or {})})
    lines = [line for line in (version.stdout + version.stderr).splitlines() if line.startswith("version")]
    return lines[0].strip() if lines else "version unknown"


def stop(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """End a server process: SIGTERM (a graceful shutdown), SIGKILL when it has not ended after grace_s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
