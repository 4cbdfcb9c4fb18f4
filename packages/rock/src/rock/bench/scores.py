"""A benchmark's figures over tasks and how sure they are: pass@k, 95 % intervals over
tasks for one model and for a gain between two.

The figure (greedy success, the mean of k samples, pass@k) is a mean over tasks,
and the tasks are what was drawn, so the interval comes from resampling tasks: a percentile
bootstrap, the tasks drawn again with replacement (10,000 times, a fixed seed, so the same
run always prints the same interval). A gain between two models on the same tasks is
resampled in pairs (each task's difference), which is what tells a real gain from noise when
both models find the same tasks easy. Attempts of one task are never resampled alone: they
are not independent of each other.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

RESAMPLES = 10_000
"""Bootstrap resamples of the tasks."""


class Outcome(Protocol):
    """A trial as these figures see it (rock bench's ``TrialResults`` is one)."""

    @property
    def task_id(self) -> str: ...

    @property
    def is_resolved(self) -> bool | None: ...


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts with c successes: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def per_task(
    results: Iterable[Outcome], statistic: Callable[[list[bool]], float] | None = None
) -> dict[str, float]:
    """Each task's figure from its trials' outcomes: the fraction resolved, or
    ``statistic`` of the outcomes (see :func:`pass_at`)."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        outcomes[r.task_id].append(bool(r.is_resolved))
    fn = statistic or (lambda v: sum(v) / len(v))
    return {task: fn(v) for task, v in sorted(outcomes.items())}


def pass_at(k: int) -> Callable[[list[bool]], float]:
    """The unbiased pass@k of a task's outcomes, as a statistic for :func:`per_task`."""
    return lambda v: pass_at_k(len(v), sum(v), min(k, len(v)))


def interval(values: Sequence[float], *, seed: int = 0) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of the mean of ``values`` (one per task)."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(RESAMPLES))
    return (means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1])


def gain(
    before: Mapping[str, float], after: Mapping[str, float], *, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """The mean gain of ``after`` over ``before`` on the tasks both have, with its paired
    95 % interval; ValueError when they share no task."""
    shared = sorted(before.keys() & after.keys())
    if not shared:
        raise ValueError("the two runs share no task: a gain needs the same held-out tasks")
    diffs = [after[t] - before[t] for t in shared]
    return sum(diffs) / len(diffs), interval(diffs, seed=seed)
