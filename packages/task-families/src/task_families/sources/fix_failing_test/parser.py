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
