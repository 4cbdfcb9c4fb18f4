"""The policy gateway: the policy behind an OpenAI-compatible endpoint, so that an agent roll
does not know (mini-swe-agent, a user's own, iflow over HTTP) can be trained unmodified.

Each episode gets a key; its agent calls ``/v1/chat/completions`` (or ``/v1/completions``)
with it, and the gateway serves the calls from the same batching generation queue as the
in-process path, token-in/token-out, recording what the policy sampled (prompt ids, sampled
ids, log-probs, policy version) so the trainer sees the same token views either way.
:mod:`roll.gateway.episodes` keeps the episodes and their segments, :mod:`roll.gateway.server`
serves HTTP, :mod:`roll.gateway.openai_api` speaks OpenAI's wire format.
"""

from roll.gateway.episodes import Answer, CallRefused, EpisodeRecord, GatewayEpisodes, Refusal
from roll.gateway.server import Gateway

__all__ = ["Answer", "CallRefused", "EpisodeRecord", "Gateway", "GatewayEpisodes", "Refusal"]
