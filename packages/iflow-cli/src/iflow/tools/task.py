"""``task``: a sub-agent with its own bounded context that returns only its final report.

The sub-agent shares the workspace, the model and the approval policy, starts its own
shell session in the parent's current directory, cannot start sub-agents itself, and
has its own (smaller) turn limit. Its whole trajectory is kept in the parent's
trajectory (``extra.iflow.subagents``); the parent's model reads only the report.
"""

from __future__ import annotations

from pydantic import Field

from iflow.tools.base import Params, Tool, ToolContext, ToolFailed, ToolOutput


class TaskParams(Params):
    description: str = Field(description="A short (3-5 word) name for the sub-task.")
    prompt: str = Field(
        description=(
            "Everything the sub-agent needs to do the sub-task on its own: the goal, the "
            "relevant paths, and what its report should contain."
        )
    )


class Task(Tool):
    name = "task"
    description = (
        "Delegate a self-contained sub-task (e.g. a broad search or an investigation) to a "
        "sub-agent with a fresh context. It has the same tools except task and returns only "
        "its final report, which keeps your own context small."
    )
    params = TaskParams
    kind = "other"

    def __init__(self, max_turns: int = 30) -> None:
        self.max_turns = max_turns

    async def run(self, params: TaskParams, ctx: ToolContext) -> ToolOutput:
        parent = ctx.agent
        if parent is None:
            raise ToolFailed("task needs a running agent; it cannot be called here.")
        sub = parent.spawn(max_turns=self.max_turns)
        try:
            end = await sub.run(params.prompt)
        finally:
            await sub.aclose()
        report = sub.final_answer or "(the sub-agent gave no report)"
        parent.adopt_subagent(params.description, sub)
        if end.failure_mode is not None:
            return ToolOutput(
                f"The sub-agent stopped before finishing ({end}). Its last words:\n{report}",
                is_error=True,
                metadata={"subagent": sub.trajectory.trajectory_id, "outcome": end.failure_mode},
            )
        return ToolOutput(
            report, metadata={"subagent": sub.trajectory.trajectory_id, "turns": sub.turn}
        )
