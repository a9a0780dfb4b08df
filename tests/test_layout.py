"""The floor plan, enforced: packages in layers that import only downwards, no import cycles, one llama_cpp
importer, one place that tells greedy from sampled, record fields read by name only in the records module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gguf_bench"
# lower number = lower layer; a module may import its own layer's siblings and anything below
LAYERS = {"errors": 0, "options": 0, "placing": 0, "engine_registry": 0, "axes": 0, "decode_window": 0, "models": 1,
          "runtimes": 2, "decoding": 2, "results": 3, "measure": 4, "cli": 5}
PEERS_APART = {("runtimes", "decoding"), ("decoding", "runtimes")}  # same layer, and neither knows the other


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = path
    return out


def imports(path: Path) -> set[str]:
    """Every gguf_bench module `path` imports, at the top or inside functions (`from gguf_bench.x import y`
    counts as gguf_bench.x.y when that is a module)."""
    names = modules()
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("gguf_bench")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gguf_bench"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & names.keys()
            found |= subs or {node.module}
    return {m for m in found if m in names and m != "gguf_bench"}


# the registry's plugin table names classes and functions by 'module:attribute' (engine_registry.py), loaded by the
# method each field's resolver is: an arrow from every module that calls the method to the named module
RESOLVERS = {"engine": "engine_class", "tune": "tune_flow", "options": "options_class"}


def registry_arrows() -> set[tuple[str, str]]:
    """(resolving module, named module) for every 'module:attribute' of the registry: the imports no `import` shows."""
    from gguf_bench.engine_registry import KINDS

    named = {field: {getattr(k, field).partition(":")[0] for k in KINDS if getattr(k, field)} for field in RESOLVERS}
    arrows = set()
    for mod, path in modules().items():
        calls = {n.func.attr for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        arrows |= {(mod, target) for field, method in RESOLVERS.items() if method in calls for target in named[field]
                   if target != mod}  # a module naming itself imports nothing
    return arrows


def graph() -> dict[str, set[str]]:
    """Each module's imports, the registry's arrows included."""
    out = {mod: imports(path) for mod, path in modules().items()}
    for mod, target in registry_arrows():
        out[mod].add(target)
    return out


def test_the_registry_names_modules_that_exist_and_its_arrows_are_resolved_where_the_layers_allow():
    from gguf_bench.engine_registry import KINDS

    named = {getattr(k, f).partition(":")[0] for k in KINDS for f in RESOLVERS if getattr(k, f)}
    assert named <= modules().keys() and "gguf_bench.measure.engines.python" in named
    arrows = registry_arrows()
    assert {t for _, t in arrows} >= {"gguf_bench.measure.engines.python", "gguf_bench.measure.engines.server",
                                      "gguf_bench.measure.engines.endpoint"}, arrows
    assert not {m for m, _ in arrows if package_of(m) in ("errors", "options", "placing", "engine_registry", "models",
                                                           "runtimes", "decoding", "results")}, arrows


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_layers_import_only_downwards():
    wrong = []
    for mod, deps in graph().items():  # the registry's arrows too
        here = package_of(mod)
        if here not in LAYERS:
            continue
        for dep in deps:
            there = package_of(dep)
            if there in LAYERS and (LAYERS[there] > LAYERS[here] or (here, there) in PEERS_APART):
                wrong.append(f"{mod} -> {dep}")
    assert not wrong, "imports from a higher layer: " + ", ".join(sorted(wrong))


RESULTS_LAYERS = {"schema": 0, "predictions": 1, "decision": 2, "presentation": 3}  # results by job: what is stored,
# what is predicted from it, what is decided from it (verdicts), what the user reads; each imports only its own and
# lower jobs


def test_results_jobs_import_only_downwards():
    assert {p.name for p in (PACKAGE / "results").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(RESULTS_LAYERS)
    assert [p.name for p in (PACKAGE / "results").glob("*.py")] == ["__init__.py"]  # every module in its job
    wrong = []
    for mod, path in modules().items():
        parts = mod.split(".")
        if parts[1:2] != ["results"] or len(parts) < 4:
            continue
        for dep in imports(path):
            there = dep.split(".")
            if there[1:2] == ["results"] and len(there) >= 4 and RESULTS_LAYERS[there[2]] > RESULTS_LAYERS[parts[2]]:
                wrong.append(f"{mod} -> {dep}")
    assert not wrong, "results: a job imports a later one: " + ", ".join(sorted(wrong))


# measure/ in layers too (issue 74): each unit (a sub-package, or a module at measure/'s top) imports only its own
# modules and units of lower layers; units of one layer know nothing of each other. An engine's options
# (engines/declared, server_options, endpoint_options) are what the plan reads (Grid.engine_options), below it; the
# engines' sessions run the plan's settings, above it: one unit, "engine options", every engines/*_options module
# (one per engine that owns options) and the declared module they share.
MEASURE_LAYERS = (
    {"inputs", "trackers", "costs", "proof",  # what a sweep sends, what wraps a run, step costs, a run's mark
     "engine options"},
    {"pair"},  # a loaded pair, warmed up
    {"plan"},  # the grid, settings x cells: nothing loads here
    {"capacity", "repeat"},  # what this machine holds; -r auto's cells to run again
    {"engines"},  # the engines' sessions
    {"measured", "deploy"},  # what a sweep measures (its engines); the deploy line of a best cell
    {"sweep"},  # plan -> engine -> store
    {"flows", "distributed"},  # the commands' flows; Ray units
)


def measure_unit(module: str) -> str | None:
    """The unit of MEASURE_LAYERS a measure module belongs to: its first part under measure/ (engines.python ->
    engines), "engine options" for engines/declared and engines/*_options; None for measure/__init__ and for modules
    outside measure/."""
    parts = module.split(".")
    if parts[:2] != ["gguf_bench", "measure"] or len(parts) < 3:
        return None
    if parts[2:3] == ["engines"] and len(parts) > 3 and (parts[3] == "declared" or parts[3].endswith("_options")):
        return "engine options"
    return parts[2]


def measure_layer(unit: str) -> int:
    return next(i for i, layer in enumerate(MEASURE_LAYERS) if unit in layer)


def test_measure_units_import_only_downwards():
    """No arrow back up inside measure/: inputs/ (what a sweep sends) imports nothing of the plan that lists it, and
    no engine imports the flows that call it. Every module of measure/ is in a declared unit."""
    units = {u for mod in modules() if (u := measure_unit(mod))}
    assert units <= set().union(*MEASURE_LAYERS), f"measure units missing from MEASURE_LAYERS: {units}"
    wrong = []
    for mod, deps in graph().items():  # the registry's arrows too
        here = measure_unit(mod)
        if here is None:
            continue
        for dep in deps:
            there = measure_unit(dep)
            if there is not None and there != here and measure_layer(there) >= measure_layer(here):
                wrong.append(f"{mod} -> {dep}")
    assert not wrong, "measure/: imports from its own layer or above: " + ", ".join(sorted(wrong))


def test_measurement_imports_no_printer():
    """measure/ decides through results/decision/ (-r auto's open verdicts, the deploy line's choice, tune's check);
    what it prints is the cli's: no module under measure/ imports results/presentation/."""
    wrong = [f"{mod} -> {dep}" for mod, path in modules().items() if package_of(mod) == "measure"
             for dep in imports(path) if dep.startswith("gguf_bench.results.presentation")]
    assert not wrong, wrong


def test_no_import_cycles():
    graph_ = graph()  # the registry's arrows too
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph_.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for mod in sorted(graph_):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, "import cycles: " + "; ".join(cycles)


def test_one_module_imports_llama_cpp():
    importers = {mod for mod, path in modules().items()
                 if re.search(r"^\s*(import llama_cpp|from llama_cpp)", path.read_text(), re.M)}
    assert importers == {"gguf_bench.runtimes.llama_cpp"}


def greedy_tests(path: Path) -> list[str]:
    """Comparisons of a temperature with 0 by == or != (what tells greedy from sampled), as source text."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            sides = [node.left, *node.comparators]
            zero = any(isinstance(x, ast.Constant) and x.value == 0 and not isinstance(x.value, bool) for x in sides)
            if zero and any("temp" in ast.unparse(x) for x in sides):
                found.append(ast.unparse(node))
    return found


def test_temperature_is_tested_in_one_place():
    """Greedy vs sampled is decided once: SamplingConfig.greedy (decoding/sampling.py), used by sampler_for.
    No other module compares a temperature with 0, and the loop and the drafters never ask."""
    found = {mod: greedy_tests(path) for mod, path in modules().items()}
    assert found.pop("gguf_bench.decoding.sampling") == ["self.temperature == 0"]
    assert not any(found.values()), {m: f for m, f in found.items() if f}
    for mod in ("gguf_bench.decoding.loop", "gguf_bench.decoding.drafters"):
        assert ".greedy" not in modules()[mod].read_text(), mod


def string_keys(path: Path) -> list[str]:
    """Keys read by a string: x["key"] and x.get("key", ...)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            found.append(node.slice.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append(node.args[0].value)
    return found


def test_record_fields_are_read_by_name_only_in_the_records_module():
    """Records are typed (results/schema/records.py): no other module reads a record's fields out of a dict by string.
    report.py and plots.py read pandas columns, which run_fields.run_row names from the fields."""
    from dataclasses import fields

    from gguf_bench.results.schema import calibration, evaluation, records

    containers = {f.name for cls in (records.RunRecord, evaluation.EvalRecord, calibration.CalibrationRecord)
                  for f in fields(cls)}
    containers |= {"identity", "divergence", "in_loop", "prompts"}
    allowed = {"gguf_bench.results.schema.records", "gguf_bench.results.schema.legacy",
               "gguf_bench.results.schema.run_fields",  # the record's flat row: a round's stored requests ("error")
               "gguf_bench.results.presentation.report", "gguf_bench.results.presentation.plots",
               "gguf_bench.results.presentation.columns", "gguf_bench.results.presentation.captions",  # report's
               "gguf_bench.results.presentation.engines_table", "gguf_bench.results.presentation.terminal",  # printers
               "gguf_bench.results.presentation.text_formats", "gguf_bench.results.presentation.calibrations",
               "gguf_bench.results.presentation.summary",  # pandas columns of the records' rows
               "gguf_bench.models.registry",  # the registry reads models.yaml (its "models" section), not records
               "gguf_bench.runtimes.llama_server", "gguf_bench.runtimes.server_clients",  # llama-server's JSON ("timings")
               "gguf_bench.measure.engines.endpoint",  # an OpenAI-compatible server's JSON ("timings", "error")
               "gguf_bench.results.presentation.specbench", "gguf_bench.measure.deploy",  # pandas columns of report's summary
               "gguf_bench.results.presentation.crossover", "gguf_bench.results.decision.tune_verdict",
               "gguf_bench.results.decision.choice", "gguf_bench.results.decision.wording",  # the summary table's columns
               "gguf_bench.results.decision.table",
               "gguf_bench.results.predictions.ceiling",  # pandas columns of report's summary
               "gguf_bench.results.predictions.server_costs",  # a round's stored requests (streamed.StreamedRequest.stored)
               "gguf_bench.results.decision.verdicts", "gguf_bench.results.decision.units",  # pandas columns of the
               "gguf_bench.results.decision.estimates", "gguf_bench.results.decision.comparisons",  # records' rows
               "gguf_bench.results.presentation.answer",  # pandas columns of report's summary
               "gguf_bench.results.presentation.html.page", "gguf_bench.results.presentation.html.document",
               "gguf_bench.results.presentation.html.figures"}  # the --format json rows the page embeds
    found = {mod: sorted(set(string_keys(path)) & containers) for mod, path in modules().items() if mod not in allowed}
    assert not any(found.values()), {m: keys for m, keys in found.items() if keys}
