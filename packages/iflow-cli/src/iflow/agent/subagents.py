"""Sub-agents: the ``task`` tool's fresh agent with its own context, and what its parent
keeps of it (its trajectory, its tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from iflow.tools.base import SubAgent
from iflow.workspace.shell import ShellSession

if TYPE_CHECKING:
    from iflow.agent import Agent


class SubAgents:
    """The agent's side of :class:`iflow.tools.base.SubAgentHost`, mixed into
    :class:`iflow.agent.Agent` (each method works on the agent it is mixed into)."""

    def spawn(self, *, max_turns: int) -> Agent:
        """A sub-agent for the ``task`` tool: same model, workspace and policy, own context."""
        agent = cast("Agent", self)
        shell = ShellSession(agent.workspace, env=dict(agent.shell.env))
        shell.cwd = agent.shell.cwd
        config = agent.config.model_copy(
            update={"max_turns": min(max_turns, agent.config.max_turns)}
        )
        sub = type(agent)(
            agent.model,
            agent.workspace,
            config=config,
            tools=[t for t in agent.all_tools if t.name != "task"],
            approver=agent.approver,
            memory=agent.memory,
            shell=shell,
            name=f"{agent.name}-task",
        )
        sub.policy = agent.policy
        return sub

    def adopt_subagent(self, description: str, sub: SubAgent) -> None:
        """Keep a finished sub-agent's trajectory in this one's record, and count its tokens."""
        agent = cast("Agent", self)
        record: dict[str, Any] = agent.trajectory.extra.setdefault("iflow", {})
        record.setdefault("subagents", []).append(
            {"description": description, "trajectory": sub.trajectory.model_dump(mode="json")}
        )
        agent.prompt_tokens += sub.prompt_tokens
        agent.completion_tokens += sub.completion_tokens
