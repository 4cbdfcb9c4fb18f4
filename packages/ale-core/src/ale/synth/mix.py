"""Choose a dataset of a given size whose make-up follows declared proportions.

Each declared dimension (family, category, difficulty) gets quotas: ``target x share``
rounded by largest remainder so they sum to the target. A first pass takes items (in a
seeded order) while every dimension's quota for the item's value has room; when
shortages leave the dataset short, a second pass adds the items that overshoot their
quotas least. The report gives, per dimension and value, the declared and achieved share.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence


def quotas(shares: Mapping[str, float], target: int) -> dict[str, int]:
    """``target`` split by ``shares`` (largest remainder; ties by name)."""
    raw = {k: target * v for k, v in shares.items()}
    out = {k: math.floor(v) for k, v in raw.items()}
    left = target - sum(out.values())
    for key in sorted(raw, key=lambda k: (-(raw[k] - out[k]), k))[:left]:
        out[key] += 1
    return out


def mix(
    items: Sequence[Mapping[str, str]],
    declared: Mapping[str, Mapping[str, float]],
    target: int,
    seed: int,
) -> tuple[list[int], dict[str, dict[str, dict[str, float]]]]:
    """Indices of the chosen items (in their original order) and the proportions report.

    ``items`` map each dimension name to the item's value; ``declared`` maps dimension
    names to ``{value: share}``.
    """
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    quota = {dim: quotas(shares, target) for dim, shares in declared.items()}
    counts: dict[str, Counter[str]] = {dim: Counter() for dim in declared}
    chosen: list[int] = []

    def take(i: int) -> None:
        chosen.append(i)
        for dim in declared:
            counts[dim][items[i][dim]] += 1

    for i in order:
        if len(chosen) >= target:
            break
        if all(counts[d][items[i][d]] < quota[d].get(items[i][d], 0) for d in declared):
            take(i)
    rest = [i for i in order if i not in set(chosen)]
    while len(chosen) < target and rest:

        def overshoot(i: int) -> float:
            return max(
                (
                    (counts[d][items[i][d]] + 1) / max(quota[d].get(items[i][d], 0), 1e-9)
                    for d in declared
                ),
                default=0.0,
            )

        best = min(rest, key=overshoot)
        rest.remove(best)
        take(best)
    total = len(chosen) or 1
    report: dict[str, dict[str, dict[str, float]]] = {}
    for dim, shares in declared.items():
        report[dim] = {
            value: {
                "declared": shares.get(value, 0.0),
                "achieved": round(counts[dim][value] / total, 4),
                "count": counts[dim][value],
                "quota": quota[dim].get(value, 0),
            }
            for value in sorted(set(shares) | set(counts[dim]))
        }
    return sorted(chosen), report
