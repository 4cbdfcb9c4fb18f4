"""The agent's session state: the conversation (what the model sees) and the trajectory (the
full record), kept in step; what a session file saves and restores; an earlier conversation
to start from or an expert's turns to continue; and rewinding to an earlier turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ale.trajectory import Role, Step, StepMark, Trajectory
from iflow.checkpoints import RewindError, RewindReport
from iflow.plan import TodoList

if TYPE_CHECKING:
    from iflow.agent import Agent


class SessionState:
    """Mixed into :class:`iflow.agent.Agent` (each method works on the agent it is mixed into)."""

    def state(self) -> dict[str, Any]:
        """What a session file keeps to resume this agent."""
        agent = cast("Agent", self)
        return {
            "history": agent.history,
            "trajectory": agent.trajectory,
            "todos": agent.todos.dump(),
            "turns": agent.turn,
            "tokens_used": agent.prompt_tokens + agent.completion_tokens,
            "extra": {
                "cwd": agent.shell.cwd,
                "always": sorted(agent.policy.always),
                "completion_tokens": agent.completion_tokens,
            },
        }

    def restore(
        self,
        *,
        history: list[Step],
        trajectory: Trajectory,
        todos: list[dict[str, str]],
        turns: int,
        tokens_used: int,
        extra: dict[str, Any],
    ) -> None:
        """Resume from what :meth:`state` kept."""
        agent = cast("Agent", self)
        agent.history = list(history)
        agent.trajectory = trajectory
        agent.todos.replace(TodoList.load(todos).items)
        agent.turn = turns
        agent.completion_tokens = int(extra.get("completion_tokens", 0))
        agent.prompt_tokens = max(0, tokens_used - agent.completion_tokens)
        agent.policy.always = set(extra.get("always", []))
        if extra.get("cwd"):
            agent.shell.cwd = str(extra["cwd"])
        agent.meter.reset()

    def seed(self, steps: list[Step]) -> None:
        """Start from an earlier conversation (a task's prior context): its user, assistant
        and tool steps follow the system prompt, marked :attr:`~StepMark.COPIED` (ATIF's
        ``is_copied_context``: no training loss is taken on them)."""
        agent = cast("Agent", self)
        copied = [
            s.model_copy(update={"mark": StepMark.COPIED})
            for s in steps
            if s.role is not Role.SYSTEM
        ]
        agent.history.extend(copied)
        agent.trajectory.steps.extend(copied)
        agent.meter.reset()

    async def rewind(self, number: int) -> RewindReport:
        """Back to before turn ``number``: its files as they were then, the conversation
        cut before its prompt (a :class:`RewindError` of one sentence when there is none)."""
        agent = cast("Agent", self)
        if agent.checkpoints is None:
            raise RewindError(
                "this session keeps no checkpoints (it is not saved), so it cannot rewind."
            )
        turn, report = await agent.checkpoints.rewind(number)
        agent.history = agent.history[: turn.history_len]
        agent.trajectory.steps = agent.trajectory.steps[: turn.trajectory_len]
        agent.final_answer = ""
        agent.meter.reset()
        return report
