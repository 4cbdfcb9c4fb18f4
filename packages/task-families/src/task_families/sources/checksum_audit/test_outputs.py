import json
from pathlib import Path

REL = "$rel"
OUT = "$out"
AS_JSON = "$as_json"
EXPECTED = json.loads("$expected")


def _norm(path):
    path = path.strip()
    if path.startswith(REL + "/"):
        path = path[len(REL) + 1 :]
    while path.startswith("./"):
        path = path[2:]
    return path


def _report():
    if AS_JSON:
        data = json.loads(Path(OUT).read_text())
        return {k: data[k] for k in EXPECTED}
    got = {}
    for key in EXPECTED:
        lines = Path(OUT, key + ".txt").read_text().splitlines()
        got[key] = [ln for ln in lines if ln.strip()]
    return got


def test_report_exists():
    assert Path(OUT).exists()


def test_categories():
    got = _report()
    for key, want in EXPECTED.items():
        assert sorted({_norm(p) for p in got[key]}) == sorted(want), key
