"""The agent's records: each step appended to the history (what the model sees) and to the
trajectory (the full record), calls left without results closed, a run's end written into
the trajectory, and the turns a run continues from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from ale.trajectory import AgentInfo, Role, Step, Timings, ToolResult, Trajectory, Usage
from iflow import __version__
from iflow.errors import AgentEnd
from iflow.events import RunEnded

if TYPE_CHECKING:
    from iflow.agent import Agent


class Records:
    """Mixed into :class:`iflow.agent.AgentLoop` (each method works on the agent)."""

    def _new_trajectory(self) -> Trajectory:
        """The trajectory this agent records, holding the system prompt so far."""
        agent = cast("Agent", self)
        return Trajectory(
            agent=AgentInfo(
                name=agent.name,
                version=__version__,
                extra={
                    "approval_mode": agent.config.approval_mode,
                    "workspace": agent.workspace.kind,
                },
            ),
            model=agent.model.name,
            steps=list(agent.history),
        )

    def _append(self, step: Step) -> None:
        agent = cast("Agent", self)
        agent.history.append(step)
        agent.trajectory.steps.append(step)

    def _close_dangling_calls(self, why: str) -> None:
        """Answer tool calls left without results, so the history stays well-formed."""
        agent = cast("Agent", self)
        if not agent.history or agent.history[-1].role is not Role.ASSISTANT:
            return
        calls = agent.history[-1].tool_calls
        if calls:
            agent._append(
                Step(
                    role=Role.TOOL,
                    tool_results=[
                        ToolResult(call_id=c.id, content=f"Not run: {why}.", is_error=True)
                        for c in calls
                    ],
                )
            )

    def _record_end(self, end: AgentEnd, started_at: datetime, seconds: float) -> None:
        agent = cast("Agent", self)
        t = agent.trajectory
        t.failure_mode = end.failure_mode
        t.usage = Usage(
            prompt_tokens=agent.prompt_tokens,
            completion_tokens=agent.completion_tokens,
            cost_usd=agent.cost_usd or None,
        )
        t.timings = Timings(started_at=started_at, finished_at=datetime.now(UTC), agent_sec=seconds)
        t.extra.setdefault("iflow", {})["end"] = {"outcome": _outcome(end), "message": str(end)}
        agent.emit(
            RunEnded(
                outcome=_outcome(end),
                message=str(end),
                exit_code=end.exit_code,
                turns=agent.budget.turns,
                result=agent.final_answer,
            )
        )

    def continue_from(self, steps: list[Step]) -> None:
        """Start the next run as if ``steps`` (assistant turns and their tool results) had
        already followed its prompt: an expert's first turns, replayed in this workspace
        (chunk-level initialised resampling). They are kept as they are, the same objects
        in the history and the trajectory, and each assistant turn counts against
        ``max_turns``."""
        agent = cast("Agent", self)
        agent._prefix = [s for s in steps if s.role in (Role.ASSISTANT, Role.TOOL)]

    def _take_prefix(self) -> None:
        agent = cast("Agent", self)
        prefix, agent._prefix = agent._prefix, []
        for step in prefix:
            agent._append(step)
            if step.role is Role.ASSISTANT:
                agent.turn += 1
                agent.budget.turns += 1


def _outcome(end: AgentEnd) -> str:
    return "finished" if end.failure_mode is None else end.failure_mode.value
