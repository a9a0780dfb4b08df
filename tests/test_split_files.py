"""Split GGUF files (`NAME-00001-of-0000N.gguf`), as the hub ships every big model: made by llama.cpp's own
llama-gguf-split from the tiny models, and by gguf.GGUFWriter's split from a header at a 235B-A22B MoE shape. Each
command answers for the whole model, named by any part, exactly as for the same model in one file."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, run_cli

from gguf_bench.models import reads
from gguf_bench.models.candidates import HEADER_SCHEMA, HeaderReader
from gguf_bench.models.offload_plan import tensor_bytes
from gguf_bench.models.parts import SPLIT_COUNT, local_header, part_paths, read_part, tensor_table
from gguf_bench.models.shapes import write_header

from hubserver import HubServer

SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


def gguf_split(binary: Path, source: Path, out: Path, parts: int = 3, *extra: str) -> list[Path]:
    """`source` split by llama-gguf-split into `parts` files (by tensor count) named OUT-0000i-of-0000N.gguf."""
    per = math.ceil(len(tensor_table(source)[1]) / parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(binary), "--split", "--split-max-tensors", str(per), *extra, str(source), str(out)],
                   check=True, capture_output=True, timeout=120)
    return sorted(out.parent.glob(f"{out.name}-*-of-*.gguf"))


@pytest.fixture(scope="module")
def split_pair(gguf_split_bin, tiny_pairs, tmp_path_factory) -> dict[str, object]:
    """The tiny middle pair's target in one file and split in 3 (and in 4, part 1 metadata only); its draft split in 3."""
    target, draft = tiny_pairs["middle"]
    root = tmp_path_factory.mktemp("split")
    return {"target": target, "draft": draft,
            "parts": gguf_split(gguf_split_bin, target, root / "t3" / "tiny-target"),
            "meta_first": gguf_split(gguf_split_bin, target, root / "t4" / "tiny-target", 3, "--no-tensor-first-split"),
            "draft_parts": gguf_split(gguf_split_bin, draft, root / "d3" / "tiny-draft")}


def _same_model(split, single) -> None:
    assert {k: v for k, v in split.meta.items() if k not in SPLIT_KEYS} == single.meta
    assert [(t.name, t.type_name, t.shape) for t in split.tensors] == [(t.name, t.type_name, t.shape) for t in single.tensors]


def test_any_part_reads_as_the_whole_model(split_pair):
    parts, single = split_pair["parts"], local_header(split_pair["target"])
    assert len(parts) == 3 and all(len(local_header(p).parts) == 3 for p in parts)
    for p in parts:
        _same_model(local_header(p), single)
    assert local_header(parts[1]).size == sum(p.stat().st_size for p in parts)
    meta_first = local_header(split_pair["meta_first"][2])  # part 1 holds metadata and no tensor
    assert len(meta_first.parts) == 4 and not meta_first.parts[0].tensors
    _same_model(meta_first, single)
    from gguf_bench.runtimes.llama_cpp import read_info

    by_llama, whole = read_info(parts[2]), read_info(split_pair["target"])  # llama.cpp loads part 1, whichever is named
    assert by_llama is read_info(parts[0]) and by_llama.path == parts[0]  # read once
    assert (by_llama.tokens, by_llama.n_layers) == (whole.tokens, whole.n_layers)
    assert by_llama.file_size == sum(p.stat().st_size for p in parts)


def _without_names(text: str, *names: str) -> str:
    """The text with the models' names replaced, each line's spacing folded (a centred title moves with its name)."""
    for name in names:
        text = text.replace(name, "MODEL")
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


def test_plan_info_and_drafts_answer_as_for_the_single_file(split_pair, tmp_path):
    target, draft, parts = split_pair["target"], split_pair["draft"], split_pair["parts"]
    plans = [invoke("plan", "--target", str(t), "--draft", str(draft), "--vram", "1GB") for t in (target, parts[1])]
    assert all(r.exit_code == 0 for r in plans), plans[1].output
    assert _without_names(plans[0].stdout, target.name) == _without_names(plans[1].stdout, parts[1].name)
    from gguf_bench.cli.models import _local_files

    assert _local_files([str(parts[1]), str(draft)], None) == [parts[0], draft]  # --compare-fit: llama-fit-params loads part 1
    info = invoke("info", str(parts[2]))
    assert info.exit_code == 0, info.output
    total = sum(p.stat().st_size for p in parts)
    assert re.search(rf"file size\s+{re.escape(_size_text(total))}", info.stdout), info.stdout
    # drafts: the target named by a part; the draft split in 3 beside it, found once with the size of all its parts
    folder = split_pair["draft_parts"][0].parent
    answers = []
    for t, search in ((target, draft.parent), (parts[2], folder)):
        result = invoke("drafts", str(t), "--search", str(search), "--offline", "--no-caches", "--vram", "1GB", "--json")
        assert result.exit_code == 0, result.output
        answers.append(json.loads(result.stdout))
    single = {Path(c["name"]).name: c for c in answers[0]["candidates"] if c["name"] == str(draft)}
    split = [c for c in answers[1]["candidates"] if c["origin"] == "search"]
    assert len(split) == 1 and Path(split[0]["name"]) == split_pair["draft_parts"][0]
    one = single[draft.name]
    assert (split[0]["status"], split[0]["params"], split[0]["active_params"]) == (one["status"], one["params"],
                                                                                 one["active_params"])
    assert split[0]["file_size"] == sum(p.stat().st_size for p in split_pair["draft_parts"])
    ratios = [{Path(r["name"]).stem.split("-0")[0]: (r["cost_ratio"], r["fits"]) for r in a["ranking"]} for a in answers]
    assert ratios[1]["tiny-draft"] == ratios[0]["tiny-draft"]


def _size_text(n: int) -> str:
    from gguf_bench.cli.models import size_text

    return size_text(n)


def test_a_split_twin_loads_and_decodes(split_pair, tmp_path):
    parts = split_pair["parts"]
    result = invoke("twin", str(parts[1]), "-o", str(tmp_path / "twin.gguf"))
    assert result.exit_code == 0, result.output
    twins = sorted(tmp_path.glob("twin-*-of-00003.gguf"))
    assert [p.name for p in twins] == [f"twin-{i:05d}-of-00003.gguf" for i in (1, 2, 3)], result.output
    twin, real = local_header(twins[0]), local_header(split_pair["target"])
    assert sum(tensor_bytes(t.type_name, t.shape) for t in twin.tensors) == sum(
        tensor_bytes(t.type_name, t.shape) for t in real.tensors)
    assert not list(tmp_path.glob(".*part"))
    run = invoke("run", "--target", str(twins[0]), "--draft", str(split_pair["draft"]), "-n", "8", "-K", "2",
                 "--prompt", "hello", "--json")
    assert run.exit_code == 0, run.output
    records = json.loads(run.stdout)
    assert [r["mode"] for r in records] == ["target", "draft", "speculative"]
    assert all(r["metrics"]["n_tokens"] == 8 and not r["error"] for r in records), run.stdout
    assert records[0]["models"]["target"]["twin"], records[0]["models"]  # the record says it ran a twin


def test_run_on_a_split_model_generates_what_the_single_file_does(split_pair):
    texts = []
    for t in (split_pair["target"], split_pair["parts"][2]):
        result = invoke("run", "--target", str(t), "--draft", str(split_pair["draft"]), "-n", "16", "-K", "2",
                        "--prompt", "the quick brown fox", "--json")
        assert result.exit_code == 0, result.output
        texts.append([r["metrics"]["text"] for r in json.loads(result.stdout)])
    assert texts[0] == texts[1] and all(texts[0])


def test_a_missing_or_misnamed_part_is_one_line(split_pair, tmp_path):
    for p in split_pair["parts"][:2]:
        shutil.copy(p, tmp_path / p.name)
    first = tmp_path / split_pair["parts"][0].name
    assert_user_error(invoke("plan", "--target", str(first), "--draft", str(split_pair["draft"]), "--vram", "1GB"),
                      "tiny-target-00003-of-00003.gguf", "download every part")
    assert_user_error(invoke("info", str(first)), "download every part")
    assert_user_error(invoke("twin", str(first), "-o", str(tmp_path / "t.gguf")), "download every part")
    assert not list(tmp_path.glob("t*twin*")) and not list(tmp_path.glob("t-0*"))
    renamed = tmp_path / "renamed.gguf"
    shutil.copy(split_pair["parts"][0], renamed)
    assert_user_error(invoke("plan", "--target", str(renamed), "--draft", str(split_pair["draft"]), "--vram", "1GB"),
                      "its name does not say so")


def test_twin_errors_are_one_line_and_leave_nothing(split_pair, tmp_path):
    assert_user_error(invoke("twin", str(split_pair["target"]), "-o", "/proc/twin.gguf"), "cannot write the twin")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(split_pair["target"].read_bytes()[:2000])
    assert_user_error(invoke("twin", str(cut), "-o", str(tmp_path / "out.gguf")), "cut.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.gguf"]


def test_an_old_header_cache_entry_is_read_again(split_pair):
    reader = HeaderReader()
    first = reader.local(split_pair["parts"][0])
    assert first.n_parts == 3 and reader.stats.headers_read == 3
    entries = list(reader.folder.glob("*.json"))
    assert len(entries) == 1 and json.loads(entries[0].read_text())["schema"] == HEADER_SCHEMA
    old = json.loads(entries[0].read_text())
    del old["schema"], old["header"]["n_parts"]  # as an older gguf-bench wrote it
    old["header"]["retired_field"] = 1
    entries[0].write_text(json.dumps(old))
    again = HeaderReader()
    assert again.local(split_pair["parts"][2]) == first and again.stats.cached == 0
    cached = HeaderReader()  # and now from the cache, as it was read
    assert _plain(cached.local(split_pair["parts"][1])) == _plain(first) and cached.stats.cached == 1


def _plain(header) -> dict:
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(header)))


# --- through the hub ------------------------------------------------------------------------------------------------


def _env(server: HubServer) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "COLUMNS": "200"}


def _cli(server: HubServer, *args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, env=_env(server), timeout=300)


def test_a_split_quant_on_the_hub_beside_single_files(split_pair, isolated):
    files = {p.name.replace("tiny-target", "tiny-7b-Q8_0"): p.read_bytes() for p in split_pair["parts"]}
    files["tiny-7b-F32.gguf"] = split_pair["target"].read_bytes()
    files["tiny-7b-Q4_K_M.gguf"] = split_pair["target"].read_bytes()
    with HubServer() as server:
        server.state.files["acme/Tiny-7B-GGUF"] = files
        plans = [_cli(server, "plan", "--target", t, "--draft", str(split_pair["draft"]), "--vram", "1GB")
                 for t in ("acme/Tiny-7B-GGUF:Q8_0", "acme/Tiny-7B-GGUF/tiny-7b-Q8_0-00002-of-00003.gguf",
                           str(split_pair["target"]))]
        gets = server.state.file_gets()
        drafts = _cli(server, "drafts", "acme/Tiny-7B-GGUF:F32", "--no-caches", "--json")
    assert all(p.returncode == 0 for p in plans), plans[0].stderr
    names = ("Tiny-7B-GGUF:Q8_0", "tiny-7b-Q8_0-00002-of-00003.gguf", split_pair["target"].name)  # as the title names them
    assert len({_without_names(p.stdout, n) for p, n in zip(plans, names)}) == 1, [p.stdout for p in plans]
    assert {path.rsplit("/", 1)[1] for path, _ in gets} == {n for n in files if "Q8_0" in n}  # every part, no other
    assert all(rng and rng.startswith("bytes=") for _, rng in gets)  # headers only
    assert drafts.returncode == 0, drafts.stderr
    found = {c["name"]: c for c in json.loads(drafts.stdout)["candidates"] if c["origin"] == "self"}
    assert found["acme/Tiny-7B-GGUF:Q8_0"]["file_size"] == local_header(split_pair["parts"][0]).size
    assert found["acme/Tiny-7B-GGUF:Q8_0"]["status"] == "compatible"


def test_a_235b_moe_split_header_plans_as_one_file(tmp_path):
    """Qwen3-235B-A22B's shape, header only: split in parts of at most 50 GB as the hub does, and in one file; a
    Qwen2.5-0.5B-shaped draft header beside it."""
    for folder in ("one", "split", "draft"):
        (tmp_path / folder).mkdir()
    single = write_header(tmp_path / "one" / "qwen3-235b.gguf", "qwen3-235b-a22b")
    parts = part_paths(write_header(tmp_path / "split" / "qwen3-235b.gguf", "qwen3-235b-a22b", split_max_size=50 * 10**9))
    draft = write_header(tmp_path / "draft" / "qwen2.5-0.5b.gguf", "qwen2.5-0.5b")
    header = local_header(parts[-1])
    assert len(parts) == int(header.meta[SPLIT_COUNT]) >= 3
    weights = sum(tensor_bytes(t.type_name, t.shape) for t in header.tensors)
    by_part = sum(tensor_bytes(t.type_name, t.shape) for p in parts for t in read_part(p).tensors)
    assert weights == by_part and 120 * 2**30 < weights < 150 * 2**30
    hub_names = [p.name.replace("qwen3-235b", "Qwen3-235B-A22B-Q4_K_M") for p in parts]
    with HubServer() as server:
        server.state.files["acme/Qwen3-235B-A22B-GGUF"] = {n: p.read_bytes() for n, p in zip(hub_names, parts)}
        plans = [_cli(server, "plan", "--target", t, "--draft", str(draft), "--vram", "24GB")
                 for t in (str(single), str(parts[1]), "acme/Qwen3-235B-A22B-GGUF:Q4_K_M")]
        server.state.sent = 0
        started = time.perf_counter()
        drafts = _cli(server, "drafts", "acme/Qwen3-235B-A22B-GGUF:Q4_K_M", "--search", str(draft.parent), "--no-caches",
                      "--vram", "24GB", "--verbose", "--json")
        seconds, sent = time.perf_counter() - started, server.state.sent
    assert all(p.returncode == 0 for p in plans), [p.stderr for p in plans]
    names = (single.name, parts[1].name, "Qwen3-235B-A22B-GGUF:Q4_K_M")
    assert len({_without_names(p.stdout, n) for p, n in zip(plans, names)}) == 1, [p.stdout for p in plans]
    weights_mib = re.findall(r"│\s*(\d+)\s*│", plans[0].stdout)  # the weights column of its rows, MiB
    assert weights_mib and max(int(w) for w in weights_mib) <= weights / 2**20
    assert drafts.returncode == 0, drafts.stderr
    out = json.loads(drafts.stdout)
    found = [c for c in out["candidates"] if c["origin"] == "search"]
    assert len(found) == 1 and found[0]["status"] == "compatible", out["candidates"]
    model = out["target_model"]
    assert model["parts"] == len(parts) and model["weights_bytes"] == weights, model
    assert weights <= model["file_size"] <= 1.001 * weights, model  # data as laid out, and each part's header
    print(f"235B split header through the local hub: {len(parts)} parts, {sent / 2**20:.1f} MiB sent, {seconds:.1f} s "
          f"for drafts --verbose; {drafts.stderr.strip().splitlines()[-1]}")


def test_a_header_is_read_once_per_file_version(split_pair, tmp_path):
    copy = tmp_path / "t.gguf"
    shutil.copy(split_pair["target"], copy)
    first = local_header(copy)
    assert local_header(copy).parts[0] is first.parts[0]  # the engines, the planner and the checks share one read
    os.utime(copy, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed: read again
    assert local_header(copy).parts[0] is not first.parts[0]
    with pytest.raises(TypeError):
        first.meta["general.name"] = "changed"  # shared, so read-only


def test_twin_measures_and_sweeps_take_a_split_target(split_pair):
    part, draft = str(split_pair["parts"][1]), str(split_pair["draft"])
    measured = invoke("plan", "--target", part, "--draft", draft, "--vram", "1GB", "--ctx", "512", "--measure",
                      "--measure-n", "4")
    assert measured.exit_code == 0, measured.output
    assert "target t/s" in measured.stdout and "tiny-target-00002-of-00003.gguf" in measured.stdout
    tuned = invoke("tune", "--twin", "--target", part, "--draft", draft, "-K", "1-2", "-n", "8", "--prompt-ids",
                   "code-short", "--reps", "1", "--acceptance", "0.7", "--json")
    assert tuned.exit_code == 0, tuned.output
    assert {r["k"] for r in json.loads(tuned.stdout)["at_acceptance"]} == {1, 2}
    swept = invoke("sweep", "--target", part, "--draft", draft, "-K", "2", "-n", "8", "--prompt-ids", "code-short",
                   "--name", "split-sweep")
    assert swept.exit_code == 0, swept.output
    assert "K=2" in swept.stdout and "tiny-target-00001-of-00003.gguf" in swept.stdout  # loaded from part 1
    results = Path(os.environ["GGUF_BENCH_RESULTS"]) / "split-sweep.jsonl"
    alone = [r for r in map(json.loads, results.read_text().splitlines()) if r.get("mode") == "target"]
    whole = reads.file_bytes(str(split_pair["target"]))  # the unsplit file: every part's tensors count
    for r in alone:  # the bytes a token stored with the run: the split model's, all of its parts
        m = r["metrics"]
        assert m["bytes_per_token"] == pytest.approx(whole.step(m["prompt_tokens"] + m["n_tokens"] / 2))


@pytest.mark.slow
def test_a_real_model_split_by_size_answers_as_its_file(gguf_split_bin, gemma_pair, tmp_path):
    """gemma-3-270m Q4_K_M (the default draft) cut by llama-gguf-split into parts of at most 100 MB."""
    target, draft = gemma_pair
    (tmp_path / "parts").mkdir()
    subprocess.run([str(gguf_split_bin), "--split", "--split-max-size", "100M", str(draft),
                    str(tmp_path / "parts" / "gemma-q4")], check=True, capture_output=True, timeout=300)
    parts = sorted((tmp_path / "parts").glob("gemma-q4-*-of-*.gguf"))
    assert len(parts) == 3
    _same_model(local_header(parts[2]), local_header(draft))
    plans = [invoke("plan", "--target", str(target), "--draft", str(d), "--vram", "2GB") for d in (draft, parts[2])]
    assert all(r.exit_code == 0 for r in plans), plans[1].output
    assert _without_names(plans[0].stdout, draft.name) == _without_names(plans[1].stdout, parts[2].name)
    found = []
    for folder in (draft.parent, tmp_path / "parts"):
        result = invoke("drafts", str(target), "--search", str(folder), "--offline", "--no-caches", "--vram", "2GB",
                        "--json")
        assert result.exit_code == 0, result.output
        found.append(next(r for r in json.loads(result.stdout)["ranking"] if "q4" in Path(r["name"]).name.lower()))
    assert found[1]["name"] == str(parts[0]) and found[1]["cost_ratio"] == found[0]["cost_ratio"]
    twin = invoke("twin", str(parts[1]), "-o", str(tmp_path / "twin.gguf"))
    assert twin.exit_code == 0, twin.output
    run = invoke("run", "--target", str(tmp_path / "twin-00001-of-00003.gguf"), "--draft", str(draft), "-n", "4",
                 "-K", "2", "--prompt", "hi", "--json")
    assert run.exit_code == 0 and all(r["metrics"]["n_tokens"] == 4 for r in json.loads(run.stdout)), run.output


def test_a_235b_split_is_one_model_for_its_record_size_checksum_and_memory_check(tmp_path, monkeypatch):
    """Qwen3-235B-A22B's shape split in parts of at most 50 GB (headers only: each part a few MB): the record, named by
    any part, stores the size of every part together and one sha256 per part in order; stored costs match the whole
    size only; the memory check counts every part, so memory less than the whole model (though more than part 1) is
    refused in one line. The available memory is set for the test: a header-only model is smaller than any machine's."""
    import hashlib

    from gguf_bench.errors import BenchError
    from gguf_bench.measure import capacity
    from gguf_bench.measure.costs import _same_file
    from gguf_bench.measure.inputs.prompts import Prompt
    from gguf_bench.measure.plan import Grid
    from gguf_bench.models.pairs import PairFiles
    from gguf_bench.results.schema.parts.provenance import ModelFile
    from gguf_bench.results.schema.store import model_record

    parts = part_paths(write_header(tmp_path / "qwen3-235b.gguf", "qwen3-235b-a22b", split_max_size=50 * 10**9))
    sizes = [p.stat().st_size for p in parts]
    record = model_record(parts[1])
    assert len(parts) >= 3 and record.size == sum(sizes) > sizes[0] + sizes[1]
    assert record.sha256 is None and record.part_sha256 == [hashlib.sha256(p.read_bytes()).hexdigest() for p in parts]
    assert model_record(parts[0]).part_sha256 == record.part_sha256
    assert _same_file(model_record(parts[0]), parts[0])
    assert not _same_file(ModelFile(parts[0].name, size=sizes[0]), parts[0])  # part 1's size: another model
    registry = tmp_path / "models.yaml"
    registry.write_text(f"models:\n  big: {{path: {parts[1]}}}\n  one: {{path: {parts[0]}}}\n"
                        "pairs: {p: {target: big, draft: one}}\ndefault: p\n")
    listed = invoke("models", "--registry", str(registry))
    assert listed.exit_code == 0 and listed.stdout.count(f" {_size_text(sum(sizes))}  cached") == 2, listed.stdout
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "x")])
    monkeypatch.setattr(capacity, "available_memory", lambda: sum(sizes) - 1)
    with pytest.raises(BenchError, match=r"needs about .* of memory \(every part of a split model\)") as refused:
        capacity.check_memory(PairFiles(parts[0], None, "235b"), grid)
    assert "\n" not in str(refused.value)
    monkeypatch.setattr(capacity, "available_memory", lambda: sum(sizes))
    capacity.check_memory(PairFiles(parts[2], None, "235b"), grid)  # the whole model fits: taken
