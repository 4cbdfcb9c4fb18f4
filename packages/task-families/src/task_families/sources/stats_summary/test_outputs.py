import json
from pathlib import Path

EXPECTED = json.loads("$expected")
TOLERANCE = "$tol"


def test_output_is_json_object():
    got = json.loads(Path("$path").read_text())
    assert isinstance(got, dict)


def test_keys():
    got = json.loads(Path("$path").read_text())
    assert set(EXPECTED) <= set(got), sorted(set(EXPECTED) - set(got))


def test_values():
    got = json.loads(Path("$path").read_text())
    for key, want in EXPECTED.items():
        assert abs(float(got[key]) - want) <= TOLERANCE, (key, got[key], want)
