"""The menu of the implement-function family: each function a task may ask for (roman
numerals both ways, run-length coding, Caesar shifts, word wrap, interval merging, bracket
balancing, base conversion, snake/camel case, range compression), with its stub, its reference
implementation (a file under ``sources/implement_function/``), the ways of asking for it, the
edge rules hard drafts state, and how its test inputs are drawn."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from task_families._sources import source


def _source(name: str) -> str:
    return source("implement_function", name)


Call = tuple[str, tuple[Any, ...]]


@dataclass(frozen=True)
class Spec:
    key: str
    modules: tuple[str, ...]
    stubs: tuple[tuple[str, str], ...]
    """(signature, docstring) of each function to write."""
    source: str
    """The reference implementation (also the oracle solution)."""
    summaries: tuple[str, ...]
    """Ways of saying what to implement; ``{mod}`` is the module file."""
    edge_notes: tuple[str, ...]
    """The extra rules a hard draft spells out."""
    basic: Callable[[random.Random], Call]
    edges: tuple[Call, ...]


def _word(rng: random.Random) -> str:
    return rng.choice(["tree", "log", "cat", "sun", "rain", "apple", "zebra", "quiet", "moon"])


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(_word(rng) for _ in range(rng.randint(lo, hi)))


def _runs(rng: random.Random) -> str:
    return "".join(rng.choice("abcxyz .") * rng.randint(1, 6) for _ in range(rng.randint(2, 6)))


def _intervals(rng: random.Random) -> list[list[int]]:
    out = []
    for _ in range(rng.randint(2, 6)):
        start = rng.randint(0, 30)
        out.append([start, start + rng.randint(1, 8)])
    return out


def _brackets(rng: random.Random) -> str:
    pairs = ["()", "[]", "{}"]
    text = ""
    for _ in range(rng.randint(2, 5)):
        pair = rng.choice(pairs)
        left, right = pair[0], pair[1]
        inner = rng.choice(["x", "a+b", "", "f(1)", "[2]"])
        text += left + inner + right if rng.random() < 0.9 else right + inner + left
    if rng.random() < 0.2:
        text += rng.choice("([{)]}")
    return text


def _camel(rng: random.Random) -> str:
    words = rng.sample(["user", "name", "order", "total", "max", "item", "count", "parse"], 3)
    return words[0] + "".join(w.capitalize() for w in words[1:])


_ROMAN_TO = Spec(
    key="int-to-roman",
    modules=("roman", "numerals", "roman_numerals"),
    stubs=(("to_roman(n)", "Return the Roman numeral for the integer n (1 <= n <= 3999)."),),
    source=_source("int_to_roman"),
    summaries=(
        "Implement `to_roman(n)` in `{mod}`: it returns the upper-case Roman numeral of the integer `n`, using subtractive notation (IV, IX, XL, XC, CD, CM).",
        "Write the body of `to_roman(n)` in `{mod}` so that it converts a positive integer into standard Roman numerals (upper case, subtractive forms such as IV and CM).",
        "`{mod}` has a stub `to_roman(n)`. Make it turn an integer between 1 and 3999 into its canonical Roman numeral string.",
    ),
    edge_notes=(
        "`n` outside 1..3999 (including 0 and negative numbers) must raise `ValueError`.",
        "3999 is the largest value and must give `MMMCMXCIX`.",
    ),
    basic=lambda r: ("to_roman", (r.randint(1, 3999) if r.random() < 0.7 else r.randint(1, 60),)),
    edges=(("to_roman", (0,)), ("to_roman", (-7,)), ("to_roman", (4000,)), ("to_roman", (3999,))),
)

_ROMAN_FROM = Spec(
    key="roman-to-int",
    modules=("roman", "numerals", "roman_parse"),
    stubs=(("from_roman(text)", "Return the integer value of the Roman numeral text."),),
    source=_source("roman_to_int"),
    summaries=(
        "Implement `from_roman(text)` in `{mod}`: it parses a Roman numeral (such as `MCMXCIV`) and returns its integer value, honouring subtractive pairs.",
        "Fill in `from_roman(text)` in `{mod}` so it converts a Roman numeral string into an int (a smaller numeral before a larger one is subtracted).",
        "The stub `from_roman(text)` in `{mod}` should return the value of a Roman numeral as an integer.",
    ),
    edge_notes=(
        "Lower-case and mixed-case numerals are accepted (`xiv` is 14), and surrounding whitespace is ignored.",
        "An empty string or any character other than I, V, X, L, C, D, M (in either case) must raise `ValueError`.",
    ),
    basic=lambda r: ("from_roman", (_roman(r.randint(1, 3999)),)),
    edges=(
        ("from_roman", ("xiv",)),
        ("from_roman", ("  MmXxIv ",)),
        ("from_roman", ("",)),
        ("from_roman", ("XIZ",)),
        ("from_roman", ("12",)),
    ),
)


def _roman(n: int) -> str:
    out = ""
    for value, letters in [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ]:
        count, n = divmod(n, value)
        out += letters * count
    return out


_RLE = Spec(
    key="run-length",
    modules=("rle", "runlength", "codec"),
    stubs=(
        (
            "rle_encode(text)",
            "Run-length encode text: 'aaab' -> '3a1b' (count, then the character).",
        ),
        ("rle_decode(encoded)", "Inverse of rle_encode: '3a1b' -> 'aaab'."),
    ),
    source=_source("run_length"),
    summaries=(
        "Implement `rle_encode(text)` and `rle_decode(encoded)` in `{mod}`. Encoding writes each run of equal characters as its length followed by the character (`aaab` becomes `3a1b`); decoding reverses it.",
        "`{mod}` needs a working run-length codec: `rle_encode(text)` turns every run of a repeated character into `<count><char>` and `rle_decode(encoded)` expands that form back.",
        "Fill in the two stubs in `{mod}`: `rle_encode` (runs become count + character, e.g. `xxyzzz` -> `2x1y3z`) and `rle_decode`, its inverse.",
    ),
    edge_notes=(
        "Runs longer than 9 use a multi-digit count (`12a`), and decoding must read multi-digit counts.",
        "The empty string encodes and decodes to the empty string.",
        "`rle_decode` must raise `ValueError` for a character that has no count before it or for input that ends with a count.",
    ),
    basic=lambda r: (
        ("rle_encode", ((_runs(r)),)) if r.random() < 0.5 else ("rle_decode", (_rle(_runs(r)),))
    ),
    edges=(
        ("rle_encode", ("a" * 12 + "b",)),
        ("rle_decode", ("12a1b",)),
        ("rle_encode", ("",)),
        ("rle_decode", ("",)),
        ("rle_decode", ("a3b",)),
        ("rle_decode", ("3a4",)),
    ),
)


def _rle(text: str) -> str:
    out, i = "", 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out += f"{j - i}{text[i]}"
        i = j
    return out


_CAESAR = Spec(
    key="caesar",
    modules=("cipher", "caesar", "rot"),
    stubs=(("caesar(text, shift)", "Shift every letter of text by shift places in the alphabet."),),
    source=_source("caesar"),
    summaries=(
        "Implement `caesar(text, shift)` in `{mod}`: every ASCII letter moves `shift` places forward in the alphabet, wrapping from z to a; case is kept and other characters are left alone.",
        "Write a Caesar cipher in `{mod}`: `caesar(text, shift)` rotates letters by `shift` (z wraps round to a), preserves upper/lower case and copies everything else unchanged.",
        "The stub `caesar(text, shift)` in `{mod}` should return `text` with each letter rotated `shift` positions (ROT-n), keeping case and leaving digits, spaces and punctuation as they are.",
    ),
    edge_notes=(
        "`shift` may be negative (shift backwards) or larger than 26 (it wraps).",
        "Only the ASCII letters a-z and A-Z move: letters such as `é` or `ß` stay unchanged.",
    ),
    basic=lambda r: (
        "caesar",
        (_sentence(r, 2, 5).capitalize() + r.choice([".", "!", " 42"]), r.randint(1, 25)),
    ),
    edges=(
        ("caesar", ("Hello, World", -3)),
        ("caesar", ("abcxyz", 55)),
        ("caesar", ("Café Straße", 4)),
        ("caesar", ("Zebra", -27)),
    ),
)

_WRAP = Spec(
    key="word-wrap",
    modules=("wrapping", "textwrap_lite", "layout"),
    stubs=(
        ("wrap(text, width)", "Greedy word wrap: a list of lines of at most width characters."),
    ),
    source=_source("word_wrap"),
    summaries=(
        "Implement `wrap(text, width)` in `{mod}`: a greedy word wrap that returns a list of lines, each at most `width` characters, with words separated by single spaces and each line filled with as many words as fit.",
        "Write `wrap(text, width)` in `{mod}`. Split the text into words on whitespace and pack them greedily into lines no longer than `width`; return the lines as a list of strings.",
        "The stub `wrap(text, width)` in `{mod}` must break text into lines (a list of strings) of at most `width` characters, putting each word on the current line when it fits and starting a new line when it does not.",
    ),
    edge_notes=(
        "A word longer than `width` goes on a line of its own, unbroken.",
        "Empty or whitespace-only text gives an empty list; runs of spaces and newlines count as one separator.",
        "`width` below 1 must raise `ValueError`.",
    ),
    basic=lambda r: ("wrap", (_sentence(r, 4, 14), r.randint(8, 24))),
    edges=(
        ("wrap", ("a extraordinarily long word", 6)),
        ("wrap", ("   ", 10)),
        ("wrap", ("", 5)),
        ("wrap", ("one  two\nthree\t four", 9)),
        ("wrap", ("word", 0)),
    ),
)

_MERGE = Spec(
    key="merge-intervals",
    modules=("intervals", "spans", "ranges"),
    stubs=(("merge_intervals(intervals)", "Merge overlapping [start, end] intervals."),),
    source=_source("merge_intervals"),
    summaries=(
        "Implement `merge_intervals(intervals)` in `{mod}`: given `[start, end]` pairs in any order, return the merged list of `[start, end]` lists sorted by start. Intervals that overlap or touch (`[1, 3]` and `[3, 5]`) become one.",
        "Write `merge_intervals(intervals)` in `{mod}` so that it combines overlapping or touching closed intervals and returns them as a list of `[start, end]` lists in ascending order of start.",
        "The stub `merge_intervals` in `{mod}` should take a list of `[start, end]` pairs (unsorted) and return the union as non-overlapping `[start, end]` lists, sorted; touching intervals are merged.",
    ),
    edge_notes=(
        "An empty list gives an empty list.",
        "A pair written backwards (`[9, 4]`) means the interval `[4, 9]`.",
        "Single-point intervals such as `[5, 5]` are valid, and an interval inside another disappears into it.",
    ),
    basic=lambda r: ("merge_intervals", (_intervals(r),)),
    edges=(
        ("merge_intervals", ([],)),
        ("merge_intervals", ([[9, 4], [1, 2]],)),
        ("merge_intervals", ([[5, 5], [1, 10], [12, 12]],)),
        ("merge_intervals", ([[3, 1], [2, 6], [8, 8], [6, 7]],)),
    ),
)

_BRACKETS = Spec(
    key="balanced-brackets",
    modules=("brackets", "balance", "syntax_check"),
    stubs=(("is_balanced(text)", "True when the brackets (), [] and {} in text are balanced."),),
    source=_source("balanced_brackets"),
    summaries=(
        "Implement `is_balanced(text)` in `{mod}`: return True when every `(`, `[` and `{{` is closed by the matching bracket in the right order, False otherwise. Other characters are ignored.",
        "Write `is_balanced(text)` in `{mod}`, a bracket checker for `()`, `[]` and `{{}}`: brackets must close in last-opened-first-closed order; characters that are not brackets do not matter.",
        "The stub `is_balanced(text)` in `{mod}` should say (True/False) whether the round, square and curly brackets in `text` are properly nested and matched.",
    ),
    edge_notes=(
        'Brackets inside double-quoted strings (`"..."`) are ignored.',
        "A double quote that is never closed makes the text unbalanced (False).",
        "The empty string is balanced.",
    ),
    basic=lambda r: ("is_balanced", (_brackets(r),)),
    edges=(
        ("is_balanced", ('f("(") + [1]',)),
        ("is_balanced", ('say("hi)',)),
        ("is_balanced", ("",)),
        ("is_balanced", ('{"a": "[", "b": [1, 2]}',)),
        ("is_balanced", ('(")")',)),
    ),
)

_BASE = Spec(
    key="base-conversion",
    modules=("baseconv", "radix", "numbase"),
    stubs=(("to_base(n, base)", "The digits of the integer n written in base (2-36)."),),
    source=_source("base_conversion"),
    summaries=(
        "Implement `to_base(n, base)` in `{mod}`: it writes the integer `n` in the given base (2 to 36) using the digits 0-9 then lower-case a-z, without a prefix or leading zeros.",
        "Write `to_base(n, base)` in `{mod}` so that it returns the string form of `n` in base `base`; digits beyond 9 are the lower-case letters a-z (so base 16 uses 0-9a-f).",
        "The stub `to_base(n, base)` in `{mod}` should convert an integer to its representation in any base from 2 to 36 (digits `0123456789abcdefghijklmnopqrstuvwxyz`, no `0x`-style prefix).",
    ),
    edge_notes=(
        "`to_base(0, b)` is `'0'` for every base.",
        "Negative numbers get a leading minus sign (`to_base(-10, 2)` is `'-1010'`).",
        "A base below 2 or above 36 must raise `ValueError`.",
    ),
    basic=lambda r: ("to_base", (r.randint(1, 100000), r.choice([2, 3, 7, 8, 12, 16, 20, 36]))),
    edges=(
        ("to_base", (0, 7)),
        ("to_base", (-255, 16)),
        ("to_base", (-10, 2)),
        ("to_base", (10, 1)),
        ("to_base", (10, 37)),
    ),
)

_CASE = Spec(
    key="snake-camel",
    modules=("naming", "casing", "identifiers"),
    stubs=(
        ("snake_to_camel(name)", "'user_name' -> 'userName'."),
        ("camel_to_snake(name)", "'userName' -> 'user_name'."),
    ),
    source=_source("snake_camel"),
    summaries=(
        "Implement the two converters in `{mod}`: `snake_to_camel(name)` turns `max_item_count` into `maxItemCount`, and `camel_to_snake(name)` turns `maxItemCount` back into `max_item_count`.",
        "`{mod}` has stubs `snake_to_camel` and `camel_to_snake`. Make them convert identifiers between snake_case and lowerCamelCase (`order_total` <-> `orderTotal`).",
        "Write `snake_to_camel(name)` (`user_name` -> `userName`) and `camel_to_snake(name)` (`userName` -> `user_name`) in `{mod}`.",
    ),
    edge_notes=(
        "In `camel_to_snake`, a run of capitals is one word (`parseHTTPResponse` -> `parse_http_response`, `userID` -> `user_id`).",
        "In `snake_to_camel`, repeated, leading or trailing underscores are ignored (`__max__count_` -> `maxCount`).",
        "Digits stay attached to the word before them (`version2Name` <-> `version2_name`).",
    ),
    basic=lambda r: (
        ("camel_to_snake", (_camel(r),))
        if r.random() < 0.5
        else ("snake_to_camel", (_snake(_camel(r)),))
    ),
    edges=(
        ("camel_to_snake", ("parseHTTPResponse",)),
        ("camel_to_snake", ("userID",)),
        ("snake_to_camel", ("__max__count_",)),
        ("camel_to_snake", ("version2Name",)),
        ("snake_to_camel", ("version2_name",)),
    ),
)


def _snake(camel: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in camel)


_RANGES = Spec(
    key="compress-ranges",
    modules=("ranges", "pagespec", "numlist"),
    stubs=(("compress_ranges(numbers)", "[1, 2, 3, 5, 7, 8] -> '1-3,5,7-8'."),),
    source=_source("compress_ranges"),
    summaries=(
        "Implement `compress_ranges(numbers)` in `{mod}`: it takes a sorted list of distinct integers and returns a comma-separated summary in which each run of consecutive numbers is written `first-last` (`[1, 2, 3, 5, 7, 8]` -> `1-3,5,7-8`).",
        "Write `compress_ranges(numbers)` in `{mod}` so that a list of integers in ascending order becomes a compact string such as `4-6,9,11-12`: runs of two or more consecutive values collapse to `start-end`, lone values stay as they are, parts are joined by commas without spaces.",
        "The stub `compress_ranges` in `{mod}` should summarise an ascending list of integers as ranges, like a printer's page selection (`[2, 3, 4, 8]` gives `2-4,8`).",
    ),
    edge_notes=(
        "The input may be unsorted and may contain duplicates; treat it as the set of its values.",
        "An empty list gives the empty string.",
        "Negative numbers appear as they are (`[-3, -2, -1]` gives `-3--1`).",
    ),
    basic=lambda r: ("compress_ranges", (sorted(r.sample(range(1, 30), r.randint(3, 12))),)),
    edges=(
        ("compress_ranges", ([5, 3, 4, 4, 10],)),
        ("compress_ranges", ([],)),
        ("compress_ranges", ([-3, -2, -1, 1],)),
        ("compress_ranges", ([7, 7, 7],)),
    ),
)

SPECS = (_ROMAN_TO, _ROMAN_FROM, _RLE, _CAESAR, _WRAP, _MERGE, _BRACKETS, _BASE, _CASE, _RANGES)
