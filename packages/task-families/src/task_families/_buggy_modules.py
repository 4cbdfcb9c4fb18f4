"""The buggy-module menu of the fix-failing-test family: six small Python modules, each
with its correct source, the bugs that may be injected into it, and case makers for the
checker and the hidden tests. Data for :mod:`task_families.fix_failing_test`."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from task_families._sources import source


def _source(name: str) -> str:
    return source("fix_failing_test", name)


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
    source=_source("statistics"),
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
    source=_source("string"),
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
    source=_source("date_and_interval"),
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
    source=_source("inventory"),
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
    source=_source("matrix"),
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
    source=_source("parser"),
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
