"""mini-swe-agent, the PyPI package as it is, as an ``ale.agents`` agent (``mini-swe-agent``).

Its own ``DefaultAgent`` runs with its own configuration file (``mini.yaml``: bash as a tool
call; ``mini_textbased.yaml``: bash in a fenced block) and its own litellm model class,
pointed at any OpenAI-compatible server — in training, roll's policy gateway, with the base
URL and key of the episode. Its commands run in the episode's rock sandbox through
:class:`SandboxEnvironment`, the small adapter to mini-swe-agent's environment protocol.
What it did comes back as a trajectory in the shared schema (the gateway records the
policy's tokens separately). So ``rock bench run --agent mini-swe-agent`` evaluates it and
``roll train`` with ``tasks.agent: mini-swe-agent`` trains a policy through it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Literal

import yaml

from ale.agents import AgentConfigError
from ale.sandbox import SandboxVerbs
from ale.trajectory import (
    AgentInfo,
    FailureMode,
    Role,
    Step,
    Timings,
    ToolCall,
    ToolResult,
    Trajectory,
)

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no fetch on import

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""What mini-swe-agent's prompt tells the model to echo when it is done."""

_EXITS = {
    "Submitted": None,
    "LimitsExceeded": FailureMode.LIMITS_EXCEEDED,
    "TimeExceeded": FailureMode.AGENT_TIMEOUT,
    "RepeatedFormatError": FailureMode.FORMAT_ERROR,
}
"""mini-swe-agent's exit statuses as failure modes (an exception's name: the agent failed)."""


class SandboxEnvironment:
    """mini-swe-agent's ``Environment`` over a rock sandbox: each action one shell command
    (a fresh ``bash -c``, as mini-swe-agent's own environments run it) under a timeout."""

    def __init__(
        self,
        sandbox: SandboxVerbs,
        *,
        cwd: str = "",
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.config = _EnvConfig(cwd=cwd, timeout=timeout, env=dict(env or {}))
        self.stopped = threading.Event()
        """Set when the episode is over (its time ran out): the next action ends the run."""

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: float | None = None
    ) -> dict[str, Any]:
        from minisweagent.exceptions import Submitted, TimeExceeded

        if self.stopped.is_set():
            raise TimeExceeded(_exit("TimeExceeded"))
        command = str(action.get("command", ""))
        limit = timeout or self.config.timeout
        try:
            result = self.sandbox.exec(
                ["bash", "-c", command],
                timeout=limit,
                cwd=cwd or self.config.cwd or None,
                env=self.config.env or None,
            )
        except Exception as exc:  # the sandbox failed under the command
            return {
                "output": "",
                "returncode": -1,
                "exception_info": f"the command could not run: {exc}",
            }
        output = result.stdout_text + result.stderr_text
        info = f"the command timed out after {limit:g} s" if result.timed_out else ""
        returncode = -1 if result.timed_out else result.exit_code
        lines = output.lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT and returncode == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )
        return {"output": output, "returncode": returncode, "exception_info": info}

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        system = {"system": "Linux", "release": "", "version": "", "machine": ""}
        return {**self.config.__dict__, **system, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": {**self.config.__dict__},
                    "environment_type": "rock.sandbox",
                }
            }
        }


class _EnvConfig:
    def __init__(self, *, cwd: str, timeout: float, env: dict[str, str]) -> None:
        self.cwd, self.timeout, self.env = cwd, timeout, env

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self.__dict__)


def _exit(status: str) -> dict[str, Any]:
    return {"role": "exit", "content": status, "extra": {"exit_status": status, "submission": ""}}


class MiniSweAgent:
    """The ``mini-swe-agent`` agent (see the module docstring).

    ``model``: the model name the server knows (the gateway takes any); ``base_url`` and
    ``api_key``: the OpenAI-compatible server; ``actions``: ``toolcall`` (mini.yaml) or
    ``text`` (mini_textbased.yaml); ``step_limit``: most model calls; ``command_timeout``:
    seconds per command; ``max_tokens``: the output cap sent with each call.
    """

    name = "mini-swe-agent"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        actions: Literal["toolcall", "text"] = "toolcall",
        step_limit: int = 30,
        command_timeout: float = 60.0,
        max_tokens: int | None = None,
        **_ignored: Any,
    ) -> None:
        if not model or not base_url:
            raise AgentConfigError(
                "mini-swe-agent needs a model server: give --model and --agent-kwarg "
                "base_url=http://HOST:PORT/v1 (and api_key=... if it wants one)"
            )
        if actions not in ("toolcall", "text"):
            raise AgentConfigError(
                f"mini-swe-agent's actions are toolcall or text, not {actions!r}"
            )
        self.model = model
        self.base_url = base_url
        self.api_key = api_key or "none"
        self.actions = actions
        self.step_limit = step_limit
        self.command_timeout = command_timeout
        self.max_tokens = max_tokens

    def _parts(
        self, sandbox: SandboxVerbs, timeout_sec: float | None
    ) -> tuple[Any, SandboxEnvironment]:
        import litellm
        import minisweagent
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.models.litellm_model import LitellmModel
        from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

        name = "mini.yaml" if self.actions == "toolcall" else "mini_textbased.yaml"
        config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / name).read_text())
        kwargs: dict[str, Any] = {"api_base": self.base_url, "api_key": self.api_key}
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        model_class = LitellmModel if self.actions == "toolcall" else LitellmTextbasedModel
        model = model_class(
            **{**config.get("model", {}), "model_kwargs": kwargs},
            model_name=f"openai/{self.model}",
            cost_tracking="ignore_errors",
        )
        model.abort_exceptions = [Exception]  # no retries: the server is ours, on loopback
        litellm.suppress_debug_info = True
        env = SandboxEnvironment(
            sandbox, timeout=self.command_timeout, env=config.get("environment", {}).get("env")
        )
        agent_config = dict(config.get("agent", {}))
        agent_config.pop("mode", None)  # the interactive agent's; DefaultAgent never asks
        agent_config |= {"step_limit": self.step_limit, "cost_limit": 0.0}
        if timeout_sec:
            agent_config["wall_time_limit_seconds"] = int(timeout_sec)
        return DefaultAgent(model, env, **agent_config), env

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        """mini-swe-agent on ``instruction`` in ``sandbox``, in a thread of its own (it is
        synchronous); cancelling the run stops it at its next command."""
        agent, env = self._parts(sandbox, timeout_sec)
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[dict[str, Any] | None, BaseException | None]] = (
            loop.create_future()
        )

        def work() -> None:
            try:
                result: tuple[Any, BaseException | None] = (agent.run(instruction), None)
            except BaseException as exc:  # the agent's own failure, reported as such
                result = (None, exc)
            loop.call_soon_threadsafe(_settle, done, result)

        threading.Thread(target=work, name="mini-swe-agent", daemon=True).start()
        try:
            _, error = await asyncio.shield(done)
        except asyncio.CancelledError:
            env.stopped.set()
            raise
        trajectory = to_trajectory(agent.messages, error)
        trajectory.model = self.model
        trajectory.timings = Timings(agent_sec=time.monotonic() - started)
        if logs_dir is not None:
            logs_dir.mkdir(parents=True, exist_ok=True)
            (logs_dir / "mini-swe-agent.json").write_text(
                json.dumps(agent.serialize(), default=str)
            )
        return trajectory


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # not when the run was cancelled meanwhile
        future.set_result(result)


def to_trajectory(messages: list[dict[str, Any]], error: BaseException | None = None) -> Trajectory:
    """mini-swe-agent's messages as a trajectory: system, user, assistant (with its tool
    calls), tool results; its exit status (or the exception it stopped with) as the failure."""
    import minisweagent

    steps: list[Step] = []
    status: str | None = None
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content else ""
        if role == "exit":
            status = str(message.get("extra", {}).get("exit_status") or text)
            continue
        if role == "tool":
            result = ToolResult(call_id=message.get("tool_call_id"), content=text)
            steps.append(Step(role=Role.TOOL, tool_results=[result]))
            continue
        calls = [
            ToolCall(
                id=str(call.get("id") or f"call_{i}"),
                name=str(call.get("function", {}).get("name", "")),
                arguments=_arguments(call.get("function", {}).get("arguments")),
            )
            for i, call in enumerate(message.get("tool_calls") or [])
        ]
        if role in ("system", "user", "assistant"):
            steps.append(Step(role=Role(role), content=text, tool_calls=calls))
    if error is not None:
        failure: FailureMode | None = _failure_of(error)
    else:
        failure = _EXITS.get(status or "", FailureMode.AGENT_ERROR)
    return Trajectory(
        agent=AgentInfo(name="mini-swe-agent", version=minisweagent.__version__),
        steps=steps,
        failure_mode=failure,
        extra={"mini_swe_agent": {"exit_status": status or type(error).__name__}},
    )


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value or "{}")
    except (TypeError, json.JSONDecodeError):
        return {"_invalid_json": str(value)}
    return parsed if isinstance(parsed, dict) else {"_invalid_json": str(value)}


def _failure_of(error: BaseException) -> FailureMode:
    """A model call that failed (the server refused or went away) is the model's failure;
    anything else the agent's."""
    module = type(error).__module__
    if module.startswith(("litellm", "openai", "httpx")):
        return FailureMode.MODEL_ERROR
    return FailureMode.AGENT_ERROR
