"""The Python loop's own options: which llama.cpp libraries it loads (--lib A,B: each build a setting of the sweep, run
in a process of its own, measure/engines/lib_process.py, since llama-cpp-python binds libllama when it is imported)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gguf_bench.engine_registry import PYTHON_ENGINE
from gguf_bench.errors import ConfigError
from gguf_bench.measure.engines.declared import EngineOptions, option

LIBRARY = "libllama.so"  # what llama-cpp-python loads from LLAMA_CPP_LIB_PATH (its _ctypes_extensions, on Linux)


@dataclass(frozen=True)
class PythonOptions(EngineOptions):
    engine: ClassVar[str] = PYTHON_ENGINE

    lib: str | None = option(None, "--lib", help="the llama.cpp build the loop loads: a folder holding libllama.so (a "
                             "`gguf-bench build-tree` build's bin/) or that file; a comma list A,B measures each build "
                             "as a setting of one sweep, in turn like two -ngl values, each in a Python process of its "
                             "own (default: llama-cpp-python's own, in this process)")

    def __post_init__(self) -> None:
        self.libraries()

    def libraries(self) -> list[Path]:
        """--lib's folders (LLAMA_CPP_LIB_PATH's value for each), as given but absolute; [] where none is given. One
        line for an entry with no libllama.so, or a library named twice."""
        if self.lib is None:
            return []
        folders = [library_folder(p.strip()) for p in str(self.lib).split(",") if p.strip()]
        real = [os.path.realpath(f / LIBRARY) for f in folders]
        if len(set(real)) < len(real):
            twice = next(f for f, r in zip(folders, real) if real.count(r) > 1)
            raise ConfigError(f"--lib names {twice / LIBRARY} twice: give each build once (a copy under another path "
                              "measures the same build twice, for an A/A comparison)")
        return folders

    def load_axes(self) -> dict[str, list]:
        """The grid's libs (plan.LOAD_AXES), one setting each, even for one: a library given runs in its own process."""
        return {"libs": self.libraries()} if self.libraries() else {}


def library_folder(given: str) -> Path:
    """The folder llama-cpp-python is pointed at (LLAMA_CPP_LIB_PATH) for one --lib entry: the folder given, or the one
    holding the libllama.so given; one line where there is none."""
    path = Path(os.path.abspath(os.path.expanduser(given)))
    folder = path.parent if path.name.startswith("libllama") and path.is_file() else path
    if not (folder / LIBRARY).is_file():
        raise ConfigError(f"--lib {given}: no {LIBRARY} there: give a folder holding {LIBRARY} (a `gguf-bench "
                          "build-tree` build's bin/, or llama-cpp-python's llama_cpp/lib) or the file itself")
    return folder
