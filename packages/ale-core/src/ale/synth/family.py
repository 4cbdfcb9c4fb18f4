"""Task families: seeded generators of complete Terminal-Bench 2.0 tasks.

A :class:`Family` turns ``(seed, difficulty)`` into a :class:`TaskDraft`: the instruction,
the files of the environment, the pytest checks, the oracle solution and an *expert*, a
small program that solves the task by acting and reading what it sees (see
:mod:`ale.synth.expert`). Generation is pure and deterministic: the same family, seed and
difficulty give the same draft on any machine, so a run can be resumed, replayed and
regenerated from its config alone.

Families register themselves with :func:`register` when their module is imported; the
modules live outside ale-core (the built-in ones in the ``task-families`` distribution) and
are found through the ``ale.task_families`` entry-point group. :func:`get_family` finds one
by name and names the closest known one when asked for a family that does not exist.
"""

from __future__ import annotations

import difflib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

from ale.plugins import PluginLoadError, load_entry_point
from ale.synth.expert import Action, Observation

CATEGORIES = (
    "data-processing",
    "debugging",
    "system-administration",
    "software-engineering",
    "scientific-computing",
    "security",
    "games",
    "text-processing",
)
"""The categories a family may declare."""

DIFFICULTIES = ("easy", "medium", "hard")

WORKDIR = "/app"
"""Where the agent starts, the oracle runs and the tests run."""

BASE_IMAGE = "rock/bench-base:bookworm"
"""The local base image every generated task builds on (made by rock without a registry)."""

ExpertProgram = Generator[Action, Observation, str]
"""An expert: yields actions, is sent what each one showed, returns its final message."""


@dataclass
class TaskDraft:
    """Everything a generated task is made of, before it is written to disk."""

    instruction: str
    """What the agent is asked to do (Markdown)."""
    files: dict[str, str | bytes]
    """Files of the environment: absolute path in the container -> content. Paths under
    /app are the agent's working files; others (``/etc/...``) are placed where named."""
    tests: str
    """Source of ``tests/test_outputs.py``: pytest checks run from /app after the agent."""
    solution: str
    """Body of ``solution/solve.sh``: bash, run from /app; must make the tests pass."""
    expert: Callable[[], ExpertProgram]
    """Makes a fresh expert program for this task (called once per episode)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The knobs this draft was made with (JSON-able), recorded in task.toml."""
    modes: dict[str, int] = field(default_factory=dict)
    """File modes for paths in ``files`` (default 0o644)."""
    setup: list[str] = field(default_factory=list)
    """Shell commands run as root after the files are placed (Dockerfile RUN lines)."""
    mistakes: list[Action] = field(default_factory=list)
    """Family-specific recoverable mistakes the expert may make (besides generic typos):
    each must fail harmlessly and change nothing the tests check."""
    tags: list[str] = field(default_factory=list)
    agent_timeout_sec: float = 300.0
    test_timeout_sec: float = 120.0


class Family(ABC):
    """A generator of tasks of one kind."""

    name: ClassVar[str]
    """Unique, kebab-case: ``csv-aggregate``."""
    category: ClassVar[str]
    """One of :data:`CATEGORIES`."""
    description: ClassVar[str]
    """One sentence for listings."""
    multi_turn: ClassVar[bool] = False
    """True when the task cannot be solved without first inspecting something and
    acting on what was seen (so credit over interactions matters)."""
    difficulties: ClassVar[tuple[str, ...]] = DIFFICULTIES

    @abstractmethod
    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        """A draft drawn with ``rng`` (the only source of randomness) at ``difficulty``."""


class UnknownFamily(LookupError):
    """No family of that name is registered."""

    def __str__(self) -> str:  # KeyError-like classes would quote the message
        return str(self.args[0])


_REGISTRY: dict[str, Family] = {}


def register(cls: type[Family]) -> type[Family]:
    """Class decorator adding a family to the registry."""
    if cls.category not in CATEGORIES:
        raise ValueError(
            f"family {cls.name} declares category {cls.category!r}; "
            f"use one of {', '.join(CATEGORIES)}"
        )
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"two families are named {cls.name!r}")
    _REGISTRY[cls.name] = cls()
    return cls


ENTRY_POINTS = "ale.task_families"
"""The entry-point group whose modules register families when imported."""

_loaded: set[str] = set()
_broken: dict[str, PluginLoadError] = {}
"""Family modules that failed to import, by entry point: their families are missing."""


def _load_installed() -> None:
    """Import every installed family module (each registers its families), once; a module
    that fails is remembered in ``_broken`` and the others still load."""
    for ep in entry_points(group=ENTRY_POINTS):
        if ep.value not in _loaded and ep.value not in _broken:
            try:
                load_entry_point(ep, "task-family")
            except PluginLoadError as exc:
                _broken[ep.value] = exc
                continue
            _loaded.add(ep.value)


def broken_packages() -> list[PluginLoadError]:
    """The installed family packages that failed to load (each error is one sentence)."""
    _load_installed()
    return list(_broken.values())


def families() -> dict[str, Family]:
    """Every registered family by name."""
    _load_installed()
    return dict(sorted(_REGISTRY.items()))


def get_family(name: str) -> Family:
    """The family named ``name``; :class:`UnknownFamily` naming the closest one otherwise."""
    known = families()
    if name in known:
        return known[name]
    if _broken:  # the family may be in the package that failed: say so, not "unknown"
        raise UnknownFamily(
            f"there is no task family named {name!r} among those that loaded; "
            + " ".join(str(e) for e in _broken.values())
        )
    if not known:
        raise UnknownFamily(
            f"there is no task family named {name!r}: no task families are installed; install "
            "the task-families package (pip install -e packages/task-families) or your own."
        )
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UnknownFamily(
        f"there is no task family named {name!r}; {hint}the families are: {', '.join(known)}."
    )


def task_rng(family: str, seed: int, difficulty: str) -> random.Random:
    """The random stream a draft is generated from: a function of its identity only."""
    return random.Random(f"{family}|{seed}|{difficulty}")


def draft_for(family: str, seed: int, difficulty: str) -> TaskDraft:
    """Generate the draft of ``family`` at ``seed`` and ``difficulty`` (deterministic)."""
    fam = get_family(family)
    if difficulty not in fam.difficulties:
        raise ValueError(
            f"family {family} has no difficulty {difficulty!r}; "
            f"use one of {', '.join(fam.difficulties)}"
        )
    return fam.generate(task_rng(family, seed, difficulty), difficulty)
