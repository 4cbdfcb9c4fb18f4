"""The one output cap rock's backends and iflow's workspace share."""

from __future__ import annotations

from ale.capped import CappedOutput


def test_keeps_the_first_bytes_up_to_its_cap_and_counts_the_rest() -> None:
    out = CappedOutput(5)
    for chunk in (b"abc", b"defg", b"", b"hi"):
        out.add(chunk)
    assert (bytes(out.data), out.total, out.dropped) == (b"abcde", 9, 4)


def test_nothing_dropped_under_the_cap() -> None:
    out = CappedOutput(10)
    out.add(b"hello")
    assert (bytes(out.data), out.dropped) == (b"hello", 0)
