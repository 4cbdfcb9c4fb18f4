"""The agent's context window: the prompt kept within the model's limit, older turns
compressed into a summary when it nears it (``/compress`` too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from iflow.context.compress import compress
from iflow.errors import ContextLengthExceeded
from iflow.events import Compressed, Notice, TokensUpdated

if TYPE_CHECKING:
    from iflow.agent import Agent


class ContextWindow:
    """Mixed into :class:`iflow.agent.AgentLoop` (each method works on the agent)."""

    async def _fit_context(self) -> None:
        agent = cast("Agent", self)
        used = agent.context_used()
        limit = agent.model.context_limit
        agent.emit(
            TokensUpdated(
                used=used, limit=limit, total=agent.prompt_tokens + agent.completion_tokens
            )
        )
        if used > agent.config.compress_threshold * limit:
            await agent.compress()
            if agent.context_used() > limit:
                raise ContextLengthExceeded(
                    f"the prompt takes {agent.context_used()} tokens even after compression, over "
                    f"the model's {limit}; start a new session or use a model with a larger context."
                )

    async def compress(self, *, force: bool = False) -> bool:
        """Replace older turns by a summary (``/compress``); False when nothing could be dropped."""
        agent = cast("Agent", self)
        before = agent.context_used()
        target = agent.config.compress_threshold * agent.model.context_limit
        done = await compress(
            agent.history,
            agent.model,
            agent.todos,
            keep_recent_turns=agent.config.keep_recent_turns,
        )
        if done is None:
            return False
        keep = agent.config.keep_recent_turns
        while agent.meter.count(done.history) > target and keep > 1:
            keep -= 1
            smaller = await compress(
                agent.history, agent.model, agent.todos, keep_recent_turns=keep, use_model=False
            )
            if smaller is None:
                break
            done = smaller
        agent.history = done.history
        agent.meter.reset()
        agent.trajectory.steps.append(done.summary)
        after = agent.context_used()
        agent.emit(
            Compressed(method=done.method, before=before, after=after, dropped_steps=done.dropped)
        )
        agent.emit(Notice(text=f"Context compressed ({done.method}): {before} -> {after} tokens."))
        return True
