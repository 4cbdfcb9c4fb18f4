"""ATIF -> ALE: a trajectory from an ATIF document of any v1.x.

An ATIF step's observation becomes a tool step after it; ``extra.ale`` gives back what
the export put there. Whatever of the document the canonical mapping would not
reproduce is kept as a patch in the trajectory's ``extra["atif"]``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from ale.atif.export import canonical
from ale.atif.models import ALE_KEY, PATCH_KEY, ROLE_OF, AtifError
from ale.atif.patch import diff
from ale.trajectory import (
    AgentInfo,
    FailureMode,
    Role,
    Step,
    StepMark,
    Timings,
    ToolCall,
    ToolResult,
    Trajectory,
    Usage,
    VerifierResult,
)


def _require(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise AtifError(
            f"ATIF {where}: {what}; fix the document or export it again with a conforming writer."
        )


def _usage_from(d: dict[str, Any], prefix: str = "") -> Usage | None:
    fields = {
        name: d.get(prefix + name)
        for name in ("prompt_tokens", "completion_tokens", "cached_tokens")
    }
    fields["cost_usd"] = d.get(prefix + "cost_usd")
    return Usage(**fields) if any(v is not None for v in fields.values()) else None


def _message_text(message: Any) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, list):  # content parts: keep the text, the patch keeps the rest
        return "".join(p.get("text", "") for p in message if isinstance(p, dict))
    return "" if message is None else str(message)


def _tool_step(observation: dict[str, Any], ale: dict[str, Any]) -> Step:
    results = observation.get("results") or []
    errors = ale.get("is_error") or [False] * len(results)
    metadata = ale.get("metadata") or [{}] * len(results)
    call_ids = ale.get("call_ids") or [r.get("source_call_id") for r in results]
    tool_results = [
        ToolResult(call_id=c, content=r.get("content") or "", is_error=e, metadata=m)
        for r, c, e, m in zip(results, call_ids, errors, metadata, strict=False)
    ]
    usage = ale.get("usage")
    return Step(
        role=Role.TOOL,
        content=ale.get("content", ""),
        reasoning=ale.get("reasoning"),
        model=ale.get("model"),
        reasoning_effort=ale.get("reasoning_effort"),
        timestamp=ale.get("timestamp"),
        usage=Usage(**usage)
        if usage is not None
        else (Usage() if ale.get("empty_usage") else None),
        prompt_token_ids=ale.get("prompt_token_ids"),
        token_ids=ale.get("token_ids"),
        logprobs=ale.get("logprobs"),
        tool_results=tool_results,
        policy_version=ale.get("policy_version"),
        reward=ale.get("reward"),
        mark=ale.get("mark"),
        prefix=ale.get("prefix", False),
        extra=ale.get("extra", {}),
    )


def _steps_from(atif_steps: list[Any]) -> list[Step]:
    steps: list[Step] = []
    for n, raw in enumerate(atif_steps, start=1):
        _require(isinstance(raw, dict), f"step {n}", "is not an object")
        source = raw.get("source")
        _require(
            source in ROLE_OF, f"step {n}", f"source must be system, user or agent, got {source!r}"
        )
        ale = ((raw.get("extra") or {}).get(ALE_KEY)) or {}
        observation = raw.get("observation")
        if ale.get("placeholder"):
            continue
        if ale.get("role") == "tool" and observation is not None:
            steps.append(_tool_step(observation, ale.get("observation", {})))
            continue
        metrics = raw.get("metrics") or {}
        usage = _usage_from(metrics)
        if usage is None and ale.get("empty_usage"):
            usage = Usage()
        if "usage" in ale:  # a system or user step's own (ATIF has no place for it)
            usage = Usage(**ale["usage"])
        extra = dict(ale.get("extra", {}))
        mark = StepMark.COPIED if raw.get("is_copied_context") else ale.get("mark")
        steps.append(
            Step(
                role=ROLE_OF[source],
                content=_message_text(raw.get("message")),
                reasoning=raw.get("reasoning_content", ale.get("reasoning")),
                tool_calls=[
                    ToolCall(
                        id=c["tool_call_id"],
                        name=c["function_name"],
                        arguments=c.get("arguments") or {},
                    )
                    for c in raw.get("tool_calls") or ale.get("tool_calls") or []
                ],
                timestamp=raw.get("timestamp"),
                model=raw.get("model_name", ale.get("model")),
                reasoning_effort=raw.get("reasoning_effort", ale.get("reasoning_effort")),
                usage=usage,
                prompt_token_ids=metrics.get("prompt_token_ids", ale.get("prompt_token_ids")),
                token_ids=metrics.get("completion_token_ids", ale.get("token_ids")),
                logprobs=metrics.get("logprobs", ale.get("logprobs")),
                policy_version=ale.get("policy_version"),
                reward=ale.get("reward"),
                mark=mark,
                prefix=ale.get("prefix", False),
                extra=extra,
            )
        )
        if observation is not None:
            steps.append(_tool_step(observation, ale.get("observation", {})))
    return steps


def from_atif(doc: dict[str, Any]) -> Trajectory:
    """A trajectory from an ATIF document; ``to_atif`` of it gives the document back."""
    _require(isinstance(doc, dict), "document", "is not a JSON object")
    version = doc.get("schema_version")
    _require(
        isinstance(version, str) and version.startswith("ATIF-v1."),
        "schema_version",
        f"must be 'ATIF-v1.x', got {version!r}",
    )
    identity = doc.get("trajectory_id") or doc.get("session_id") or uuid.uuid4().hex
    _require(isinstance(identity, str), "trajectory_id", "is not a string")
    agent = doc.get("agent")
    _require(
        isinstance(agent, dict) and isinstance(agent.get("name"), str),
        "agent",
        "must be an object with a name",
    )
    _require(isinstance(doc.get("steps"), list), "steps", "is missing or not a list")
    assert isinstance(agent, dict)  # checked above
    ale = ((doc.get("extra") or {}).get(ALE_KEY)) or {}
    try:
        final = doc.get("final_metrics") or {}
        usage = None if ale.get("no_usage") else (_usage_from(final, "total_") or Usage())
        traj = Trajectory(
            schema_version=ale.get(
                "schema_version", Trajectory.model_fields["schema_version"].default
            ),
            trajectory_id=identity,
            task_id=ale.get("task_id"),
            episode_id=ale.get("episode_id"),
            group_id=ale.get("group_id"),
            agent=AgentInfo(
                name=agent["name"],
                version=ale["agent_version"] if "agent_version" in ale else agent.get("version"),
                extra=agent.get("extra") or {},
            ),
            model=agent.get("model_name"),
            steps=_steps_from(doc["steps"]),
            reward=ale.get("reward"),
            verifier=VerifierResult.model_validate(ale["verifier"]) if "verifier" in ale else None,
            timings=Timings.model_validate(ale["timings"]) if "timings" in ale else None,
            usage=usage,
            failure_mode=FailureMode(ale["failure_mode"]) if "failure_mode" in ale else None,
            notes=doc.get("notes"),
            extra=ale.get("extra", {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, AtifError):
            raise
        raise AtifError(
            f"ATIF document could not be mapped ({exc}); check it against ATIF v1.7."
        ) from exc
    patch = diff(doc, canonical(traj))
    if patch is not None:
        traj.extra[PATCH_KEY] = patch
    return traj


def read_atif(path: str | Path) -> Trajectory:
    """Read an ATIF JSON file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AtifError(
            f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); fix the file."
        ) from None
    try:
        return from_atif(doc)
    except AtifError as exc:
        raise AtifError(f"{path}: {exc}") from None
