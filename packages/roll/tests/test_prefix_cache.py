"""PrefixCache: longest-prefix matches, covering sequences, the token bound, policy versions."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from roll.generation.prefix_cache import PrefixCache  # noqa: E402


def layers(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]


def test_the_longest_common_prefix_wins_within_the_limit() -> None:
    store = PrefixCache(100)
    store.keep([1, 2, 3], layers(3), 0)
    store.keep([1, 2, 9, 9, 9], layers(5), 0)
    kept, n = store.match([1, 2, 9, 9, 4, 4], limit=5)
    assert n == 4 and kept is not None and kept[0][0].shape[2] == 5
    assert store.match([1, 2, 9, 9, 9], limit=3)[1] == 3  # a prompt keeps tokens to run
    assert store.match([7, 2, 3], limit=3) == (None, 0)


def test_a_sequence_that_extends_a_kept_one_replaces_it() -> None:
    store = PrefixCache(100)
    store.keep([1, 2], layers(2), 0)
    store.keep([1, 2, 3, 4], layers(4), 0)
    assert len(store) == 1 and store.tokens == 4
    store.keep([1, 2, 3], layers(3), 0)  # already covered: nothing added
    assert len(store) == 1 and store.tokens == 4


def test_the_least_recently_used_leave_past_the_bound() -> None:
    store = PrefixCache(6)
    store.keep([1, 1, 1], layers(3), 0)
    store.keep([2, 2, 2], layers(3), 0)
    store.match([1, 1, 1, 5], limit=3)  # used: [2, 2, 2] is now the oldest
    store.keep([3, 3, 3], layers(3), 0)
    assert store.match([2, 2, 2], limit=3) == (None, 0)
    assert store.match([1, 1, 1], limit=3)[1] == 3 and store.tokens == 6
    store.keep(list(range(7)), layers(7), 0)  # longer than the bound: not kept
    assert store.tokens == 6


def test_entries_of_another_policy_version_are_refused_and_a_sync_empties_it() -> None:
    store = PrefixCache(100)
    store.keep([1, 2, 3], layers(3), 0)
    store.clear(1)
    assert len(store) == 0 and store.match([1, 2, 3, 4], limit=3) == (None, 0)
    store.keep([1, 2, 3], layers(3), 0)  # computed with the old weights
    assert len(store) == 0
