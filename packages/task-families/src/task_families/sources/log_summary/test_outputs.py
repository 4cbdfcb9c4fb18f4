import json
from pathlib import Path

OUT = Path("$out")
STYLE = "$style"
KEY = "$key"
EXPECTED = "$expected"


def rows():
    text = OUT.read_text()
    if STYLE == "json":
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if STYLE == "csv":
        header = [c.strip() for c in lines[0].split(",")]
        assert header == [KEY, "count"], header
        cells = [[c.strip() for c in line.split(",")] for line in lines[1:]]
        return [(c[0], int(c[1])) for c in cells]
    parts = [line.split() for line in lines]
    assert all(len(p) == 2 for p in parts), lines
    if STYLE == "uniq":
        return [(p[1], int(p[0])) for p in parts]
    return [(p[0], int(p[1])) for p in parts]


def test_report_exists():
    assert OUT.is_file()


def test_counts():
    want = [tuple(r) for r in json.loads(EXPECTED)]
    got = rows()
    if got is None:
        data = json.loads(OUT.read_text())
        assert data == dict(want)
    else:
        assert sorted(got) == sorted(want)


def test_order():
    want = [tuple(r) for r in json.loads(EXPECTED)]
    got = rows()
    if got is not None:
        assert got == want
