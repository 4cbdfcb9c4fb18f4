"""Any agent program as an ``ale.agents`` agent (``command``): run as a command on this machine.

For an agent that is a program rather than a Python class (a company's agent, a script in
another language), ``tasks.agent: {name: command, kwargs: {command: "my-agent --fast"}}``
runs the command once per episode with the task's instruction on its standard input and, in
its environment, what it needs to act:

- ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_MODEL``: the model server (in training,
  the policy gateway with the episode's key);
- ``ROCK_URL``, ``ROCK_TOKEN``, ``ROCK_SANDBOX_ID``: the episode's sandbox behind its rock
  daemon (``rock sandbox exec "$ROCK_SANDBOX_ID" -- CMD`` runs a command in it);
- ``ALE_INSTRUCTION``: the instruction again.

Its exit status says how it ended (0: it finished; anything else: the agent failed), and its
output is kept in the run's logs. The policy's tokens are what the gateway recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

from ale.agents import AgentConfigError
from ale.sandbox import SandboxVerbs
from ale.trajectory import AgentInfo, FailureMode, Role, Step, Timings, Trajectory


class CommandAgent:
    """The ``command`` agent (see the module docstring)."""

    name = "command"

    def __init__(
        self,
        model: str | None = None,
        *,
        command: str | list[str] | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        env: dict[str, str] | None = None,
        **_ignored: Any,
    ) -> None:
        if not command:
            raise AgentConfigError(
                "the command agent needs the program to run: give --agent-kwarg "
                "command='my-agent --flag' (tasks.agent.kwargs.command in roll)"
            )
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.env = dict(env or {})

    def _environment(self, instruction: str, sandbox: SandboxVerbs) -> dict[str, str]:
        env = {**os.environ, **self.env, "ALE_INSTRUCTION": instruction}
        env["ROCK_SANDBOX_ID"] = sandbox.id
        client = getattr(sandbox, "client", None)  # a daemon's sandbox: how to reach it
        for name, attribute in (("ROCK_URL", "url"), ("ROCK_TOKEN", "token")):
            if getattr(client, attribute, None):
                env[name] = str(getattr(client, attribute))
        server = {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.api_key,
            "OPENAI_MODEL": self.model,
        }
        env |= {name: value for name, value in server.items() if value}
        return env

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self._environment(instruction, sandbox),
                start_new_session=True,
            )
        except OSError as exc:
            raise AgentConfigError(
                f"the command agent could not start {self.argv[0]!r} ({exc.strerror or exc}); "
                "check the command and that it is installed"
            ) from None
        failure: FailureMode | None = None
        try:
            output, _ = await asyncio.wait_for(
                process.communicate(instruction.encode()), timeout_sec
            )
        except TimeoutError:
            output, failure = b"", FailureMode.AGENT_TIMEOUT
        finally:
            if process.returncode is None:  # timed out or cancelled: the whole group goes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                await process.wait()
        if failure is None and process.returncode != 0:
            failure = FailureMode.AGENT_ERROR
        text = output.decode(errors="replace")
        if logs_dir is not None:
            logs_dir.mkdir(parents=True, exist_ok=True)
            (logs_dir / "command.log").write_text(text)
        return Trajectory(
            agent=AgentInfo(name=self.name, extra={"command": self.argv}),
            model=self.model,
            steps=[Step(role=Role.USER, content=instruction)],
            failure_mode=failure,
            timings=Timings(agent_sec=time.monotonic() - started),
            extra={"command": {"exit_code": process.returncode, "output_tail": text[-2000:]}},
        )
