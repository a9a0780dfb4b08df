"""The examples each command's `--help` ends with, kept in one place (as `git` and `gh` do).

Every example is a real command of this CLI: tests/test_readme.py parses each one with the real command line, as it
parses the README's and docs/'s, and checks that every command has some and that they fit an 80-column terminal.
"""

from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "models": [
        "gguf-bench models",
        "gguf-bench models --registry my-models.yaml",
    ],
    "download": [
        "gguf-bench download gemma-270m-f32+q4km",
        "gguf-bench download qwen-coder-7b+0.5b     # from the hub, into the HF cache",
        "gguf-bench download --all",
    ],
    "info": [
        "gguf-bench info gemma-270m-f32+q4km",
        "gguf-bench info target.gguf draft.gguf     # draft compatibility verdicts",
    ],
    "machine": [
        "gguf-bench machine     # the read bandwidth with every core, stored",
        "gguf-bench machine -t 4 --size-mib 2048 --no-likwid",
    ],
    "make-test-pair": [
        "gguf-bench make-test-pair /tmp/tiny --noise 0.05",
        "gguf-bench make-test-pair /tmp/tiny --mtp    # a target with an MTP head",
        "gguf-bench info /tmp/tiny/tiny-target.gguf /tmp/tiny/tiny-draft.gguf",
    ],
    "drafts": [
        "gguf-bench drafts Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M",
        "gguf-bench drafts target.gguf --search ~/models --offline",
        "gguf-bench drafts gemma-3-270m-f32 --vram 24GB --json",
    ],
    "plan": [
        "gguf-bench plan qwen-coder-7b+0.5b --vram 24GB --ctx 4096",
        "gguf-bench plan --target t.gguf --draft d.gguf --vram 8GB --measure",
        "gguf-bench plan     # the default pair, on the first GPU the build sees",
    ],
    "twin": [
        "gguf-bench twin gemma-3-270m-q4_k_m -o gemma-twin.gguf",
        "gguf-bench twin Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M -o q7.gguf",
        "gguf-bench run --target q7.gguf --draft d.gguf -K 4    # speed only",
    ],
    "run": [
        "gguf-bench run      # default pair, K=4, greedy, 64 tokens",
        "gguf-bench run qwen-coder-7b+0.5b -ngl all -ngld all -K 8 -n 256 -r 3",
        "gguf-bench run --target t.gguf --spec-type ngram -K 8 --prompt-ids code-edit",
    ],
    "sweep": [
        "gguf-bench sweep -K 1-8 --name k-scan",
        "gguf-bench sweep --engine server --spec-type ngram-mod,draft-simple -np 1,2",
        "gguf-bench sweep --prompts humaneval --per-category 20 -d 0,4096",
    ],
    "report": [
        "gguf-bench report   # every results/*.jsonl",
        "gguf-bench report results/deploy.jsonl   # ends with the line to deploy",
        "gguf-bench report results/workloads.jsonl --spec-bench --format md",
    ],
    "tune": [
        "gguf-bench tune -K 1-16",
        "gguf-bench tune qwen-coder-7b+0.5b -K 1-8 -ngl 0,all --check --plot tune.png",
        "gguf-bench tune --target t.gguf --draft d.gguf -K 1-8 --json",
    ],
    "eval": [
        "gguf-bench eval --nb-prompts 100 --seed 0   # greedy, default pair",
        "gguf-bench eval qwen-coder-1.5b-f16+q2k --chat --temp 0.7 --json",
        "gguf-bench eval --verify sequential         # outputs must be identical",
    ],
    "check-dist": [
        'gguf-bench check-dist --prompt "Once upon a time" -m 4 --samples 1000',
        "gguf-bench check-dist qwen-coder-1.5b-f16+q2k --temp 0.7 --top-p 0.95",
    ],
    "compare": [
        'gguf-bench compare --prompt "def quicksort(xs):" -n 128 -K 6',
        'gguf-bench compare --prompt "def quicksort(xs):" --verify sequential',
    ],
    "build-gpu": [
        "gguf-bench build-gpu --vulkan --check      # only the system package check",
        "gguf-bench build-gpu --vulkan",
        "gguf-bench build-gpu --cuda                # needs nvcc",
    ],
    "build-server": [
        "gguf-bench build-server                    # once; later calls do nothing",
        "gguf-bench build-server --rpc          # llama-server and rpc-server, RPC on",
        "gguf-bench run --engine both -K 4 --prompt-ids code-short",
    ],
    "build-tree": [
        "gguf-bench build-tree --cpu -j 2            # libraries and tools, one build",
        "gguf-bench build-tree --cuda --cuda-arch 90 -o build-cuda",
        "LLAMA_CPP_LIB_PATH=build-cuda/bin gguf-bench run --engine both -K 4",
    ],
    "rpc-server": [
        "gguf-bench rpc-server --port 50052 --threads 1",
        "gguf-bench sweep --engine server --rpc 127.0.0.1:50052 -ngl all",
    ],
}


def epilog(command: str) -> str | None:
    """The `Examples:` block for `command`'s --help; `\\b` keeps click from joining its lines into one paragraph."""
    lines = EXAMPLES.get(command)
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines) if lines else None
