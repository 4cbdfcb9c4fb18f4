"""Hooks in Claude Code's shape, run for real: bash scripts reading the event on stdin and
answering with exit codes and JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from iflow.agent import Agent
from iflow.config import AgentConfig
from iflow.errors import Finished, StoppedByHook
from iflow.events import Event, Notice
from iflow.hooks import HookMatcher, HookRunner
from iflow.models.scripted import ScriptedModel
from iflow.settings import load_settings
from iflow.workspace import LocalWorkspace


def shell(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}


def finish(summary: str = "done") -> dict[str, Any]:
    return {"tool_calls": [{"name": "finish", "arguments": {"summary": summary}}]}


def hooks(tmp_path: Path, **events: list[tuple[str, str]]) -> HookRunner:
    """Each event: (matcher, script body) pairs; each script is written to a file."""
    config: dict[str, list[HookMatcher]] = {}
    for event, pairs in events.items():
        for n, (matcher, body) in enumerate(pairs):
            script = tmp_path / f"{event}-{n}.sh"
            script.write_text("#!/bin/bash\n" + body)
            script.chmod(0o755)
            config.setdefault(event, []).append(
                HookMatcher.model_validate(
                    {
                        "matcher": matcher,
                        "hooks": [{"type": "command", "command": str(script), "timeout": 5}],
                    }
                )
            )
    return HookRunner(config, cwd=tmp_path, session_id="s-1")


async def run(
    tmp_path: Path, runner: HookRunner, script: list[Any], mode: str = "default"
) -> tuple[Agent, Any, list[Event]]:
    events: list[Event] = []
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(
            ScriptedModel(script),
            ws,
            config=AgentConfig(headless=True, approval_mode=mode),  # type: ignore[arg-type]
            hooks=runner,
            on_event=events.append,
        )
        end = await agent.run("do the work")
        await agent.aclose()
    return agent, end, events


def results(agent: Agent) -> list[Any]:
    return [r for s in agent.trajectory.steps for r in s.tool_results]


async def test_a_pre_tool_use_hook_blocks_with_exit_2_and_sees_the_event(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    runner = hooks(
        tmp_path,
        PreToolUse=[("Bash", f"cat > {seen}\necho 'no deleting here' >&2\nexit 2\n")],
    )
    agent, end, _ = await run(tmp_path, runner, [shell("rm -rf important"), finish()], "yolo")
    [blocked, _] = results(agent)
    assert blocked.is_error and blocked.content == (
        "A hook blocked this run_shell_command call: no deleting here"
    )
    event = json.loads(seen.read_text())
    assert event["hook_event_name"] == "PreToolUse" and event["tool_name"] == "Bash"
    assert event["tool_input"] == {"command": "rm -rf important"}
    assert event["session_id"] == "s-1" and event["cwd"] == str(tmp_path)
    assert isinstance(end, Finished)


async def test_a_pre_tool_use_hook_allows_what_headless_would_deny_and_asks(tmp_path: Path) -> None:
    allow = '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}'
    runner = hooks(tmp_path, PreToolUse=[("run_shell_command", f"echo '{allow}'\n")])
    agent, _, _ = await run(tmp_path, runner, [shell("touch made"), finish()])
    assert (tmp_path / "made").exists() and not results(agent)[0].is_error
    ask = allow.replace('"allow"', '"ask"')
    runner = hooks(tmp_path, PreToolUse=[("Bash|Write", f"echo '{ask}'\n")])
    agent, _, _ = await run(tmp_path, runner, [shell("touch asked"), finish()], "yolo")
    assert not (tmp_path / "asked").exists()  # ask in yolo mode: headless cannot ask, denied
    said = results(agent)[0].content  # the hook decided: said so, and no mode is suggested
    assert said.startswith("A PreToolUse hook asked for approval of this run_shell_command")
    assert "--yolo" not in said


async def test_post_tool_use_feedback_reaches_the_model(tmp_path: Path) -> None:
    block = '{"decision": "block", "reason": "run the linter before you go on"}'
    runner = hooks(tmp_path, PostToolUse=[("*", f"echo '{block}'\n")])
    agent, _, _ = await run(tmp_path, runner, [shell("echo edited"), finish()], "yolo")
    first = results(agent)[0]
    assert first.content.startswith("stdout") or "edited" in first.content
    assert first.content.endswith("A hook says: run the linter before you go on")


async def test_prompt_hooks_add_context_or_block(tmp_path: Path) -> None:
    runner = hooks(
        tmp_path,
        SessionStart=[("", "echo 'The repo uses tabs.'\n")],
        UserPromptSubmit=[
            ("", 'echo \'{"hookSpecificOutput": {"additionalContext": "Ticket 42"}}\'\n')
        ],
    )
    agent, _, _ = await run(tmp_path, runner, [finish()])
    prompt = next(s.content for s in agent.trajectory.steps if s.role.value == "user")
    assert prompt == "do the work\n\nThe repo uses tabs.\n\nTicket 42"
    runner = hooks(tmp_path, UserPromptSubmit=[("", "echo 'secrets in the prompt' >&2; exit 2\n")])
    model = ScriptedModel([finish()])
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(model, ws, config=AgentConfig(headless=True), hooks=runner)
        end = await agent.run("my password is hunter2")
    assert isinstance(end, StoppedByHook) and "secrets in the prompt" in str(end)
    assert end.exit_code != 0 and agent.turn == 0  # the model never saw it


async def test_a_stop_hook_sends_the_agent_on_once(tmp_path: Path) -> None:
    body = (
        'if [ "$(python3 -c \'import json,sys; print(json.load(sys.stdin)["stop_hook_active"])\')" '
        '= False ]; then echo "tests still fail" >&2; exit 2; fi\n'
    )
    runner = hooks(tmp_path, Stop=[("", body)])
    agent, end, _ = await run(
        tmp_path, runner, [finish("first"), shell("echo fixing"), finish("second")], "yolo"
    )
    assert isinstance(end, Finished) and agent.final_answer == "second"
    reminders = [s.content for s in agent.trajectory.steps if "Stop hook" in (s.content or "")]
    assert reminders == ["<reminder>A Stop hook says you are not done: tests still fail</reminder>"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("echo broke >&2; exit 1\n", "failed (exit 1: broke); it decided nothing"),
        ("echo '{not json'\n", "looks like JSON but is not"),
        ("sleep 30\n", "ran past its timeout of 5 s"),
    ],
)
async def test_a_failing_hook_is_one_sentence_and_changes_nothing(
    tmp_path: Path, body: str, says: str
) -> None:
    runner = hooks(tmp_path, PreToolUse=[("Bash", body)])
    _, _, events = await run(tmp_path, runner, [shell("touch went-on"), finish()], "yolo")
    assert (tmp_path / "went-on").exists()
    warnings = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert len(warnings) == 1 and says in warnings[0] and "\n" not in warnings[0]


def test_hooks_of_every_settings_layer_run_and_unknown_events_are_kept(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".iflow").mkdir(parents=True)
    (work / ".iflow").mkdir(parents=True)
    entry = {"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}
    (home / ".iflow" / "settings.json").write_text(
        json.dumps({"hooks": {"PreToolUse": [entry], "Notification": [{"hooks": []}]}})
    )
    (work / ".iflow" / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [entry]}}))
    settings = load_settings(cwd=work, home=home, env={})
    assert len(settings.hooks["PreToolUse"]) == 2 and "Notification" in settings.hooks
    (work / ".iflow" / "settings.json").write_text(
        json.dumps({"hooks": {"PreToolUse": [{"hooks": [{"type": "prompt", "command": "x"}]}]}})
    )
    with pytest.raises(Exception, match="hooks"):
        load_settings(cwd=work, home=home, env={})


async def test_hooks_written_as_claude_code_s_docs_write_them(tmp_path: Path) -> None:
    """A formatter hook reading ``.tool_input.file_path`` with jq (absolute, as Claude Code
    sends it) formats the file the agent wrote; a hook reading ``.tool_response.stdout``
    sees the shell's output; a Stop hook reads the session's transcript (JSONL) from
    ``.transcript_path``."""
    write = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "notes.txt", "content": "a   \nb  \n"}}
        ]
    }
    stdout_seen, users = tmp_path / "stdout.txt", tmp_path / "users.txt"
    runner = hooks(
        tmp_path,
        PostToolUse=[
            ("Write|Edit", "f=$(jq -r '.tool_input.file_path')\n[ \"${f:0:1}\" = / ] || exit 1\n"
                           "sed -i 's/[[:space:]]*$//' \"$f\"\n"),
            ("Bash", f"jq -r '.tool_response.stdout' > {stdout_seen}\n"),
        ],
        Stop=[("", f"t=$(jq -r '.transcript_path')\n"
                   f"jq -r 'select(.type == \"user\") | .message.content' \"$t\" > {users}\n")],
    )  # fmt: skip
    runner.transcript_dir = tmp_path / "transcripts"
    events: list[Event] = []
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(
            ScriptedModel([write, shell("echo from-the-shell"), finish()]),
            ws,
            config=AgentConfig(headless=True, approval_mode="yolo"),
            hooks=runner,
            on_event=events.append,
        )
        runner.transcript = lambda: agent.history
        assert isinstance(await agent.run("do the work"), Finished)
        await agent.aclose()
    assert (tmp_path / "notes.txt").read_text() == "a\nb\n"  # formatted by the hook
    assert stdout_seen.read_text().startswith("from-the-shell")
    assert users.read_text().splitlines()[0] == "do the work"
    assert not [e for e in events if isinstance(e, Notice) and e.level == "warning"]
