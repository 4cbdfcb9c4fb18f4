"""The tools the agent can call. :func:`default_tools` is the set every surface uses."""

from __future__ import annotations

from iflow.plan import TodoItem, TodoList
from iflow.tools.base import (
    Params,
    Tool,
    ToolContext,
    ToolFailed,
    ToolKind,
    ToolOutput,
    ToolRegistry,
)
from iflow.tools.files import ReadFile, Replace, WriteFile
from iflow.tools.finish import Finish
from iflow.tools.search import Glob, ListDirectory, SearchFileContent
from iflow.tools.shell import DEFAULT_OUTPUT_LIMIT, RunShellCommand
from iflow.tools.task import Task
from iflow.tools.todo import TodoRead, TodoWrite

__all__ = [
    "Params",
    "TodoItem",
    "TodoList",
    "Tool",
    "ToolContext",
    "ToolFailed",
    "ToolKind",
    "ToolOutput",
    "ToolRegistry",
    "default_tools",
]


def default_tools(
    *, output_limit: int = DEFAULT_OUTPUT_LIMIT, subagents: bool = True
) -> list[Tool]:
    """Every tool, in the order the model sees them (``task`` left out for sub-agents)."""
    tools: list[Tool] = [
        RunShellCommand(output_limit=output_limit),
        ReadFile(),
        WriteFile(),
        Replace(),
        ListDirectory(),
        Glob(),
        SearchFileContent(),
        TodoWrite(),
        TodoRead(),
    ]
    if subagents:
        tools.append(Task())
    tools.append(Finish())
    return tools
