"""A model that is an expert program: synthesis records expert trajectories through it.

:class:`ExpertModel` wraps an :class:`ale.synth.expert.ExpertRun`. At each call it reads
the last tool result of the conversation (what the previous action showed), asks the
expert for its next action and answers with that action as a tool call: shell actions as
``run_shell_command``, file writes as ``write_file``, the end as ``finish``. The agent loop
runs the tools and records every step exactly as it does for any model, so an expert
trajectory has the system prompt, tool schemas and observation format a trained policy
will see. Turns that are a planned mistake or its recovery carry the step's ``mark``
(:attr:`~ale.trajectory.StepMark.MISTAKE` / ``RECOVERY``), which trainers read.
"""

from __future__ import annotations

import json
from typing import Any

from ale.synth.expert import Action, ExpertRun, Final, Observation
from ale.trajectory import Role, Step, StepMark, ToolCall, Usage
from iflow.models.base import DeltaCallback, ModelResponse, estimate_messages, estimate_tokens

_TOOLS = {"shell": "run_shell_command", "write": "write_file"}


class ExpertModel:
    """The :class:`iflow.models.base.Model` face of an expert program."""

    def __init__(self, run: ExpertRun, *, name: str = "expert", context_limit: int = 131072):
        self.run = run
        self.name = name
        self.context_limit = context_limit
        self.calls = 0

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        observation = _last_observation(messages) if self.calls else None
        self.calls += 1
        step = self.run.next(observation)
        mark = self.run.marks[-1] if self.run.marks else ""
        names = {_tool_name(t) for t in tools}
        if isinstance(step, Final):
            if "finish" in names:
                calls = [
                    ToolCall(id=self._call_id(), name="finish", arguments={"summary": step.message})
                ]
                response = ModelResponse(content="", tool_calls=calls, finish_reason="tool_calls")
            else:
                response = ModelResponse(content=step.message, finish_reason="stop")
        else:
            call = ToolCall(id=self._call_id(), name=_TOOLS[step.kind], arguments=_arguments(step))
            response = ModelResponse(
                content=step.thought, tool_calls=[call], finish_reason="tool_calls"
            )
        completion = response.content + "".join(
            c.name + json.dumps(c.arguments) for c in response.tool_calls
        )
        response.usage = Usage(completion_tokens=estimate_tokens(completion))
        if mark:
            response.mark = StepMark(mark)
        if on_delta is not None and response.content:
            on_delta(response.content)
        return response

    def _call_id(self) -> str:
        """Call ids numbered by turn, so a regenerated trajectory is the same byte for byte."""
        return f"call_{self.calls:04d}"

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        return estimate_messages(messages, tools)


def _tool_name(schema: dict[str, Any]) -> str:
    return str(schema.get("function", schema).get("name", ""))


def _arguments(action: Action) -> dict[str, Any]:
    if action.kind == "write":
        return {"path": action.path, "content": action.content}
    return {"command": action.command}


def _last_observation(messages: list[Step]) -> Observation | None:
    for message in reversed(messages):
        if message.role is Role.TOOL and message.tool_results:
            result = message.tool_results[-1]
            code = result.metadata.get("exit_code")
            if not isinstance(code, int):
                code = 1 if result.is_error else None
            return Observation(result.content, code)
        if message.role is Role.ASSISTANT:
            break
    return None


def replay_script(steps: list[Step]) -> list[dict[str, Any]]:
    """The assistant turns of a recorded trajectory as a scripted model's responses, so the
    same calls can be replayed (with their ids) in a fresh environment."""
    out: list[dict[str, Any]] = []
    for step in steps:
        if step.role is not Role.ASSISTANT:
            continue
        out.append(
            {
                "content": step.content,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in step.tool_calls
                ],
            }
        )
    return out
