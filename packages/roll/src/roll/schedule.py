"""Tail batching: a rollout schedule for synchronous, on-policy RL without waiting for stragglers.

A plain synchronous step runs ``groups_per_step`` groups and waits for the slowest episode,
so with long-tailed episode lengths most steps are as slow as their longest episode. Tail
batching (RollPacker, arXiv 2509.21009) splits the steps in two kinds:

- a **short round** launches ``ceil(eta * groups_per_step)`` groups of fresh prompts, trains
  on the first ``groups_per_step`` that finish and cuts the others (an in-process episode is
  dropped where it is; an agentic one is cancelled, its sandbox given back): their prompts
  are *deferred*. Agentic groups run their verifiers only once admitted, so the groups cut
  never do (:mod:`roll.agentic.admission`);
- a **long round** — every ``long_round_every``-th step while prompts are deferred — runs
  every deferred prompt together (fresh ones filling up to ``groups_per_step``) and waits
  for them all: the long episodes of several steps share one wait, so a long round trains
  more groups than a short one. A group that fails whole there for infrastructure reasons
  is replaced by a fresh prompt (at most :data:`RESAMPLE_LIMIT` rounds of them per step,
  counted), so a broken task cannot hold the run up.

Every group starts after the previous update and is over before the next: every sample is
on-policy (its policy version is the trainer's at its step), unlike asynchronous rollouts.
A deferred prompt runs again from its start with the new policy. The deferred prompts and the
counters are part of the checkpoint (:meth:`TailBatching.state`), so a run killed in the
middle of a long round resumes with the same prompts.

:class:`TailBatching` is a :class:`~roll.sources.RolloutSource` over any source that can
run a round (:class:`RoundRunner`): the in-process environments, agentic tasks, and their
Ray variants.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from pydantic import BaseModel

from ale.trajectory import Trajectory
from roll.config import TailBatchingConfig
from roll.errors import TrainingAborted

RESAMPLE_LIMIT = 3
"""Rounds of fresh prompts a long round runs in place of groups that failed whole."""


class Prompt(BaseModel):
    """What a group is run on, as kept in the deferred queue (and the checkpoint)."""

    key: str
    """An environment prompt's name (``s{step}-g{index}``), or a task's id."""
    seed: int | None = None
    """The environment seed (in-process environments)."""
    step: int
    """The step it was drawn in."""


@dataclass
class Round:
    """What a round gave: groups trained on, prompts cut (deferred), groups failed whole."""

    groups: list[list[Trajectory]] = field(default_factory=list)
    cut: list[Prompt] = field(default_factory=list)
    failed: list[Prompt] = field(default_factory=list)


class RoundRunner(Protocol):
    """A rollout source that can run rounds (besides the :class:`~roll.sources.RolloutSource`
    verbs, which tail batching hands on)."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...

    def metrics(self) -> dict[str, float]: ...

    def paused(self) -> AbstractContextManager[Any]: ...

    def fresh(self, step: int, indices: range) -> list[Prompt]:
        """New prompts of ``step`` (the ``indices``-th drawn in it)."""
        ...

    def run_round(self, step: int, prompts: list[Prompt], keep: int | None) -> Round:
        """A group of each prompt with the current policy: with ``keep``, until that many
        groups have finished (the others cut); else until all have."""
        ...


class TailBatching:
    """The tail-batching schedule over ``runner`` (see the module docstring)."""

    def __init__(
        self,
        runner: RoundRunner,
        config: TailBatchingConfig,
        *,
        groups_per_step: int,
        start_step: int,
    ) -> None:
        self.runner = runner
        self.config = config
        self.groups_per_step = groups_per_step
        self.step = start_step
        self.deferred: list[Prompt] = []
        self.counters = {"short_rounds": 0, "long_rounds": 0, "deferred_total": 0,
                         "failed_groups": 0, "long_resampled": 0}  # fmt: skip
        self._last: dict[str, float] = {}

    def __enter__(self) -> Self:
        self.runner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.__exit__(*exc)

    def paused(self) -> AbstractContextManager[Any]:
        return self.runner.paused()

    def long_round(self, step: int) -> bool:
        """Whether ``step`` runs the deferred prompts (and waits for them all)."""
        return bool(self.deferred) and (step + 1) % self.config.long_round_every == 0

    def take(self, version: int) -> list[Trajectory]:
        step = self.step
        self.step += 1
        wanted = self.groups_per_step
        long = self.long_round(step)
        if long:
            self.counters["long_rounds"] += 1
            prompts, self.deferred = self.deferred, []
            drawn = max(wanted - len(prompts), 0)
            prompts += self.runner.fresh(step, range(drawn))
            launched = len(prompts)
            result = self.runner.run_round(step, prompts, None)
            groups, failed = list(result.groups), len(result.failed)
            for _ in range(RESAMPLE_LIMIT):  # fresh prompts in place of groups failed whole
                if not failed:
                    break
                self.counters["failed_groups"] += failed
                self.counters["long_resampled"] += failed
                fresh = self.runner.fresh(step, range(drawn, drawn + failed))
                drawn += failed
                launched += failed
                again = self.runner.run_round(step, fresh, None)
                groups += again.groups
                failed = len(again.failed)
            self.counters["failed_groups"] += failed
        else:
            self.counters["short_rounds"] += 1
            launched = math.ceil(self.config.eta * wanted - 1e-9)  # 1.2 * 5 is not above 6
            result = self.runner.run_round(step, self.runner.fresh(step, range(launched)), wanted)
            groups = result.groups
            self.deferred += result.cut
            self.counters["deferred_total"] += len(result.cut)
            self.counters["failed_groups"] += len(result.failed)
        if not groups:
            raise TrainingAborted(
                f"no group of step {step + 1} could be run: every one of its {launched} "
                "prompts failed for infrastructure reasons (see episodes/infra/* in the "
                "metrics); check the sandboxes and the rock daemon"
            )
        self._last = {"tail/long_round": float(long), "tail/launched_groups": float(launched)}
        return [t for group in groups for t in group]

    def metrics(self) -> dict[str, float]:
        out = self.runner.metrics() | self._last
        out["tail/deferred"] = float(len(self.deferred))
        for key, value in self.counters.items():
            out[f"tail/{key}"] = float(value)
        return out

    def state(self) -> dict[str, Any]:
        """The deferred prompts and the counters, for the checkpoint."""
        return {
            "deferred": [p.model_dump() for p in self.deferred],
            "counters": dict(self.counters),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.deferred = [Prompt.model_validate(p) for p in state.get("deferred", [])]
        self.counters.update(state.get("counters", {}))
