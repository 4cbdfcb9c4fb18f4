"""The held-out figures' intervals: a bootstrap over tasks, for one model and for a gain."""

from __future__ import annotations

import math
import random

import pytest
from bench_fakes import trial

from rock.bench.results import TrialResults
from rock.bench.scores import gain, interval, pass_at, per_task


def _trials(outcomes: dict[str, list[bool]]) -> list[TrialResults]:
    return [
        trial(task, i + 1, ok, n_attempts=len(oks))
        for task, oks in outcomes.items()
        for i, ok in enumerate(oks)
    ]


def test_a_task_s_attempts_are_one_figure_mean_or_pass_at_k() -> None:
    trials = _trials({"a": [True, False, False, False], "b": [False] * 4, "c": [True] * 4})
    assert per_task(trials) == {"a": 0.25, "b": 0.0, "c": 1.0}
    assert per_task(trials, pass_at(4)) == {"a": 1.0, "b": 0.0, "c": 1.0}
    assert per_task(trials, pass_at(2))["a"] == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)


def test_the_interval_is_as_wide_as_the_normal_approximation_says() -> None:
    """38 tasks at one half: about ±16 points (1.96 · √(¼/38)); the same run, the same
    interval; a figure every task agrees on has no width."""
    values = [1.0] * 19 + [0.0] * 19
    low, high = interval(values)
    half = 1.96 * math.sqrt(0.25 / 38)
    assert low == pytest.approx(0.5 - half, abs=0.03) and high == pytest.approx(
        0.5 + half, abs=0.03
    )
    assert interval(values) == (low, high)
    assert interval([1.0] * 10) == (1.0, 1.0) and interval([]) == (0.0, 0.0)
    wide = interval([1.0] * 5 + [0.0] * 5)
    assert wide[1] - wide[0] > high - low  # fewer tasks, less sure


def test_a_gain_on_the_same_tasks_is_resampled_in_pairs() -> None:
    """Twelve tasks each solved more often after (by 0.25 of its attempts): the paired
    interval excludes zero, though the two models' own intervals overlap widely."""
    rng = random.Random(1)
    before = {f"t{i}": rng.choice([0.0, 0.25, 0.5, 0.75]) for i in range(12)}
    after = {t: v + 0.25 for t, v in before.items()}
    mean, (low, high) = gain(before, after)
    assert (
        mean == pytest.approx(0.25) and low == pytest.approx(0.25) and high == pytest.approx(0.25)
    )
    own = interval(list(before.values())), interval(list(after.values()))
    assert own[0][1] > own[1][0]  # overlapping, yet the gain is sure
    mixed = {t: v + (0.25 if i % 2 else -0.25) for i, (t, v) in enumerate(before.items())}
    assert gain(before, mixed)[1][0] < 0 < gain(before, mixed)[1][1]
    with pytest.raises(ValueError, match="share no task"):
        gain({"a": 1.0}, {"b": 1.0})
