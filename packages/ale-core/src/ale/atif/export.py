"""ALE -> ATIF: the canonical ATIF document of a trajectory.

An assistant step and the tool step after it become one ATIF agent step with an
``observation``; what ATIF has no field for travels in ``extra.ale`` of the step or of
the document. :func:`to_atif` applies the patch an import kept, so a document read
comes back as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ale.atif.models import ALE_KEY, ATIF_VERSION, PATCH_KEY, SOURCE_OF
from ale.atif.patch import apply
from ale.trajectory import Role, Step, StepMark, Trajectory, Usage


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
            "source": SOURCE_OF[step.role],
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
        atif_step["extra"] = {ALE_KEY: ale}
    return atif_step


def _tool_atif_step(step: Step, carrier: dict[str, Any] | None) -> dict[str, Any] | None:
    """Attach a tool step's results to ``carrier`` (the step just before, when it has no
    observation yet: ATIF lets any step carry one) and return None; else a system step of its
    own carrying them."""
    obs_ale = _observation_ale(step)
    carries_tool = carrier is not None and carrier.get("extra", {}).get(ALE_KEY, {}).get("role")
    if carrier is not None and "observation" not in carrier and not carries_tool:
        ids = {c["tool_call_id"] for c in carrier.get("tool_calls") or []}
        carrier["observation"], call_ids = _observation(step, ids)
        if call_ids is not None:
            obs_ale["call_ids"] = call_ids
        if obs_ale:
            carrier.setdefault("extra", {}).setdefault(ALE_KEY, {})["observation"] = obs_ale
        return None
    observation, call_ids = _observation(step, set())
    if call_ids is not None:
        obs_ale["call_ids"] = call_ids
    return {
        "source": "system",
        "message": "",
        "observation": observation,
        "extra": {ALE_KEY: {"role": "tool", "observation": obs_ale}},
    }


def canonical(traj: Trajectory) -> dict[str, Any]:
    """The ATIF document the mapping gives for ``traj``, before any patch kept from an
    import."""
    steps = _atif_steps(traj)
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": traj.trajectory_id,
        "trajectory_id": traj.trajectory_id,
        "agent": _agent(traj),
        "steps": steps,
        "final_metrics": _final_metrics(traj, len(steps)),
        "extra": {ALE_KEY: _trajectory_ale(traj)},
    }
    if traj.notes is not None:
        doc["notes"] = traj.notes
    return doc


def _atif_steps(traj: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's steps as ATIF steps, numbered from 1, a tool step riding on the
    step before it where it can."""
    steps: list[dict[str, Any]] = []
    for step in traj.steps:
        if step.role is Role.TOOL:
            own = _tool_atif_step(step, steps[-1] if steps else None)
            if own is not None:
                steps.append(own)
            continue
        steps.append(_message_step(step))
    if not steps:  # ATIF wants one step at least: a placeholder import drops again
        steps.append({"source": "system", "message": "", "extra": {ALE_KEY: {"placeholder": True}}})
    for number, atif_step in enumerate(steps, start=1):
        atif_step["step_id"] = number
    return steps


def _agent(traj: Trajectory) -> dict[str, Any]:
    agent: dict[str, Any] = {"name": traj.agent.name, "version": traj.agent.version or ""}
    if traj.model is not None:
        agent["model_name"] = traj.model
    if traj.agent.extra:
        agent["extra"] = traj.agent.extra
    return agent


def _final_metrics(traj: Trajectory, atif_steps: int) -> dict[str, Any]:
    usage = traj.usage or Usage()
    return _drop_none(
        {
            "total_prompt_tokens": usage.prompt_tokens,
            "total_completion_tokens": usage.completion_tokens,
            "total_cached_tokens": usage.cached_tokens,
            "total_cost_usd": usage.cost_usd,
            "total_steps": atif_steps if traj.steps else 0,
        }
    )


def _trajectory_ale(traj: Trajectory) -> dict[str, Any]:
    """ALE-only fields of the trajectory (the document's ``extra.ale``)."""
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
    own_extra = {k: v for k, v in traj.extra.items() if k != PATCH_KEY}
    if own_extra:
        ale_top["extra"] = own_extra
    return ale_top


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an ATIF document (a JSON-able dict)."""
    return apply(canonical(traj), traj.extra.get(PATCH_KEY))


def write_atif(traj: Trajectory, path: str | Path) -> Path:
    """Write the trajectory as an ATIF JSON file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(to_atif(traj), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return path
