"""Every command-line option, declared once (Annotated aliases shared by the commands), and the helpers that
turn the pair options into files. Values are validated in gguf_bench.options and the library's dataclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gguf_bench.decoding.loop import Verify

# --- which models ---------------------------------------------------------------------------------
PairArg = Annotated[str | None, typer.Argument(help="pair name from the registry (default: its default pair)")]
PairsArg = Annotated[list[str] | None, typer.Argument(help="pair names (default: the registry's default)")]
TargetOpt = Annotated[Path | None, typer.Option("--target", help="target (instead of a pair name): a GGUF file, a "
                      "registry model, or a hub file REPO:QUANT or REPO/FILE.gguf (downloaded when missing)")]
DraftOpt = Annotated[Path | None, typer.Option("--draft", help="draft (with --target), named as --target")]
RegistryOpt = Annotated[Path | None, typer.Option("--registry", help="models.yaml to use "
                        "(default: $GGUF_BENCH_REGISTRY, ./models.yaml, or the one shipped with gguf-bench)")]

# --- how they are loaded ----------------------------------------------------------------------------
NglOpt = Annotated[str, typer.Option("--gpu-layers", "-ngl", help="target layers on the GPU: a number or 'all'")]
NgldOpt = Annotated[str, typer.Option("--gpu-layers-draft", "-ngld", help="draft layers on the GPU")]
MarginOpt = Annotated[str, typer.Option("--margin", help="memory kept free on each device for what llama.cpp does "
                                        "not account (the driver's context, allocator slack)")]
MARGIN = "512MiB"  # plan's and drafts' default --margin
NglsOpt = Annotated[str, typer.Option("--gpu-layers", "-ngl", help="target GPU layers: list/range/'all'")]
NgldsOpt = Annotated[str, typer.Option("--gpu-layers-draft", "-ngld", help="draft GPU layers")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", "-t", help="CPU threads (default: all cores)")]
CtxOpt = Annotated[int, typer.Option("--ctx-size", "-c", help="context size of each model")]
# llama.cpp's context settings (llama-bench's flags): declared in gguf_bench/axes.py, made options by cli/axis_flags.py;
# `sweep` takes comma lists, and every combination runs
# where the weights go beyond -ngl (llama.cpp's flags; gguf_bench/placing.py): in `sweep`, lists and repeated options
# are alternatives, and every combination runs
NCpuMoeOpt = Annotated[str | None, typer.Option("--n-cpu-moe", "-ncmoe", help="MoE target: keep the expert weights of "
                       "the first N layers on the CPU (all: every layer's, llama.cpp's -cmoe); sweep: 0,2,4 or 0-8+2")]
NCpuMoeDraftOpt = Annotated[str | None, typer.Option("--n-cpu-moe-draft", "-ncmoed", help="the same for a MoE draft")]
OverrideOpt = Annotated[list[str] | None, typer.Option("--override-tensor", "-ot", help="PATTERN=BUFFER,...: weights whose "
                        "name matches the regex go to that buffer type (CPU, Vulkan0, CUDA0...); 'none': no override; "
                        "sweep: repeat -ot for alternatives")]
OverrideDraftOpt = Annotated[list[str] | None, typer.Option("--override-tensor-draft", "-otd", help="-ot for the draft")]
DeviceOpt = Annotated[list[str] | None, typer.Option("--device", "-dev", help="devices the target offloads to "
                      "(Vulkan0,CUDA1; none: no offload; `gguf-bench info` lists them); sweep: repeat for alternatives")]
DeviceDraftOpt = Annotated[list[str] | None, typer.Option("--device-draft", "-devd", help="the draft's devices (none: the "
                           "draft on the CPU)")]
# the target's split over several devices, and RPC servers' devices (placing.Split)
TensorSplitOpt = Annotated[list[str] | None, typer.Option("--tensor-split", "-ts", help="each device's share of the "
                           "target's layers, in device order (RPC servers' first): 1,1 or 3,1; sweep: repeat for "
                           "alternatives")]
SplitModeOpt = Annotated[str | None, typer.Option("--split-mode", "-sm", help="layer (default), row, or none (all on the "
                         "-mg device); sweep: a comma list")]
MainGpuOpt = Annotated[str | None, typer.Option("--main-gpu", "-mg", help="with -sm none: the device's index; sweep: a "
                       "comma list")]
RpcOpt = Annotated[list[str] | None, typer.Option("--rpc", help="HOST:PORT,... of llama.cpp rpc-servers, whose devices "
                   "(RPC0, RPC1, ...) the target splits over (--engine server; `gguf-bench rpc-server` starts one)")]
RpcDelayOpt = Annotated[str | None, typer.Option("--rpc-delay", help="one-way delay in ms added each way in front of "
                        "each --rpc server by a loopback proxy (0-1000), to measure a network hop here; sweep: 0,1,3")]
EngineOpt = Annotated[str, typer.Option("--engine", help="who generates: python (gguf-bench's loop), server (llama.cpp's "
                      "llama-server, a process per setting), or both, side by side on the same files; endpoint: a "
                      "server someone else started (--url against --baseline-url)")]
DepthOpt = Annotated[str | None, typer.Option("--depth", "-d", help="tokens of context before the prompt, as llama-bench's "
                     "-d: 0,4096,16384 (English prose prefilled in both models and not timed; the context grows to "
                     "hold it)")]
PromptTokensOpt = Annotated[str | None, typer.Option("--prompt-tokens", help="make each prompt this many tokens long, a "
                           "list (256,2048,8192): English prose before its task, in the same turn and timed (unlike "
                           "-d); each length is its own workload")]
ParallelOpt = Annotated[str | None, typer.Option("--parallel", "-np", help="server engine: llama-server's slots, a list "
                        "(1,2,4); each slot holds --ctx-size; default: one request at a time on one slot")]
ClientsOpt = Annotated[str | None, typer.Option("--clients", help="server engine: clients sending their prompts at the "
                       "same moment, a list (default: as many as --parallel); -r rounds of them")]

# --- what is generated ------------------------------------------------------------------------------
KOpt = Annotated[str, typer.Option("--draft-max", "-K", help="draft length K")]
KsOpt = Annotated[str, typer.Option("--draft-max", "-K", help="draft lengths: 1,2,4,8 or 1-8 or 1-8+2")]
NPredictOpt = Annotated[int, typer.Option("--n-predict", "-n", help="tokens to generate")]
TempOpt = Annotated[float, typer.Option("--temp", help="temperature, 0 = greedy")]
TempsOpt = Annotated[str, typer.Option("--temp", help="temperatures, e.g. 0,0.7")]
TopKOpt = Annotated[int, typer.Option("--top-k", help="top-k filter, 0 = off")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="top-p (nucleus) filter, 1 = off")]
SeedOpt = Annotated[int, typer.Option("--seed", help="sampling seed (repetition i uses seed + i)")]
RepsOpt = Annotated[int, typer.Option("--repetitions", "-r", help="measured repetitions after one warm-up run")]
SweepRepsOpt = Annotated[str, typer.Option("--repetitions", "-r", help="measured repetitions after one warm-up run, or "
                                           "'auto': 2, then only the cells of undecided verdicts again, up to "
                                           "--max-reps")]
MaxRepsOpt = Annotated[int, typer.Option("--max-reps", help="-r auto: the most repetitions of any cell")]
VerdictMarginOpt = Annotated[float, typer.Option("--margin", metavar="PCT", help="% a less simple setting (a draft, a "
                             "larger K, more GPU layers) must gain to be chosen: 'faster' only where the whole corrected "
                             "interval lies above +PCT; inside ±PCT it is 'the same' (≈) and the deploy line takes the "
                             "simpler one; -r auto stops on either")]
LoadsOpt = Annotated[str, typer.Option("--loads", metavar="each|once", help="each: a fresh model load (a fresh "
                     "llama-server process) per repetition, so every interval holds a load's own speed and counts "
                     "repetitions; once: one load per setting for the whole sweep (models too large to load again: "
                     "the answer then rests on one load, and says so)")]
ObjectiveOpt = Annotated[str, typer.Option("--objective", metavar="decode|request|throughput", help="what the gain, "
                          "★, -r auto, the per-slot map and the deploy line read: decode tokens/s; request latency "
                          "(TTFT + -n tokens, lower is better: the gain is the latencies' ratio); served throughput "
                          "(every token over the wall time, prompts included, at the slot count)")]
AskedMarginOpt = Annotated[float | None, typer.Option("--margin", metavar="PCT", help="as sweep's --margin (default: the "
                           "margin the sweep stored, else 5)")]
AskedObjectiveOpt = Annotated[str | None, typer.Option("--objective", metavar="decode|request|throughput", help="as "
                              "sweep's --objective (default: the objective the sweep stored, else decode)")]
RepsBudgetOpt = Annotated[str | None, typer.Option("--reps-budget", help="-r auto: start no more passes after this "
                                                   "long (90s, 30m, 2h)")]
VerifyOpt = Annotated[Verify, typer.Option("--verify", help="batched: the target verifies K+1 tokens in one decode "
                      "(fast, what is benchmarked); sequential: one token at a time, so greedy output equals the target "
                      "alone's bit for bit on any CPU (checks the loop)")]
PromptOpt = Annotated[str | None, typer.Option("--prompt", "-p", help="prompt text")]
ChatOpt = Annotated[bool, typer.Option("--chat", help="wrap the prompt in the model's chat template")]
PromptIdsOpt = Annotated[str | None, typer.Option("--prompt-ids", help="built-in prompts by id or category (chat, "
                         "translation, summarization, qa, math, rag, code-edit, code) or all; default: code-short, "
                         "chat-short, code-long, chat-long")]
PromptIdOpt = Annotated[str | None, typer.Option("--prompt-ids", "--prompt-id", help="one built-in prompt by id "
                        "(code-edit-hints, chat-short, ...; `sweep --prompt-ids` takes several)")]
PromptsFileOpt = Annotated[str | None, typer.Option("--prompts", help="a standard prompt set: humaneval, spec-bench "
                           "(or spec-bench:qa,translation: its categories mt_bench, translation, summarization, qa, "
                           "math_reasoning, rag), mt-bench (models.yaml's prompt_sets); or a JSONL file of "
                           "{\"id\", \"prompt\", \"chat\", \"category\"} or Spec-Bench's own question.jsonl "
                           "(FILE.jsonl:qa,rag for some of its categories)")]
PerCategoryOpt = Annotated[int | None, typer.Option("--per-category", help="a seeded sample (--seed) of N prompts "
                           "from each category")]

# --- drafting strategies (decoding/strategy.py); in `sweep` each takes a comma list, and every combination runs --
SpecTypeOpt = Annotated[str, typer.Option("--spec-type", help="who drafts: draft (the draft model), ngram (prompt lookup, "
                        "no draft model needed), ngram,draft (n-gram first, the model when it finds nothing; in a "
                        "sweep list write ngram+draft); with --engine server also llama-server's own types, spelled as "
                        "it spells them: draft-simple, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, "
                        "draft-mtp, draft-eagle3, draft-dflash, draft-dspark. -K becomes: --spec-draft-n-max K for draft-* (with "
                        "--draft-min, --draft-p-min); --spec-<type>-size-m K for ngram-simple, ngram-map-k(4v) (size-n: "
                        "--ngram-max); --spec-ngram-mod-n-max K for ngram-mod (n-min: --draft-min, else 3/4 K; n-match 24); "
                        "ngram-cache drafts at most 8, so it runs at K=8 only; chain llama-server's types with + "
                        "(draft-mtp+ngram-mod: one server with both drafters, each with its size flags)")]
NgramMinOpt = Annotated[int, typer.Option("--ngram-min", help="shortest n-gram the lookup matches")]
NgramMaxOpt = Annotated[int, typer.Option("--ngram-max", help="longest n-gram the lookup matches (tried first)")]
PMinOpt = Annotated[str, typer.Option("--draft-p-min", help="stop a model draft before a token whose probability "
                    "(top-10 softmax) is below P, as llama.cpp; 0 = off; in [0, 1)")]
DraftMinOpt = Annotated[int, typer.Option("--draft-min", help="drop model drafts shorter than N (0 = off)")]
KScheduleOpt = Annotated[str, typer.Option("--k-schedule", help="fixed: every round drafts up to K; heuristic: Hugging "
                         "Face's rule, K+2 after a fully accepted round, K-1 otherwise, from -K within [1, --k-cap]; "
                         "cost: each round drafts 0..K tokens, token by token, as this machine's verify cost (tune's "
                         "calibration, else measured at load) and the draft's confidence predict the most tokens/s")]
KCapOpt = Annotated[int, typer.Option("--k-cap", help="largest K the heuristic schedule reaches")]

# --- where results go -------------------------------------------------------------------------------
NameOpt = Annotated[str | None, typer.Option("--name", help="store in results/NAME.jsonl")]
ResultsDirOpt = Annotated[Path | None, typer.Option("--results-dir", help="the folder of results files (default: "
                          "$GGUF_BENCH_RESULTS, else ./results)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
