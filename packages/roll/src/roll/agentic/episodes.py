"""Agentic episodes: an agent, with the policy as its model, on a task in a sandbox.

An episode takes a sandbox from a :class:`ale.episode.EpisodeRunner` (rock's warm
pool), applies the task's environment, runs the agent — the iflow agent loop in the compact
prompt profile with a :class:`~roll.policy.PolicyModel`, or any agent calling the
policy through the gateway (:mod:`roll.gateway`) with its episode's key, whose record then
replaces the agent's steps — and scores it with the task's verifier. How it ended decides
what becomes of it:

- **scored**: the verifier ran; the reward stands, whatever the agent did (a finish, a
  format error after garbage tool calls, turns or time used up, a loop): those are the
  policy's own results and it learns from them;
- **infrastructure**: the sandbox failed or was lost, the verifier failed or hung, the
  generation backend failed, the rock daemon went away (a restart) under the episode —
  nothing says how good the policy was, so the episode is dropped and run again from the
  same initial state (a fresh sandbox of the same task), up to ``max_attempts`` times;
  never scored as zero.

Every started episode is counted in :class:`EpisodeCounts`, so nothing is lost silently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ale.agents import BenchAgent, TaskContext, load_agent
from ale.episode import EpisodeResult, EpisodeRunner
from ale.sandbox import SandboxVerbs
from ale.task import Task
from ale.trajectory import FailureMode, Role, Step, Trajectory
from roll.agentic.admission import EpisodeGate, GroupGate
from roll.errors import RollError
from roll.gateway import Gateway
from roll.gateway.openai_api import MODEL_NAME
from roll.generation.queue import GenerationQueue
from roll.policy import PolicyModel

if TYPE_CHECKING:
    from rock.episode_runner import ForkedStarts

T = TypeVar("T")


@runtime_checkable
class ForkingRunner(EpisodeRunner, Protocol):
    """An episode runner that also starts episodes from forks of a prepared sandbox (rock's
    pool runner, :class:`rock.episode_runner.PoolRunner`): what a group needs that starts
    after an expert's first turns."""

    async def episode(
        self,
        task: Task,
        agent: BenchAgent,
        *,
        logs_dir: Path | None = None,
        before_verifier: Callable[[], Awaitable[None]] | None = None,
        starts: ForkedStarts | None = None,
    ) -> EpisodeResult: ...

    async def prepared(
        self, task: Task, prepare: Callable[[Any, str], Awaitable[T]], count: int
    ) -> tuple[ForkedStarts, T]: ...


@dataclass
class EpisodeCounts:
    """What happened to every episode started."""

    started: int = 0
    scored: int = 0
    retried: int = 0
    """Infrastructure failures that were run again."""
    abandoned: int = 0
    """Episodes whose every attempt failed for infrastructure reasons."""
    cut: int = 0
    """Episodes stopped before their end because their group was no longer wanted (tail
    batching's short rounds)."""
    cut_unverified: int = 0
    """Of those, the ones cut while they waited before their verifier (it never ran:
    :mod:`roll.agentic.admission`)."""
    reasons: Counter[str] = field(default_factory=Counter)
    last_error: str | None = None
    """The last infrastructure failure, as its sentence."""
    gateway_calls: int = 0
    """Policy calls served by the gateway (agents behind it)."""
    without_calls: int = 0
    """Episodes whose agent never called the gateway."""

    def as_metrics(self, prefix: str = "episodes/") -> dict[str, float]:
        out = {
            f"{prefix}started": float(self.started),
            f"{prefix}scored": float(self.scored),
            f"{prefix}infra_retried": float(self.retried),
            f"{prefix}infra_abandoned": float(self.abandoned),
        }
        if self.cut:
            out[f"{prefix}cut"] = float(self.cut)
            out[f"{prefix}cut_unverified"] = float(self.cut_unverified)
        if self.gateway_calls or self.without_calls:
            out[f"{prefix}gateway_calls"] = float(self.gateway_calls)
            out[f"{prefix}without_calls"] = float(self.without_calls)
        for reason, count in self.reasons.items():
            out[f"{prefix}infra/{reason}"] = float(count)
        return out


@dataclass
class AgentSettings:
    """How the iflow agent runs in training episodes."""

    prompt_profile: str = "compact"
    tool_format: str = "text"
    """``text`` or ``brief`` (see :class:`roll.config.TasksConfig`)."""
    max_turns: int = 8
    context_limit: int = 4096
    max_new_tokens: int = 256
    extra: dict[str, Any] = field(default_factory=dict)
    name: str = "iflow"
    """The agent (see :class:`roll.config.AgentConfig`); anything but in-process iflow calls
    the policy through ``gateway``."""
    gateway: Gateway | None = None

    def remote(self, url: str, key: str) -> BenchAgent:
        """The agent of one episode, given the gateway's base URL and the episode's key."""
        kwargs: dict[str, Any] = {"model": MODEL_NAME, "base_url": url, "api_key": key}
        if self.name == "iflow":  # iflow as over HTTP what it is in-process
            kwargs |= {
                "provider": "openai",
                "tool_format": self.tool_format,
                "prompt_profile": self.prompt_profile,
                "max_turns": self.max_turns,
                "context_limit": self.context_limit,
                "max_output_tokens": self.max_new_tokens,
            }
        return load_agent(self.name, **(kwargs | self.extra))


@dataclass(frozen=True)
class Start:
    """Where a group's episodes start (chunk-level initialised resampling on sandboxes): the
    expert's first ``anchor`` turns are replayed once, by the iflow agent's own tools, in a
    sandbox of the task; each episode gets a fork of that sandbox and continues from those
    turns, which enter its trajectory marked ``extra.roll.prefix`` (the imitation term's
    tokens, no RL loss). Anchor 0 is the task from its beginning."""

    expert: Trajectory
    anchor: int
    expert_index: int = 0


class _Continuing:
    """The episode's agent, continuing from ``prefix`` (given in its task context)."""

    def __init__(self, agent: BenchAgent, prefix: list[Step]) -> None:
        self.agent, self.prefix = agent, prefix
        self.name = getattr(agent, "name", "iflow")

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
        context: TaskContext | None = None,
        **options: Any,
    ) -> Trajectory:
        steps = [s.model_copy(deep=True) for s in self.prefix]  # the episode's own objects
        context = dataclasses.replace(context or TaskContext(), prefix=steps)
        run = self.agent.run
        return await run(  # type: ignore[call-arg]
            instruction, sandbox, logs_dir=logs_dir, timeout_sec=timeout_sec, context=context,
            **options,
        )  # fmt: skip


class AgenticEpisodes:
    """Runs groups of episodes of tasks with the policy (see the module docstring)."""

    def __init__(
        self,
        runner: EpisodeRunner,
        queue: GenerationQueue,
        tokenizer: Any,
        *,
        agent: AgentSettings | None = None,
        max_attempts: int = 3,
        retry_delay: float = 0.5,
    ) -> None:
        self.runner = runner
        self.retry_delay = retry_delay
        """Seconds before the second attempt, doubled for each further one (a restarting
        daemon or a refilling pool gets time to come back)."""
        self.queue = queue
        self.tokenizer = tokenizer
        self.agent = agent or AgentSettings()
        self.max_attempts = max_attempts
        self.counts = EpisodeCounts()

    def _agent(self) -> Any:
        from iflow.bench import IflowAgent

        model = PolicyModel(
            self.queue,
            self.tokenizer,
            context_limit=self.agent.context_limit,
            max_new_tokens=self.agent.max_new_tokens,
            tool_format=self.agent.tool_format,
        )
        return IflowAgent(
            model_obj=model,
            prompt_profile=self.agent.prompt_profile,
            max_turns=self.agent.max_turns,
            tool_format=self.agent.tool_format,
            **self.agent.extra,
        )

    async def _attempt(
        self, task: Task, group_id: str, hold: EpisodeGate | None, started: _Started | None
    ) -> EpisodeResult:
        gateway = self.agent.gateway
        if started is not None:  # (the config keeps resampling to the in-process agent)
            continuing = _Continuing(self._agent(), started.prefix)
            assert isinstance(self.runner, ForkingRunner)  # (_prepare made started with it)
            return await self.runner.episode(
                task, continuing, before_verifier=hold, starts=started.starts
            )
        if gateway is None:
            return await self.runner.episode(task, self._agent(), before_verifier=hold)
        key = gateway.episodes.open(f"{group_id}/{task.id}")
        try:
            agent = self.agent.remote(gateway.url, key)
            outcome = await self.runner.episode(task, agent, before_verifier=hold)
        finally:
            record = gateway.episodes.close(key)
            gateway.episodes.forget(key)
        self.counts.gateway_calls += record.calls
        if record.lost:  # the gateway restarted under it: not a result of the policy's
            return EpisodeResult(
                failure=FailureMode.MODEL_ERROR,
                error="the policy gateway restarted during the episode",
            )
        if not record.calls:
            self.counts.without_calls += 1
        if outcome.trajectory is not None:  # what the policy sampled, as the gateway saw it
            outcome.trajectory.steps = record.steps
        return outcome

    async def episode(
        self,
        task: Task,
        group_id: str,
        hold: EpisodeGate | None = None,
        started: _Started | None = None,
    ) -> Trajectory | None:
        """One scored episode of ``task`` (infrastructure failures run again), or ``None``
        when every attempt failed for infrastructure reasons; with ``hold``, each attempt
        waits there before its verifier (:mod:`roll.agentic.admission`); with ``started``,
        from a fork of its group's prepared sandbox (:class:`Start`)."""
        for attempt in range(self.max_attempts):
            if attempt:
                await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1))
            self.counts.started += 1
            try:
                outcome = await self._attempt(task, group_id, hold, started)
            except asyncio.CancelledError:  # its group was cut: stopped, sandbox given back
                self.counts.cut += 1
                raise
            reason = outcome.unscored
            if reason is None:
                self.counts.scored += 1
                trajectory = outcome.trajectory
                assert trajectory is not None
                trajectory.reward = float(outcome.reward or 0.0)
                trajectory.group_id = group_id
                trajectory.task_id = trajectory.task_id or task.id
                trajectory.episode_id = trajectory.episode_id or uuid.uuid4().hex
                if started is not None:
                    roll = trajectory.extra.setdefault("roll", {})
                    roll["anchor"] = started.anchor
                    roll["expert_index"] = started.expert_index
                return trajectory
            self.counts.reasons[reason.value] += 1
            self.counts.last_error = outcome.error or reason.value
            self.counts.retried += 1
        self.counts.retried -= 1
        self.counts.abandoned += 1
        return None

    async def group(
        self,
        task: Task,
        size: int,
        group_id: str,
        gate: GroupGate | None = None,
        start: Start | None = None,
    ) -> list[Trajectory]:
        """``size`` concurrent episodes of ``task``; the scored ones. Cancelled, it returns
        once every episode has stopped and given its sandbox back. With ``gate`` (a short
        round's), the episodes run their verifiers once the group is admitted. With
        ``start``, they continue from an expert's first turns, each in a fork of the sandbox
        they were replayed in (:class:`Start`); when that replay fails, so does the group."""
        started: _Started | None = None
        if start is not None and start.anchor > 0:
            started = await self._prepare(task, size, start)
            if started is None:
                return []
        try:
            return await self._group(task, size, group_id, gate, started)
        finally:
            if started is not None:
                await asyncio.shield(started.starts.aclose())

    async def _prepare(self, task: Task, size: int, start: Start) -> _Started | None:
        """The prepared sandbox and its forks, or None (counted) when it could not be made."""
        if not isinstance(self.runner, ForkingRunner):
            raise RollError(
                "episodes that start from an expert's turns need rock's pool runner (forks "
                "of a daemon's sandboxes); this runner has none."
            )

        async def replay(sandbox: Any, workdir: str) -> list[Step]:
            return await self._replay(task, start, sandbox, workdir)

        try:
            starts, prefix = await self.runner.prepared(task, replay, size)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the sandbox or the replay failed: no episode ran
            self.counts.started += size
            self.counts.abandoned += size
            self.counts.reasons[FailureMode.SANDBOX_ERROR.value] += size
            self.counts.last_error = f"the expert's turns could not be replayed: {exc}"
            return None
        return _Started(starts, prefix, start.anchor, start.expert_index)

    async def _replay(self, task: Task, start: Start, sandbox: Any, workdir: str) -> list[Step]:
        """The expert's first ``anchor`` turns, run by the iflow agent's tools in
        ``sandbox`` (a scripted model says them): its assistant turns (marked
        ``extra.roll.prefix``) and their tool results, as this sandbox answered them."""
        from iflow.bench import IflowAgent
        from iflow.models.scripted import ScriptedModel

        turns = [s for s in start.expert.steps if s.role is Role.ASSISTANT][: start.anchor]
        script: list[Any] = [
            {
                "content": t.content,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in t.tool_calls
                ],
            }
            if t.tool_calls
            else t.content
            for t in turns
        ]
        agent = IflowAgent(
            model_obj=ScriptedModel(script),
            prompt_profile=self.agent.prompt_profile,
            max_turns=len(script),
            tool_format=self.agent.tool_format,
            **self.agent.extra,
        )
        trajectory = await agent.run(task.instruction, sandbox, root=workdir)
        prefix: list[Step] = []
        seen = 0
        for step in trajectory.steps:
            if step.role is Role.ASSISTANT:
                if seen == len(script):
                    break
                seen += 1
                prefix.append(step.model_copy(update={"prefix": True}))
            elif step.role is Role.TOOL and seen:
                prefix.append(step)
        if seen < len(script):
            raise RollError(f"the expert's turns ended after {seen} of {len(script)} in the replay")
        return prefix

    async def _group(
        self,
        task: Task,
        size: int,
        group_id: str,
        gate: GroupGate | None,
        started: _Started | None,
    ) -> list[Trajectory]:
        async def one() -> Trajectory | None:
            hold = gate.episode() if gate is not None else None
            try:
                return await self.episode(task, group_id, hold, started)
            finally:
                if hold is not None:
                    hold.ended()

        episodes = [asyncio.ensure_future(one()) for _ in range(size)]
        try:
            done = await asyncio.gather(*episodes)
        except asyncio.CancelledError:  # gather stops waiting at the first cancelled episode
            for episode in episodes:
                episode.cancel()
            await asyncio.gather(*episodes, return_exceptions=True)
            raise
        return [t for t in done if t is not None]


@dataclass
class _Started:
    """A group's prepared start: the forks' source and the turns its episodes continue from."""

    starts: ForkedStarts
    prefix: list[Step]
    anchor: int
    expert_index: int
