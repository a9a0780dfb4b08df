"""The terms a decision is made in: what one setting, one workload and one block are (the columns that name them),
the verdicts, the margin and the objectives. Nothing here computes."""

from __future__ import annotations

from gguf_bench.axes import AXES

CONTEXT = [a.name for a in AXES]  # llama.cpp's context settings, each declared once (gguf_bench/axes.py)
CONCURRENCY = ["parallel", "clients"]  # server engine: slots and clients of a round (None: one request at a time)
SPECULATION = ["verify"]  # settings of speculative runs only (a target alone has none): a row's, not its baseline's
SETTING = ["pair", "engine", "server_bin", "host", *CONCURRENCY, "ngl", "ngld", "placement", *CONTEXT, "threads", "n_ctx",
           "depth", "prompt_length", "temperature", "top_k", "top_p", "n_predict", *SPECULATION]  # server_bin: the build,
# where a sweep's --server-bin lists several, or the Python loop's --lib folder (empty: llama-cpp-python's own, older records)
# a baseline shares these but SPECULATION (depth: tokens of context before the prompt; prompt_length:
# --prompt-tokens); files that differ in any of them never fold into one row
BASELINE = [c for c in SETTING if c not in SPECULATION]  # what a row shares with its target alone
BY = ("prompt", "host")  # what --by can keep apart (host is always kept apart)
MAIN_SHARE = 0.75  # a CPU-only run whose generating thread got less of the wall time than this shared the CPU
OTHERS_CORES = 0.25  # a run beside other processes that kept more than this many cores busy (on average) was disturbed
STEAL_CORES = 0.05  # a VM's run whose cores the hypervisor gave to other guests for more than this many cores (on
# average) was disturbed: steal accrues only on a core that had work, so on a quiet machine it is time taken from the
# run's own threads (unlike another process on an idle core); 0.05 of a core is 5% of the generating thread's time,
# the change DRIFT names. It is inside others_cores too, which judges it by OTHERS_CORES where it is larger
BLOCK = ["_sweep", "prompt_id", "repetition"]  # a pair's runs share these (and the setting): measured in one block of
# one sweep (_sweep: the sweep's name and the file it came from, sweep_of)
# two settings' runs paired across (over_fastest_alone) share these too
ACROSS = ["temperature", "depth", "prompt_length", *CONCURRENCY]
CHUNK = ["_sweep", "repetition"]  # the runs one chunk of a repetition measured (in_chunks): one observation
GAIN_LEVEL = 0.05  # a gain is decided where its 95% interval, corrected for the rows that compete, excludes zero
FAMILY = ["pair", "host", *CONCURRENCY, "depth", "prompt_length", "temperature", "top_k", "top_p", "n_predict",
          "prompt_id"]
# one workload: the rows that compete for one verdict (its deploy line, its ★, its -r auto verdicts; across offloads,
# top_k and top_p are part of it, as the temperature is: what the user asks of the model, never a setting to rank;
# context settings, engines, types and K's): a Bonferroni family. prompt_id only where the summary keeps prompts apart
# (--by prompt)
ALTERNATIVES = [*FAMILY, "engine"]  # the targets alone a speculative row is weighed against: its workload's, measured by
# its own engine (a llama-server command is never chosen over the Python loop's target alone, nor the other way)
MARGIN = 5.0  # % : two settings whose whole corrected interval lies within ±MARGIN are "the same" (docs/verdicts.md)
VERDICTS = ("faster", "slower", "same", "undecided")  # every comparison ends in one of these
DRIFT_RUNS = 8  # the fewest target-alone runs whose quarters say how the machine moved
DRIFT = 0.05  # the target alone moving more than this from the first quarter of its runs to the last is named
OBJECTIVES = {"decode": "tokens_per_s", "request": "request_tokens_per_s", "throughput": "served_tokens_per_s"}
OBJECTIVE_NAMES = {"decode": "decode tokens/s", "request": "request latency", "throughput": "served throughput"}
RUN_KEYS = [*SETTING, "prompt_id", "mode", "strategy", "k"]  # what finds a summary row's runs (prompt_id where kept)
SESSION_GAP_S = 600.0  # runs of one sweep stored without an invocation: a pause of more than this between one run's end
# and the next run's start begins another session (a --resume, a re-run of failed cells), whose runs pair apart
# each column that tells settings or workloads apart, with the flag (or word) a line names it by: '-ngl 99', 'T 0.7'
FLAGS = {"pair": "pair", "engine": "engine", "host": "host", "parallel": "-np", "clients": "clients", "depth": "-d",
            "prompt_length": "prompt tok", "server_bin": "build",
            "temperature": "T", "n_predict": "n", "prompt_id": "prompt",
            "ngl": "-ngl", "ngld": "-ngld", "placement": "placement",
            **{a.name: a.flag for a in AXES}}
