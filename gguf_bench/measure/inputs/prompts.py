"""Built-in prompts, by category, and JSONL prompt files.

Categories follow Spec-Bench's (multi-turn chat, translation, summarization, question answering,
maths, retrieval-augmented answering) plus code: completion ("code") and editing ("code-edit", where
the answer repeats most of its input). Which drafting strategy wins depends on the category: an
n-gram draft copies from the prompt, so it shines where the answer repeats it (code editing,
summarization, retrieval) and has little to copy in open chat. Every text here was written for
this project.

`--prompt-ids` takes ids or category names (a category stands for all its prompts), or `all`.
Without it: the four original prompts (BUILTIN), so older sweeps and `tune` keep their cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import ConfigError


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    chat: bool = False  # wrap in the model's chat template
    category: str = ""
    length: int | None = None  # --prompt-tokens: made this many tokens long by real text before the task (prepared.py)


def at_lengths(prompts: list[Prompt], lengths: list[int] | None) -> list[Prompt]:
    """Each prompt at each of `lengths` tokens (`--prompt-tokens`), its id naming the length ('code-short@2048');
    the prompts as they are without lengths."""
    if not lengths:
        return prompts
    if bad := [n for n in lengths if n < 1]:
        raise ConfigError(f"--prompt-tokens takes token counts of 1 or more, got {bad[0]}")
    return [Prompt(f"{p.id}@{n}", p.text, p.chat, p.category, n) for n in sorted(set(lengths)) for p in prompts]


BUILTIN = (
    Prompt("code-short", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", category="code"),
    Prompt("chat-short", "Explain in two sentences what a hash table is.", chat=True, category="chat"),
    Prompt("code-long", (
        "# A small command-line tool that reads a CSV file of transactions (date, account, amount),\n"
        "# groups them by account and month, and prints a table of totals, averages and counts.\n"
        "import argparse\nimport csv\nfrom collections import defaultdict\nfrom datetime import datetime\n\n\n"
        "def parse_args():\n    parser = argparse.ArgumentParser(description=__doc__)\n"
        "    parser.add_argument(\"path\", help=\"CSV file to read\")\n"
        "    parser.add_argument(\"--month\", help=\"only this month, as YYYY-MM\")\n    return parser.parse_args()\n\n\n"
        "def read_transactions(path):\n"), category="code"),
    Prompt("chat-long", (
        "I am planning a three-day trip to Lisbon in early spring with two children aged 7 and 10. "
        "We like museums, parks and good food, but we do not want to spend more than two hours a day "
        "on public transport. Please suggest a day-by-day plan with one main activity in the morning, "
        "one in the afternoon, and a family-friendly place for dinner, and explain briefly why each "
        "choice suits children."), chat=True, category="chat"),
)
DEFAULT_PROMPT = BUILTIN[0]

_MODULE_TO_EDIT = '''\
"""Keep track of a small library's loans: who borrowed which book, and when it is due."""

import datetime
from collections import defaultdict

LOAN_DAYS = 21
FINE_PER_DAY = 0.25


class Loan:
    def __init__(self, book_id, member_id, start):
        self.book_id = book_id
        self.member_id = member_id
        self.start = start
        self.returned = None

    def due(self):
        return self.start + datetime.timedelta(days=LOAN_DAYS)

    def days_late(self, today):
        end = self.returned or today
        return max(0, (end - self.due()).days)

    def fine(self, today):
        return round(self.days_late(today) * FINE_PER_DAY, 2)


class Ledger:
    def __init__(self):
        self.loans = []
        self.by_member = defaultdict(list)

    def lend(self, book_id, member_id, start):
        if self.on_loan(book_id):
            raise ValueError(f"book {book_id} is already on loan")
        loan = Loan(book_id, member_id, start)
        self.loans.append(loan)
        self.by_member[member_id].append(loan)
        return loan

    def on_loan(self, book_id):
        return any(loan.book_id == book_id and loan.returned is None for loan in self.loans)

    def give_back(self, book_id, day):
        for loan in self.loans:
            if loan.book_id == book_id and loan.returned is None:
                loan.returned = day
                return loan
        raise KeyError(f"book {book_id} is not on loan")

    def overdue(self, today):
        return [loan for loan in self.loans if loan.returned is None and loan.days_late(today) > 0]

    def fines_for(self, member_id, today):
        return sum(loan.fine(today) for loan in self.by_member[member_id])
'''

_ARTICLE = (
    "The town council of Elmbridge voted on Tuesday to turn the old tram depot on River Street into a covered "
    "market. The depot, built in 1911, has stood empty since the last trams ran in 1968; since then it has served "
    "as a bus garage, a furniture warehouse and, for the past nine years, as nothing at all. The plan approved on "
    "Tuesday keeps the brick walls and the iron roof, adds a glass front facing the river, and divides the floor "
    "into forty-two stalls for food, crafts and repairs. The council will spend 3.8 million pounds on the building "
    "work, and a local cooperative of traders will run the market under a twenty-year lease. Supporters said the "
    "market would bring people back to River Street, where a third of the shops have closed in the last decade. "
    "Opponents worried about parking: the depot has space for only sixty cars, and residents of the nearby Weir "
    "Lane estate already complain about visitors parking in their streets. The council answered that the market "
    "would sit two hundred metres from the railway station and that a new cycle path along the river would open "
    "in the same year. Work is due to start in March and the market should open the following spring. The first "
    "stall holders will be chosen in an open call in the autumn, with a third of the stalls kept for traders who "
    "have never had a shop before."
)

_MANUAL = (
    "[1] The Aquila 300 coffee machine must be descaled every 200 cups or every two months, whichever comes first. "
    "When descaling is due, the orange drop symbol on the display blinks.\n"
    "[2] To descale, empty the drip tray, fill the water tank to the MAX line with fresh water and add one sachet "
    "of Aquila descaler. Place a container of at least 1.5 litres under the steam wand and the coffee spout.\n"
    "[3] Hold the steam button and the one-cup button together for five seconds until the orange drop symbol "
    "lights up steadily. The machine then runs the descaling program, which takes about 25 minutes and pauses "
    "twice; press the one-cup button to continue after each pause.\n"
    "[4] When the program ends, rinse the water tank, fill it with fresh water and run the rinse cycle by pressing "
    "the one-cup button once. Never use vinegar: it damages the seals of the boiler.\n"
    "[5] The warranty covers the machine for two years, but not damage caused by limescale when the machine was "
    "not descaled as described above."
)

CATEGORY_PROMPTS = (
    Prompt("chat-multiturn", (
        "Here is our conversation so far.\n"
        "User: I want to start running. I am 45 and have not done any sport for years. Where do I begin?\n"
        "Assistant: Start with walking and running in turns: for example one minute of easy running, then two "
        "minutes of walking, repeated eight times, three days a week. Rest a day between sessions.\n"
        "User: How do I know when to make it harder?\n"
        "Assistant: When a session feels easy two times in a row, add thirty seconds to each running interval, or "
        "cut the walking by thirty seconds. Change only one thing at a time.\n"
        "User: My knees hurt a little after the third session. Should I stop?\n"
        "Continue the conversation: answer my last question as the assistant."), chat=True, category="chat"),
    Prompt("translate-en-fr", (
        "Translate the following text into French. Give only the translation.\n\n"
        "The bakery on the corner opens at seven in the morning, but the queue starts long before that. On "
        "Saturdays the baker makes a rye bread with walnuts that is sold out within an hour. Last winter, when the "
        "oven broke down, the whole street brought him coffee and kept him company while he waited for the "
        "repairman."), chat=True, category="translation"),
    Prompt("summarize-news", "Summarize the following news article in five sentences, keeping the key figures.\n\n"
           + _ARTICLE, chat=True, category="summarization"),
    Prompt("qa-science", ("Why does ice float on water, while most solids sink in their own liquid? Answer in one "
                          "paragraph, as you would to a curious fifteen-year-old."), chat=True, category="qa"),
    Prompt("math-word", (
        "A train leaves Ashford at 9:40 and travels at 84 km/h. A second train leaves Brampton, 231 km away, at "
        "10:10 and travels towards Ashford at 96 km/h on a parallel track. At what time do they pass each other, "
        "and how far from Ashford? Reason step by step and give the final answer on the last line."),
        chat=True, category="math"),
    Prompt("rag-manual", ("Answer the question using only the numbered passages below, and cite the passages you "
                          "use like [2].\n\n" + _MANUAL + "\n\nQuestion: My Aquila 300 shows a blinking orange drop. "
                          "What exactly do I have to do, step by step, and what must I avoid?"),
           chat=True, category="rag"),
    Prompt("code-edit-hints", ("Add type hints to every function and method of this Python module and a one-line "
                               "docstring to each method that has none. Change nothing else, and return the whole "
                               "module in one code block.\n\n```python\n" + _MODULE_TO_EDIT + "```"),
           chat=True, category="code-edit"),
)
ALL_PROMPTS = BUILTIN + CATEGORY_PROMPTS
CATEGORIES = tuple(dict.fromkeys(p.category for p in ALL_PROMPTS))


def builtin(ids: list[str] | None = None) -> list[Prompt]:
    """Built-in prompts by id or category (`all`: every one); the four of BUILTIN when ids is empty."""
    if not ids:
        return list(BUILTIN)
    chosen: dict[str, Prompt] = {}
    for name in ids:
        matches = [p for p in ALL_PROMPTS if name in (p.id, p.category, "all")]
        if not matches:
            raise ConfigError(f"unknown built-in prompt '{name}'; choose ids ({', '.join(p.id for p in ALL_PROMPTS)}), "
                              f"categories ({', '.join(CATEGORIES)}) or all")
        chosen.update((p.id, p) for p in matches)
    return list(chosen.values())


# Spec-Bench's question.jsonl files MT-Bench's 80 rows under MT-Bench's eight categories; its tables report them as one
# task, mt_bench.
MT_BENCH_CATEGORIES = frozenset({"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})


def first_turn(row: dict) -> str | None:
    """The text a row sends: its `prompt`, or the first of its `turns` (Spec-Bench's and MT-Bench's rows are
    conversations; the first turn is sent, as vLLM's and aiperf's loaders do). None when it has neither."""
    turns = row.get("turns") or row.get("prompt")
    text = turns[0] if isinstance(turns, list) and turns else turns
    return text if isinstance(text, str) and text.strip() else None


def turn_rows(text: str, where: str) -> Iterator[tuple[int, dict, str]]:
    """Each non-empty line of a JSONL text: (its line number, the row, the text it sends: first_turn); one line naming
    `where` and the line where a row is no JSON object or sends no text. The one JSONL reader of prompts."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            sent = first_turn(row)
        except (ValueError, AttributeError):
            sent = None
        if sent is None:
            raise ConfigError(f"{where} line {n}: expected a JSON object with a non-empty \"prompt\" string or "
                              "\"turns\" list")
        yield n, row, sent


def load_jsonl(path: Path) -> list[Prompt]:
    """One JSON object a line: {"id": ..., "prompt": ..., "chat": false, "category": ...} (id defaults to the line
    number), or Spec-Bench's own rows, {"question_id", "category", "turns"}: the first turn, through the chat template,
    id `<category>-<question_id>`, MT-Bench's eight categories as one, mt_bench, as Spec-Bench's tables have it."""
    if not path.is_file():
        raise ConfigError(f"prompts file {path} not found")
    prompts = [_row_prompt(row, text, n) for n, row, text in turn_rows(path.read_text(encoding="utf-8"), str(path))]
    if not prompts:
        raise ConfigError(f"{path} holds no prompts")
    return prompts


def _row_prompt(obj: dict, text: str, n: int) -> Prompt:
    category = str(obj.get("category", ""))
    if "prompt" in obj:
        return Prompt(str(obj.get("id", f"line{n}")), text, bool(obj.get("chat", False)), category)
    category = "mt_bench" if category in MT_BENCH_CATEGORIES else category
    return Prompt(str(obj.get("id", f"{category or 'line'}-{obj.get('question_id', n)}")), text,
                  bool(obj.get("chat", True)), category)


def from_options(text: str | None, path: Path | None, chat: bool, ids: str | None = None) -> Prompt:
    """`--prompt TEXT`, `--prompt-file PATH` or `--prompt-ids ID` (one built-in prompt; or the default prompt), wrapped
    in the chat template if `chat` (a built-in chat prompt always is)."""
    if sum(x is not None for x in (text, path, ids)) > 1:
        raise ConfigError("give one of --prompt, --prompt-file and --prompt-ids")
    if ids is not None:
        chosen = builtin(ids.split(","))
        if len(chosen) != 1:
            raise ConfigError(f"run measures one prompt, and --prompt-ids {ids} names {len(chosen)} "
                              f"({', '.join(p.id for p in chosen[:4])}{', ...' if len(chosen) > 4 else ''}); "
                              "name one id, or use `gguf-bench sweep --prompt-ids` for several")
        return Prompt(chosen[0].id, chosen[0].text, chosen[0].chat or chat, chosen[0].category)
    if path:
        if not path.is_file():
            raise ConfigError(f"prompt file {path} not found")
        text = path.read_text(encoding="utf-8")
    if text is not None and not text.strip():
        raise ConfigError("the prompt is empty")
    return Prompt("custom", text, chat) if text else Prompt(DEFAULT_PROMPT.id, DEFAULT_PROMPT.text, chat)


def choose(ids: str | None, path: Path | None) -> list[Prompt]:
    """`--prompt-ids a,b` (built-in) or `--prompts FILE.jsonl`; every built-in prompt when neither."""
    if ids and path:
        raise ConfigError("give --prompts FILE or --prompt-ids, not both")
    return load_jsonl(path) if path else builtin(ids.split(",") if ids else None)
