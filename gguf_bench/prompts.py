"""Built-in prompts (short and long, chat and code), and JSONL prompt files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import ConfigError


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    chat: bool = False  # wrap in the model's chat template


BUILTIN = (
    Prompt("code-short", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    Prompt("chat-short", "Explain in two sentences what a hash table is.", chat=True),
    Prompt("code-long", (
        "# A small command-line tool that reads a CSV file of transactions (date, account, amount),\n"
        "# groups them by account and month, and prints a table of totals, averages and counts.\n"
        "import argparse\nimport csv\nfrom collections import defaultdict\nfrom datetime import datetime\n\n\n"
        "def parse_args():\n    parser = argparse.ArgumentParser(description=__doc__)\n"
        "    parser.add_argument(\"path\", help=\"CSV file to read\")\n"
        "    parser.add_argument(\"--month\", help=\"only this month, as YYYY-MM\")\n    return parser.parse_args()\n\n\n"
        "def read_transactions(path):\n")),
    Prompt("chat-long", (
        "I am planning a three-day trip to Lisbon in early spring with two children aged 7 and 10. "
        "We like museums, parks and good food, but we do not want to spend more than two hours a day "
        "on public transport. Please suggest a day-by-day plan with one main activity in the morning, "
        "one in the afternoon, and a family-friendly place for dinner, and explain briefly why each "
        "choice suits children."), chat=True),
)
DEFAULT_PROMPT = BUILTIN[0]


def builtin(ids: list[str] | None = None) -> list[Prompt]:
    if not ids:
        return list(BUILTIN)
    by_id = {p.id: p for p in BUILTIN}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise ConfigError(f"unknown built-in prompt '{unknown[0]}'; choose from {', '.join(by_id)}")
    return [by_id[i] for i in ids]


def load_jsonl(path: Path) -> list[Prompt]:
    """One JSON object a line: {"id": ..., "prompt": ..., "chat": false}; id defaults to the line number."""
    if not path.is_file():
        raise ConfigError(f"prompts file {path} not found")
    prompts = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            text = obj["prompt"]
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{path} line {n}: expected a JSON object with a \"prompt\" string") from None
        if not isinstance(text, str) or not text:
            raise ConfigError(f"{path} line {n}: \"prompt\" must be a non-empty string")
        prompts.append(Prompt(str(obj.get("id", f"line{n}")), text, bool(obj.get("chat", False))))
    if not prompts:
        raise ConfigError(f"{path} holds no prompts")
    return prompts
