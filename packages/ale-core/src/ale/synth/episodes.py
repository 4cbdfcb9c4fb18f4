"""The stages that run episodes in sandboxes -- verify, trajectory, replay -- each
deciding one candidate from its episodes and writing the decision to the journal."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from ale.agents import BenchAgent
from ale.episode import EpisodeResult
from ale.jsonl import read_jsonl, write_jsonl
from ale.synth.config import SynthConfig
from ale.synth.expert import ExpertRun
from ale.synth.family import draft_for
from ale.synth.journal import Journal
from ale.synth.plan import Candidate
from ale.task import Task
from ale.trajectory import StepMark, Trajectory


class Agents(Protocol):
    """The agents the stages need, made by the layer that wires the pipeline."""

    def oracle(self, task: Task) -> Any: ...

    def nop(self) -> Any: ...

    def expert(self, task: Task, run: ExpertRun) -> Any: ...

    def replay(self, trajectory: Trajectory) -> Any: ...

    def teacher(self) -> Any | None: ...


def _trajectory_file(work: Path, c: Candidate) -> Path:
    return work / "trajectories" / f"{c.id}.jsonl"


def saved_trajectory(work: Path, c: Candidate) -> Trajectory:
    """The trajectory the trajectory stage kept for ``c`` under the work directory."""
    return next(iter(read_jsonl(_trajectory_file(work, c))))


class EpisodeStages:
    """What each sandbox stage does with one candidate; ``episode`` runs one episode (the
    pipeline counts them)."""

    def __init__(
        self,
        config: SynthConfig,
        agents: Agents,
        episode: Callable[[Task, BenchAgent], Awaitable[EpisodeResult]],
        work: Path,
    ) -> None:
        self.config = config
        self.agents = agents
        self.episode = episode
        self.work = work

    async def verify(self, j: Journal, c: Candidate, task: Task) -> None:
        oracle = await self.episode(task, self.agents.oracle(task))
        if oracle.error is not None:
            j.put(
                "verify",
                c.id,
                False,
                f"oracle episode failed: {oracle.error}",
                kind="verify_error",
                retry=True,
            )
            return
        if not oracle.passed:
            j.put(
                "verify",
                c.id,
                False,
                f"the oracle solution fails its tests (reward {oracle.reward})",
                kind="oracle_failed",
            )
            return
        nop = await self.episode(task, self.agents.nop())
        if nop.error is not None:
            j.put(
                "verify",
                c.id,
                False,
                f"no-op episode failed: {nop.error}",
                kind="verify_error",
                retry=True,
            )
        elif nop.reward is not None and nop.reward > 0:
            j.put(
                "verify",
                c.id,
                False,
                f"the tests pass with no work done (reward {nop.reward})",
                kind="nop_passed",
            )
        else:
            j.put("verify", c.id, True, oracle_sec=oracle.seconds, nop_sec=nop.seconds)

    async def trajectory(self, j: Journal, c: Candidate, task: Task) -> None:
        rng = random.Random(f"{self.config.seed}|mistake|{c.id}")
        mistake = rng.random() < self.config.mistake_rate
        teacher = None
        if self.config.teacher is not None and rng.random() < self.config.teacher.share:
            teacher = self.agents.teacher()
        source = "expert"
        outcome: EpisodeResult | None = None
        if teacher is not None:
            outcome = await self.episode(task, teacher)
            source = "teacher"
            if not outcome.passed:
                j.put("teacher", c.id, False, outcome.error or f"reward {outcome.reward}")
                outcome = None
        if outcome is None:
            source = "expert"
            draft = draft_for(c.family, c.seed, c.difficulty)
            run = ExpertRun(
                draft.expert(),
                mistake=mistake,
                mistake_after=rng.randrange(3),
                mistakes=list(draft.mistakes),
                rng=rng,
            )
            outcome = await self.episode(task, self.agents.expert(task, run))
        if outcome.error is not None or outcome.trajectory is None:
            j.put(
                "trajectory",
                c.id,
                False,
                f"the {source} episode failed: {outcome.error}",
                kind="trajectory_error",
                retry=True,
            )
            return
        if not outcome.passed:
            j.put(
                "trajectory",
                c.id,
                False,
                f"the {source} did not solve it (reward {outcome.reward})",
                kind="expert_failed",
            )
            return
        t = outcome.trajectory
        t.task_id = c.id
        t.extra["synth"] = {
            **c.attrs(),
            "seed": c.seed,
            "source": source,
            "multi_turn": c.multi_turn,
            "mistakes": sum(s.mark is StepMark.MISTAKE for s in t.steps),
        }
        write_jsonl(_trajectory_file(self.work, c), [t])
        j.put("trajectory", c.id, True, source=source)

    async def replay(self, j: Journal, c: Candidate, task: Task) -> None:
        recorded = saved_trajectory(self.work, c)
        outcome = await self.episode(task, self.agents.replay(recorded))
        if outcome.error is not None:
            j.put(
                "replay",
                c.id,
                False,
                f"the replay episode failed: {outcome.error}",
                kind="replay_error",
                retry=True,
            )
        elif outcome.reward != recorded.reward:
            j.put(
                "replay",
                c.id,
                False,
                f"replayed, the calls reach reward {outcome.reward}, not {recorded.reward}",
                kind="replay_mismatch",
            )
        else:
            j.put("replay", c.id, True)
