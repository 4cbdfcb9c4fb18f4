import csv
import json
from pathlib import Path

OUT = Path("$out")
FORMAT = "$fmt"
NAMES = "$names"
EXPECTED = "$rows"


def same(got, want):
    if isinstance(want, bool) or want is None:
        return got == want
    if isinstance(want, (int, float)):
        try:
            return abs(float(got) - want) < 1e-6
        except (TypeError, ValueError):
            return False
    return str(got) == want


def load():
    text = OUT.read_text()
    if FORMAT == "json":
        return json.loads(text)
    if FORMAT == "jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    table = [row for row in csv.reader(text.splitlines()) if row]
    assert table[0] == json.loads(NAMES), table[0]
    return [dict(zip(table[0], row)) for row in table[1:]]


def test_output_exists():
    assert OUT.is_file()


def test_rows():
    got = load()
    want = json.loads(EXPECTED)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert set(g) == set(w), (i, sorted(g))
        for key, value in w.items():
            assert same(g[key], value), (i, key, g[key], value)
