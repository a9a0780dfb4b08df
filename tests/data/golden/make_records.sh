#!/usr/bin/env bash
# How the golden record files were made (tests/test_report_golden.py reads them; this script is not run by the tests).
# Run from the repository root with the environment that runs the tests; it writes into a scratch folder and copies the
# records here. Paths in the records are relative (tiny/..., bin/...) because the commands run from that folder.
#   tests/data/golden/make_records.sh [SCRATCH]        (default /tmp/golden-gen; needs `gguf-bench build-server` done)
# Then `python tests/test_report_golden.py --regenerate` rewrites the .out files from them. Remaking the records
# changes every measured number: do it only when a new kind of file must be pinned, never to make the test pass.
set -euo pipefail
repo=$(pwd)
scratch=${1:-/tmp/golden-gen}
py=${PYTHON:-python}
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$scratch" && mkdir -p "$scratch/bin" && cd "$scratch"
"$py" -c "from gguf_bench.models.tiny import make_pair; make_pair('tiny', noise=0.05, seed=0)"
cp "$repo/tests/data/golden/prompts/prompts.jsonl" .
# llama-server as build-server made it, beside its marker (the records name bin/llama-server: no machine's cache path)
srv=$("$py" -c "from gguf_bench.runtimes.server_build import cached_binary; print(cached_binary())")
cp "$srv" "$(dirname "$srv")/built-by-gguf-bench.txt" bin/
gb() { "$py" -m gguf_bench.cli "$@" --results-dir out; }
pair=(--target tiny/tiny-target.gguf --draft tiny/tiny-draft.gguf)
gb sweep "${pair[@]}" --prompts prompts.jsonl -K 2,4 --spec-type draft,ngram --temp 0,0.7 -r 2 -n 8 -t 1 \
  --name sweep-python
gb sweep "${pair[@]}" --prompts prompts.jsonl:qa -K 2,4 --engine server --parallel 1,2 --clients 2 -n 8 -t 1 \
  --server-bin bin/llama-server --name sweep-server
gb sweep "${pair[@]}" --prompts prompts.jsonl:qa -K 2 --engine both -n 8 -t 1 --server-bin bin/llama-server \
  --name sweep-both
gb eval "${pair[@]}" --nb-prompts 4 -n 8 -t 1 --name eval
gb tune "${pair[@]}" -K 1-4 --prompt-ids code-short -n 8 --reps 2 -t 1 --check --name tune
cp out/sweep-python.jsonl out/sweep-server.jsonl out/sweep-both.jsonl out/eval.jsonl out/tune.jsonl "$repo/tests/data/golden/"
