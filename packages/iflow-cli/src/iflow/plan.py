"""The agent's plan: the list ``todo_write`` replaces and ``todo_read`` shows (the tools are
in :mod:`iflow.tools.todo`). It is the agent's state, not a tool's: compression keeps it,
the agent reminds the model of open items, the TUI's ``/todo`` shows it, sessions save it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

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
