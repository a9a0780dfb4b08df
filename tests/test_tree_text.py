"""The checkout's text as a reader meets it: no file git tracks holds an unresolved merge conflict, and docs/layout.md
names every module of the package (issue 57, 5: it had both wrong)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT

# git's conflict lines: "<<<<<<< HEAD", "||||||| base" (diff3), "=======", ">>>>>>> branch". A line of seven "=" alone
# is also a markdown or rst underline, so it counts only in a file that holds one of the other three.
OPENING = re.compile(r"^(<{7}|\|{7}|>{7}) ", re.M)
MIDDLE = re.compile(r"^={7}$", re.M)


def conflict_lines(text: str) -> list[int]:
    """The line numbers (from 1) of the conflict markers in `text`; none where it holds no <<<, ||| or >>> line."""
    if not OPENING.search(text):
        return []
    spans = sorted(m.start() for pattern in (OPENING, MIDDLE) for m in pattern.finditer(text))
    return [text.count("\n", 0, at) + 1 for at in spans]


def tracked() -> list[str]:
    """The paths git tracks in this checkout (a skip, saying why, where this is no checkout)."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to read")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    return [n for n in names.decode().split("\0") if n and (REPO_ROOT / n).is_file()]


def tracked_text() -> dict[str, str]:
    """Every file git tracks, as text; binary files (a NUL byte in the first 8000, as git decides) left out."""
    out = {}
    for name in tracked():
        data = (REPO_ROOT / name).read_bytes()
        if b"\0" not in data[:8000]:
            out[name] = data.decode("utf-8", errors="replace")
    return out


def test_conflict_lines_finds_a_conflict_and_leaves_underlines_alone():
    conflict = "a\n" + "<" * 7 + " HEAD\nours\n" + "=" * 7 + "\ntheirs\n" + ">" * 7 + " rpc\nb\n"
    assert conflict_lines(conflict) == [2, 4, 6]
    assert conflict_lines("Title\n" + "=" * 7 + "\n\ntext\n") == []  # a setext heading
    assert conflict_lines("x\n" + ">" * 7 + " rpc\n") == [2]  # half a conflict, resolved by hand


def test_no_tracked_file_holds_a_conflict_marker():
    found = {name: lines for name, text in tracked_text().items() if (lines := conflict_lines(text))}
    assert not found, f"unresolved merge conflicts (file: lines): {found}"


def layout_sections(text: str) -> dict[str, str]:
    """The package listing of docs/layout.md by package: "models" -> its lines, "results/schema" -> a subpackage's;
    "" -> the top-level modules' lines."""
    block = text.split("```")[1]
    sections: dict[str | None, str] = {}
    current = None
    for line in block.splitlines():
        if m := re.match(r"gguf_bench/((?:\w+/)*)", line):
            current = m[1].rstrip("/")
        elif line and not line[0].isspace():  # scripts/, tests/, ...
            current = None
        sections[current] = sections.get(current, "") + line + "\n"
    return sections


def test_layout_page_names_every_module_under_its_package():
    """Every tracked module of gguf_bench, by its name, in its package's lines of the listing (a module being written
    counts once it is added)."""
    sections = layout_sections((REPO_ROOT / "docs" / "layout.md").read_text())
    missing = []
    for name in tracked():
        parts = name.split("/")
        if parts[0] != "gguf_bench" or not name.endswith(".py") or parts[-1] == "__init__.py":
            continue
        folders = parts[1:-1]  # a module under its own folder's lines, else its nearest listed parent's (trackers/)
        where = next(("/".join(folders[:n]) for n in range(len(folders), -1, -1) if "/".join(folders[:n]) in sections), "")
        if not re.search(rf"\b{re.escape(parts[-1].removesuffix('.py'))}\b", sections.get(where, "")):
            missing.append(name)
    assert not missing, f"docs/layout.md's listing does not name these modules under their package: {missing}"
