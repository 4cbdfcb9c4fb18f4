"""The plan: ``todo_write`` replaces the list, ``todo_read`` shows it.

The list is the agent's :class:`iflow.plan.TodoList`.
"""

from __future__ import annotations

from pydantic import Field

from iflow.plan import TodoItem
from iflow.tools.base import Params, Tool, ToolContext, ToolOutput


class TodoWriteParams(Params):
    todos: list[TodoItem] = Field(
        description="The whole plan, in order; it replaces the previous list."
    )


class TodoWrite(Tool):
    name = "todo_write"
    description = (
        "Write your plan as a todo list (it replaces the previous one). Use it for tasks of "
        "several steps; mark an item in_progress when you start it and completed when done."
    )
    params = TodoWriteParams
    kind = "other"

    async def run(self, params: TodoWriteParams, ctx: ToolContext) -> ToolOutput:
        ctx.todos.replace(params.todos)
        return ToolOutput(ctx.todos.render(), metadata={"todos": ctx.todos.dump()})


class TodoReadParams(Params):
    pass


class TodoRead(Tool):
    name = "todo_read"
    description = "Show the current todo list."
    params = TodoReadParams
    kind = "other"

    async def run(self, params: TodoReadParams, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(ctx.todos.render())
