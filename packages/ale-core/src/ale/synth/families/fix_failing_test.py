"""fix-failing-test: a small Python module has an injected bug and its checker fails.

/app holds one module drawn from a menu (statistics, strings, dates, inventory, matrices,
parsers) with one bug (two on hard) drawn per seed: an off-by-one, a wrong operator or
comparison, swapped arguments, a wrong default. A checker script prints which cases fail.
The task needs interaction: which function is broken is only known by running the checker,
and the broken line only by reading that function (and, when the fault sits in a helper it
calls, the helper too). The tests run the module on hidden cases and check that the checker
file is unchanged.
"""

from __future__ import annotations

import builtins
import hashlib
import random
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ale.synth.expert import Observation, shell
from ale.synth.family import ExpertProgram, Family, TaskDraft, register

Args = tuple[Any, ...]
CaseMaker = Callable[[random.Random], Args]


@dataclass(frozen=True)
class _Bug:
    """One injectable bug: the line ``good`` (stripped) becomes ``bad`` in ``func``."""

    func: str
    good: str
    bad: str
    kind: str


@dataclass(frozen=True)
class _Module:
    topic: str
    purpose: str
    names: tuple[str, ...]
    source: str
    bugs: tuple[_Bug, ...]
    cases: dict[str, CaseMaker]


def _ints(rng: random.Random, lo: int, hi: int, n_lo: int = 1, n_hi: int = 8) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(n_lo, n_hi))]


def _words(rng: random.Random, n: int) -> list[str]:
    pool = ["alpha", "Data", "river", "Stone", "level", "noon", "open", "Cloud", "kayak", "map"]
    return [rng.choice(pool) for _ in range(n)]


_STATS = _Module(
    topic="statistics",
    purpose="the nightly reporting scripts",
    names=("stats_helpers", "numstats", "statkit"),
    source='''\
"""Small statistics helpers used by the reporting scripts."""


def _total(values):
    total = 0
    for value in values:
        total += value
    return total


def mean(values):
    """Arithmetic mean of a non-empty list."""
    return _total(values) / len(values)


def median(values):
    """Middle value (mean of the two middle values for an even count)."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2 == 1:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def variance(values):
    """Population variance."""
    m = mean(values)
    return _total([(v - m) ** 2 for v in values]) / len(values)


def value_range(values):
    """Largest value minus smallest value."""
    return max(values) - min(values)


def clamp(x, low=0, high=100):
    """x limited to the closed interval [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x


def percent(part, whole, digits=1):
    """part as a percentage of whole, rounded to `digits` decimals."""
    return round(100 * part / whole, digits)
''',
    bugs=(
        _Bug("_total", "for value in values:", "for value in values[1:]:", "off-by-one"),
        _Bug("median", "mid = n // 2", "mid = (n - 1) // 2", "off-by-one"),
        _Bug("median", "if n % 2 == 1:", "if n % 2 == 0:", "wrong comparison"),
        _Bug(
            "variance",
            "return _total([(v - m) ** 2 for v in values]) / len(values)",
            "return _total([(v - m) ** 2 for v in values]) / (len(values) - 1)",
            "off-by-one",
        ),
        _Bug(
            "value_range",
            "return max(values) - min(values)",
            "return min(values) - max(values)",
            "swapped operands",
        ),
        _Bug(
            "clamp",
            "def clamp(x, low=0, high=100):",
            "def clamp(x, low=0, high=10):",
            "wrong default",
        ),
        _Bug("clamp", "if x < low:", "if x > low:", "wrong comparison"),
        _Bug(
            "percent",
            "return round(100 * part / whole, digits)",
            "return round(100 * whole / part, digits)",
            "swapped arguments",
        ),
    ),
    cases={
        "mean": lambda r: (_ints(r, -20, 60, 2, 8),),
        "median": lambda r: (_ints(r, 0, 90, 2, 9),),
        "variance": lambda r: (_ints(r, 0, 30, 2, 7),),
        "value_range": lambda r: (_ints(r, -50, 50, 2, 8),),
        "clamp": lambda r: (
            (r.randint(-30, 130),)
            if r.random() < 0.6
            else (r.randint(-10, 40), r.randint(-5, 5), r.randint(10, 30))
        ),
        "percent": lambda r: (r.randint(1, 40), r.randint(41, 200)),
    },
)

_TEXT = _Module(
    topic="string",
    purpose="the static site generator",
    names=("textutils", "strtools", "stringkit"),
    source='''\
"""String helpers for the static site generator."""


def _clean(text):
    return "".join(ch.lower() for ch in text if ch.isalnum())


def slugify(text, sep="-"):
    """Lower-case alphanumeric words of text joined by sep."""
    words = "".join(ch.lower() if ch.isalnum() else " " for ch in text).split()
    return sep.join(words)


def truncate(text, width, suffix="..."):
    """text cut to at most width characters, ending in suffix when it was cut."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix


def is_palindrome(text):
    """True when text reads the same backwards, ignoring case and punctuation."""
    cleaned = _clean(text)
    return cleaned == cleaned[::-1]


def count_word(text, word):
    """How many times word occurs in text as a whole word, ignoring case."""
    target = _clean(word)
    return sum(1 for token in text.split() if _clean(token) == target)


def title_case(text):
    """Each word capitalised, the rest of the word in lower case."""
    return " ".join(w[:1].upper() + w[1:].lower() for w in text.split())


def initials(name):
    """Upper-case initials of a full name, each followed by a dot."""
    return "".join(part[0].upper() + "." for part in name.split())
''',
    bugs=(
        _Bug(
            "_clean",
            'return "".join(ch.lower() for ch in text if ch.isalnum())',
            'return "".join(ch for ch in text if ch.isalnum())',
            "missing normalisation",
        ),
        _Bug(
            "slugify", 'def slugify(text, sep="-"):', 'def slugify(text, sep="_"):', "wrong default"
        ),
        _Bug("truncate", "if len(text) <= width:", "if len(text) < width:", "wrong comparison"),
        _Bug(
            "truncate",
            "return text[: width - len(suffix)] + suffix",
            "return text[: width - len(suffix) + 1] + suffix",
            "off-by-one",
        ),
        _Bug(
            "title_case",
            'return " ".join(w[:1].upper() + w[1:].lower() for w in text.split())',
            'return " ".join(w[:1].upper() + w[2:].lower() for w in text.split())',
            "off-by-one",
        ),
        _Bug(
            "initials",
            'return "".join(part[0].upper() + "." for part in name.split())',
            'return "".join(part[-1].upper() + "." for part in name.split())',
            "wrong index",
        ),
    ),
    cases={
        "slugify": lambda r: (" ".join(_words(r, r.randint(2, 4))) + r.choice(["!", "", "?"]),),
        "truncate": lambda r: (
            (w := " ".join(_words(r, r.randint(1, 3)))),
            max(4, len(w) + r.choice([-5, -3, 0, 0, 2])),
        ),
        "is_palindrome": lambda r: (
            r.choice(
                [
                    "Racecar",
                    "Never odd or even",
                    "Step on no pets!",
                    "Level",
                    "Kayak",
                    "Nope",
                    "Stone",
                    "Was it a car or a cat I saw",
                ]
            ),
        ),
        "count_word": lambda r: (
            " ".join(_words(r, r.randint(3, 8))),
            r.choice(["data", "level", "stone", "map"]),
        ),
        "title_case": lambda r: (" ".join(w.lower() for w in _words(r, r.randint(1, 4))),),
        "initials": lambda r: (
            r.choice(["ada", "Grace", "alan", "Edsger", "Barbara"])
            + " "
            + r.choice(["lovelace", "Hopper", "turing", "Dijkstra", "Liskov"]),
        ),
    },
)

_DATES = _Module(
    topic="date and interval",
    purpose="the shift scheduler",
    names=("datekit", "timespan", "sched_dates"),
    source='''\
"""Date and interval helpers for the shift scheduler (no datetime on purpose)."""


def _is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """Number of days in month (1-12) of year."""
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def day_of_year(year, month, day):
    """1-based position of the date within its year."""
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def quarter(month):
    """Quarter (1-4) that month (1-12) falls in."""
    return (month - 1) // 3 + 1


def _minutes(hhmm):
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def duration(start, end):
    """Minutes from start to end ("HH:MM"); an end before start wraps past midnight."""
    return (_minutes(end) - _minutes(start)) % (24 * 60)


def overlap(a_start, a_end, b_start, b_end):
    """Length of the overlap of [a_start, a_end) and [b_start, b_end); 0 when none."""
    return max(0, min(a_end, b_end) - max(a_start, b_start))
''',
    bugs=(
        _Bug(
            "_is_leap",
            "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
            "return year % 4 == 0 and (year % 100 != 0 and year % 400 == 0)",
            "wrong operator",
        ),
        _Bug(
            "days_in_month",
            "return 30 if month in (4, 6, 9, 11) else 31",
            "return 30 if month in (4, 6, 9, 10) else 31",
            "wrong constant",
        ),
        _Bug(
            "day_of_year",
            "return sum(days_in_month(year, m) for m in range(1, month)) + day",
            "return sum(days_in_month(year, m) for m in range(1, month + 1)) + day",
            "off-by-one",
        ),
        _Bug("quarter", "return (month - 1) // 3 + 1", "return month // 3 + 1", "off-by-one"),
        _Bug(
            "_minutes",
            "return int(hours) * 60 + int(minutes)",
            "return int(minutes) * 60 + int(hours)",
            "swapped arguments",
        ),
        _Bug(
            "duration",
            "return (_minutes(end) - _minutes(start)) % (24 * 60)",
            "return (_minutes(start) - _minutes(end)) % (24 * 60)",
            "swapped arguments",
        ),
        _Bug(
            "overlap",
            "return max(0, min(a_end, b_end) - max(a_start, b_start))",
            "return max(0, min(a_end, b_end) - min(a_start, b_start))",
            "wrong function",
        ),
    ),
    cases={
        "days_in_month": lambda r: (
            r.choice([1900, 2000, 2023, 2024, 2026, 2028]),
            r.randint(1, 12),
        ),
        "day_of_year": lambda r: (
            r.choice([1900, 2000, 2024, 2025, 2028]),
            r.randint(1, 12),
            r.randint(1, 28),
        ),
        "quarter": lambda r: (r.randint(1, 12),),
        "duration": lambda r: (
            f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}",
            f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}",
        ),
        "overlap": lambda r: (
            (a := r.randint(0, 40)),
            a + r.randint(1, 30),
            (b := r.randint(0, 40)),
            b + r.randint(1, 30),
        ),
    },
)

_INVENTORY = _Module(
    topic="inventory",
    purpose="the warehouse tool",
    names=("inventory", "stockbook", "warehouse"),
    source='''\
"""Stock bookkeeping for the warehouse tool; a stock maps item name -> units."""


def _line_total(quantity, unit_price):
    return round(quantity * unit_price, 2)


def add_item(stock, name, quantity=1):
    """A copy of stock with quantity more units of name."""
    updated = dict(stock)
    updated[name] = updated.get(name, 0) + quantity
    return updated


def remove_item(stock, name, quantity=1):
    """A copy of stock with quantity fewer units of name; items reaching 0 are dropped."""
    updated = dict(stock)
    left = updated.get(name, 0) - quantity
    if left > 0:
        updated[name] = left
    else:
        updated.pop(name, None)
    return updated


def total_units(stock):
    """All units in stock."""
    return sum(stock.values())


def low_stock(stock, threshold=5):
    """Names with fewer than threshold units, alphabetically."""
    return sorted(name for name, units in stock.items() if units < threshold)


def order_value(order, prices):
    """Price of an order (name -> quantity) at the given unit prices."""
    return round(sum(_line_total(q, prices[name]) for name, q in order.items()), 2)
''',
    bugs=(
        _Bug(
            "_line_total",
            "return round(quantity * unit_price, 2)",
            "return round(quantity + unit_price, 2)",
            "wrong operator",
        ),
        _Bug(
            "add_item",
            "updated[name] = updated.get(name, 0) + quantity",
            "updated[name] = updated.get(name, 1) + quantity",
            "wrong default",
        ),
        _Bug("remove_item", "if left > 0:", "if left >= 0:", "wrong comparison"),
        _Bug("total_units", "return sum(stock.values())", "return len(stock)", "wrong function"),
        _Bug(
            "low_stock",
            "return sorted(name for name, units in stock.items() if units < threshold)",
            "return sorted(name for name, units in stock.items() if units <= threshold)",
            "wrong comparison",
        ),
        _Bug(
            "low_stock",
            "def low_stock(stock, threshold=5):",
            "def low_stock(stock, threshold=3):",
            "wrong default",
        ),
    ),
    cases={
        "add_item": lambda r: (
            (_stock(r), r.choice(["bolt", "nut", "gear", "pulley"]), r.randint(1, 9))
            if r.random() < 0.6
            else (_stock(r), r.choice(["bolt", "nut", "gear", "pulley"]))
        ),
        "remove_item": lambda r: (
            (s := _stock(r)),
            (n := r.choice(sorted(s))),
            s[n] if r.random() < 0.4 else r.randint(1, s[n]),
        ),
        "total_units": lambda r: (_stock(r),),
        "low_stock": lambda r: (_stock(r),) if r.random() < 0.5 else (_stock(r), r.randint(2, 8)),
        "order_value": lambda r: (
            {n: r.randint(1, 6) for n in r.sample(["bolt", "nut", "gear", "spring"], 2)},
            {"bolt": 0.25, "nut": 0.1, "gear": 4.5, "spring": 1.75},
        ),
    },
)


def _stock(rng: random.Random) -> dict[str, int]:
    names = rng.sample(["bolt", "nut", "gear", "spring", "washer", "pulley"], rng.randint(2, 5))
    return {name: rng.randint(1, 12) for name in names}


_MATRIX = _Module(
    topic="matrix",
    purpose="the layout engine",
    names=("matops", "tinymat", "matrix_utils"),
    source='''\
"""Tiny matrix helpers (a matrix is a list of rows) for the layout engine."""


def _dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def transpose(m):
    """Rows become columns."""
    return [[m[i][j] for i in range(len(m))] for j in range(len(m[0]))]


def identity(n):
    """The n x n identity matrix."""
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def matmul(a, b):
    """Matrix product of a and b."""
    cols = transpose(b)
    return [[_dot(row, col) for col in cols] for row in a]


def trace(m):
    """Sum of the main diagonal."""
    return sum(m[i][i] for i in range(len(m)))


def scale(m, k):
    """Every entry multiplied by k."""
    return [[k * x for x in row] for row in m]


def add(a, b):
    """Entry-wise sum of two matrices of the same shape."""
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
''',
    bugs=(
        _Bug(
            "_dot",
            "return sum(a * b for a, b in zip(u, v))",
            "return sum(a + b for a, b in zip(u, v))",
            "wrong operator",
        ),
        _Bug(
            "transpose",
            "return [[m[i][j] for i in range(len(m))] for j in range(len(m[0]))]",
            "return [[m[j][i] for i in range(len(m))] for j in range(len(m[0]))]",
            "swapped indices",
        ),
        _Bug(
            "identity",
            "return [[1 if i == j else 0 for j in range(n)] for i in range(n)]",
            "return [[1 if i <= j else 0 for j in range(n)] for i in range(n)]",
            "wrong comparison",
        ),
        _Bug(
            "trace",
            "return sum(m[i][i] for i in range(len(m)))",
            "return sum(m[i][i] for i in range(1, len(m)))",
            "off-by-one",
        ),
        _Bug(
            "scale",
            "return [[k * x for x in row] for row in m]",
            "return [[k + x for x in row] for row in m]",
            "wrong operator",
        ),
        _Bug(
            "add",
            "return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]",
            "return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]",
            "wrong operator",
        ),
    ),
    cases={
        "transpose": lambda r: (_mat(r, r.randint(1, 3), r.randint(2, 3)),),
        "identity": lambda r: (r.randint(2, 4),),
        "matmul": lambda r: (_mat(r, 2, (k := r.randint(2, 3))), _mat(r, k, r.randint(2, 3))),
        "trace": lambda r: (_mat(r, (n := r.randint(2, 3)), n),),
        "scale": lambda r: (_mat(r, 2, 2), r.randint(2, 5)),
        "add": lambda r: (_mat(r, 2, 3), _mat(r, 2, 3)),
    },
)


def _mat(rng: random.Random, rows: int, cols: int) -> list[list[int]]:
    return [[rng.randint(-4, 9) for _ in range(cols)] for _ in range(rows)]


_PARSE = _Module(
    topic="parser",
    purpose="the config loader",
    names=("kvparse", "confparse", "textparse"),
    source='''\
"""Parsers for the small text formats our config files use."""

_UNITS = {"h": 3600, "m": 60, "s": 1}


def _coerce(value):
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value.lstrip("-").isdigit():
        return int(value)
    return value


def parse_pairs(text, sep=";"):
    """'a=1; b=x' -> {'a': 1, 'b': 'x'}; values that look like ints or bools are converted."""
    result = {}
    for part in text.split(sep):
        if part.strip():
            key, _, value = part.partition("=")
            result[key.strip()] = _coerce(value.strip())
    return result


def parse_duration(text):
    """'1h30m' -> 5400 (seconds; units h, m and s)."""
    total = 0
    number = ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * _UNITS[ch]
            number = ""
    return total


def parse_version(text):
    """'1.10.2' -> (1, 10, 2)."""
    return tuple(int(p) for p in text.split("."))


def compare_versions(a, b):
    """-1, 0 or 1 as version a is older than, equal to or newer than version b."""
    left, right = parse_version(a), parse_version(b)
    return (left > right) - (left < right)


def parse_list(text):
    """'a, b,,c' -> ['a', 'b', 'c'] (empty items are dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]
''',
    bugs=(
        _Bug(
            "_coerce",
            'return value.lower() == "true"',
            'return value.lower() == "false"',
            "inverted condition",
        ),
        _Bug(
            "parse_pairs",
            'def parse_pairs(text, sep=";"):',
            'def parse_pairs(text, sep=","):',
            "wrong default",
        ),
        _Bug(
            "parse_duration",
            "total += int(number) * _UNITS[ch]",
            "total = int(number) * _UNITS[ch]",
            "wrong operator",
        ),
        _Bug(
            "parse_version",
            'return tuple(int(p) for p in text.split("."))',
            'return tuple(p for p in text.split("."))',
            "missing conversion",
        ),
        _Bug(
            "compare_versions",
            "return (left > right) - (left < right)",
            "return (left < right) - (left > right)",
            "swapped operands",
        ),
        _Bug(
            "parse_list",
            'return [item.strip() for item in text.split(",") if item.strip()]',
            'return [item.strip() for item in text.split(",") if item]',
            "wrong condition",
        ),
    ),
    cases={
        "parse_pairs": lambda r: (
            "; ".join(
                f"{k}={r.choice(['true', 'False', str(r.randint(-9, 99)), 'eu-west', 'on'])}"
                for k in r.sample(["debug", "port", "region", "retries", "cache"], r.randint(2, 4))
            )
            + r.choice(["", ";"]),
        ),
        "parse_duration": lambda r: (
            "".join(f"{r.randint(1, 59)}{u}" for u in ["h", "m", "s"] if r.random() < 0.7) or "45s",
        ),
        "parse_version": lambda r: (
            ".".join(str(r.randint(0, 12)) for _ in range(r.randint(2, 3))),
        ),
        "compare_versions": lambda r: (
            f"{r.randint(1, 2)}.{r.randint(0, 12)}",
            f"{r.randint(1, 2)}.{r.randint(0, 12)}",
        ),
        "parse_list": lambda r: (
            ", ".join(r.sample(["red", "green", "blue", "  ", "", "cyan"], r.randint(3, 5))),
        ),
    },
)

_MODULES = (_STATS, _TEXT, _DATES, _INVENTORY, _MATRIX, _PARSE)

_CHECKER = '''\
"""Checks for {mod}.py: run `python3 {checker}`; it prints each case and exits 1 on a failure."""

import sys

import {mod}

CASES = [
{cases}]


def same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and abs(got - want) < 1e-9
    return type(got) is type(want) and got == want


def main():
    failed = 0
    for name, args, want in CASES:
        call = name + "(" + ", ".join(repr(a) for a in args) + ")"
        try:
            got = getattr({mod}, name)(*args)
        except Exception as exc:
            got = "<" + type(exc).__name__ + ": " + str(exc) + ">"
        if same(got, want):
            print("ok   " + call)
        else:
            failed += 1
            print("FAIL " + call + ": expected " + repr(want) + ", got " + repr(got))
    print(str(len(CASES) - failed) + " passed, " + str(failed) + " failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''

_OPENERS = [
    "The {topic} helpers in `/app/{mod}.py` are used by {purpose}, and something in them is broken.",
    "After a recent refactor, `{checker}` in /app started failing.",
    "A teammate reports that `{mod}.py` returns wrong answers; its checker agrees.",
    "Something is off in /app/{mod}.py: the self-check `{checker}` no longer passes.",
    "Our CI job for the {topic} module `{mod}` went red this morning.",
    "{purpose_cap} is misbehaving and the trail leads to `/app/{mod}.py`.",
]
_ASKS = [
    "Run `python3 {checker}` to see which cases fail, then find the bug in `{mod}.py` and fix it.",
    "Find and fix the defect in `{mod}.py` so that `python3 {checker}` reports no failures.",
    "Please track down what is wrong in `{mod}.py` and repair it; `{checker}` shows the failing cases.",
    "Make `{checker}` pass again by correcting the code in `{mod}.py`.",
    "Debug `{mod}.py` using the output of `{checker}` and fix the code so that every case passes.",
]
_NOTES = [
    "Do not modify `{checker}`: it is the reference.",
    "Leave the checker untouched; only the module should change.",
    "The checker is right, so don't edit it, and keep the function names and signatures.",
    "Change only `{mod}.py`; `{checker}` must stay exactly as it is.",
    "Edits to `{checker}` do not count: the fix belongs in the module.",
]
_HIDDEN = [
    "Your fix is also tested on inputs the checker does not try, so fix the cause instead of special-casing the inputs.",
    "Hidden inputs beyond the checker's are used to grade this, so fix the real cause.",
    "Other inputs than the checked ones will be tried too; fix the cause, not the symptoms.",
    "Grading uses more cases than the checker has.",
]
_HARDER = {
    "medium": [
        "The broken line is not necessarily in the function the checker names.",
        "Keep in mind that a function can fail because of something it calls.",
    ],
    "hard": [
        "There may be more than one bug, and a wrong result can come from a helper the failing function calls.",
        "Expect more than one defect; some may hide in helper functions.",
        "More than one thing is broken, and not always where the checker points.",
    ],
}

_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\(")
_NUMBERED = re.compile(r"^(\d+)[:-](.*)$")
_FAIL = re.compile(r"^FAIL ([A-Za-z_]\w*)\(")


def _load(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<module>", "exec"), namespace)
    return namespace


def _apply(source: str, bugs: list[_Bug]) -> str:
    lines = source.split("\n")
    for bug in bugs:
        hits = [i for i, line in enumerate(lines) if line.strip() == bug.good]
        assert len(hits) == 1, bug
        i = hits[0]
        lines[i] = lines[i][: len(lines[i]) - len(lines[i].lstrip())] + bug.bad
    return "\n".join(lines)


def _call(namespace: dict[str, Any], name: str, args: Args) -> Any:
    try:
        return namespace[name](*args)
    except Exception as exc:
        return f"<{type(exc).__name__}>"


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, int | float) and abs(got - want) < 1e-9
    return type(got) is type(want) and got == want


def _pick_cases(
    rng: random.Random, module: _Module, bugs: list[_Bug], per_func: int
) -> list[tuple[str, Args, Any]]:
    """``per_func`` random cases per public function, plus cases that make sure every bug
    shows up as at least one failure."""
    good = _load(module.source)
    broken = [_load(_apply(module.source, [bug])) for bug in bugs]
    chosen: list[tuple[str, Args, Any]] = []
    for name in sorted(module.cases):
        for _ in range(per_func):
            args = module.cases[name](rng)
            chosen.append((name, args, good[name](*args)))
    for space in broken:
        if any(not _same(_call(space, n, a), w) for n, a, w in chosen):
            continue
        names = sorted(module.cases)
        for _ in range(2000):
            name = rng.choice(names)
            args = module.cases[name](rng)
            want = good[name](*args)
            if not _same(_call(space, name, args), want):
                chosen.insert(rng.randrange(len(chosen) + 1), (name, args, want))
                break
        else:
            raise AssertionError("no case shows the bug")
    return chosen


def _sed_quote(bad: str, good: str, line: int) -> str:
    """A sed expression replacing ``bad`` by ``good`` on ``line``, quoted for bash."""
    pattern = re.sub(r"([\\/.*\[^$])", r"\\\1", bad)
    replacement = re.sub(r"([\\/&])", r"\\\1", good)
    return "'" + f"{line}s/{pattern}/{replacement}/".replace("'", "'\\''") + "'"


def _numbered(text: str) -> list[tuple[int, str]]:
    found = []
    for raw in text.splitlines():
        match = _NUMBERED.match(raw)
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found


def _callees(lines: list[tuple[int, str]], seen: set[str]) -> list[str]:
    names: list[str] = []
    for _, text in lines:
        if text.lstrip().startswith("def "):
            continue
        for name in _CALL.findall(text):
            if name not in seen and name not in names and not hasattr(builtins, name):
                names.append(name)
    return names


def _clip(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _grep_defs(names: list[str], path: str) -> str:
    patterns = " ".join(f"-e '^def {name}('" for name in names)
    return f"grep -n -A 12 {patterns} {path}"


@register
class FixFailingTest(Family):
    name = "fix-failing-test"
    category = "debugging"
    description = "Find and fix an injected bug in a small Python module from its checker's output."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        module = rng.choice(_MODULES)
        mod = rng.choice(module.names)
        short = mod.split("_")[0]
        checker = rng.choice(
            [f"check_{mod}.py", f"check_{short}.py", f"{short}_check.py", "run_checks.py"]
        )
        helper_bugs = [b for b in module.bugs if b.func.startswith("_")]
        public_bugs = [b for b in module.bugs if not b.func.startswith("_")]
        if difficulty == "easy":
            bugs = [rng.choice(public_bugs)]
        elif difficulty == "medium":
            bugs = [rng.choice(helper_bugs if rng.random() < 0.5 else public_bugs)]
        else:
            first = rng.choice(helper_bugs)
            bugs = [first, rng.choice([b for b in public_bugs if b.func != first.func])]
        per_func = {"easy": 1, "medium": 2, "hard": 3}[difficulty]
        checked = _pick_cases(rng, module, bugs, per_func)
        hidden = _pick_cases(rng, module, bugs, 4)
        broken_source = _apply(module.source, bugs)
        checker_text = _CHECKER.format(
            mod=mod,
            checker=checker,
            cases="".join(f"    ({n!r}, {a!r}, {w!r}),\n" for n, a, w in checked),
        )
        checker_sha = hashlib.sha256(checker_text.encode()).hexdigest()
        fill = {
            "mod": mod,
            "checker": checker,
            "topic": module.topic,
            "purpose": module.purpose,
            "purpose_cap": module.purpose[:1].upper() + module.purpose[1:],
        }
        parts = [
            rng.choice(_OPENERS).format(**fill),
            rng.choice(_ASKS).format(**fill),
            rng.choice(_NOTES).format(**fill),
            rng.choice(_HIDDEN),
        ]
        if difficulty in _HARDER:
            parts.append(rng.choice(_HARDER[difficulty]))
        tail = parts[2:]
        rng.shuffle(tail)
        instruction = " ".join(parts[:2] + tail)
        tests = _tests(mod, checker, checker_sha, hidden)
        broken_lines = [line.strip() for line in broken_source.split("\n")]
        fix = " ".join(
            "-e " + _sed_quote(b.bad, b.good, broken_lines.index(b.bad) + 1) for b in bugs
        )
        solution = f"sed -i {fix} {mod}.py\npython3 {checker}\n"
        path = f"{mod}.py"

        def expert() -> ExpertProgram:
            ran: Observation = yield shell(
                f"python3 {checker}", "First I run the checker to see what fails."
            )
            fails = [line for line in ran.output.splitlines() if _FAIL.match(line)]
            failing: list[str] = []
            for line in fails:
                name = _FAIL.match(line).group(1)  # type: ignore[union-attr]
                if name not in failing:
                    failing.append(name)
            if not failing:
                return "The checker reports no failures, so there is nothing to fix."
            located: dict[int, int] = {}
            seen: set[str] = set()
            todo = list(failing)
            first = _clip(fails[0][5:])
            thought = f"`{failing[0]}` fails ({first}). Let me read its code."
            if len(failing) > 1:
                thought = (
                    f"{len(fails)} cases fail, in {', '.join(failing)} (first: {first}). "
                    "I read those functions."
                )
            for _round in range(3):
                seen.update(todo)
                view = yield shell(_grep_defs(todo, path), thought)
                lines = _numbered(view.output)
                for i, bug in enumerate(bugs):
                    for number, text in lines:
                        if i not in located and text.strip() == bug.bad:
                            located[i] = number
                if len(located) == len(bugs):
                    break
                todo = _callees(lines, seen)[:4]
                if not todo:
                    break
                called = ", ".join(f"`{n}`" for n in todo)
                thought = (
                    f"Those bodies do not explain every failure; they call {called}, "
                    "so I read that code next."
                )
                if located:
                    thought = (
                        f"Line {min(located.values())} looks wrong, but that does not explain "
                        f"every failure; the code also calls {called}, so I read that next."
                    )
            if len(located) < len(bugs):
                return "I could not find the faulty line from what the checker shows."
            notes = "; ".join(
                f"line {located[i]} `{b.bad}` should be `{b.good}` ({b.kind})"
                for i, b in enumerate(bugs)
            )
            exprs = " ".join(
                "-e " + _sed_quote(b.bad, b.good, located[i]) for i, b in enumerate(bugs)
            )
            yield shell(f"sed -i {exprs} {path}", f"Found it: {notes}. I fix it in place.")
            again = yield shell(f"python3 {checker}", "Now I re-run the checker.")
            if not again.ok:
                return "The checker still fails after my fix; see the output above."
            return f"Fixed {mod}.py ({notes}); {checker} now passes."

        return TaskDraft(
            instruction=instruction,
            files={f"/app/{mod}.py": broken_source, f"/app/{checker}": checker_text},
            tests=tests,
            solution=solution,
            expert=expert,
            params={
                "module": mod,
                "topic": module.topic,
                "checker": checker,
                "bugs": [{"function": b.func, "kind": b.kind} for b in bugs],
                "checked_cases": len(checked),
                "hidden_cases": len(hidden),
            },
            mistakes=[
                shell("python3 -m pytest -q", "Let me run the test suite."),
                shell(f"python3 tests/{checker}", "I run the checker."),
                shell(f"grep -n 'def ' src/{mod}.py", "Let me list the functions."),
            ],
            tags=["python", "debugging"],
        )


def _tests(mod: str, checker: str, sha: str, cases: list[tuple[str, Args, Any]]) -> str:
    listed = "".join(f"    ({n!r}, {a!r}, {w!r}),\n" for n, a, w in cases)
    return textwrap.dedent(
        """\
        import hashlib
        import subprocess
        import sys
        from pathlib import Path

        import pytest

        sys.path.insert(0, "/app")
        import {mod}  # noqa: E402

        CHECKER = Path("/app/{checker}")
        CHECKER_SHA256 = "{sha}"
        CASES = [
        {cases}]


        def same(got, want):
            if isinstance(want, float) or isinstance(got, float):
                return isinstance(got, (int, float)) and abs(got - want) < 1e-9
            return type(got) is type(want) and got == want


        def test_checker_unchanged():
            assert hashlib.sha256(CHECKER.read_bytes()).hexdigest() == CHECKER_SHA256


        def test_checker_passes():
            done = subprocess.run(
                [sys.executable, CHECKER.name], cwd="/app", capture_output=True, text=True
            )
            assert done.returncode == 0, done.stdout[-2000:]


        @pytest.mark.parametrize("name,args,want", CASES)
        def test_hidden_case(name, args, want):
            got = getattr({mod}, name)(*args)
            assert same(got, want), (name, args, want, got)
        """
    ).format(mod=mod, checker=checker, sha=sha, cases=listed)
