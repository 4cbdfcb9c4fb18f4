"""What one run of the agent has spent against its limits, and the end when it is over.

A run is one prompt until an end; the agent's own totals (its whole life, across runs)
stay on :class:`iflow.agent.Agent`. The limits come from :class:`iflow.config.AgentConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from iflow.config import AgentConfig
from iflow.errors import LimitsExceeded


@dataclass
class RunBudget:
    """Turns, tokens and cost spent by the run under way."""

    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    def check(self, config: AgentConfig) -> None:
        """Raise :class:`LimitsExceeded` (one sentence saying which limit to raise) when the
        run has used up its turns, tokens or cost."""
        if self.turns >= config.max_turns:
            raise LimitsExceeded(
                f"the agent used its {config.max_turns} turns without finishing; "
                "raise --max-turns (or max_turns in settings) to let it go on."
            )
        if config.max_tokens is not None and self.tokens >= config.max_tokens:
            raise LimitsExceeded(
                f"the run spent {self.tokens} tokens, over its limit of {config.max_tokens}; "
                "raise max_tokens to let it go on."
            )
        if config.max_cost_usd is not None and self.cost_usd >= config.max_cost_usd:
            raise LimitsExceeded(
                f"the run cost ${self.cost_usd:.4f}, over its limit of "
                f"${config.max_cost_usd:.4f}; raise max_cost_usd to let it go on."
            )
