"""A setting of the Python loop on a build of its own (--lib A,B): its session runs in a child Python process whose
llama-cpp-python binds that build's libllama.

llama-cpp-python loads libllama once, when `llama_cpp` is first imported, from LLAMA_CPP_LIB_PATH (its
llama_cpp.py: `load_shared_library("llama", LLAMA_CPP_LIB_PATH)`; the libggml*.so it needs are found beside it, through
its RUNPATH), so one process runs one build. Each load of a --lib setting is one child: the parent sends it the setting
and the prepared prompts, then one cell at a time, and gets each cell's record back (with the greedy texts the child
made, so a later load of the setting compares with them); the child's records name the library it loaded (the `build`
part, runtimes/llama_cpp.library_build). The sweep sees an ordinary session: the cells' order, the order stamps and the
turns between settings are the parent's, as for a setting loaded in-process.

The child is `python -m` the engine's module (engines/python.py), whose main hands `serve` its in-process session
class (so this module imports no engine). Protocol: pickles over the child's stdin and over a copy of its stdout (its
fd 1 then points at stderr, so whatever llama.cpp prints cannot corrupt the stream).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from gguf_bench.errors import BenchError
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.plan import Cell, Setting, shuffled
from gguf_bench.results.schema.records import RunRecord

if TYPE_CHECKING:
    from gguf_bench.measure.engines.protocol import Session

READY, RECORD, RAISED = "ready", "record", "raised"


class LibrarySession:
    """A Python-loop session in a child process bound to `setting.load.lib`; a child that dies fails the cells left."""

    design = "shuffled"  # as the in-process session (python.PythonSession)

    def __init__(self, setting: Setting, prompts: PreparedPrompts, child: str):
        """child: the module the child runs (`python -m`), whose main calls `serve` with the in-process session."""
        self.setting, self.prompts = setting, prompts
        self.failure: str | None = None
        env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(setting.load.lib)}
        # a session of its own: a Ctrl-C reaches the parent only, which closes the child (close) between cells
        self.child = subprocess.Popen([sys.executable, "-m", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env=env, start_new_session=True)
        try:
            self._send((setting, prompts))
            self._receive()
        except _ChildDied as died:
            self.failure = f"model load failed: {died}"
        except BaseException:
            self.close()
            raise

    def order(self, cells: list[Cell]) -> list[Cell]:
        """Block by block, each block's cells in a seeded random order (plan.shuffled), as in-process."""
        return shuffled(cells, self.setting.grid.seed)

    def measure(self, cell: Cell) -> RunRecord:
        if self.failure:
            return self.setting.record(cell, error=self.failure)
        try:
            self._send(cell)
            record, greedy = self._receive()
        except _ChildDied as died:
            self.failure = str(died)
            return self.setting.record(cell, error=self.failure)
        self.prompts.greedy.update(greedy)
        return record

    def close(self) -> None:
        if self.child.poll() is None:
            try:
                self._send(None)
                self.child.wait(timeout=60)
            except (_ChildDied, subprocess.TimeoutExpired):
                self.child.kill()
                self.child.wait()
        for stream in (self.child.stdin, self.child.stdout):
            stream.close()

    def _send(self, message) -> None:
        try:
            pickle.dump(message, self.child.stdin)
            self.child.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._died() from exc

    def _receive(self):
        try:
            kind, value = pickle.load(self.child.stdout)
        except (EOFError, pickle.UnpicklingError, OSError) as exc:
            raise self._died() from exc
        if kind == RAISED:  # what opening the setting raised in the child (a prompt too long for the context, ...)
            raise value
        return value

    def _died(self) -> _ChildDied:
        code = self.child.wait()
        return _ChildDied(f"the Python loop's process for --lib {self.setting.load.lib} exited (code {code})")


class _ChildDied(Exception):
    pass


def serve(session_class: Callable[[Setting, PreparedPrompts], Session]) -> None:
    """The child's main: its stdout kept for the replies (fd 1 then points at stderr, so that whatever llama.cpp prints
    goes there), the requests read from stdin."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve(session_class, sys.stdin.buffer, replies)


def _serve(session_class, requests: BinaryIO, replies: BinaryIO) -> None:
    """Open the setting in this process (bound to LLAMA_CPP_LIB_PATH's build), then measure each cell sent until None
    comes."""
    def reply(kind: str, value) -> None:
        pickle.dump((kind, value), replies)
        replies.flush()

    setting, prompts = pickle.load(requests)
    try:
        session = session_class(setting, prompts)
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it as the in-process session would
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that does not pickle goes as its text
            exc = BenchError(str(exc))
        reply(RAISED, exc)
        return
    try:
        reply(READY, None)
        while (cell := pickle.load(requests)) is not None:
            record = session.measure(cell)
            reply(RECORD, (record, prompts.greedy))
    except (EOFError, BrokenPipeError):  # the parent went away without a word: nothing left to answer
        pass
    finally:
        session.close()

