"""The agent loop against the scripted model and a real local workspace."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ale.trajectory import FailureMode, Role, ToolCall, Usage
from iflow.agent import Agent
from iflow.approval import ApprovalRequest
from iflow.config import AgentConfig
from iflow.errors import ContextTooLong, ModelError
from iflow.events import Compressed, Notice, RunEnded, ToolFinished
from iflow.models.base import ModelResponse
from iflow.models.scripted import ScriptedModel
from iflow.workspace.local import LocalWorkspace


def call(name: str, **arguments: object) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def shell(command: str) -> dict:
    return call("run_shell_command", command=command)


def finish(summary: str = "done") -> dict:
    return call("finish", summary=summary)


@pytest.fixture
async def ws(tmp_path: Path):
    async with LocalWorkspace(tmp_path) as workspace:
        yield workspace


@pytest.fixture(autouse=True)
async def _close_agents(monkeypatch: pytest.MonkeyPatch):
    """Every agent made in a test gets its shell state removed afterwards."""
    made: list[Agent] = []
    real_init = Agent.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Agent, "__init__", init)
    yield
    for agent in made:
        await agent.aclose()


def make(ws, responses, **config) -> tuple[Agent, list]:
    events: list = []
    config.setdefault("approval_mode", "yolo")
    agent = Agent(
        ScriptedModel(responses), ws, config=AgentConfig(**config), on_event=events.append
    )
    return agent, events


async def test_tool_round_trip_and_finish(ws, tmp_path: Path) -> None:
    agent, events = make(
        ws,
        [
            shell("echo hello > greeting.txt && cat greeting.txt"),
            call("read_file", path="greeting.txt"),
            finish("wrote greeting.txt"),
        ],
    )
    end = await agent.run("write a greeting")
    assert end.failure_mode is None and end.exit_code == 0
    assert agent.final_answer == "wrote greeting.txt"
    assert (tmp_path / "greeting.txt").read_text() == "hello\n"
    roles = [s.role for s in agent.trajectory.steps]
    assert roles == [Role.SYSTEM, Role.USER] + [Role.ASSISTANT, Role.TOOL] * 3
    shell_result = agent.trajectory.steps[3].tool_results[0]
    assert "hello" in shell_result.content and shell_result.metadata["exit_code"] == 0
    assert agent.trajectory.failure_mode is None
    assert agent.trajectory.timings and agent.trajectory.timings.agent_sec is not None
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.name for e in finished] == ["run_shell_command", "read_file", "finish"]
    assert isinstance(events[-1], RunEnded) and events[-1].outcome == "finished"


async def test_the_model_sees_observations(ws) -> None:
    model = ScriptedModel([shell("echo marker-42"), "all good"])
    agent = Agent(model, ws, config=AgentConfig(approval_mode="yolo"))
    end = await agent.run("go")
    assert end.failure_mode is None and agent.final_answer == "all good"
    second_prompt = model.calls[1]
    assert second_prompt[-1].role is Role.TOOL
    assert "marker-42" in second_prompt[-1].tool_results[0].content


async def test_unknown_and_malformed_calls_are_observations(ws) -> None:
    agent, _ = make(
        ws,
        [
            call("launch_rockets", count=3),
            call("read_file", nonsense=True),
            "<tool_call>{not json</tool_call>",
            finish(),
        ],
    )
    end = await agent.run("go")
    assert end.failure_mode is None
    results = [r for s in agent.trajectory.steps if s.role is Role.TOOL for r in s.tool_results]
    assert results[0].is_error and "Unknown tool 'launch_rockets'" in results[0].content
    assert results[1].is_error and "Invalid arguments for read_file" in results[1].content
    assert results[2].is_error and results[2].call_id is None


async def test_format_errors_in_a_row_end_the_run(ws) -> None:
    agent, _ = make(ws, ["<tool_call>{bad</tool_call>"] * 3, max_format_errors=3)
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.FORMAT_ERROR
    assert agent.trajectory.failure_mode is FailureMode.FORMAT_ERROR


async def test_require_finish_reminds_then_fails(ws) -> None:
    agent, _ = make(ws, ["I think I'm done", "really done", finish("ok")], require_finish=True)
    end = await agent.run("go")
    assert end.failure_mode is None and agent.final_answer == "ok"
    reminders = [s.content for s in agent.trajectory.steps if s.role is Role.TOOL and s.content]
    assert len(reminders) == 2 and "call finish" in reminders[0]


async def test_turn_limit(ws) -> None:
    agent, _ = make(ws, [shell(f"echo {i}") for i in range(10)], max_turns=3)
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.LIMITS_EXCEEDED
    assert "3 turns" in str(end) and "--max-turns" in str(end)
    assert agent.turn == 3


async def test_token_limit(ws) -> None:
    agent, _ = make(ws, [shell(f"echo {i}") for i in range(10)], max_tokens=50)
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.LIMITS_EXCEEDED and "tokens" in str(end)


async def test_cost_limit(ws) -> None:
    responses = [
        ModelResponse(
            tool_calls=[
                ToolCall(id=f"c{i}", name="run_shell_command", arguments={"command": "true"})
            ],
            usage=Usage(prompt_tokens=10, completion_tokens=5, cost_usd=0.02),
        )
        for i in range(5)
    ]
    agent, _ = make(ws, responses, max_cost_usd=0.05)
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.LIMITS_EXCEEDED and "$" in str(end)
    assert agent.turn == 3
    assert agent.trajectory.usage.cost_usd == pytest.approx(0.06)


async def test_wall_clock_timeout(ws) -> None:
    agent, _ = make(ws, [shell("sleep 20"), finish()], max_wall_sec=1.0)
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.AGENT_TIMEOUT
    last = agent.trajectory.steps[-1]
    assert last.role is Role.TOOL and "time limit" in last.tool_results[0].content


async def test_interrupt_keeps_the_session(ws) -> None:
    agent, _ = make(ws, [shell("sleep 30"), "second answer"])
    task = asyncio.create_task(agent.run("go"))
    for _ in range(200):
        await asyncio.sleep(0.02)
        if agent.turn == 1 and agent.history[-1].role is Role.ASSISTANT:
            break
    assert agent.interrupt()
    end = await asyncio.wait_for(task, 10)
    assert end.failure_mode is FailureMode.INTERRUPTED and end.exit_code == 130
    assert agent.history[-1].role is Role.TOOL  # the dangling call was answered
    again = await agent.run("go on")
    assert again.failure_mode is None and agent.final_answer == "second answer"
    assert not agent.interrupt()


class _SlowFirst(ScriptedModel):
    """A model whose first answer never comes (the user interrupts it)."""

    async def complete(self, *args: object, **kwargs: object):  # type: ignore[override]
        if not getattr(self, "_waited", False):
            self._waited = True
            await asyncio.sleep(60)
        return await super().complete(*args, **kwargs)


ALTERNATING = (  # as strict chat templates check it (Mistral's, Gemma's)
    "{% for m in messages %}{% if m['role'] in ('user', 'assistant') %}"
    "{% if (m['role'] == 'user') == (loop.index0 is odd) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
    "{% endif %}{% endif %}{% endfor %}"
)


async def test_an_answer_cut_off_leaves_roles_that_still_alternate(ws) -> None:
    """Interrupted while the model was answering, then a new prompt: no two user messages
    in a row (a template that requires alternating roles renders the next request)."""
    import jinja2

    agent = Agent(_SlowFirst(["the answer"]), ws, config=AgentConfig(approval_mode="yolo"))
    task = asyncio.create_task(agent.run("first question"))
    for _ in range(100):
        await asyncio.sleep(0.02)
        if agent.history[-1].role is Role.USER:
            break
    assert agent.interrupt()
    assert (await asyncio.wait_for(task, 10)).failure_mode is FailureMode.INTERRUPTED
    assert await agent.run("second question")
    roles = [s.role.value for s in agent.history if s.role.value in ("user", "assistant")]
    assert roles == ["user", "assistant", "user", "assistant"]

    def boom(message: str) -> None:
        raise ValueError(message)

    env = jinja2.Environment()
    env.globals["raise_exception"] = boom
    template = env.from_string(ALTERNATING)
    template.render(messages=[{"role": r} for r in roles])  # renders
    with pytest.raises(ValueError, match="must alternate"):  # (what it refused before)
        template.render(messages=[{"role": r} for r in ("user", "user", "assistant")])


async def test_model_errors_end_the_run(ws) -> None:
    agent, _ = make(ws, [ModelError("the server is down; try later")])
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.MODEL_ERROR and "server is down" in str(end)


async def test_loop_detection_warns_then_stops(ws) -> None:
    agent, events = make(ws, [shell("ls")] * 10, loop_threshold=3)
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.LOOP_DETECTED
    warnings = [e for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert len(warnings) == 1
    told = [s.content for s in agent.history if s.role is Role.TOOL and "<warning>" in s.content]
    assert len(told) == 1 and "same tool call 3 times" in told[0]
    assert agent.turn == 5  # warned at the 3rd, stopped 2 later


async def test_repeated_failing_calls_stop(ws) -> None:
    agent, _ = make(ws, [shell(f"false {i}") for i in range(12)])
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.LOOP_DETECTED
    assert agent.turn == 7


async def test_a_different_working_call_resets_the_detector(ws) -> None:
    script = [shell("ls"), shell("ls"), shell("pwd"), shell("ls"), shell("ls"), finish()]
    agent, _ = make(ws, script)
    assert (await agent.run("go")).failure_mode is None


async def test_compression_keeps_the_prompt_under_the_limit(ws) -> None:
    big = "x" * 1200
    script = [shell(f"echo {big} {i}") for i in range(3)] + [
        "Summary: echoed long lines three times.",
        shell(f"echo {big} 3"),
        finish(),
    ]
    model = ScriptedModel(script)
    events: list = []
    agent = Agent(
        model,
        ws,
        config=AgentConfig(approval_mode="yolo", keep_recent_turns=1),
        on_event=events.append,
    )
    # compression starts when the prompt passes 1,500 tokens more than the empty one (~2.5 turns)
    limit = model.context_limit = int((agent.context_used() + 1500) / 0.8)
    end = await agent.run("echo things")
    assert end.failure_mode is None, str(end)
    compressed = [e for e in events if isinstance(e, Compressed)]
    assert compressed and compressed[0].method == "summary"
    assert compressed[0].after < compressed[0].before
    assert all(e.after <= 0.8 * limit for e in compressed)
    # the first user message survives; the summary follows it
    assert agent.history[1].content == "echo things"
    assert "summarised" in agent.history[2].content
    # the trajectory still has every step, plus the summary
    assert len(agent.trajectory.steps) > len(agent.history)


async def test_compression_falls_back_when_the_model_cannot_summarise(ws) -> None:
    big = "y" * 1200
    script = [
        call("todo_write", todos=[{"content": "echo things", "status": "in_progress"}]),
        *[shell(f"echo {big} {i}") for i in range(3)],
        ModelError("summaries are not supported here"),
        finish(),
    ]
    model = ScriptedModel(script)
    events: list = []
    agent = Agent(
        model,
        ws,
        config=AgentConfig(approval_mode="yolo", keep_recent_turns=1),
        on_event=events.append,
    )
    model.context_limit = int((agent.context_used() + 1500) / 0.8)
    end = await agent.run("echo things")
    assert end.failure_mode is None, str(end)
    compressed = [e for e in events if isinstance(e, Compressed)]
    assert compressed and compressed[0].method == "fallback"
    summary = agent.history[2].content
    assert "dropped" in summary and "echo things" in summary  # marker + the todo list


async def test_force_compress_and_context_too_long_retry(ws) -> None:
    script = [
        shell("echo a"),
        shell("echo b"),
        shell("echo c"),
        ContextTooLong("too long"),
        "short summary",
        finish(),
    ]
    agent, _ = make(ws, script, keep_recent_turns=1)
    end = await agent.run("go")
    assert end.failure_mode is None
    assert any("summarised" in s.content for s in agent.history)


async def test_context_too_long_with_nothing_to_drop(ws) -> None:
    agent, _ = make(ws, [ContextTooLong("the prompt is too long")])
    end = await agent.run("go")
    assert end.failure_mode is FailureMode.CONTEXT_LENGTH_EXCEEDED


async def test_todo_reminder(ws) -> None:
    script = [call("todo_write", todos=[{"content": "step one"}, {"content": "step two"}])]
    script += [shell(f"echo {i}") for i in range(3)] + [finish()]
    agent, _ = make(ws, script, todo_reminder_every=2)
    await agent.run("go")
    reminders = [s for s in agent.history if s.role is Role.TOOL and "<reminder>" in s.content]
    assert reminders and "step two" in reminders[0].content


async def test_approval_default_mode(ws, tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []
    answers = iter(["deny", "allow_always", "allow_once"])

    async def approver(request: ApprovalRequest):
        asked.append(request)
        return next(answers)

    script = [
        shell("echo one"),
        shell("echo two"),
        shell("echo three"),
        call("write_file", path="f.txt", content="hi"),
        call("read_file", path="f.txt"),
        finish(),
    ]
    agent = Agent(ScriptedModel(script), ws, config=AgentConfig(), approver=approver)
    await agent.run("go")
    results = [s.tool_results[0] for s in agent.trajectory.steps if s.role is Role.TOOL]
    assert results[0].is_error and "denied" in results[0].content
    assert "two" in results[1].content and "three" in results[2].content
    assert [r.tool for r in asked] == ["run_shell_command", "run_shell_command", "write_file"]
    assert (tmp_path / "f.txt").read_text() == "hi"


async def test_headless_denies_what_needs_approval(ws, tmp_path: Path) -> None:
    script = [call("write_file", path="g.txt", content="x"), shell("echo hi"), finish()]
    agent, _ = make(ws, script, approval_mode="auto-edit", headless=True)
    await agent.run("go")
    results = [s.tool_results[0] for s in agent.trajectory.steps if s.role is Role.TOOL]
    assert not results[0].is_error and (tmp_path / "g.txt").exists()
    assert results[1].is_error and "--yolo" in results[1].content


async def test_plan_mode_offers_read_only_tools(ws, tmp_path: Path) -> None:
    model = ScriptedModel([call("write_file", path="h.txt", content="x"), finish()])
    agent = Agent(model, ws, config=AgentConfig(approval_mode="plan"))
    names = {s["function"]["name"] for s in agent.schemas}
    assert "write_file" not in names and "run_shell_command" not in names
    assert {"read_file", "glob", "todo_write", "finish"} <= names
    await agent.run("plan it")
    result = agent.trajectory.steps[3].tool_results[0]
    assert result.is_error and "plan mode" in result.content
    assert not (tmp_path / "h.txt").exists()
    agent.set_mode("yolo")
    assert "write_file" in {s["function"]["name"] for s in agent.schemas}


async def test_task_subagent_returns_only_its_report(ws) -> None:
    script = [
        call("task", description="count files", prompt="count the files here"),
        shell("echo sub-agent-output"),  # the sub-agent's turns use the same model
        finish("there are 0 files"),
        finish("the sub-agent says 0 files"),
    ]
    agent, _ = make(ws, script)
    end = await agent.run("delegate")
    assert end.failure_mode is None
    report = agent.trajectory.steps[3].tool_results[0]
    assert report.content == "there are 0 files"
    assert "sub-agent-output" not in json.dumps([s.model_dump(mode="json") for s in agent.history])
    subs = agent.trajectory.extra["iflow"]["subagents"]
    assert subs[0]["description"] == "count files"
    assert "task" not in {t.name for t in agent.spawn(max_turns=3).all_tools}


async def test_cd_and_export_carry_over_between_calls(ws, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    agent, _ = make(ws, [shell("cd sub && export FOO=bar"), shell("pwd; echo $FOO"), finish()])
    await agent.run("go")
    out = agent.trajectory.steps[5].tool_results[0].content
    assert str(tmp_path / "sub") in out and "bar" in out


async def test_state_restore_round_trip(ws) -> None:
    agent, _ = make(ws, [call("todo_write", todos=[{"content": "a"}]), finish()])
    await agent.run("go")
    state = agent.state()
    other, _ = make(ws, [finish("resumed")])
    other.restore(**state)
    assert other.todos.render() == agent.todos.render()
    assert other.turn == agent.turn
    await other.run("again")
    assert other.history[: len(agent.history)] == agent.history


@pytest.mark.parametrize(
    ("command", "root"),
    [("ls;", "ls"), ("ls; rm -rf /tmp/x", "ls"), ("ls|wc -l", "ls"), ("git status && y", "git")],
)
def test_always_allow_remembers_the_program_without_shell_punctuation(
    command: str, root: str
) -> None:
    from iflow.approval import ApprovalPolicy

    policy = ApprovalPolicy()
    policy.remember("execute", {"command": command})
    assert policy.always == {f"execute:{root}"}
    assert not policy.needs_approval("execute", {"command": f"{root} -la"})
