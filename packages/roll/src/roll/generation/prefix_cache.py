"""Keys and values of sequences the HF backend has already run, found again by longest prefix.

An agent's turn sends its whole conversation again: the last prompt, the answer sampled for
it and what the tool printed. Without this store each turn ran the forward pass over all of
it; with it, a turn's prompt finds the sequence it extends (its previous prompt and answer,
kept when that row stopped) and only the new tokens go forward, as vLLM's automatic prefix
caching and SGLang's radix cache do on a GPU. A call's prompts that begin alike (an agent's
system prompt and tools) have their common prefix computed once and kept here too.

An entry is one sequence's keys and values, a ``[1, kv heads, length, head dim]`` pair per
layer, valid for one policy version: a weight sync empties the store, and an entry offered
under another version is refused. The least recently used entries leave first once more than
``max_tokens`` tokens are kept; a sequence that extends a kept one replaces it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

Layers = list[tuple["torch.Tensor", "torch.Tensor"]]
"""Keys and values per layer, each ``[1, kv heads, length, head dim]``."""


class PrefixCache:
    """Kept sequences' keys and values, matched by the longest common prefix."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.version = 0
        self._entries: OrderedDict[tuple[int, ...], Layers] = OrderedDict()
        self._tokens = 0

    @property
    def tokens(self) -> int:
        """How many tokens' keys and values are kept."""
        return self._tokens

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self, version: int) -> None:
        """Forget every entry: the weights that computed them are gone."""
        self._entries.clear()
        self._tokens = 0
        self.version = version

    def match(self, ids: Sequence[int], limit: int) -> tuple[Layers | None, int]:
        """The kept entry sharing the longest prefix with ``ids`` (counting at most ``limit``
        tokens) and that prefix's length; ``(None, 0)`` when none shares a token."""
        key = tuple(ids)
        best: tuple[int, ...] | None = None
        length = 0
        for kept in self._entries:
            if kept[0] != key[0] or len(kept) <= length:
                continue
            common = _common_prefix(kept, key, limit)
            if common > length:
                best, length = kept, common
        if best is None:
            return None, 0
        self._entries.move_to_end(best)
        return self._entries[best], length

    def keep(self, ids: Sequence[int], layers: Layers, version: int) -> None:
        """Keep ``layers`` (computed under policy ``version``) for ``ids``."""
        key = tuple(ids)
        if version != self.version or not key or len(key) > self.max_tokens:
            return
        for kept in list(self._entries):
            if len(kept) <= len(key) and key[: len(kept)] == kept:  # the new one covers it
                del self._entries[kept]
                self._tokens -= len(kept)
            elif len(kept) > len(key) and kept[: len(key)] == key:  # already covered
                self._entries.move_to_end(kept)
                return
        self._entries[key] = layers
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            dropped, _ = self._entries.popitem(last=False)
            self._tokens -= len(dropped)


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit`` (a binary search over
    tuple slices: each comparison runs in C)."""
    high = min(len(a), len(b), limit)
    if a[:high] == b[:high]:
        return high
    low = 0  # a[:low] == b[:low] holds; a[:high] == b[:high] does not
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


__all__ = ["Layers", "PrefixCache"]
