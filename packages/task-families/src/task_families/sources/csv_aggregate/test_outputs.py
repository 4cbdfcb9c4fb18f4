import json
from pathlib import Path

EXPECTED = "$expected"


def test_output_exists():
    assert Path("$path").is_file()


def test_totals():
    got = json.loads(Path("$path").read_text())
    want = json.loads(EXPECTED)
    assert set(got) == set(want)
    for key, total in want.items():
        assert abs(float(got[key]) - total) < 0.011, key
