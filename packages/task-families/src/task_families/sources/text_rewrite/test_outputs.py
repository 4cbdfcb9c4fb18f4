import hashlib
from pathlib import Path

EXPECTED = "$expected"


def test_output_matches():
    got = Path("$path").read_text()
    assert got.rstrip("\n") == EXPECTED.rstrip("\n")
