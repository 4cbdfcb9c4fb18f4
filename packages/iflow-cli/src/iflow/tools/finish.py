"""``finish``: the agent says it is done and gives its report."""

from __future__ import annotations

from pydantic import Field

from iflow.tools.base import Params, Tool, ToolContext, ToolOutput


class FinishParams(Params):
    summary: str = Field(
        default="",
        description="Your final report: what you did, what you found, anything left undone.",
    )


class Finish(Tool):
    name = "finish"
    description = (
        "Call when the task is complete (or cannot be completed) with a short final report. "
        "The run ends after this call."
    )
    params = FinishParams
    kind = "other"

    async def run(self, params: FinishParams, ctx: ToolContext) -> ToolOutput:
        return ToolOutput("Finished.", metadata={"finish": True, "summary": params.summary})
