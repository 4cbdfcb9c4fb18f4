"""Duplicate instructions: exact (after normalising) and near (MinHash over word shingles).

Exact duplicates are found by the SHA-256 of the normalised text (lower case, runs of
white space as one space). Near duplicates are pairs whose Jaccard similarity of word
``k``-shingles is at least a threshold, estimated with MinHash signatures and found
through locality-sensitive hashing (bands of rows): candidates that share a band bucket
are compared on their signatures, so the work grows with the number of texts, not its
square. The first text of a duplicate set (in the order given) is kept.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_WORDS = re.compile(r"[a-z0-9_]+")
_MERSENNE = (1 << 61) - 1
_MAX_HASH = (1 << 32) - 1


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def exact_key(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()


def shingles(text: str, k: int = 5) -> set[str]:
    """The word ``k``-grams of ``text`` (lower-cased words; shorter texts give one shingle)."""
    words = _WORDS.findall(text.lower())
    if len(words) <= k:
        return {" ".join(words)}
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


def jaccard(a: str, b: str, k: int = 5) -> float:
    """Exact Jaccard similarity of the word ``k``-shingles of two texts."""
    sa, sb = shingles(a, k), shingles(b, k)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def _hash32(item: str) -> int:
    return struct.unpack("<I", hashlib.blake2b(item.encode(), digest_size=4).digest())[0]


class MinHasher:
    """MinHash signatures with ``num_perm`` universal hash functions, seeded."""

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        import random

        rng = random.Random(seed)
        self.num_perm = num_perm
        self._a = [rng.randrange(1, _MERSENNE) for _ in range(num_perm)]
        self._b = [rng.randrange(0, _MERSENNE) for _ in range(num_perm)]

    def signature(self, items: Iterable[str]) -> tuple[int, ...]:
        hashes = [_hash32(i) for i in items] or [0]
        return tuple(
            min(((a * h + b) % _MERSENNE) & _MAX_HASH for h in hashes)
            for a, b in zip(self._a, self._b, strict=True)
        )


def estimated_jaccard(sig_a: Sequence[int], sig_b: Sequence[int]) -> float:
    return sum(x == y for x, y in zip(sig_a, sig_b, strict=True)) / len(sig_a)


@dataclass
class DedupResult:
    kept: list[int]
    """Indices of the texts kept, in order."""
    duplicate_of: dict[int, tuple[int, str, float]]
    """Index of each dropped text -> (index it repeats, "exact" or "near", similarity)."""


def deduplicate(
    texts: Sequence[str],
    *,
    threshold: float = 0.8,
    k: int = 5,
    num_perm: int = 128,
    bands: int = 32,
    seed: int = 1,
) -> DedupResult:
    """Drop exact and near duplicates (estimated Jaccard >= ``threshold``), keeping the first."""
    if num_perm % bands:
        raise ValueError(f"num_perm ({num_perm}) must be a multiple of bands ({bands})")
    rows = num_perm // bands
    hasher = MinHasher(num_perm, seed)
    seen_exact: dict[str, int] = {}
    buckets: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(bands)]
    signatures: dict[int, tuple[int, ...]] = {}
    kept: list[int] = []
    dropped: dict[int, tuple[int, str, float]] = {}
    for i, text in enumerate(texts):
        key = exact_key(text)
        if key in seen_exact:
            dropped[i] = (seen_exact[key], "exact", 1.0)
            continue
        sig = hasher.signature(shingles(text, k))
        best: tuple[int, float] | None = None
        candidates: set[int] = set()
        for band in range(bands):
            candidates.update(buckets[band].get(sig[band * rows : (band + 1) * rows], ()))
        for j in sorted(candidates):
            score = estimated_jaccard(sig, signatures[j])
            if score >= threshold and (best is None or score > best[1]):
                best = (j, score)
        if best is not None:
            dropped[i] = (best[0], "near", round(best[1], 3))
            continue
        seen_exact[key] = i
        signatures[i] = sig
        for band in range(bands):
            buckets[band].setdefault(sig[band * rows : (band + 1) * rows], []).append(i)
        kept.append(i)
    return DedupResult(kept=kept, duplicate_of=dropped)
