"""Offload on a real GPU backend: layers placed as asked (target and draft apart), read back from llama.cpp;
greedy speculative output equal to the target alone's with the target split across devices and the draft on the
device; rewinds with the KV cache on the device; eval and the distribution test on an offloaded pair; the time
split that waits for the device.

Marked `gpu`: they run wherever the installed llama-cpp-python sees a GPU device: CUDA on a GPU machine, or the
Vulkan build (`gguf-bench build-gpu --vulkan`) on Mesa's software device, lavapipe, which needs
GGML_VK_VISIBLE_DEVICES=0 (tests/conftest.py sets it; .ci/run runs this file in such an environment). Speed under
lavapipe means nothing; placement, allocations and correctness are real. On a CPU-only build they are skipped,
and say why.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from cli_helpers import at_width, invoke, pair_args, stored

from gguf_bench.decoding.loop import Verify
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.measure.flows.quality import distribution_check, mul_prompts, run_eval
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles
from gguf_bench.options import ALL_LAYERS
from gguf_bench.runtimes.llama_cpp import gpu_devices

if os.environ.get("GGUF_BENCH_REQUIRE_GPU") and not gpu_devices():  # CI's Vulkan step: skipping would hide a failure
    raise RuntimeError("GGUF_BENCH_REQUIRE_GPU is set but this llama-cpp-python build sees no GPU device")
# scripts/gpu_proof.sh dry-run, on a CPU build: each test builds every fixture it asks for (the kit's cache and build,
# offline), then skips before its assertions, which need a device (`fixtures_then_skip`)
DRY_RUN = os.environ.get("GGUF_BENCH_GPU_DRY_RUN") == "1" and not gpu_devices()

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_devices() and not DRY_RUN, reason="this llama-cpp-python build sees no GPU "
                                 "device (CPU-only build; `gguf-bench build-gpu --vulkan` makes one that uses Mesa's "
                                 "lavapipe)")]


@pytest.fixture(autouse=True)
def fixtures_then_skip(request):
    """Under the kit's dry-run (DRY_RUN): the test's fixtures, then a skip; elsewhere nothing."""
    if DRY_RUN:
        params = getattr(request.node, "callspec", None)
        for name in request.fixturenames:
            if name != request.fixturename and name not in (params.params if params else {}):
                request.getfixturevalue(name)
        pytest.skip("GGUF_BENCH_GPU_DRY_RUN: fixtures built on a CPU build; the assertions need a GPU device")
GREEDY = SamplingConfig()
TOTAL = 5  # the tiny models' 4 blocks + the output layer, as llama.cpp counts them


def loaded(files, ngl: int, ngld: int, name: str = "tiny") -> LoadedPair:
    return LoadedPair(PairFiles(*files, name), LoadConfig(ngl=ngl, ngld=ngld, n_ctx=256, threads=2))


@pytest.mark.parametrize(("ngl", "ngld"), [(0, ALL_LAYERS), (2, 0), (3, 1), (ALL_LAYERS, ALL_LAYERS)])
def test_layers_go_where_asked_for_target_and_draft_apart(tiny_pairs, ngl, ngld):
    with loaded(tiny_pairs["middle"], ngl, ngld) as pair:
        for model, asked in ((pair.target, ngl), (pair.draft, ngld)):
            want = min(asked, TOTAL)
            where = model.placement
            assert where.layers == f"{want}/{TOTAL}", where
            on_device = where.device_mib()
            if want:
                device = gpu_devices()[0].name
                assert on_device.get(device, 0) > 0 and where.model_mib.get(device, 0) > 0, where
                # the KV cache of the offloaded blocks is on the device (the output layer, offloaded first, has none)
                assert (where.kv_mib.get(device, 0) > 0) == (want > 1), where
            else:
                assert not any(where.model_mib.get(d.name) for d in gpu_devices()), where
        offload = pair.offload()
        assert (offload.target, offload.draft) == (pair.target.placement.layers, pair.draft.placement.layers)


@pytest.mark.parametrize("level", ["high", "middle"])
def test_greedy_speculative_equals_the_target_alone_split_across_devices(tiny_pairs, level):
    """Target split between the CPU and the device, draft all on the device; sequential verification reads only
    one-token decodes, so the output is the target alone's on the same placement. `middle` rejects about half
    the drafts: every rejection rewinds both KV caches, part of them on the device."""
    with loaded(tiny_pairs[level], 2, ALL_LAYERS) as pair:
        prompt = pair.prompt_tokens("The quick brown fox")
        regular = pair.generate("target", prompt, 48, 4, GREEDY)
        spec = pair.generate("speculative", prompt, 48, 4, GREEDY, verify=Verify.SEQUENTIAL)
        assert spec.tokens == regular.tokens
        assert spec.rounds > 0 and (level == "high" or spec.accepted < spec.drafted)  # rejections happened


def test_rewinds_with_the_whole_kv_cache_on_the_device(tiny_pairs):
    with loaded(tiny_pairs["low"], ALL_LAYERS, ALL_LAYERS) as pair:
        prompt = pair.prompt_tokens("Once upon a time")
        regular = pair.generate("target", prompt, 40, 6, GREEDY)
        spec = pair.generate("speculative", prompt, 40, 6, GREEDY, verify=Verify.SEQUENTIAL)
        assert spec.tokens == regular.tokens and spec.accepted < spec.drafted / 2


def test_eval_and_the_distribution_check_on_an_offloaded_pair(tiny_pairs):
    with loaded(tiny_pairs["low"], 3, ALL_LAYERS, "low") as pair:
        exact = run_eval(pair, mul_prompts(4, seed=1), 4, GREEDY, n_predict=12, verify=Verify.SEQUENTIAL)
        assert exact.identical == exact.n and exact.loop_errors == 0
        batched = run_eval(pair, mul_prompts(4, seed=1), 4, GREEDY, n_predict=12)
        assert batched.loop_errors == 0 and batched.identical + batched.batch_numerics == batched.n
        # 300 samples a side (1000 took 330 s on lavapipe, 9/10 of this file's time); the CPU suite's sampling tests
        # test the rule itself with more; here it is the device's logits that must not change it
        check = distribution_check(pair, pair.prompt_tokens("Hi"), 4, 300, 3, SamplingConfig(1.0, top_k=5, seed=3))
        assert check.same, check.p_values


def test_time_inside_llama_cpp_includes_the_device(tiny_pairs):
    """llama_decode returns before the device has finished; the engine waits for it (llama_synchronize) inside
    the timed region. Without that, the device's work showed as time outside llama.cpp: 500-1200% of the time
    inside it on this pair."""
    with loaded(tiny_pairs["high"], ALL_LAYERS, ALL_LAYERS) as pair:
        prompt = pair.prompt_tokens("Hello")
        pair.generate("speculative", prompt, 8, 4, GREEDY)
        res = pair.generate("speculative", prompt, 48, 4, GREEDY)
    assert res.overhead_pct < 100, (res.target_decode_s, res.draft_decode_s, res.decode_s)


def test_run_records_the_placement_llama_cpp_reported(tiny_pairs, isolated):
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "12", "-ngl", "2", "-ngld", "all", "--name", "placed")
    assert result.exit_code == 0, result.output
    assert "target placement: 2/5 layers on GPU" in result.output and "draft placement: 5/5 layers on GPU" in result.output
    record = stored(isolated / "results" / "placed.jsonl")[-1]
    offload = record["offload"]
    assert (offload["target"], offload["draft"]) == ("2/5", "5/5")
    device = gpu_devices()[0].name
    assert offload["target_placement"]["model_mib"][device] > 0 and offload["draft_placement"]["kv_mib"][device] > 0
    assert record["env"]["devices"] and record["env"]["gpu"] == gpu_devices()[0].description


def test_info_names_the_device_and_says_what_to_set_when_it_sees_none(tiny_pairs):
    seen = invoke("info", str(tiny_pairs["high"][0]))
    assert "GPU offload: yes" in seen.output and gpu_devices()[0].name in seen.output
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    hidden = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "info", str(tiny_pairs["high"][0])], env=env,
                            capture_output=True, text=True)
    if "llvmpipe" in gpu_devices()[0].description:  # lavapipe is a CPU-type device: unseen without the variable
        assert "sees no device" in hidden.stdout and "GGML_VK_VISIBLE_DEVICES=0" in hidden.stdout, hidden.stdout


@pytest.mark.parametrize("ngl", [1, 3, ALL_LAYERS])
def test_planner_weights_and_kv_equal_llama_cpps_buffers(tiny_pairs, ngl):
    """The header-only prediction (models/offload_plan.py) against what llama.cpp allocated on the device."""
    from gguf_bench.models.offload_plan import MIB, Shape, device_bytes
    from gguf_bench.models.parts import tensor_table
    from gguf_bench.runtimes.llama_cpp import Model

    path = tiny_pairs["middle"][0]
    predicted = device_bytes(Shape.from_header(*tensor_table(path)), ngl, 256)
    with Model(path, ngl, 256, 2) as model:
        where, device = model.placement, gpu_devices()[0].name
        assert where.layers == f"{predicted.layers}/{predicted.total_layers}"
        assert where.model_mib.get(device, 0) == pytest.approx(predicted.weights / MIB, abs=0.02)
        assert where.kv_mib.get(device, 0) == pytest.approx(predicted.kv / MIB, abs=0.02)


# --- placement beyond -ngl (placing.py): experts in system memory, the draft off the device, -ot ---

def _placed(files, ngl: int, ngld: int, placing=None, placing_draft=None) -> LoadedPair:
    from gguf_bench.placing import Placing

    load = LoadConfig(ngl=ngl, ngld=ngld, n_ctx=256, threads=2, placing=placing or Placing(),
                      placing_draft=placing_draft or Placing())
    return LoadedPair(PairFiles(*files, "moe"), load)


def _expert_mib(path, layers: int) -> float:
    """The expert weights of the first `layers` blocks, in MiB, from the header."""
    import re

    from gguf_bench.models.offload_plan import tensor_bytes
    from gguf_bench.models.parts import tensor_table

    expert = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate)_exps")
    return sum(tensor_bytes(t.type_name, t.shape) for t in tensor_table(path)[1]
               if (m := expert.match(t.name)) and int(m[1]) < layers) / 2**20


def test_n_cpu_moe_keeps_exactly_those_experts_off_the_device(moe_pair):
    from gguf_bench.placing import Placing

    device = gpu_devices()[0].name
    with _placed(moe_pair, ALL_LAYERS, ALL_LAYERS) as whole, \
            _placed(moe_pair, ALL_LAYERS, ALL_LAYERS, Placing(n_cpu_moe=2), Placing(n_cpu_moe=1)) as placed:
        for model, n, full in ((placed.target, 2, whole.target), (placed.draft, 1, whole.draft)):
            where = model.placement
            assert where.layers == f"{TOTAL}/{TOTAL}" and list(where.expert_layers.values()) == [list(range(n))], where
            assert not _is_device_buffer(next(iter(where.expert_layers)))  # host memory, whatever its buffer's name
            moved = full.placement.model_mib[device] - where.model_mib[device]
            assert moved == pytest.approx(_expert_mib(model.path, n), abs=0.02)  # the log rounds to 0.01 MiB


def _is_device_buffer(name: str) -> bool:
    from gguf_bench.runtimes.placement import _is_device

    return _is_device(name)


def test_a_draft_on_no_device_holds_nothing_there(moe_pair):
    from gguf_bench.placing import Placing

    with _placed(moe_pair, ALL_LAYERS, ALL_LAYERS, placing_draft=Placing(devices=("none",))) as pair:
        assert pair.draft.placement.device_mib() == {} and pair.draft.placement.layers == f"0/{TOTAL}"
        assert pair.target.placement.device_mib()  # the target still offloads


def test_an_override_pattern_sends_its_weights_to_the_cpu(moe_pair):
    from gguf_bench.placing import Placing

    with _placed(moe_pair, ALL_LAYERS, 0, Placing(overrides=((r"attn_(q|k)\.weight", "CPU"),))) as pair:
        assert sum(pair.target.placement.overridden.values()) == 8  # q and k of 4 blocks


# -ncmoe 4 covers every layer of the tiny models through -ncmoe's per-layer patterns. Some layers' experts in host
# memory and the others on the device (-ncmoe 2 here) crash Mesa's lavapipe (Debian 12) in its own worker thread at
# the first decode (SIGSEGV inside libvulkan_lvp.so, seen with gdb); loading and placing them works (see above).
@pytest.mark.parametrize("placing", ["-ncmoe 4", "-cmoe", "-ot ffn_down_exps=CPU"])
def test_greedy_speculative_equals_the_target_alone_at_each_placement(moe_pair, placing):
    from gguf_bench.placing import parse_label

    with _placed(moe_pair, ALL_LAYERS, ALL_LAYERS, parse_label(placing), parse_label(placing)) as pair:
        prompt = pair.prompt_tokens("The quick brown fox")
        alone = pair.generate("target", prompt, 24, 0, GREEDY)
        spec = pair.generate("speculative", prompt, 24, 3, GREEDY, verify=Verify.SEQUENTIAL)
        assert spec.tokens == alone.tokens


def test_a_device_the_build_lacks_is_one_line_naming_the_ones_it_has(moe_pair):
    result = invoke("run", *pair_args(moe_pair), "-n", "4", "-dev", "CUDA7")
    assert result.exit_code == 1 and f"it has {gpu_devices()[0].name}" in result.stderr


@pytest.mark.parametrize("ngl", [2, ALL_LAYERS])
@pytest.mark.parametrize("n_cpu_moe", [0, 2, ALL_LAYERS])
def test_planner_with_experts_on_the_cpu_equals_llama_cpps_buffers(moe_pair, ngl, n_cpu_moe):
    """-ncmoe on a MoE model: the planner's device weights (the offloaded layers less the experts kept on the CPU)
    and KV cache (with its layer, whatever the experts do) against llama.cpp's buffers; the experts' layers against
    its override log (to a host buffer: CPU, or the device's host buffer such as Vulkan_Host)."""
    from gguf_bench.models.offload_plan import MIB, Shape, device_bytes
    from gguf_bench.models.parts import tensor_table
    from gguf_bench.placing import Placing
    from gguf_bench.runtimes.llama_cpp import Model

    placing = Placing(n_cpu_moe=n_cpu_moe)
    predicted = device_bytes(Shape.from_header(*tensor_table(moe_pair[0])), ngl, 256, placing=placing)
    with Model(moe_pair[0], ngl, 256, 2, None, placing) as model:
        where, device = model.placement, gpu_devices()[0].name
    assert where.layers == f"{predicted.layers}/{predicted.total_layers}"
    assert where.model_mib.get(device, 0) == pytest.approx(predicted.weights / MIB, abs=0.02)
    assert where.kv_mib.get(device, 0) == pytest.approx(predicted.kv / MIB, abs=0.02)
    on_host = sorted(i for buffer, layers in where.expert_layers.items() if buffer != device for i in layers)
    assert on_host == list(predicted.expert_layers) and device not in where.expert_layers


# --- llama.cpp's own fitting (llama-fit-params) beside the planner: plan --compare-fit ---

@pytest.fixture(scope="module")
def wide_moe(tmp_path_factory):
    """A wider MoE pair (width 256, FFN 512, 8 experts: 52 MiB of weights), large enough for whole MiB to be a fine
    measure."""
    from gguf_bench.models.tiny import TinySpec, make_pair

    return make_pair(tmp_path_factory.mktemp("wide"), spec=TinySpec(width=256, ff=512, n_experts=8, n_experts_used=2))


def _compute_mib(path, binary) -> int:
    """llama.cpp's own estimate of its compute buffer on the device with every layer there (llama-fit-params'
    --fit-print for a budget the whole model fits): the backend's, lavapipe's a few MiB, CUDA's its own."""
    from gguf_bench.models.offload_plan import MIB, Budget
    from gguf_bench.runtimes import fit_params

    run, _ = fit_params.fit(path, 512, Budget.one(4000 * MIB), binary=binary)
    assert run.choice is not None and run.choice.ngl == -1, run
    return run.devices[0].compute


def _fit_and_plan(path, beyond_mib: int, binary):
    """llama-fit-params' pick for `path` within a budget of `beyond_mib` more than the backend's compute buffer, its
    device estimate, and the planner's bytes for that pick."""
    from gguf_bench.models.offload_plan import MIB, Budget, Shape, device_bytes
    from gguf_bench.models.parts import tensor_table
    from gguf_bench.runtimes import fit_params

    budget = Budget.one((_compute_mib(path, binary) + beyond_mib) * MIB)
    run, notes = fit_params.fit(path, 512, budget, binary=binary)
    assert run.choice is not None and not notes, run
    (est,) = run.devices
    assert est.device == gpu_devices()[0].name
    return run.choice, est, device_bytes(Shape.from_header(*tensor_table(path)), run.choice.layers, 512, None,
                                         run.choice.placing, budget)


# the budgets: MiB beyond the backend's compute buffer (`_compute_mib`), for the weights and the KV cache, so that
# the same fractions of the model fit on lavapipe (a compute buffer of 2 MiB for this model) and on CUDA
@pytest.mark.parametrize("beyond_mib", [2, 3, 4, 6])
def test_llama_fit_params_estimate_for_its_pick_equals_the_planners(moe_pair, fit_params_bin, beyond_mib):
    """llama-fit-params fits the tiny MoE target into a budget (-fitt: the device's free memory less the budget):
    -ngl and the experts it moves to the CPU (-ot), and its estimate for that pick (--fit-print). It prints whole MiB
    rounded down, and the model is 3.3 MiB, so a relative check (5%) cannot be made at that resolution: the
    planner's bytes for the same pick, rounded down, must equal llama.cpp's model and KV numbers; the compute buffer
    within 1 MiB."""
    from gguf_bench.models.offload_plan import MIB

    choice, est, picked = _fit_and_plan(moe_pair[0], beyond_mib, fit_params_bin)
    assert (est.model, est.context) == (picked.weights // MIB, picked.kv // MIB), (est, picked)
    assert abs(est.compute - picked.compute / MIB) < 1, (est, picked)
    if beyond_mib < 6:  # too small for the whole model (3.3 MiB and 0.5 of KV): fewer layers, or experts to the CPU
        assert picked.layers < TOTAL or picked.expert_layers, choice
    else:
        assert choice.ngl == -1 and not choice.overrides  # it fits as it is: nothing changed


@pytest.mark.parametrize("beyond_mib", [23, 33, 53, 73])
def test_llama_fit_params_model_estimate_within_5_percent_of_the_planners(wide_moe, fit_params_bin, beyond_mib):
    """On the wider MoE target (52 MiB, 2 of KV) the device's model bytes agree within 5% (the rounding down: under
    1 MiB) and the KV cache exactly. The compute buffer is not checked: with experts on the CPU op offload copies
    them into it, and the planner counts the largest expert tensor whole (11.5 MiB on lavapipe, llama.cpp 8-9)."""
    from gguf_bench.models.offload_plan import MIB

    choice, est, picked = _fit_and_plan(wide_moe[0], beyond_mib, fit_params_bin)
    assert picked.weights > 10 * MIB and abs(est.model - picked.weights / MIB) <= 0.05 * picked.weights / MIB
    assert est.model == picked.weights // MIB and est.context == picked.kv // MIB, (est, picked)
    assert (beyond_mib < 73) == bool(picked.expert_layers), choice  # experts to the CPU until it all fits


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory):
    """A tiny model with 32266 tokens: its output weight (F32, 7.9 MiB) and logits (32266 x 512 x 4 = 63 MiB) fit
    lavapipe's 128 MiB buffers, and the logits are most of the compute buffer."""
    from gguf_bench.models.tiny import TinySpec, make_pair

    return make_pair(tmp_path_factory.mktemp("vocab"), spec=TinySpec(extra_tokens=32000))[0]


@pytest.mark.parametrize("ngl", [0, 2, ALL_LAYERS])
def test_planner_compute_buffer_equals_llama_cpps(big_vocab, ngl):
    """The compute buffer is llama.cpp's reserve (models/offload_plan.py: output_stage): the logits of every token of
    the ubatch where the output matmul runs, and at -ngl 0 the output weight op offload copies there too."""
    from gguf_bench.models.offload_plan import MIB, Shape, device_bytes, output_stage
    from gguf_bench.models.parts import tensor_table
    from gguf_bench.runtimes.llama_cpp import Model

    shape = Shape.from_header(*tensor_table(big_vocab))
    predicted = device_bytes(shape, ngl, 512)
    assert output_stage(shape, 512) > 0.85 * predicted.compute  # the logits are what is measured
    with Model(big_vocab, ngl, 512, 2) as model:
        measured = model.placement.compute_mib[gpu_devices()[0].name]
    assert measured == pytest.approx(predicted.compute / MIB, rel=0.02), (measured, predicted)


def test_llama_fit_params_keeps_a_placement_the_user_fixed(moe_pair, fit_params_bin):
    """With -ncmoe given, llama.cpp changes nothing: when the model does not fit as placed, it says so."""
    from gguf_bench.models.offload_plan import MIB, Budget
    from gguf_bench.placing import Placing
    from gguf_bench.runtimes import fit_params

    run, _ = fit_params.fit(moe_pair[0], 512, Budget.one(4 * MIB), Placing(n_cpu_moe=1), fit_params_bin)
    assert run.choice is None and "tensor_buft_overrides already set by user" in run.failure, run
    assert run.devices[0].model == 2  # its estimate as placed: blk 0's experts on the CPU, 2.57 MiB on the device (planner)


def test_plan_compare_fit_shows_llama_cpps_picks_beside_the_planner(moe_pair, fit_params_bin, monkeypatch):
    """Each model fitted alone takes the whole budget: llama.cpp's two picks together need more than it holds,
    while the planner's rows are joint."""
    monkeypatch.setenv("GGUF_BENCH_CACHE", str(fit_params_bin.parents[2]))  # where the fixture built it
    at_width(monkeypatch, 80)
    result = invoke("plan", *pair_args(moe_pair), "--vram", "520MiB", "--ctx", "512", "--compare-fit")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "fits it alone, the draft ignored" in text and text.count("llama.cpp picks") == 2, result.output
    need = re.search(r"two picks together need (\d+) MiB on (\S+) of 8\b", text)
    assert need and int(need[1]) > 8 and need[2] == gpu_devices()[0].name, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    free = gpu_devices()[0].memory_free
    more = invoke("plan", *pair_args(moe_pair), "--vram", f"{free // 2**20 + 1024}MiB", "--margin", "0", "--ctx", "512",
                  "--compare-fit")
    assert more.exit_code == 0 and "is more than its free memory" in " ".join(more.output.split()), more.output
