#!/usr/bin/env python
"""A sweep on a local two-node Ray cluster (this machine only), then `report --by host`.

Shows what runs where without a fleet: two worker nodes named node-a and node-b ($GGUF_BENCH_HOST),
each with its own model cache, one unit of work (pair x offload setting) each, one results file.

    python scripts/demo_ray_cluster.py [--out /tmp/ray-demo]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from gguf_bench.models.tiny import make_pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/ray-demo"))
    args = ap.parse_args()
    target, draft = make_pair(args.out / "tiny", noise=0.05, seed=0)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for host in ("node-a", "node-b"):
            env = {"GGUF_BENCH_HOST": host, "GGUF_BENCH_CACHE": str(args.out / host / "cache")}
            cluster.add_node(num_cpus=1, resources={"bench": 1}, env_vars=env)
        cluster.wait_for_nodes()
        results = args.out / "results"
        env = {**os.environ, "GGUF_BENCH_RESULTS": str(results), "COLUMNS": "80"}
        cli = [sys.executable, "-m", "gguf_bench.cli"]
        sweep = [*cli, "sweep", "--target", str(target), "--draft", str(draft), "--name", "two-nodes", "-K", "2,4",
                 "-ngl", "0,1", "--prompt-ids", "code-short", "-n", "64", "-r", "3", "-t", "1",
                 "--ray", cluster.address, "--ray-gpus-per-task", "0", "--ray-resources", "bench:1", "--resume"]
        print("$ gguf-bench", " ".join(sweep[3:]).replace(cluster.address, "HEAD:PORT"), flush=True)
        subprocess.run(sweep, env=env, check=True, stdout=subprocess.DEVNULL)
        print("$ gguf-bench report results/two-nodes.jsonl --by host", flush=True)
        subprocess.run([*cli, "report", str(results / "two-nodes.jsonl"), "--by", "host"], env=env, check=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
