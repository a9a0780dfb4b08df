#!/usr/bin/env python
"""The Python half of scripts/gpu_proof.sh (which says what the kit is): each subcommand one small step.

    python scripts/gpu_proof.py sdist OUT.tar.gz        # the installed llama-cpp-python's sdist, pruned, packed
    python scripts/gpu_proof.py missing                 # NAME==VERSION of each dependency the device image lacks
    python scripts/gpu_proof.py bindings DIR            # llama-cpp-python's Python part alone, a wheel into DIR
    python scripts/gpu_proof.py headers DIR [--tiny]    # synthesised headers at real shapes (+ cached real models')
    python scripts/gpu_proof.py arch                    # CMAKE_CUDA_ARCHITECTURES of the first GPU (nvidia-smi)
    python scripts/gpu_proof.py backend                 # the libraries the Python engine loaded, their devices
    python scripts/gpu_proof.py bandwidth               # the card's memory bandwidth (a device-to-device copy)
    python scripts/gpu_proof.py prompts OUT.jsonl --model M  # a short prompt, a long one (--tokens): -ngl sweep
    python scripts/gpu_proof.py rows REPORT.json [--bandwidth TABLE]  # each row's TTFT, joules and bandwidth share
    python scripts/gpu_proof.py check DIR --tables A,B  # every table is there with its figures, no error, CUDA used
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

# What the sdist's CUDA build of the library and of llama-server do not read (paths under the sdist's root): model
# and vocabulary files, docs, tests, examples, other ggml backends, the web UI's sources (the server is built with
# LLAMA_BUILD_UI=OFF and no prebuilt UI: runtimes/server_build.py), and libraries an earlier pip build of the unpacked
# sdist installed into its llama_cpp/lib (its CMakeLists installs there too).
LLAMA = "vendor/llama.cpp/"
PRUNE = [".git", "docs", "examples", "tests", "docker", "llama_cpp/lib", LLAMA + "models", LLAMA + "docs", LLAMA + "media",
         LLAMA + "benches",
         LLAMA + "tests", LLAMA + "examples", LLAMA + "pocs", LLAMA + "gguf-py", LLAMA + "conversion", LLAMA + ".github",
         LLAMA + "ci", LLAMA + "tools/ui/src", LLAMA + "tools/ui/tests", LLAMA + "tools/ui/static",
         LLAMA + "tools/ui/package-lock.json", LLAMA + "tools/server/public", LLAMA + "tools/server/tests"]
PRUNE += [f"{LLAMA}ggml/src/ggml-{b}" for b in ("vulkan", "sycl", "metal", "opencl", "cann", "hexagon", "webgpu",
                                                  "openvino", "et", "virtgpu", "musa", "hip", "zdnn", "zendnn")]

MEDIA = (".mp4", ".png", ".jpg", ".jpeg", ".gif", ".wav", ".mp3", ".gguf")  # test inputs, pictures, vocabularies

# The Python packages of the lent machines' image ('cuda'), as /work/.library/device/KINDS.md listed them on 2026-11-17
# (names only; the image's versions serve): a dependency not in it travels as a wheel.
IMAGE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize hypothesis idna
huggingface-hub imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless
optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split())
ROOTS = ["gguf-bench", "llama-cpp-python"]  # gguf-bench itself travels as its own wheel
# the shapes the run's pairs use (gpu_proof.sh `pairs`): every header travels, and the run twins each one
KIT_SHAPES = ("llama3-8b", "llama3.2-1b", "qwen2.5-7b", "qwen2.5-0.5b", "qwen3-30b-a3b", "tiny-llama", "tiny-llama-draft",
              "tiny-qwen2", "tiny-qwen2-draft", "tiny-qwen3moe")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(dist: str) -> list[str]:
    """The names dist needs at run time on the device's Python 3.12 (no extras), as this environment's metadata lists
    them."""
    from packaging.requirements import Requirement

    out = []
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"python_version": "3.12", "python_full_version": "3.12.3",
                                                      "sys_platform": "linux", "platform_system": "Linux",
                                                      "platform_machine": "x86_64", "extra": ""}):
            out.append(norm(req.name))
    return out


def missing() -> list[str]:
    """NAME==VERSION (this environment's version) of every run-time dependency, direct or not, outside the image.
    Nothing is built by pip on the device (llama-cpp-python travels as `bindings`), so no build requirements."""
    seen, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in IMAGE:
            continue  # the image's own copy serves, with its own dependencies
        todo += requirements(name)
    need = sorted(seen - IMAGE - set(ROOTS))
    return [f"{n}=={v}" if (v := _version(n)) else n for n in need]


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:  # a build requirement not installed here: the newest serves
        return None


def sdist(out: Path) -> None:
    from gguf_bench.runtimes.build import installed_version, sources

    version = installed_version()
    with tempfile.TemporaryDirectory() as tmp:
        src = sources(version, Path(tmp) / "sdist.log")
    root = f"llama_cpp_python-{version}"
    pruned = [src / p for p in PRUNE]

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        path = src.parent / info.name
        if any(path == p or p in path.parents for p in pruned) or "/build/" in f"/{info.name}/" or \
                (info.isfile() and info.name.lower().endswith(MEDIA)):
            return None
        return info

    with tarfile.open(out, "w:gz", compresslevel=9) as tar:
        tar.add(src, arcname=root, filter=keep)
    print(f"{out}: {root} pruned of {len(PRUNE)} folders, {out.stat().st_size / 2**20:.1f} MiB")


def bindings(folder: Path) -> None:
    """The installed llama-cpp-python's wheel without its libraries (its sdist with LLAMA_BUILD and LLAVA_BUILD off:
    nothing compiled, 0.1 MiB): on the device the Python engine loads the libraries of the one CMake build
    (`build-tree`) through LLAMA_CPP_LIB_PATH, so pip compiles nothing there."""
    import os

    from gguf_bench.runtimes.build import installed_version, sources

    with tempfile.TemporaryDirectory() as tmp:
        src = sources(installed_version(), Path(tmp) / "sdist.log")
    env = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir", "-w", str(folder),
                    str(src)], env=env, check=True)
    wheel = next(folder.glob("llama_cpp_python-*.whl"))
    print(f"{wheel}: the Python part of llama-cpp-python, no libraries ({wheel.stat().st_size // 1024} KiB)")


def headers(folder: Path, tiny: bool) -> None:
    from gguf_bench.models.download import locate
    from gguf_bench.models.parts import local_header
    from gguf_bench.models.registry import load_registry
    from gguf_bench.models.shapes import SHAPES, write_header

    folder.mkdir(parents=True, exist_ok=True)
    for name in KIT_SHAPES:
        if name.startswith("tiny-") == tiny:
            write_header(folder / f"{name}.gguf", name)
            print(f"{folder / name}.gguf: synthesised, {SHAPES[name].description}")
    if tiny:
        return
    reg = load_registry()
    for name in ("gemma-3-270m-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"):  # the real files that exist here
        path = locate(reg.models[name], reg) if name in reg.models else None
        if path is None:
            print(f"{name}: not in the cache (gguf-bench download), its header not included")
            continue
        (folder / f"real-{name}.gguf").write_bytes(local_header(path).parts[0].prefix)
        print(f"{folder}/real-{name}.gguf: the header of {path.name}")


def arch() -> None:
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout.split()
    print(out[0].replace(".", "") if out else "")


def backend() -> None:
    """Which libllama and ggml the Python engine mapped (LLAMA_CPP_LIB_PATH: the build's), its backends and devices."""
    from gguf_bench.runtimes.llama_cpp import backends, devices, llama_versions

    found = backends()
    maps = Path("/proc/self/maps").read_text().splitlines()
    for lib in sorted({line.split()[-1] for line in maps if "/libllama.so" in line or "/libggml" in line}):
        print(f"mapped: {lib}")
    print(f"backends: {found}")
    for d in devices():
        print(f"device: {d.name} ({d.kind}) {d.description}, {d.memory_total / 2**30:.1f} GiB")
    print(f"system_info: {llama_versions()['system_info']}")


# --- the figures that mean most on a GPU: the card's bandwidth, each row's share of it, TTFT, joules -----------------


def bandwidth(gib: float = 4.0, reps: int = 10) -> None:
    """The card's memory bandwidth: a device-to-device copy of `gib` GiB through PyTorch (the image's), timed with CUDA
    events, bytes read and written counted (as KINDS.md's 4.3 TB/s); the best of `reps` after two warm-ups. Without
    torch or CUDA (the dry-run) it says so and measures nothing."""
    try:
        import torch
    except ImportError:
        print("no GPU bandwidth: torch is not installed (dry-run)")
        return
    if not torch.cuda.is_available():
        print("no GPU bandwidth: torch sees no CUDA device (dry-run)")
        return
    n = int(gib * 2**30)
    src, dst = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(reps + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    best = min(times)
    print(f"device: {torch.cuda.get_device_name(0)}")
    print(f"copy of {gib:g} GiB, best of {reps}: {best * 1e3:.2f} ms; bandwidth {2 * n / best / 1e9:.0f} GB/s "
          f"(read + written); median {2 * n / sorted(times)[len(times) // 2] / 1e9:.0f} GB/s")


def prompts(out: Path, tokens: int, model: Path) -> None:
    """Two prompts: the built-in code-short, and a long one of `tokens` tokens of real text by the model's own tokenizer
    (the depth filler's article, manual and module, repeated, cut to length) with a task after it, timed in full
    (unlike -d's untimed filler)."""
    import json

    import llama_cpp

    from gguf_bench.measure.inputs import prompts as p
    vocab = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    text = "\n\n".join((p._ARTICLE, p._MANUAL, p._MODULE_TO_EDIT)) + "\n\n"
    per_char = len(vocab.tokenize(text.encode(), add_bos=False)) / len(text)
    body = text * (2 + int(tokens / per_char) // len(text))
    ids = vocab.tokenize(body.encode(), add_bos=False)[:tokens]
    long = vocab.detokenize(ids).decode(errors="ignore")
    rows = [{"id": "code-short", "prompt": p.BUILTIN[0].text, "category": "code"},
            {"id": f"long-{tokens}", "prompt": long + "\n\nSummarise the text above in three sentences.\n",
             "category": "long"}]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"prompts: code-short and long-{tokens} ({len(ids)} tokens of {model.name}'s tokenizer)")


def rows(report: Path, table: Path | None) -> None:
    """The -ngl sweep's rows (a `report --format json`): tokens/s, time to first token and its paired cost, joules per
    token, bytes read per token and the share of the card's bandwidth (`bandwidth`'s table) it reaches. Joules: the
    run's where every device it used was counted (RAPL and NVML), else the GPUs' alone (NVML, no RAPL: the CPU not
    counted) in a column of their own, never in the run's."""
    import json

    from gguf_bench.results.predictions.ceiling import ceiling_pct
    gbs = None
    if table and table.is_file() and (m := re.search(r"bandwidth (\d+) GB/s", table.read_text())):
        gbs = float(m[1])
    data = json.loads(report.read_text())
    found = data["rows"] if isinstance(data, dict) else data
    print(f"card bandwidth: {f'{gbs:.0f} GB/s' if gbs else 'not measured'}")
    head = ("prompt", "-ngl", "K", "tokens/s", "TTFT s", "TTFT cost %", "J/token", "GPU J/tok", "MB/token", "card %")
    print("  ".join(f"{h:>11}" for h in head))

    def cell(v, fmt):
        return f"{v:{fmt}}" if isinstance(v, (int, float)) and v == v else "-"
    if not any(r.get("gpu_joules_per_token") for r in found):
        why = "the runs' joules were counted whole (J/token)" if any(r.get("tokens_per_joule") for r in found) else \
            "no energy counter read the GPUs the runs used"
        print(f"GPU J/tok: none: {why}")
    for r in found:
        k = r.get("k") if r.get("mode") == "speculative" else r.get("mode")
        share = ceiling_pct(r.get("tokens_per_s"), r.get("bytes_per_token"), gbs)
        jt = 1 / r["tokens_per_joule"] if r.get("tokens_per_joule") else None
        print("  ".join(f"{c:>11}" for c in (
            str(r.get("prompt_id", "all"))[:11], str(r.get("ngl")), str(k), cell(r.get("tokens_per_s"), ".1f"),
            cell(r.get("ttft_s"), ".3f"), cell(r.get("ttft_cost_pct"), "+.1f"), cell(jt, ".3f"),
            cell(r.get("gpu_joules_per_token"), ".3f"),
            cell((r.get("bytes_per_token") or float("nan")) / 1e6, ".0f"), cell(share, ".0f"))))


# --- check: the tables a complete run writes, each with the figures it must hold -------------------------------------


@dataclass(frozen=True)
class Figure:
    """A figure a table must hold, each time it appears a finite number: the cells under a column heading (in the rows
    `rows` matches), or group 1 of `pattern` on any line. `unless`: a line that says the table was run without it."""

    name: str
    unit: str
    column: str | None = None
    rows: str = r"^│"
    pattern: str | None = None
    unless: str | None = None


ACCEPT_ROW = r"^\s*(?:target alone|\d+) "  # a row of bench_known_acceptance.py: the target alone, then each K
SWEEP_ROW = r"^\s*\S+\s+\S+\s+(?:target|draft|\d+)\s+[\d-]"  # a row of `rows`: prompt, -ngl, K (or mode), figures
# gpu_proof.sh's tables (its `tables` lists those of a run: machine, build, twins and each measuring step), by name;
# machine.txt holds what the device check reads, no figure
FIGURES: dict[str, tuple[Figure, ...]] = {
    "machine": (),
    "build": (Figure("device memory", "GiB", pattern=r"^device: .*, (\S+) GiB$"),
              Figure("build time", "s", pattern=r"^build-tree --(?:cpu|cuda)\b.*?: (\S+) s\b")),
    "twins": (Figure("tensors", "", pattern=r"^twin of .*?: (\S+) tensors"),
              Figure("logical size", "KB/MB/GB", pattern=r"^twin of .*? tensors, (\S+) [KMGT]?B logical")),
    "offload": (Figure("tests passed", "", pattern=r"\b(\S+) passed\b"),),
    "plan-cli": tuple(Figure(c, "MiB", column=c) for c in ("weights", "KV", "compute", "total")),
    "plan": (*(Figure(c, "MiB predicted/measured", column=c, rows=r"^\S+\.gguf ") for c in ("weights p/m", "total p/m")),
             Figure("totals within 5%", "rows", pattern=r"^totals within 5% of llama\.cpp's: (\S+) of \S+ rows")),
    "tune": (Figure("target t_verify(1)", "ms", pattern=r"target t_verify\(1\) (\S+) ms"),
             Figure("draft step", "ms", pattern=r"^measured: .*, draft (\S+) ms"),
             Figure("verify ×", "", column="verify ×", rows=r"^\s*\d+ "),
             *(Figure(f"a={a}", "tokens/s", column=f"a={a}", rows=r"^\s*\d+ ") for a in ("0.6", "0.8"))),
    "bandwidth": (Figure("card bandwidth", "GB/s", pattern=r"; bandwidth (\S+) GB/s"),),
    "accept": (Figure("measured", "tokens/s", column="measured t/s", rows=ACCEPT_ROW),
               Figure("acceptance", "", column="acceptance", rows=r"^\s*\d+ "),
               Figure("predicted", "tokens/s", column="predicted t/s", rows=ACCEPT_ROW),
               Figure("error", "%", column="error %", rows=r"^\s*\d+ "),
               Figure("K within 10%", "", pattern=r"^within 10%: (\S+) of \S+ K$")),
    "verify": (Figure("ms", "ms", pattern=r"^\| \d+ \| (\S+) \|"),
               Figure("2 tokens", "× one token", pattern=r"^\S+: 2 tokens cost (\S+)× one token")),
    "sweep": (Figure("tokens/s", "", column="tokens/s", rows=SWEEP_ROW),
              Figure("TTFT", "s", column="TTFT s", rows=SWEEP_ROW),
              Figure("GPU J/tok", "J", column="GPU J/tok", rows=SWEEP_ROW, unless="GPU J/tok: none: "),
              Figure("deploy line", "tokens/s", pattern=r"^deploy\b.*? (\S+) tokens/s")),
    "engines": (Figure("python", "tokens/s", column="python", rows=r"^\s*(?:alone|\d+) "),
                Figure("server", "tokens/s", column="server", rows=r"^\s*(?:alone|\d+) ",
                       unless="no server (--no-server)"),
                Figure("decode split", "ms", pattern=r"^\s*(?:alone|\d+) .*?(\S+, \S+, \S+)$")),
}
NUMBER = re.compile(r"(?<![\w.])(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)(?:inity)?)(?![\w.])", re.I)
# an error line: llama.cpp's and Python's, pytest's summary and counts, and a figure that is no number (nan, NaN);
# case as written ('failed to' is llama.cpp's and llama-server's, CMake's 'Failed' is not an error)
ERROR = re.compile(r"RuntimeError|CUDA error|failed to|^Traceback|^Error\b|^FAILED|^E  |\b\d+ (?:failed|errors?)\b"
                   r"|(?<![\w.])[-+]?(?i:nan)\b", re.M)
PASSED, SKIPPED = re.compile(r"\b\d+ passed\b"), re.compile(r"\b\d+ skipped\b")


def figures_of(name: str) -> tuple[Figure, ...]:
    """The figures of a table by its name: 'tune-llama' is a 'tune' table ('plan-cli-qwen': 'plan-cli')."""
    for kind in sorted(FIGURES, key=len, reverse=True):
        if name == kind or name.startswith(kind + "-"):
            return FIGURES[kind]
    raise SystemExit(f"check: no figures are declared for a table named {name} (scripts/gpu_proof.py FIGURES)")


def column_cells(text: str, heading: str, rows: str) -> list[str]:
    """The cells under `heading` in the rows `rows` matches: a box table's (┃ and │ between cells) or a right-aligned
    one's (a cell ends where its heading ends and starts after the heading before it). The heading is read from the
    last line above the first row that holds it."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if re.match(rows, line)), len(lines))
    named = re.compile(rf"(?:^|[┃\s]){re.escape(heading)}(?:$|[┃\s])")
    header = next((i for i in range(first - 1, -1, -1) if named.search(lines[i])), None)
    if header is None:
        return []
    below = [line for line in lines[header + 1:] if re.match(rows, line)]
    if "┃" in lines[header]:
        at = [c.strip() for c in lines[header].split("┃")].index(heading)
        return [cells[at] if at < len(cells := line.split("│")) else "" for line in below]
    end = re.search(rf"(?:^|\s){re.escape(heading)}(?:$|\s)", lines[header]).end()
    end -= lines[header][end - 1].isspace()
    start = len(lines[header][:end - len(heading)].rstrip())
    return [line[start:end] for line in below]


def figure_fault(fig: Figure, text: str) -> str | None:
    """Why a table does not hold `fig` (None: it does, finite wherever it appears)."""
    if fig.unless and fig.unless in text:
        return None
    found = column_cells(text, fig.column, fig.rows) if fig.column else re.findall(fig.pattern, text, re.M)
    what = f"{fig.name} ({fig.unit})" if fig.unit else fig.name
    if not found:
        return f"no {what}"
    for cell in found:
        numbers = NUMBER.findall(cell)
        if not numbers or not all(math.isfinite(float(n)) for n in numbers):
            return f"{what} is {cell.strip() or 'empty'!r}, not a finite number"
    return None


def error_in(name: str, text: str, logs: Path) -> str | None:
    """The first error line in a table or in its step's log (logs/NAME.err, logs/NAME.log)."""
    for where, body in ((f"{name}.txt", text), *((p.name, p.read_text(errors="replace"))
                                                  for p in (logs / f"{name}.err", logs / f"{name}.log") if p.is_file())):
        if m := ERROR.search(body):
            line = body[body.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
            return f"an error in {where}: {line.strip()[:200]}"
    return None


def table_fault(name: str, text: str, declared: set[str], logs: Path) -> str | None:
    """Why a table is not a measurement (None: it is): an error in it or in its step's log, a test run that passed
    nothing (all skipped), a figure it must hold missing or not a finite number. A table the run declared skipped (in
    skipped.txt, 'NAME: why') need hold no figure, but no error either."""
    if why := error_in(name, text, logs):
        return why
    if name in declared:
        return None
    if SKIPPED.search(text) and not PASSED.search(text):
        return "its tests were all skipped"
    return next((why for fig in figures_of(name) if (why := figure_fault(fig, text))), None)


def device_fault(folder: Path, cpu: bool) -> str | None:
    """Whether the run reported the device it claims: a CUDA device among the devices the build's libraries saw
    (build.txt, `backend`) and nvidia-smi's GPU (machine.txt); with `cpu` (the dry-run), a CPU build: the CPU, no CUDA
    device."""
    build, machine = (folder / n for n in ("build.txt", "machine.txt"))
    devices = re.findall(r"^device: (\S+)", build.read_text(errors="replace"), re.M) if build.is_file() else []
    gpu = re.search(r"^gpu: (.*)$", machine.read_text(errors="replace"), re.M) if machine.is_file() else None
    if cpu:
        if "CPU" not in devices or any(d.startswith("CUDA") for d in devices):
            return f"the run was declared a CPU build (--cpu), but its libraries saw {', '.join(devices) or 'no device'}"
        return None
    if not any(re.fullmatch(r"CUDA\d+", d) for d in devices) or not gpu or gpu[1].startswith("none"):
        return (f"no CUDA device: the build's libraries saw {', '.join(devices) or 'no device'} (build.txt) and "
                f"machine.txt says gpu: {gpu[1] if gpu else '(nothing)'}")
    return None


def check(folder: Path, tables: list[str], cpu: bool = False, logs: Path | None = None) -> int:
    """Every table a complete run writes (`tables`) is there and holds its figures (table_fault), every other table
    written holds no error, and the run reported a CUDA device (or, with `cpu`, the CPU it declared)."""
    logs = logs or folder.parent / "logs"
    skipped = folder / "skipped.txt"
    declared = set(re.findall(r"^([\w-]+):", skipped.read_text(), re.M)) if skipped.is_file() else set()
    written = {t.stem: t.read_text(errors="replace") for t in sorted(folder.glob("*.txt")) if t.name != "skipped.txt"}
    for name, text in written.items():
        print(f"{name}.txt: {len(text.encode())} bytes" + (" (declared skipped)" if name in declared else ""))
    bad = [(n, "missing") for n in tables if n not in written]
    bad += [(n, why) for n, text in written.items()
            if (why := table_fault(n, text, declared, logs) if n in tables else error_in(n, text, logs))]
    if why := device_fault(folder, cpu):
        bad.append(("device", why))
    if bad:
        print("not measurements: " + "; ".join(f"{n}: {why}" for n, why in bad), file=sys.stderr)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sdist").add_argument("out", type=Path)
    sub.add_parser("missing")
    sub.add_parser("bindings").add_argument("folder", type=Path)
    h = sub.add_parser("headers")
    h.add_argument("folder", type=Path)
    h.add_argument("--tiny", action="store_true", help="the smallest shapes only (dry-run)")
    sub.add_parser("arch")
    sub.add_parser("backend")
    sub.add_parser("bandwidth")
    pr = sub.add_parser("prompts")
    pr.add_argument("out", type=Path)
    pr.add_argument("--tokens", type=int, default=1500)
    pr.add_argument("--model", type=Path, required=True, help="the target: its tokenizer counts the tokens")
    r = sub.add_parser("rows")
    r.add_argument("report", type=Path)
    r.add_argument("--bandwidth", type=Path, help="the bandwidth step's table")
    c = sub.add_parser("check")
    c.add_argument("folder", type=Path)
    c.add_argument("--tables", required=True, help="the tables a complete run writes, comma-separated (gpu_proof.sh)")
    c.add_argument("--cpu", action="store_true", help="a CPU run (the dry-run): its device is the CPU, declared")
    c.add_argument("--logs", type=Path, help="the steps' logs (default: the folder beside it named logs)")
    args = ap.parse_args()
    if args.cmd == "sdist":
        sdist(args.out)
    elif args.cmd == "missing":
        print("\n".join(missing()))
    elif args.cmd == "bindings":
        bindings(args.folder)
    elif args.cmd == "headers":
        headers(args.folder, args.tiny)
    elif args.cmd == "arch":
        arch()
    elif args.cmd == "backend":
        backend()
    elif args.cmd == "bandwidth":
        bandwidth()
    elif args.cmd == "prompts":
        prompts(args.out, args.tokens, args.model)
    elif args.cmd == "rows":
        rows(args.report, args.bandwidth)
    elif args.cmd == "check":
        return check(args.folder, args.tables.split(","), args.cpu, args.logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
