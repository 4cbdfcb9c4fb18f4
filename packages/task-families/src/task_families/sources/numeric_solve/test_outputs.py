from pathlib import Path

EXPECTED = "$expected"
TOL = "$tol"


def numbers():
    return [float(tok) for tok in Path("$path").read_text().split()]


def test_count():
    assert len(numbers()) == len(EXPECTED)


def test_values():
    for got, want in zip(numbers(), EXPECTED):
        assert abs(got - want) <= TOL, (got, want)
