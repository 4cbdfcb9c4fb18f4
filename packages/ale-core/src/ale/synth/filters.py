"""Filters over trajectories and instructions: heuristics and decontamination.

* :func:`heuristic_reason` rejects trajectories a trainer should not imitate: runs that
  ended in a failure mode, too many turns or characters, one identical call repeated, or
  calls the agent could not parse.
* :class:`Contamination` measures how much of an instruction's word n-grams appear in
  held-out evaluation tasks, so nothing close to an evaluation task is trained on.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ale.synth.config import FilterConfig
from ale.trajectory import Role, Trajectory

_WORDS = re.compile(r"[a-z0-9_]+")
INVALID_JSON_KEY = "_invalid_json"
"""Where agents put tool-call arguments they could not parse as JSON."""


def heuristic_reason(trajectory: Trajectory, config: FilterConfig) -> str | None:
    """Why ``trajectory`` fails the heuristics, or None when it passes."""
    if trajectory.failure_mode is not None:
        return f"the run ended with {trajectory.failure_mode.value}"
    turns = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
    if len(turns) > config.max_turns:
        return f"{len(turns)} assistant turns, over the limit of {config.max_turns}"
    size = 0
    for step in trajectory.steps:
        size += len(step.content) + sum(len(r.content) for r in step.tool_results)
        size += sum(len(json.dumps(c.arguments)) for c in step.tool_calls)
    if size > config.max_chars:
        return f"{size} characters, over the limit of {config.max_chars}"
    calls = Counter(
        (c.name, json.dumps(c.arguments, sort_keys=True)) for s in turns for c in s.tool_calls
    )
    if calls:
        (name, _), count = calls.most_common(1)[0]
        if count > config.max_repeats:
            return f"one {name} call repeated {count} times (limit {config.max_repeats})"
    for step in trajectory.steps:
        if any(INVALID_JSON_KEY in c.arguments for c in step.tool_calls):
            return "a tool call whose arguments could not be parsed"
        if step.role is Role.TOOL and any(
            r.call_id is None and r.is_error for r in step.tool_results
        ):
            return "a reply the agent could not parse as a tool call"
    return None


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORDS.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


class Contamination:
    """Word n-gram overlap of texts with a held-out set."""

    def __init__(self, held_out: Iterable[tuple[str, str]], n: int) -> None:
        """``held_out``: ``(name, text)`` pairs of evaluation instructions."""
        self.n = n
        self.index: dict[tuple[str, ...], str] = {}
        self.count = 0
        for name, text in held_out:
            self.count += 1
            for gram in ngrams(text, n):
                self.index.setdefault(gram, name)

    def overlap(self, text: str) -> tuple[float, str | None]:
        """The share of ``text``'s n-grams found in the held-out set, and the held-out task
        that shares the most of them."""
        grams = ngrams(text, self.n)
        if not grams:
            return 0.0, None
        hits = Counter(self.index[g] for g in grams if g in self.index)
        if not hits:
            return 0.0, None
        return sum(hits.values()) / len(grams), hits.most_common(1)[0][0]


def held_out_instructions(paths: Iterable[Path]) -> list[tuple[str, str]]:
    """``(set/task, instruction)`` of every task under each directory (a task set, a
    dataset with a ``tasks/`` directory, or one task). A directory that does not exist or
    holds no task is an error naming it."""
    from ale.task import iter_tasks, load_task
    from ale.task.loader import detect_format

    out: list[tuple[str, str]] = []
    for path in paths:
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(
                f"the held-out set {path} is not a directory; fix decontamination.sets "
                "or the --held-out path."
            )
        if not detect_format(path) and (path / "tasks").is_dir():
            path = path / "tasks"  # a dataset written by `rock synth run`
        tasks = [load_task(path)] if detect_format(path) else list(iter_tasks(path))
        if not tasks:
            raise FileNotFoundError(
                f"the held-out set {path} holds no tasks; point decontamination.sets or "
                "--held-out at a directory of tasks (or a dataset with a tasks/ directory)."
            )
        out += [(f"{path.name}/{t.id}", t.instruction) for t in tasks]
    return out
