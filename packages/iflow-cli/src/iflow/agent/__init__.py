"""The agent, one room per concern: the loop and what it holds (:mod:`.loop`), what it does
with one answer (:mod:`.answers`), its context window (:mod:`.context`), its records of
history and trajectory (:mod:`.records`), its session state and rewind (:mod:`.session`),
the run's budget (:mod:`.budget`) and sub-agents (:mod:`.subagents`), put together here."""

from iflow.agent.budget import RunBudget
from iflow.agent.loop import INTERRUPTED_ANSWER, AgentLoop, TurnHook
from iflow.agent.session import SessionState
from iflow.agent.subagents import SubAgents


class Agent(AgentLoop, SessionState, SubAgents):
    """One agent: a model, a workspace, tools, and the conversation so far; it runs prompts
    (:class:`AgentLoop`), keeps and restores its session (:class:`SessionState`), and spawns
    the ``task`` tool's sub-agents (:class:`SubAgents`)."""


__all__ = ["INTERRUPTED_ANSWER", "Agent", "AgentLoop", "RunBudget", "TurnHook"]
