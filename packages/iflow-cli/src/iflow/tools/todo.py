"""The plan: ``todo_write`` replaces the list, ``todo_read`` shows it.

The list lives in the agent's :class:`TodoList`; compression keeps it, the agent
reminds the model of open items, the TUI's ``/todo`` shows it, sessions save it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from iflow.tools.base import Params, Tool, ToolContext, ToolOutput

Status = Literal["pending", "in_progress", "completed"]
_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


class TodoItem(BaseModel):
    """One item of the plan."""

    content: str = Field(min_length=1, description="What to do, in a short imperative sentence.")
    status: Status = Field(default="pending", description="pending, in_progress or completed.")


class TodoList:
    """The agent's plan."""

    def __init__(self, items: list[TodoItem] | None = None) -> None:
        self.items: list[TodoItem] = list(items or [])

    def replace(self, items: list[TodoItem]) -> None:
        self.items = list(items)

    def open_items(self) -> list[TodoItem]:
        return [item for item in self.items if item.status != "completed"]

    def render(self) -> str:
        """The list as the model and people read it; a sentence when it is empty."""
        if not self.items:
            return "The todo list is empty."
        lines = [
            f"{i}. {_MARK[item.status]} {item.content}" for i, item in enumerate(self.items, 1)
        ]
        done = len(self.items) - len(self.open_items())
        return f"Todo list ({done}/{len(self.items)} done):\n" + "\n".join(lines)

    def dump(self) -> list[dict[str, str]]:
        return [item.model_dump() for item in self.items]

    @classmethod
    def load(cls, data: list[dict[str, str]]) -> TodoList:
        return cls([TodoItem.model_validate(item) for item in data])


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
