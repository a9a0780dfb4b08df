"""The README's examples parse (issue 23): every `gguf-bench ...` command in its code blocks and inline code names a
command that exists, with options that command has and values they accept, so the README cannot drift from the CLI
again (`run --prompt-ids` was documented before `run` had it). Parsing only: nothing runs, nothing is loaded."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from gguf_bench import options
from gguf_bench.cli.app import app
from gguf_bench.errors import BenchError
from gguf_bench.measure import prompts

README = Path(__file__).resolve().parent.parent / "README.md"
_COMMAND = re.compile(r"(?:^|(?<=[\s/`$]))gguf-bench(?=\s)(?P<rest>[^`]*)")
_SHELL_OPS = {"&&", "||", "|", ";", ">", ">>", "<", "&"}


def readme_commands() -> list[tuple[int, list[str]]]:
    """(line, arguments after `gguf-bench`) of every command in the README: code blocks (continuation lines joined)
    and inline code; comments, redirections and what follows a pipe or && are cut off."""
    found, in_code, held = [], False, ""
    for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code, held = not in_code, ""
            continue
        if in_code and (held or "gguf-bench" in line):
            held += line.removesuffix("\\") + " "
            if line.endswith("\\"):
                continue
            spans, held = [held], ""
        else:
            spans = re.findall(r"`([^`]+)`", line) if not in_code else []
        for span in spans:
            for m in _COMMAND.finditer(span):
                lexer = shlex.shlex(m["rest"], posix=True, punctuation_chars=True)
                lexer.whitespace_split, lexer.commenters = True, "#"
                args = []
                for token in lexer:
                    if token in _SHELL_OPS:
                        break
                    args.append(token)
                found.append((n, args))
    return found


COMMANDS = readme_commands()
ROOT = typer.main.get_command(app)
# click's UsageError, from whichever click typer runs on (typer 0.29 vendors its own)
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def test_the_readme_has_examples_of_every_command():
    named = {args[0] for _, args in COMMANDS if args and not args[0].startswith("-")}
    assert len(COMMANDS) > 40 and named >= set(ROOT.commands) - {"build-server"}, sorted(set(ROOT.commands) - named)


# what the command bodies parse from text, checked on the README's values (placeholders such as ... are skipped)
VALUES = {"ks": options.draft_lengths, "ngls": options.layer_list, "nglds": options.layer_list, "ngl": options.layers,
          "ngld": options.layers, "temps": options.temperatures, "k": options.one_draft_length,
          "prompt_ids": lambda v: prompts.builtin(v.split(","))}


def problem(args: list[str]) -> str | None:
    """Why `gguf-bench ARGS` would not get past parsing, or None."""
    args = list(args)
    root_opts = {opt for p in ROOT.params for opt in p.opts}
    while args and args[0].startswith("-"):  # options of gguf-bench itself (--version)
        if args.pop(0) not in root_opts:
            return "no such option of gguf-bench itself"
    if not args:
        return None
    name, rest = args[0], args[1:]
    if name not in ROOT.commands:
        return f"no command '{name}'"
    try:
        ctx = ROOT.commands[name].make_context(name, rest)
    except UsageError as exc:
        # prose names a command without its arguments (`gguf-bench info`): fine
        return None if type(exc).__name__ == "MissingParameter" else exc.format_message()
    for key, parse in VALUES.items():
        value = ctx.params.get(key)
        if isinstance(value, str) and "..." not in value:
            try:
                parse(value)
            except BenchError as exc:
                return str(exc)
    return None


def test_the_check_catches_what_drifted():
    assert "No such option: --prompt-idz" in problem(["run", "--prompt-idz", "code-short"])
    assert "no command 'swep'" in problem(["swep"])
    assert "unknown built-in prompt 'code-edit-hint'" in problem(["sweep", "--prompt-ids", "code-edit-hint"])
    assert "-K" in problem(["sweep", "-K", "0"]) and problem(["sweep", "-K", "1-8"]) is None


@pytest.mark.parametrize("line,args", COMMANDS, ids=[f"line{n}" for n, _ in COMMANDS])
def test_readme_command_parses(line, args):
    why = problem(args)
    assert why is None, f"README.md line {line}: gguf-bench {' '.join(args)}: {why}"
