"""Results a person can trust (issue 23): one writer per results file, runs that never pool silently into another
file, resumes that say what they resume, and statistics and tables that do not overclaim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

from cli_helpers import GGUF_BENCH, assert_user_error, invoke, one_error_line, pair_args, stored


def sweep_args(files, name, *extra):
    return ["sweep", *pair_args(files), "--name", name, "--prompt-ids", "code-short,chat-short", *extra]


def cli(*args):
    return [*GGUF_BENCH, *args]


# --- 1. one writer per results file ------------------------------------------------------------------


def test_two_sweeps_started_at_once_with_one_name_never_both_write(tiny_pairs, isolated):
    args = cli(*sweep_args(tiny_pairs["middle"], "twin", "-K", "1,2", "-n", "24"))
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    loser = next(err for p, (_, err) in zip(procs, outs) if p.returncode == 1)
    line = one_error_line(loser)
    assert "another gguf-bench process is writing twin" in line or "already exists" in line, line
    counts = Counter(r["cell"] for r in stored(isolated / "results" / "twin.jsonl"))
    assert len(counts) == 2 * (2 + 2) and set(counts.values()) == {1}, counts  # 2 prompts x (target, draft, K=1, K=2)
    listed = sorted(p.name for p in (isolated / "results").iterdir() if not p.name.startswith("."))
    assert listed == ["twin.jsonl"], listed  # the writer's lock is hidden: a listing shows the results


def test_resume_while_the_sweep_still_runs_is_refused(tiny_pairs, isolated):
    args = cli(*sweep_args(tiny_pairs["low"], "busy", "-K", "1-4", "-n", "200", "-r", "2"))
    out = isolated / "results" / "busy.jsonl"
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    deadline = time.time() + 120
    while time.time() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
        time.sleep(0.05)
    assert first.poll() is None, "the first sweep ended before the test could resume it"
    second = subprocess.run(args + ["--resume"], capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    assert second.returncode == 1, second.stdout + second.stderr
    line = one_error_line(second.stderr)
    assert "another gguf-bench process is writing busy" in line and "--name" in line, line
    assert first.wait(timeout=300) == 0, first.stderr.read()
    counts = Counter(r["cell"] for r in stored(out))
    assert len(counts) == 2 * 2 * (2 + 4) and set(counts.values()) == {1}, counts


# --- 2. run keeps to its own file and says where; resume says what it resumes ----------------------------


def test_run_refuses_an_existing_file_and_says_where_it_stored(tiny_pairs, isolated):
    files = tiny_pairs["high"]
    small = ["--prompt-ids", "code-short", "-n", "8", "-K", "2", "--no-draft-alone"]
    assert invoke("sweep", *pair_args(files), "--name", "s", *small).exit_code == 0
    before = (isolated / "results" / "s.jsonl").read_text()
    assert_user_error(invoke("run", *pair_args(files), "-n", "8", "--name", "s"), "s.jsonl already exists", "another --name")
    assert (isolated / "results" / "s.jsonl").read_text() == before  # nothing pooled into the sweep's file
    ran = invoke("run", *pair_args(files), "-n", "8", "--name", "r")
    assert ran.exit_code == 0, ran.output
    assert f"stored 3 runs in {isolated / 'results' / 'r.jsonl'}" in " ".join(ran.output.split())
    as_json = invoke("run", *pair_args(files), "-n", "8", "--name", "r2", "--json")
    assert as_json.stdout.lstrip().startswith("[") and "stored 3 runs in" in as_json.stderr


def test_resume_with_another_grid_says_how_much_of_the_file_it_matches(tiny_pairs, isolated):
    files = tiny_pairs["high"]
    base = [*pair_args(files), "--name", "g", "--prompt-ids", "code-short", "-n", "8", "--no-draft-alone"]
    assert invoke("sweep", *base, "-K", "1").exit_code == 0  # target alone + K=1: 2 cells
    same = invoke("sweep", *base, "-K", "1", "--resume")
    assert "resuming: 2 cells already done, 0 to go" in same.output and "not in this grid" not in same.output
    other = invoke("sweep", *base, "-K", "2", "--resume")
    assert other.exit_code == 0, other.output
    text = " ".join(other.output.split())
    assert "resuming: 1 cells already done, 2 to go; 1 of the 2 cells in the file are not in this grid" in text, text
    assert "1 target-alone cells already done are measured again beside the new cells" in text, text  # K=2's baseline
    longer = invoke("sweep", *base, "-K", "1", "-n", "12", "--resume")
    text = " ".join(longer.output.split())
    assert "resuming: 0 cells already done, 2 to go; 3 of the 3 cells in the file are not in this grid" in text, text


# --- 4. tune never recommends a slowdown --------------------------------------------------------------


def test_tune_says_run_the_target_alone_when_no_k_beats_it(tiny_pairs):
    """The low pair's draft is as large as its target and agrees with it 7% of the time: every K is slower."""
    args = ["tune", *pair_args(tiny_pairs["low"]), "-K", "1-3", "-n", "16", "--prompt-ids", "code-short", "--threads", "2",
            "-c", "256", "--reps", "1"]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert all(r["predicted_gain_pct"] < 0 for r in doc["rows"])  # the situation this test is about
    assert not any(r["best"] for r in doc["rows"])
    best = doc["best"]
    assert best["k"] == 0 and best["strategy"] == "run the target alone" and best["predicted_gain_pct"] == 0.0
    assert best["predicted_tokens_per_s"] == max(r["predicted_baseline_tokens_per_s"] for r in doc["rows"])
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    line = " ".join(table.stdout.split("recommended:")[1].split())
    assert line.startswith("run the target alone (-ngl 0,") and "no draft length is predicted to beat it" in line, line
    assert "★" not in table.stdout


# --- 5. statistics that do not overclaim ---------------------------------------------------------------


def test_eval_at_zero_correct_gives_a_wilson_interval_not_zero_width(tiny_pairs):
    result = invoke("eval", *pair_args(tiny_pairs["low"]), "--nb-prompts", "5", "-n", "6", "--name", "e0")
    assert result.exit_code == 0, result.output
    assert "95% Wilson interval" in result.output and "Wald" not in result.output
    rows = [ln for ln in result.output.splitlines() if "0/5" in ln]  # random weights: no product is right
    assert len(rows) == 2 and all("[0.0%, 43.4%]" in ln for ln in rows), result.output


def test_check_dist_with_few_samples_says_it_cannot_tell(tiny_pairs):
    result = invoke("check-dist", *pair_args(tiny_pairs["middle"]), "--samples", "30", "-m", "3")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "not enough samples to tell" in text and "matches the target's distribution" not in text, text
    assert "detectable TV" in text


# --- 6. a busy machine is called out ---------------------------------------------------------------------


def hand_record(mode, tps, k=0, rep=0, load1=0.2, main=1.0, wall=2.0, others=0.0):
    return {"pair": "P", "mode": mode, "config": {"k": k, "n_predict": 64, "prompt_id": "p", "repetition": rep},
            "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps},
            "offload": {"target": "0/29", "draft": "0/29"},
            "models": {"target": {"file": "t.gguf"}, "draft": {"file": "d.gguf"}},
            "load": {"load1_before": load1, "load1_after": load1, "wall_s": wall, "cpu_s": 2 * main * wall,
                     "main_cpu_s": main * wall, "cpu_count": 2, "others_cpu_s": others * wall}}


def test_report_flags_spread_and_load_and_stars_no_best_beside_them():
    from gguf_bench.results.presentation.report import rich_table
    from gguf_bench.results.presentation.summary import summarize, to_frame
    from gguf_bench.results.schema.parts.machine_load import Load
    from gguf_bench.results.schema.records import RunRecord, parse

    quiet = [hand_record("target", 10), hand_record("target", 10.4, rep=1), hand_record("speculative", 14, k=2),
             hand_record("speculative", 14.2, k=2, rep=1), hand_record("speculative", 12, k=4),
             hand_record("speculative", 12.1, k=4, rep=1)]
    rec = parse(quiet[0])
    assert isinstance(rec, RunRecord) and isinstance(rec.load, Load) and rec.load.main_share == 1.0
    s = summarize(to_frame(quiet))
    assert (s["unreliable"] == "").all() and s["best_k"].sum() == 1
    slower = quiet[:2] + [hand_record("speculative", t, k=k, rep=i) for k, ts in ((2, (6, 6.1)), (4, (5, 5.1)))
                          for i, t in enumerate(ts)]
    s = summarize(to_frame(slower))  # both K decidedly slower than the target alone: no best K to star
    assert s["decided"].eq(True).sum() == 2 and not s["best_k"].any()

    spread = quiet[:5] + [hand_record("speculative", 30, k=4, rep=1)]  # K=4: 12 and 30 tokens/s
    s = summarize(to_frame(spread)).set_index(["mode", "k"])
    assert s.loc[("speculative", 4), "unreliable"] == "spread" and not s["best_k"].any()

    def on(prompt, record):
        return {**record, "config": {**record["config"], "prompt_id": prompt}}
    mixed = [on("qa", hand_record("target", 10)), on("code", hand_record("target", 10.2)),  # one run per prompt: a
             on("qa", hand_record("speculative", 11, k=4)), on("code", hand_record("speculative", 30, k=4))]  # workload,
    assert (summarize(to_frame(mixed))["unreliable"] == "").all()  # not noise
    twice = mixed + [on("qa", hand_record("speculative", 11.3, k=4, rep=1)), on("code", hand_record("speculative", 29, k=4, rep=1))]
    assert (summarize(to_frame(twice))["unreliable"] == "").all()  # each prompt's repetitions agree
    noisy = mixed + [on("qa", hand_record("speculative", 11.3, k=4, rep=1)), on("code", hand_record("speculative", 14, k=4, rep=1))]
    assert summarize(to_frame(noisy)).set_index(["mode", "k"]).loc[("speculative", 4), "unreliable"] == "spread"

    own = quiet[:5] + [hand_record("speculative", 12.1, k=4, rep=1, load1=3.5)]  # load average 3.5, none of it others'
    assert (summarize(to_frame(own))["unreliable"] == "").all()
    busy = quiet[:5] + [hand_record("speculative", 12.1, k=4, rep=1, others=1.3)]  # others kept 1.3 cores busy
    summary = summarize(to_frame(busy))
    assert summary.set_index(["mode", "k"]).loc[("speculative", 4), "unreliable"] == "busy"
    assert "others used 1.3 of 2 cores" in " ".join(rich_text(summary).split())
    old = [{**r, "load": {k: v for k, v in r["load"].items() if k != "others_cpu_s"}} for r in own]  # before others_cpu_s
    assert summarize(to_frame(old)).set_index(["mode", "k"]).loc[("speculative", 4), "unreliable"] == "busy"
    starved = quiet[:5] + [hand_record("speculative", 12.1, k=4, rep=1, main=0.4)]  # the thread got 40% of the time
    summary = summarize(to_frame(starved))
    assert summary.set_index(["mode", "k"]).loc[("speculative", 4), "unreliable"] == "busy"
    from rich.console import Console

    console = Console(width=100, record=True)
    console.print(rich_table(summary, width=100))
    text = console.export_text()
    assert "K=4 !" in text and "★" not in text and "! unreliable: the machine was busy" in text, text


def test_a_sweep_beside_a_cpu_hog_records_the_load_and_flags_its_rows(tiny_pairs, isolated):
    # two hogs per core and one llama.cpp thread: with as many threads as cores, llama.cpp's threads spin at their
    # barriers while a hog holds the core the last one needs, and the sweep took 5 minutes here (longer on slower
    # machines); one thread has no barrier to wait at, and still gets well under 0.75 of a core
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        time.sleep(1)
        result = invoke("sweep", *pair_args(tiny_pairs["middle"]), "--name", "hog", "--prompt-ids", "code-short",
                        "-K", "2", "-n", "500", "-r", "2", "--threads", "1")  # runs of tenths of seconds, many ticks
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "hog.jsonl")
    for r in records:
        load = r["load"]
        assert load["wall_s"] > 0 and load["cpu_s"] > 0 and load["main_cpu_s"] > 0 and load["cpu_count"] >= 1
        assert load["load1_before"] is not None and load["load1_after"] is not None
        assert load["main_cpu_s"] < 0.75 * load["wall_s"], load  # the hogs took their share of the cores
    text = " ".join(result.output.split())
    assert "! unreliable:" in text and "the machine was busy: others used" in text and "★" not in text, result.output
    assert " ! " in result.output or "!\n" in result.output
    assert all(r["load"]["others_cpu_s"] > 0.5 * r["load"]["wall_s"] for r in records), [r["load"] for r in records]


def rich_text(summary, width=100) -> str:
    from rich.console import Console

    from gguf_bench.results.presentation.report import rich_table

    console = Console(width=width, record=True)
    console.print(rich_table(summary, width=width))
    return console.export_text()


def test_a_sweep_right_after_a_cpu_heavy_job_is_not_flagged(tiny_pairs, isolated):
    """The load average lingers for minutes after a build and counts the sweep's own threads; what the rest of the
    machine did during each run is what counts. Hogs that ended before the sweep leave its rows unflagged."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(6 * (os.cpu_count() or 1))]
    time.sleep(20)  # the 1-minute load average climbs well above the cores
    for hog in hogs:
        hog.kill()
        hog.wait()
    result = invoke("sweep", *pair_args(tiny_pairs["middle"]), "--name", "after", "--prompt-ids", "code-short",
                    "-K", "1,2", "-n", "1500", "-r", "2", "--threads", "2")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "after.jsonl")
    assert max(r["load"]["load1_before"] for r in records) > os.cpu_count(), [r["load"] for r in records]  # the old rule fired
    from gguf_bench.results.decision.units import busy
    from gguf_bench.results.presentation.summary import to_frame

    # what each run measured of the rest of the machine decides, never the load average: the same runs with the load
    # average removed are judged alike (a CI machine's neighbours may really steal during the sweep: that may flag a run)
    frame = to_frame(records)
    assert "others_cores" in frame and frame["others_cores"].notna().all()
    assert busy(frame).tolist() == busy(frame.drop(columns="load1")).tolist(), result.output
    quiet = frame.assign(others_cores=0.0, steal_cores=0.0, main_cpu_share=1.0)
    assert not busy(quiet).any()


# --- 3. tables never hide what tells rows apart -------------------------------------------------------


def test_report_at_80_columns_keeps_t_n_and_host_and_truncates_no_cell():
    from rich.console import Console

    from gguf_bench.results.presentation.report import rich_table
    from gguf_bench.results.presentation.summary import summarize, to_frame

    rows = []
    for pair in ("gemma-270m-f32+q4km", "qwen-coder-1.5b-f16+q2k"):
        for n in (16, 64):
            for temp in (0.0, 0.7):
                for mode, k, tps in (("target", 0, 10.0), ("draft", 0, 30.0), ("speculative", 4, 13.0)):
                    r = hand_record(mode, tps, k=k)
                    r["pair"] = pair
                    r["config"] |= {"n_predict": n, "temperature": temp}
                    r["node"] = {"host": "rtx3060-box"}
                    rows.append(r)
    console = Console(width=80, record=True)
    console.print(rich_table(summarize(to_frame(rows)), width=80, show_host=True))
    text = console.export_text()
    header = next(ln for ln in text.splitlines() if "tokens/s" in ln).split()
    assert {"pair", "host", "T", "n", "run", "tokens/s", "gain"} <= set(header), text
    assert "…" not in text and max(map(len, text.splitlines())) <= 80, text


def test_offload_groups_the_build_ignored_are_labelled_and_explained():
    """`sweep -ngl 0,all` on a CPU-only build: two groups, both placed 0/5. The table names what each group asked
    for beside what llama.cpp placed, and says in one caption line that the build ignored -ngl/-ngld."""
    from rich.console import Console

    from gguf_bench.results.presentation.report import render, rich_table
    from gguf_bench.results.presentation.summary import summarize, to_frame

    rows = []
    for ngl in (0, "all"):
        for mode, k, tps in (("target", 0, 10.0), ("speculative", 4, 13.0)):
            r = hand_record(mode, tps, k=k)
            r["config"] |= {"ngl": ngl, "ngld": 0}
            r["offload"] = {"target": "0/5", "draft": "0/5"}
            rows.append(r)
    summary = summarize(to_frame(rows))
    for width in (80, 120):
        console = Console(width=width, record=True)
        console.print(rich_table(summary, width=width))
        text = console.export_text()
        lines = text.splitlines()
        header = next(ln for ln in lines if "tokens/s" in ln).split()
        assert "-ngl" in header and "GPU" in header, text
        body = [ln.split() for ln in lines if "0/5" in ln]
        assert len(body) == 4 and len({tuple(b) for b in body}) == 4, text  # no two rows look the same
        assert any("all" in b for b in body) and any("0/5" in b for b in body), text
        assert "this llama.cpp build has no GPU device: -ngl/-ngld were ignored" in " ".join(text.split()), text
        assert "…" not in text and max(map(len, lines)) <= width, text
    md = render(summary, "md")
    assert "0/5 (asked -ngl all -ngld 0)" in md and md.count("asked") == 2, md
    placed = [r | {"offload": {"target": "5/5" if r["config"]["ngl"] == "all" else "0/5", "draft": "0/5"}} for r in rows]
    console = Console(width=80, record=True)
    console.print(rich_table(summarize(to_frame(placed)), width=80))
    assert "ignored" not in console.export_text() and "asked" not in render(summarize(to_frame(placed)), "md")
