"""The README's and docs/'s examples parse (issues 23, 29): every `gguf-bench ...` command in their code blocks and
inline code names a command that exists, with options that command has and values they accept, so the docs cannot
drift from the CLI again (`run --prompt-ids` was documented before `run` had it). The examples each command's --help
ends with (gguf_bench/cli/examples.py) are parsed the same way. Parsing only: nothing runs, nothing is loaded."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from pathlib import Path

import pytest
import typer
import yaml

from gguf_bench import options
from gguf_bench.cli import examples
from gguf_bench.cli.app import app
from gguf_bench.errors import BenchError
from gguf_bench.measure.inputs import prompts

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
_COMMAND = re.compile(r"(?:^|(?<=[\s/`$]))gguf-bench(?=\s)(?P<rest>[^`]*)")
_SHELL_OPS = {"&&", "||", "|", ";", ">", ">>", "<", "&"}


def commands_in_text(span: str) -> list[list[str]]:
    """The arguments after `gguf-bench` of each command in one line of shell; comments, redirections and what follows
    a pipe or && are cut off."""
    found = []
    for m in _COMMAND.finditer(span):
        lexer = shlex.shlex(m["rest"], posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        args = []
        for token in lexer:
            if token in _SHELL_OPS:
                break
            args.append(token)
        found.append(args)
    return found


def page_commands(page: Path = README) -> list[tuple[int, list[str]]]:
    """(line, arguments after `gguf-bench`) of every command in a markdown page: code blocks (continuation lines
    joined) and inline code."""
    found, in_code, held = [], False, ""
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
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
        found += [(n, args) for span in spans for args in commands_in_text(span)]
    return found


def readme_commands() -> list[tuple[int, list[str]]]:
    return page_commands(README)


def cases() -> list[tuple[str, list[str]]]:
    """(where, arguments) of every command of the README and the docs/ pages; where is FILE:LINE, and #2, #3 ... for
    a second and third command on one line."""
    found, seen = [], Counter()
    for page in PAGES:
        for n, args in page_commands(page):
            where = f"{page.relative_to(REPO)}:{n}"
            seen[where] += 1
            found.append((where + (f"#{seen[where]}" if seen[where] > 1 else ""), args))
    return found


COMMANDS = cases()
ROOT = typer.main.get_command(app)
# click's UsageError, from whichever click typer runs on (typer 0.29 vendors its own)
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def test_the_docs_have_examples_of_every_command():
    named = {args[0] for _, args in COMMANDS if args and not args[0].startswith("-")}
    assert len(COMMANDS) > 40 and named >= set(ROOT.commands), sorted(set(ROOT.commands) - named)
    assert len(readme_commands()) >= 8  # the front page keeps one example per common task


def test_every_docs_page_is_in_the_site_nav():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    listed = sorted(page for entry in nav for page in entry.values())
    assert listed == sorted(p.name for p in PAGES[1:])


# what the command bodies parse from text, checked on the docs' values (placeholders such as ... are skipped)
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


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading (lower case, punctuation dropped, spaces as hyphens)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_links_resolve():
    """mkdocs build --strict checks the links between docs/ pages; the README's links to them are checked here."""
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        assert (REPO / path).exists(), f"README.md links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (REPO / path).read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {github_anchor(h) for h in headings}, f"README.md: no heading of {path} has #{anchor}"


@pytest.mark.parametrize("where,args", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_docs_command_parses(where, args):
    why = problem(args)
    assert why is None, f"{where}: gguf-bench {' '.join(args)}: {why}"


# the examples each command's --help ends with
HELP_EXAMPLES = [(f"{name}:{i}", line) for name, lines in examples.EXAMPLES.items() for i, line in enumerate(lines, 1)]


def test_every_command_has_two_or_three_examples():
    assert set(examples.EXAMPLES) == set(ROOT.commands)
    for name, lines in examples.EXAMPLES.items():
        assert 2 <= len(lines) <= 3, name
        assert commands_in_text(lines[0])[0][0] == name, f"{name}: the first example runs another command"


@pytest.mark.parametrize("where,line", HELP_EXAMPLES, ids=[where for where, _ in HELP_EXAMPLES])
def test_help_example_parses(where, line):
    (args,) = commands_in_text(line)
    why = problem(args)
    assert why is None, f"--help example {where}: {line}: {why}"


@pytest.mark.parametrize("name", sorted(ROOT.commands))
def test_help_ends_with_its_examples_one_a_line_in_80_columns(name):
    command = ROOT.commands[name]
    ctx = command.make_context(name, [], resilient_parsing=True)
    ctx.terminal_width = 80
    text = command.get_help(ctx)
    tail = text[text.rindex("Examples:"):].splitlines()[1:]
    assert [line.strip() for line in tail if line.strip()] == examples.EXAMPLES[name], text
    assert max(len(line) for line in tail) <= 80, text
