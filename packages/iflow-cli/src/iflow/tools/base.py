"""Tools: a name, a description, a pydantic model of parameters (its JSON schema is what the
model sees) and an async ``run``. The :class:`ToolRegistry` turns a model's tool call into an
observation and never raises for a bad call: unknown names, invalid JSON and arguments that
fail validation all become error observations the model can read.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from ale.trajectory import ToolCall, ToolResult, Trajectory
from iflow.errors import AgentEnd, IflowError
from iflow.models.base import INVALID_JSON_KEY
from iflow.plan import TodoList

if TYPE_CHECKING:
    from iflow.workspace.base import Workspace
    from iflow.workspace.shell import ShellSession

ToolKind = Literal["read", "edit", "execute", "mcp", "other"]
"""What approval a tool needs: ``read`` never asks, ``edit`` asks outside auto-edit/yolo,
``execute`` and ``mcp`` (an MCP server's tool that is not read-only) ask outside yolo,
``other`` (todo, finish, task) never asks."""


class Params(BaseModel):
    """Base of every tool's parameters: unknown arguments are errors the model is told about."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class ToolOutput:
    """What a tool returns: the text the model reads and structured detail it does not."""

    content: str
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


class SubAgent(Protocol):
    """What the ``task`` tool uses of a sub-agent: it runs one prompt and is closed; its
    report, trajectory and token counts go to its parent."""

    final_answer: str
    turn: int
    trajectory: Trajectory
    prompt_tokens: int
    completion_tokens: int

    async def run(self, prompt: str) -> AgentEnd: ...

    async def aclose(self) -> None: ...


class SubAgentHost(Protocol):
    """What a tool may ask of the agent running it: a sub-agent, and to keep its record.
    (Tools get this much of :class:`iflow.agent.Agent`, not the agent itself.)"""

    def spawn(self, *, max_turns: int) -> SubAgent: ...

    def adopt_subagent(self, description: str, sub: SubAgent) -> None: ...


@dataclass
class ToolContext:
    """What tools act on. The agent makes one per run."""

    workspace: Workspace
    shell: ShellSession
    todos: TodoList
    agent: SubAgentHost | None = None
    """The running agent (the ``task`` tool spawns its sub-agent from it)."""


class ToolFailed(IflowError):
    """Raised by a tool to answer with an error observation (its message is what the model reads)."""


class Tool(abc.ABC):
    """One tool. Subclasses set the class attributes and implement :meth:`run`."""

    name: str
    description: str
    params: type[Params]
    kind: ToolKind = "read"
    trusted: bool = False
    """Never ask before running it (an MCP server configured with ``trust``)."""

    def compact_schema(self) -> dict[str, Any]:
        """The description of the compact prompt profile: the first sentence of the tool's
        description and its required parameters with their types only."""
        full = self.schema()
        function = full["function"]
        first = function["description"].strip().split("\n")[0].split(". ")[0].rstrip(".")
        parameters = function["parameters"]
        required = list(parameters.get("required", []))
        properties = parameters.get("properties", {})
        function["description"] = first + "."
        function["parameters"] = {
            "type": "object",
            "properties": {
                name: {"type": properties[name].get("type", "string")}
                for name in required
                if name in properties
            },
            "required": required,
        }
        return full

    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments (what the model is shown)."""
        parameters = self.params.model_json_schema()
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        return parameters

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool description of this tool."""
        parameters = self.parameters_schema()
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    @abc.abstractmethod
    async def run(self, params: Any, ctx: ToolContext) -> ToolOutput:
        """Do the work. Raise :class:`ToolFailed` (or return ``is_error=True``) for failures."""

    def describe(self, arguments: dict[str, Any]) -> str:
        """One line for people (the TUI's panel title, the approval prompt)."""
        inner = ", ".join(f"{k}={json.dumps(v)[:60]}" for k, v in arguments.items())
        return f"{self.name}({inner})"


class ToolRegistry:
    """The tools an agent may call, by name."""

    def __init__(self, tools: list[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}; give each a unique name")
            self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self, *, compact: bool = False) -> list[dict[str, Any]]:
        if compact:
            return [tool.compact_schema() for tool in self._tools.values()]
        return [tool.schema() for tool in self._tools.values()]

    def only(self, kinds: AbstractSet[str]) -> ToolRegistry:
        """A registry with just the tools of the given kinds (plan mode keeps read and other)."""
        return ToolRegistry([t for t in self._tools.values() if t.kind in kinds])

    def validate(self, call: ToolCall) -> tuple[Tool, Params] | ToolResult:
        """The tool and its parsed parameters, or the error observation for a bad call."""
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return _error(call, f"Unknown tool {call.name!r}. The tools you can call are: {known}.")
        if INVALID_JSON_KEY in call.arguments:
            raw = str(call.arguments[INVALID_JSON_KEY])[:500]
            return _error(
                call,
                f"The arguments of your {call.name} call are not valid JSON ({raw!r}); "
                "send a JSON object matching the tool's schema.",
            )
        try:
            params = tool.params.model_validate(call.arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            return _error(call, f"Invalid arguments for {call.name}: {problems}.")
        return tool, params

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run one call; every failure becomes an error observation."""
        checked = self.validate(call)
        if isinstance(checked, ToolResult):
            return checked
        tool, params = checked
        try:
            out = await tool.run(params, ctx)
        except ToolFailed as exc:
            return _error(call, str(exc))
        except IflowError as exc:
            return _error(call, str(exc))
        except OSError as exc:
            return _error(call, f"{call.name} failed: {exc}")
        return ToolResult(
            call_id=call.id, content=out.content, is_error=out.is_error, metadata=out.metadata
        )


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, content=message, is_error=True)
