"""ATIF export and import: the Agent Trajectory Interchange Format of Terminal-Bench and Harbor
(written as v1.7; any v1.x read).

Mapping. An ATIF step is a system, user or agent message; the observation of an
agent's tool calls rides on the same ATIF step. In the ALE schema the
observation is a ``tool`` step of its own. So an assistant step and the tool step
after it become one ATIF agent step with ``observation``; an ATIF step's
observation becomes a tool step after it. ALE fields ATIF has no place for
(rewards, verifier, timings, failure mode, policy versions, ids) travel in the
``extra.ale`` object of the ATIF document and of its steps.

Losslessness, both ways:

* ALE -> ATIF -> ALE gives back an equal trajectory.
* ATIF -> ALE -> ATIF gives back the same JSON. Whatever of the ATIF document
  the canonical mapping would not reproduce (field order aside) - an unusual
  ``step_id``, a multimodal message, fields of a newer ATIF version - is kept as
  a JSON patch in the trajectory's ``extra["atif"]`` and applied again on export.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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

ATIF_VERSION = "ATIF-v1.7"
_PATCH_KEY = "atif"
_ALE_KEY = "ale"
_SOURCE_OF = {Role.SYSTEM: "system", Role.USER: "user", Role.ASSISTANT: "agent"}
_ROLE_OF = {v: k for k, v in _SOURCE_OF.items()}


class AtifError(ValueError):
    """An ATIF document could not be read."""


# --- ATIF models (strict: what a conforming writer produces) -----------------


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


# --- JSON patches -------------------------------------------------------------

_ABSENT = "$absent"
_ITEMS = "$items"
_VALUE = "$value"
_BASE = "$base"
"""What the canonical document held where a patch changes it: the patch applies there only
while the trajectory still gives that (an edit made after import wins over the patch)."""


def _diff(target: Any, base: Any) -> Any:
    """A patch turning ``base`` into ``target`` (None when they are equal)."""
    if target == base and type(target) is type(base):
        return None
    if isinstance(target, dict) and isinstance(base, dict):
        patch: dict[str, Any] = {}
        for key in base.keys() - target.keys():
            patch[key] = {_ABSENT: True, _BASE: base[key]}
        for key, value in target.items():
            if key not in base:
                patch[key] = {_VALUE: value}
            else:
                sub = _diff(value, base[key])
                if sub is not None:
                    patch[key] = sub
        return patch or None
    if isinstance(target, list) and isinstance(base, list) and len(target) == len(base):
        items = {
            str(i): sub
            for i, (t, b) in enumerate(zip(target, base, strict=True))
            if (sub := _diff(t, b)) is not None
        }
        return {_ITEMS: items} if items else None
    return {_VALUE: target, _BASE: base}


def _edited(current: Any, patch: dict[str, Any]) -> bool:
    """Whether the trajectory now gives something other than what the patch was made on."""
    return _BASE in patch and current != patch[_BASE]


def _apply(base: Any, patch: Any) -> Any:
    if patch is None:
        return base
    if _VALUE in patch:
        return base if _edited(base, patch) else patch[_VALUE]
    if _ITEMS in patch:
        if not isinstance(base, list):
            return base  # edited into something else: the edit wins
        out = list(base)
        for index, sub in patch[_ITEMS].items():
            if int(index) < len(out):
                out[int(index)] = _apply(out[int(index)], sub)
        return out
    if not isinstance(base, dict):
        return base
    out_d = dict(base)
    for key, sub in patch.items():
        if isinstance(sub, dict) and sub.get(_ABSENT) is True:
            if not _edited(out_d.get(key), sub):
                out_d.pop(key, None)
        elif key in out_d:
            out_d[key] = _apply(out_d[key], sub)
        elif _VALUE in sub and _BASE not in sub:
            out_d[key] = sub[_VALUE]  # a field the canonical form does not write
    return out_d  # a key an edit took away stays away


# --- export -------------------------------------------------------------------


def _dump(model: BaseModel | None) -> Any:
    return None if model is None else model.model_dump(mode="json", exclude_none=True)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _metrics(step: Step) -> dict[str, Any] | None:
    usage = step.usage or Usage()
    metrics = _drop_none(
        {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
            "cost_usd": usage.cost_usd,
            "prompt_token_ids": step.prompt_token_ids,
            "completion_token_ids": step.token_ids,
            "logprobs": step.logprobs,
        }
    )
    return metrics or None


def _step_ale(step: Step) -> dict[str, Any]:
    """ALE-only fields of a step."""
    ale: dict[str, Any] = _drop_none(
        {
            "policy_version": step.policy_version,
            "reward": step.reward,
            "mark": step.mark if step.mark is not StepMark.COPIED else None,
            "prefix": step.prefix or None,
        }
    )
    if step.usage is not None and not any(v is not None for v in step.usage.model_dump().values()):
        ale["empty_usage"] = True
    if step.extra:
        ale["extra"] = step.extra
    return ale


def _observation_ale(step: Step) -> dict[str, Any]:
    """Fields of a tool step that ATIF's observation cannot hold."""
    ale = _step_ale(step)
    if step.content:
        ale["content"] = step.content
    for name in ("reasoning", "model", "reasoning_effort"):
        if getattr(step, name) is not None:
            ale[name] = getattr(step, name)
    if step.timestamp is not None:
        ale["timestamp"] = step.timestamp.isoformat()
    if step.usage is not None:
        ale["usage"] = _dump(step.usage)
    for name in ("prompt_token_ids", "token_ids", "logprobs"):
        if getattr(step, name) is not None:
            ale[name] = getattr(step, name)
    errors = [r.is_error for r in step.tool_results]
    if any(errors):
        ale["is_error"] = errors
    metadata = [r.metadata for r in step.tool_results]
    if any(metadata):
        ale["metadata"] = metadata
    return ale


def _observation(step: Step, call_ids: set[str]) -> tuple[dict[str, Any], list[Any] | None]:
    """The tool step's results as an ATIF observation of a step whose tool calls have
    ``call_ids`` (a result naming another call leaves ``source_call_id`` out, as ATIF asks),
    and the results' own call ids when any was left out (kept in ``extra.ale``)."""
    results = [
        _drop_none(
            {
                "source_call_id": r.call_id if r.call_id in call_ids else None,
                "content": r.content,
            }
        )
        for r in step.tool_results
    ]
    kept = all(r.call_id is None or r.call_id in call_ids for r in step.tool_results)
    return {"results": results}, None if kept else [r.call_id for r in step.tool_results]


def _calls(step: Step) -> list[dict[str, Any]]:
    return [
        {"tool_call_id": c.id, "function_name": c.name, "arguments": c.arguments}
        for c in step.tool_calls
    ]


def _message_step(step: Step) -> dict[str, Any]:
    """A system, user or agent step. ATIF allows model, reasoning, tool calls and metrics on
    agent steps only: a system or user step carries them in ``extra.ale``."""
    agent = step.role is Role.ASSISTANT
    atif_step = _drop_none(
        {
            "timestamp": step.timestamp.isoformat() if step.timestamp else None,
            "source": _SOURCE_OF[step.role],
            "message": step.content,
        }
    )
    if step.mark is StepMark.COPIED:
        atif_step["is_copied_context"] = True
    ale = _step_ale(step)
    if agent:
        atif_step |= _drop_none(
            {
                "model_name": step.model,
                "reasoning_effort": step.reasoning_effort,
                "reasoning_content": step.reasoning,
                "tool_calls": _calls(step) or None,
                "metrics": _metrics(step),
            }
        )
    else:
        ale |= _drop_none(
            {
                "model": step.model,
                "reasoning_effort": step.reasoning_effort,
                "reasoning": step.reasoning,
                "tool_calls": _calls(step) or None,
                "usage": _dump(step.usage) if step.usage is not None else None,
                "prompt_token_ids": step.prompt_token_ids,
                "token_ids": step.token_ids,
                "logprobs": step.logprobs,
            }
        )
        ale.pop("empty_usage", None)  # the usage itself travels, empty or not
    if ale:
        atif_step["extra"] = {_ALE_KEY: ale}
    return atif_step


def _tool_atif_step(step: Step, carrier: dict[str, Any] | None) -> dict[str, Any] | None:
    """Attach a tool step's results to ``carrier`` (the step just before, when it has no
    observation yet: ATIF lets any step carry one) and return None; else a system step of its
    own carrying them."""
    obs_ale = _observation_ale(step)
    carries_tool = carrier is not None and carrier.get("extra", {}).get(_ALE_KEY, {}).get("role")
    if carrier is not None and "observation" not in carrier and not carries_tool:
        ids = {c["tool_call_id"] for c in carrier.get("tool_calls") or []}
        carrier["observation"], call_ids = _observation(step, ids)
        if call_ids is not None:
            obs_ale["call_ids"] = call_ids
        if obs_ale:
            carrier.setdefault("extra", {}).setdefault(_ALE_KEY, {})["observation"] = obs_ale
        return None
    observation, call_ids = _observation(step, set())
    if call_ids is not None:
        obs_ale["call_ids"] = call_ids
    return {
        "source": "system",
        "message": "",
        "observation": observation,
        "extra": {_ALE_KEY: {"role": "tool", "observation": obs_ale}},
    }


def _canonical(traj: Trajectory) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for step in traj.steps:
        if step.role is Role.TOOL:
            own = _tool_atif_step(step, steps[-1] if steps else None)
            if own is not None:
                steps.append(own)
            continue
        steps.append(_message_step(step))
    if not steps:  # ATIF wants one step at least: a placeholder import drops again
        steps.append(
            {"source": "system", "message": "", "extra": {_ALE_KEY: {"placeholder": True}}}
        )
    for number, atif_step in enumerate(steps, start=1):
        atif_step["step_id"] = number

    agent: dict[str, Any] = {"name": traj.agent.name, "version": traj.agent.version or ""}
    if traj.model is not None:
        agent["model_name"] = traj.model
    if traj.agent.extra:
        agent["extra"] = traj.agent.extra

    usage = traj.usage or Usage()
    final = _drop_none(
        {
            "total_prompt_tokens": usage.prompt_tokens,
            "total_completion_tokens": usage.completion_tokens,
            "total_cached_tokens": usage.cached_tokens,
            "total_cost_usd": usage.cost_usd,
            "total_steps": len(steps) if traj.steps else 0,
        }
    )
    ale_top: dict[str, Any] = _drop_none(
        {
            "schema_version": traj.schema_version,
            "task_id": traj.task_id,
            "episode_id": traj.episode_id,
            "group_id": traj.group_id,
            "reward": traj.reward,
            "verifier": _dump(traj.verifier),
            "timings": _dump(traj.timings),
            "failure_mode": traj.failure_mode.value if traj.failure_mode else None,
        }
    )
    if traj.agent.version is None:
        ale_top["agent_version"] = None
    if traj.usage is None:
        ale_top["no_usage"] = True
    own_extra = {k: v for k, v in traj.extra.items() if k != _PATCH_KEY}
    if own_extra:
        ale_top["extra"] = own_extra
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": traj.trajectory_id,
        "trajectory_id": traj.trajectory_id,
        "agent": agent,
        "steps": steps,
        "final_metrics": final,
        "extra": {_ALE_KEY: ale_top},
    }
    if traj.notes is not None:
        doc["notes"] = traj.notes
    return doc


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an ATIF document (a JSON-able dict)."""
    return _apply(_canonical(traj), traj.extra.get(_PATCH_KEY))


# --- import -------------------------------------------------------------------


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
            source in _ROLE_OF, f"step {n}", f"source must be system, user or agent, got {source!r}"
        )
        ale = ((raw.get("extra") or {}).get(_ALE_KEY)) or {}
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
                role=_ROLE_OF[source],
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
    ale = ((doc.get("extra") or {}).get(_ALE_KEY)) or {}
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
    patch = _diff(doc, _canonical(traj))
    if patch is not None:
        traj.extra[_PATCH_KEY] = patch
    return traj


def write_atif(traj: Trajectory, path: str | Path) -> Path:
    """Write the trajectory as an ATIF JSON file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(to_atif(traj), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return path


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
