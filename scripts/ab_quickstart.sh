#!/usr/bin/env bash
# Interleaved A/B of the README's quick start: REV (old) against the working tree (new), ROUNDS rounds, each side a
# fresh process with the same venv, models and machine, old and new alternating so that drift hits both alike.
# Nothing else may run meanwhile. Prints each sweep's wall time, then mean ± std tokens/s per row and new/old.
#
#   scripts/ab_quickstart.sh REV [ROUNDS]      e.g. scripts/ab_quickstart.sh 9f947ed 3
set -euo pipefail
rev=${1:?usage: scripts/ab_quickstart.sh REV [ROUNDS]}
rounds=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
py=$repo/.venv/bin/python
old=$(mktemp -d /tmp/ab-old.XXXX) out=$(mktemp -d /tmp/ab-results.XXXX)
git -C "$repo" worktree add -q --detach "$old" "$rev"
trap 'git -C "$repo" worktree remove --force "$old"' EXIT
for i in $(seq "$rounds"); do
  for side in old new; do
    dir=$repo; [ "$side" = old ] && dir=$old
    start=$(date +%s.%N)
    # run from the tree's own folder so that `python -m` imports that tree's gguf_bench
    (cd "$dir" && COLUMNS=80 GGUF_BENCH_RESULTS=$out "$py" -m gguf_bench.cli sweep --name "$side-$i" -K 1,2,4,8 \
      --prompt-ids code-short,chat-short -n 64 >"$out/$side-$i.log" 2>&1)
    echo "$side $i: $(echo "$(date +%s.%N) - $start" | bc) s"
  done
done
"$py" - "$out" <<'PY'
import collections, glob, json, statistics as st, sys
speeds = collections.defaultdict(lambda: collections.defaultdict(list))
for path in glob.glob(f"{sys.argv[1]}/*.jsonl"):
    side = path.rsplit("/", 1)[1].split("-")[0]
    for line in open(path):
        r = json.loads(line)
        row = {"target": "target alone", "draft": "draft alone"}.get(r["mode"], f"K={r['config']['k']}")
        speeds[row][side].append(r["metrics"]["tokens_per_s"])
print(f"{'row':<13}{'old tokens/s':>18}{'new tokens/s':>18}{'new/old':>9}")
for row, by in speeds.items():
    o, n = by["old"], by["new"]
    print(f"{row:<13}{st.mean(o):11.2f} ± {st.stdev(o):4.2f}{st.mean(n):11.2f} ± {st.stdev(n):4.2f}{st.mean(n) / st.mean(o):9.3f}")
PY
