"""Each command's engine options, assembled from what the engines declare (measure/engines/declared.py, named in
engine_registry): `@engine_flags("sweep")` adds every declared flag the command takes to its signature (in `--help`
last, each help text led by its owners: `[llama-server]`), refuses in one line a flag given without an engine that
owns it (and, for an engine that `takes` only some of the command's parameters, the others given: its own line), and
hands the command the chosen engines' options as `engine_options` (what Grid stores). A new engine's
options reach every command that takes them without an edit here."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Annotated

import typer

from gguf_bench import engine_registry
from gguf_bench.errors import BenchError
from gguf_bench.measure.engines.declared import Flag


@dataclass
class Declared:
    """One flag as the engines declare it; `owners` are the engines that take it (one flag may belong to several)."""

    name: str
    type: object
    default: object
    flag: Flag
    owners: list[str] = field(default_factory=list)

    def owned_by(self) -> str:
        return " and ".join(engine_registry.kind(o).title for o in self.owners)


def declared(command: str) -> dict[str, Declared]:
    """Every engine option `command` takes, by its parameter name, in the registry's order."""
    out: dict[str, Declared] = {}
    for kind in engine_registry.KINDS:
        options = kind.options_class()
        for name, type_, default, flag in (options.declared() if options else []):
            if command not in flag.commands:
                continue
            if name not in out:
                out[name] = Declared(name, type_, default, flag)
            elif (out[name].flag.flags, out[name].default) != (flag.flags, default):
                raise TypeError(f"{kind.name} declares {name} unlike {out[name].owners[0]}")  # a declaration's bug
            out[name].owners.append(kind.name)
    return out


CONTEXT = "engine_flags_context"  # the click context the decorator asks typer for (which flags were given)


def engine_flags(command: str, always: frozenset[str] = frozenset()):
    """Decorate a command whose signature ends in `engine_options` (and has an `engine` parameter): see the module.
    always: the command's parameters about how it runs (--name, --resume, ...), that every engine takes."""
    def decorate(fn):
        table = declared(command)
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "engine_options"]
        added = [inspect.Parameter(d.name, inspect.Parameter.KEYWORD_ONLY, default=d.default, annotation=Annotated[
            d.type, typer.Option(*d.flag.flags, help=f"[{d.owned_by()}] {d.flag.help}",
                                 rich_help_panel=f"{d.owned_by()} options")])
            for d in sorted(table.values(), key=lambda d: len(d.owners))]  # each engine's own, then the shared

        # typer fills one Context parameter: the command's own where it has one, else one added for this
        theirs = next((p.name for p in own if p.annotation is typer.Context), None)
        context = [] if theirs else [inspect.Parameter(CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            ctx = kwargs[theirs] if theirs else kwargs.pop(CONTEXT)
            values = {name: kwargs.pop(name) for name in table}
            engines = engine_registry.chosen(kwargs.get("engine") or engine_registry.DEFAULT)
            _refuse_unowned(ctx, table, engines)
            _refuse_untaken(ctx, table, engines, always)
            return fn(*args, engine_options=_options(values, engines), **kwargs)

        wrapper.__signature__ = inspect.Signature(own + added + context)
        wrapper.__annotations__ = {p.name: p.annotation for p in own + added + context}
        return wrapper
    return decorate


def _refuse_unowned(ctx: typer.Context, table: dict[str, Declared], engines: tuple[str, ...]) -> None:
    """One line for a flag given on the command line (or from the environment) that no chosen engine owns."""
    for d in table.values():
        source = getattr(ctx.get_parameter_source(d.name), "name", None)
        if source in ("COMMANDLINE", "ENVIRONMENT") and not set(d.owners) & set(engines):
            chosen = " and ".join(engine_registry.of(e).what for e in engines)
            raise BenchError(f"{d.flag.flags[0]} is an option of {d.owned_by()}, and this command runs {chosen}: "
                             f"leave it out, or add --engine {' or '.join(d.owners)}")


def _refuse_untaken(ctx: typer.Context, table: dict[str, Declared], engines: tuple[str, ...],
                    always: frozenset[str]) -> None:
    """One line, the engine's own (EngineOptions.refusal), for the parameters given that a chosen engine does not take
    (EngineOptions.takes: the endpoint takes no -K or -ngl, which the servers' owner set), in the commands it has
    options for (another command refuses the engine itself, in its own words)."""
    for name in engines:
        options = engine_registry.kind(name).options_class()
        if options is not None and options.takes is not None and any(name in d.owners for d in table.values()):
            if flags := given(ctx, options.takes | options.names() | always | {"engine"}):
                raise BenchError(options.refusal(flags))


def given(ctx: typer.Context, leave: frozenset[str]) -> list[str]:
    """The options given on this command line (or from the environment) whose parameter names are not in `leave`, as
    the user wrote them (-K, --spec-type)."""
    return [min(p.opts, key=len) for p in ctx.command.params
            if p.name not in leave and p.opts and getattr(ctx.get_parameter_source(p.name), "name", None)
            in ("COMMANDLINE", "ENVIRONMENT")]


def _options(values: dict[str, object], engines: tuple[str, ...]) -> tuple:
    """The chosen engines' options, each from the values given for its own flags (its defaults for the rest)."""
    out = []
    for name in engines:
        options = engine_registry.kind(name).options_class()
        if options is not None:
            out.append(options(**{f: values[f] for f in options.names() if f in values}))
    return tuple(out)
