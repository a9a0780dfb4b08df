"""Each command's options for the declared axes (gguf_bench/axes.py), made from the declarations: `@axis_flags()` puts
one option per axis in the command's signature where its `axes` parameter stands (Typer reads `inspect.signature`), and
hands the command the values as the Grid's lists, parsed, in `axes`. A new axis reaches `run` and `sweep` without an
edit here."""

from __future__ import annotations

import functools
import inspect
from typing import Annotated

import typer

from gguf_bench import axes as declared

PARAMETER = "axes"  # the command's parameter that the axes' options replace, and that receives their lists


def axis_flags(single: bool = False):
    """Decorate a command with an `axes: dict` parameter; single: `run`, one value each (the parameter named as the
    axis's record field, Axis.name), else a list each (named as the Grid's list, Axis.grid)."""
    def decorate(fn):
        names = {a.name if single else a.grid: a for a in declared.AXES}
        own = list(inspect.signature(fn, eval_str=True).parameters.values())
        at = [p.name for p in own].index(PARAMETER)
        kind = own[at].kind  # where the command had `axes` (Signature keeps kinds in order)
        added = [inspect.Parameter(name, kind, default=None, annotation=Annotated[
            str | None, typer.Option(*a.flags, help=a.help)]) for name, a in names.items()]
        params = own[:at] + added + own[at + 1:]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            given = {a.name: kwargs.pop(name) for name, a in names.items()}
            return fn(*args, **kwargs, **{PARAMETER: declared.grid_lists(given, single)})

        wrapper.__signature__ = inspect.Signature(params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper
    return decorate
