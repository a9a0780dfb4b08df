"""What an engine takes from the command line beyond the experiment's axes: its options, declared as a frozen
dataclass (EngineOptions) whose fields carry their flags and help (`option`), as llm's models declare an `Options`
class. The CLI assembles each command's flags from these declarations (cli/engine_flags.py) and refuses, in one line,
a flag whose owners are not among the engines chosen (and, for an engine that `takes` only some of the command's
parameters, every other one given); a sweep stores the chosen engines' instances on its Grid
(Grid.options_of), and each engine reads its own."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import ClassVar


@dataclass(frozen=True)
class Flag:
    """How one option is given: its flags (the first is its name in messages), its help, the commands that take it."""

    flags: tuple[str, ...]
    help: str
    commands: tuple[str, ...] = ("sweep",)


def option(default, *flags: str, help: str, commands: tuple[str, ...] = ("sweep",)):
    """A field of an engine's options with its command-line flags."""
    return field(default=default, metadata={"flag": Flag(tuple(flags), help, commands)})


@dataclass(frozen=True)
class EngineOptions:
    """The base of every engine's options: `engine` is the engine's name (engine_registry)."""

    engine: ClassVar[str] = ""
    # the command's other parameters (by name) this engine can be given: None, every one; an engine that measures what
    # someone else set up takes only these, and `refusal` says in one line why the rest are left out (cli/engine_flags)
    takes: ClassVar[frozenset[str] | None] = None

    @classmethod
    def refusal(cls, flags: list[str]) -> str:
        """The one line for `flags` given though this engine does not take them."""
        return f"{', '.join(flags)}: not an option of --engine {cls.engine}: leave {them(flags)} out"

    @classmethod
    def declared(cls) -> list[tuple[str, type, object, Flag]]:
        """(field name, its type, its default, its Flag) for every field that has flags."""
        hints = typing.get_type_hints(cls)
        return [(f.name, hints[f.name], f.default, f.metadata["flag"]) for f in fields(cls) if "flag" in f.metadata]

    def load_axes(self) -> dict[str, list]:
        """The grid's load axes (plan.LOAD_AXES: a Grid list by its name) that these options make, several values each
        (the server's --server-bin A,B: one setting per binary); {} where they make none."""
        return {}

    @classmethod
    def names(cls) -> frozenset[str]:
        """The fields that have flags (the command's parameter names)."""
        return frozenset(name for name, *_ in cls.declared())


def them(flags: list[str]) -> str:
    """How a refusal names what to leave out: 'them' for several flags, else 'it'."""
    return "them" if len(flags) > 1 else "it"
