"""The ATIF document: its version, its models, and the keys under which ALE's own fields
travel in it.

The models are strict (what a conforming writer produces): use them to check a document
this package wrote. Reading does not go through them, so that documents of any v1.x read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ale.trajectory import Role

ATIF_VERSION = "ATIF-v1.7"
PATCH_KEY = "atif"
"""The key of a trajectory's ``extra`` holding the patch an import kept."""
ALE_KEY = "ale"
"""The key of an ATIF ``extra`` (the document's, a step's) holding ALE's own fields."""
SOURCE_OF = {Role.SYSTEM: "system", Role.USER: "user", Role.ASSISTANT: "agent"}
ROLE_OF = {v: k for k, v in SOURCE_OF.items()}


class AtifError(ValueError):
    """An ATIF document could not be read."""


class _Atif(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifAgent(_Atif):
    name: str
    version: str
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class AtifToolCall(_Atif):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class AtifSubagentRef(_Atif):
    session_id: str
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None


class AtifObservationResult(_Atif):
    source_call_id: str | None = None
    content: str | None = None
    subagent_trajectory_ref: list[AtifSubagentRef] | None = None


class AtifObservation(_Atif):
    results: list[AtifObservationResult]


class AtifMetrics(_Atif):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class AtifStep(_Atif):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class AtifTrajectory(_Atif):
    """An ATIF document as this module writes it, strictly: use it to check what a writer
    produced (Harbor's own models are the reference; tests check against them too)."""

    schema_version: str
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep]
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
