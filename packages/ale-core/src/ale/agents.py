"""The agent contract between agent packages and the harnesses that run them.

An agent package (iflow, or any other) registers a class in the entry-point group
``ale.agents``; ``rock bench`` and the synthesis pipeline load it by name with
:func:`load_agent`, so they never import the agent's package. The class is built with
the harness's ``--model`` and ``--agent-kwarg key=value`` pairs, and its ``run`` gets the
task instruction and a sandbox (:class:`ale.sandbox.SandboxVerbs`: rock's ``Sandbox`` verbs,
``exec``, ``read_file``, ``write_file``...). It returns the episode's trajectory in the shared schema.
An agent whose ``run`` also takes ``context`` gets what the task gives its agent beyond the
instruction (:class:`TaskContext`: MCP servers, skills, a prior conversation).
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ale.atif import read_atif
from ale.plugins import load_entry_point
from ale.sandbox import SandboxVerbs
from ale.task.models import Task, TaskMcpServer
from ale.trajectory import Step, Trajectory

GROUP = "ale.agents"


@runtime_checkable
class BenchAgent(Protocol):
    """What a harness needs from an agent."""

    name: str

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        """Work on ``instruction`` inside ``sandbox``; return the trajectory (its
        ``failure_mode`` says how the run ended when it did not finish cleanly)."""
        ...


@dataclass(frozen=True)
class TaskContext:
    """What a task gives its agent besides the instruction (Harbor passes the same to the
    agents that support it). A harness passes it as ``run(..., context=...)`` to an agent
    whose ``run`` takes ``context`` (:func:`accepts_context`), when the task has any."""

    mcp_servers: list[TaskMcpServer] = field(default_factory=list)
    """MCP servers: a stdio one runs inside the sandbox, a URL one is reached as it is."""
    skills_dir: str | None = None
    """A directory in the sandbox of Agent Skills (``<skill>/SKILL.md``)."""
    prior: Trajectory | None = None
    """A conversation to start from (the task's ``trajectory.json``)."""
    prefix: list[Step] = field(default_factory=list)
    """Turns already taken after the instruction, which the agent continues from: an
    expert's first assistant turns and their tool results, replayed in this sandbox (or the
    one it was forked from) — chunk-level initialised resampling. They count against the
    agent's turns and are kept as they are (their ``extra`` marks included)."""

    def __bool__(self) -> bool:
        return bool(self.mcp_servers or self.skills_dir or self.prior is not None or self.prefix)

    @classmethod
    def of(cls, task: Task, *, first: bool = True) -> TaskContext:
        """The context of ``task``'s agent (``first``: for its first or only step; the prior
        conversation belongs to that one)."""
        from_file = None
        if first and task.prior_trajectory is not None:
            from_file = read_atif(task.prior_trajectory)
        env = task.environment
        return cls(mcp_servers=list(env.mcp_servers), skills_dir=env.skills_dir, prior=from_file)


def accepts_context(agent: object) -> bool:
    """Whether ``agent.run`` takes a ``context`` keyword (:class:`TaskContext`)."""
    run = getattr(agent, "run", None)
    try:
        return callable(run) and "context" in inspect.signature(run).parameters
    except (TypeError, ValueError):
        return False


AGENT_CHECK = "check"
"""An agent may also have ``check()``: a harness calls it once before its first trial, and it
raises :class:`AgentConfigError` (one sentence) when the agent cannot start — iflow without a
model, say — so a run is refused rather than failed trial by trial."""


class AgentNotFound(LookupError):
    """No installed package registers an agent of that name."""


class AgentConfigError(ValueError):
    """An agent's arguments (``--model``, ``--agent-kwarg``) are missing or wrong; the message
    is one sentence saying which and what to give instead."""


def available_agents() -> list[str]:
    """Names registered in the ``ale.agents`` entry-point group."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def load_agent(name: str, **kwargs: Any) -> BenchAgent:
    """The agent registered as ``name`` (or the class ``package.module:Class``), built with
    ``kwargs``; :class:`ale.plugins.PluginLoadError` (one sentence) when its package fails to
    import."""
    if ":" in name and not any(ep.name == name for ep in entry_points(group=GROUP)):
        module, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise AgentNotFound(
                f"{name!r} names no agent class that can be imported ({type(exc).__name__}: "
                f"{exc}); check the module path and that its package is installed."
            ) from None
        return _build(name, factory, kwargs)
    for ep in entry_points(group=GROUP):
        if ep.name == name:
            return _build(name, load_entry_point(ep, "agent"), kwargs, ep.value)
    known = ", ".join(available_agents()) or "none"
    raise AgentNotFound(
        f"no agent named {name!r} is installed (installed agents: {known}); "
        "install the package that provides it, e.g. iflow-cli for 'iflow'."
    )


def _build(name: str, factory: object, kwargs: dict[str, Any], where: str = "") -> BenchAgent:
    if not callable(factory):
        raise AgentNotFound(
            f"the agent {name!r}{f' ({where})' if where else ''} is something that cannot be "
            "built; its package must register a class or factory function."
        )
    agent: BenchAgent = factory(**kwargs)
    return agent


def parse_agent_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``["max_turns=30", "temperature=0.2"]`` as a dict; values are read as JSON when they
    parse (numbers, booleans, lists), else kept as strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"agent kwarg {pair!r} is not key=value; write it like max_turns=30")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
