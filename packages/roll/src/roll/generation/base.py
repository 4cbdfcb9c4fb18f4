"""The generation backend contract: token ids in, sampled token ids and their log-probs out.

A backend samples continuations of already-tokenised prompts, many at once, and reports for
every sampled token the log-probability under the distribution it was sampled from (after
temperature and top-p): these are the sampling policy's log-probs μ that IPA's mismatch mask
compares with the trainer's π_old. After each optimiser update the trainer hands the backend
the new weights with :meth:`GenerationBackend.sync_weights` and bumps the policy version.
A backend whose ``batches_itself`` attribute is true (an inference server) takes overlapping
``generate`` calls from several threads and batches their requests itself.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    """How to sample one batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_new_tokens: int = Field(default=128, ge=1)
    """Most tokens to sample per prompt."""
    temperature: float = Field(default=1.0, ge=0.0)
    """0 means greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra ids that end a continuation (the tokenizer's EOS ids always do)."""
    seed: int | None = None
    """Seed for this batch; the same seed, prompts and weights give the same samples."""


class Generation(BaseModel):
    """One sampled continuation."""

    model_config = ConfigDict(extra="forbid")

    token_ids: list[int]
    """Sampled ids, the stop token included when one ended the continuation."""
    logprobs: list[float]
    """Log-prob of each sampled id under the sampling distribution."""
    finish_reason: Literal["stop", "length"]
    """``stop``: an EOS/stop id was sampled; ``length``: ``max_new_tokens`` ran out."""
    policy_version: int | None = None
    """The weights' version it was sampled with, when the server knows it (a generation
    queue sets it when the request starts: a request that waited out a weight update was
    sampled with the new weights)."""


@runtime_checkable
class GenerationBackend(Protocol):
    """Samples continuations for a batch of prompts with the current policy weights."""

    name: str
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One :class:`Generation` per prompt, in order."""
        ...

    def sync_weights(self, model: Any, version: int) -> None:
        """Load the trainer's current weights (a ``torch.nn.Module``) and set the version."""
        ...

    def close(self) -> None:
        """Release what the backend holds (GPU memory, engine processes)."""
        ...


@runtime_checkable
class DecodeSession(Protocol):
    """Rows decoding together that others may join between steps (continuous batching)."""

    @property
    def rows(self) -> int:
        """How many rows are decoding."""
        ...

    def fits(self, lengths: list[int], budgets: list[int]) -> bool:
        """Whether rows of these prompt lengths and budgets may join now, together."""
        ...

    def admit(self, prompts: list[list[int]], budgets: list[int]) -> list[int]:
        """Start decoding ``prompts`` (each with its most new tokens); returns their keys."""
        ...

    def step(self) -> list[tuple[int, Generation]]:
        """One decode step for every row; returns the rows that finished, by key."""
        ...


@runtime_checkable
class ContinuousBackend(GenerationBackend, Protocol):
    """A backend whose rows can join and leave a running batch."""

    def open_session(self, params: SamplingParams) -> DecodeSession:
        """An empty session sampling with ``params`` (its ``max_new_tokens`` unused)."""
        ...
