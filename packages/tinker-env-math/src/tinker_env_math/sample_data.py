"""Generates the sample dataset shipped with the package (``data/gsm8k_sample.jsonl``).

The problems are written by templates with small numbers, in the GSM8K convention: a worked
solution with ``<<a+b=c>>`` calculator annotations and a last line ``#### <number>``. The same
seed gives the same file byte for byte (stdlib :class:`random.Random`, no numpy)::

    python -m tinker_env_math.sample_data            # rewrites the bundled sample
    python -m tinker_env_math.sample_data --out my.jsonl --n 200 --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

__all__ = ["generate_records", "write_jsonl", "main"]

NAMES = (
    ("Ava", "She"),
    ("Ben", "He"),
    ("Chloe", "She"),
    ("Dan", "He"),
    ("Ema", "She"),
    ("Finn", "He"),
    ("Gia", "She"),
    ("Hugo", "He"),
    ("Ines", "She"),
    ("Jonas", "He"),
)
ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "cards")

Record = dict[str, str]


def _calc(a: int, op: str, b: int) -> tuple[str, int]:
    """``a op b`` as a GSM8K solution writes it, with its calculator annotation
    (``3 + 4 = <<3+4=7>>7``), and its value (``/`` divides exactly)."""
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    return f"{a} {op} {b} = <<{a}{op}{b}={value}>>{value}", value


def _worked(question: str, *steps: tuple[str, int, str, int]) -> Record:
    """A record: the question, then one solution line per step ``(sentence, a, op, b)`` with
    ``{}`` in the sentence standing for ``a op b`` worked out (:func:`_calc`), then ``####`` and
    the last step's value."""
    lines, value = [], 0
    for sentence, a, op, b in steps:
        calc, value = _calc(a, op, b)
        lines.append(sentence.format(calc))
    return {"question": question, "answer": "\n".join([*lines, f"#### {value}"])}


def _buy_then_give(r: random.Random) -> Record:
    (name, he), item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(3, 40), r.randint(2, 30)
    c = r.randint(1, a + b - 1)
    return _worked(
        f"{name} has {a} {item}. {he} buys {b} more and then gives {c} to a friend. "
        f"How many {item} does {name} have now?",
        (f"After buying, {name} has {{}} {item}.", a, "+", b),
        (f"After giving {c} away, {name} has {{}} {item}.", a + b, "-", c),
    )


def _boxes(r: random.Random) -> Record:
    item = r.choice(ITEMS)
    a, b, extra = r.randint(2, 12), r.randint(2, 12), r.randint(1, 9)
    return _worked(
        f"A box holds {a} {item}. There are {b} full boxes and {extra} loose {item}. "
        f"How many {item} are there in all?",
        (f"The boxes hold {{}} {item}.", a, "*", b),
        (f"With the loose ones there are {{}} {item}.", a * b, "+", extra),
    )


def _pages(r: random.Random) -> Record:
    name = r.choice(NAMES)[0]
    a, days, last = r.randint(5, 30), r.randint(2, 7), r.randint(1, 20)
    return _worked(
        f"{name} reads {a} pages a day for {days} days, then {last} pages on the next day. "
        f"How many pages does {name} read in total?",
        (f"In {days} days {name} reads {{}} pages.", a, "*", days),
        ("In total that is {} pages.", a * days, "+", last),
    )


def _money_left(r: random.Random) -> Record:
    (name, he), item = r.choice(NAMES), r.choice(ITEMS)
    price, count = r.randint(2, 9), r.randint(2, 6)
    money = count * price + r.randint(0, 30)
    return _worked(
        f"{name} has ${money}. {he} buys {count} packs of {item} at ${price} each. "
        f"How many dollars does {name} have left?",
        ("The packs cost {} dollars.", count, "*", price),
        (f"{name} has {{}} dollars left.", money, "-", count * price),
    )


def _groups(r: random.Random) -> Record:
    groups, size, absent = r.randint(2, 8), r.randint(2, 9), r.randint(1, 5)
    enrolled = groups * size + absent
    return _worked(
        f"A class has {enrolled} students. {absent} are absent today, and the rest "
        f"split into {groups} equal groups. How many students are in each group?",
        ("There are {} students present.", enrolled, "-", absent),
        ("Each group has {} students.", enrolled - absent, "/", groups),
    )


TEMPLATES: tuple[Callable[[random.Random], Record], ...] = (
    _buy_then_give,
    _boxes,
    _pages,
    _money_left,
    _groups,
)


def generate_records(n: int = 50, seed: int = 0) -> list[Record]:
    """``n`` records, cycling through the templates; deterministic in ``seed``."""
    r = random.Random(seed)
    return [TEMPLATES[i % len(TEMPLATES)](r) for i in range(n)]


def write_jsonl(records: list[Record], path: str | Path) -> Path:
    """Write one JSON object a line (UTF-8, ``\\n`` line ends)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    from tinker_env_math.dataset import SAMPLE_DATASET_PATH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(SAMPLE_DATASET_PATH), help="output .jsonl path")
    parser.add_argument("--n", type=int, default=50, help="number of records")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    path = write_jsonl(generate_records(args.n, args.seed), args.out)
    print(f"wrote {args.n} records to {path}")


if __name__ == "__main__":
    main()
