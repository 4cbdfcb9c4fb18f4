"""OpenAIModel against a real HTTP server (tests/openai_server.py) on a loopback port."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ale.trajectory import Role, Step, ToolCall, ToolResult
from iflow.errors import ContextTooLong, ModelError
from iflow.models import INVALID_JSON_KEY, OpenAIModel, render_tools_prompt
from iflow.models.openai_http import DEFAULT_OUTPUT_TOKENS

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import Endless, Fail, FakeOpenAI, Hang, Raw, Reply, closed_port_url, serve_openai

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
MESSAGES = [
    Step(role=Role.SYSTEM, content="You are a coding agent."),
    Step(role=Role.USER, content="What is in README.md?"),
]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A server of each test's own: on one shared by the module, a late retry of an earlier
    test's request took the behaviour queued for the next test (a 400, an endless answer)."""
    with serve_openai() as server:
        yield server


def make(server: FakeOpenAI, **kw: object) -> OpenAIModel:
    options: dict = {"api_key": "sk-test", "backoff_base": 0.01, "backoff_max": 0.05} | kw
    return OpenAIModel("test-model", base_url=server.base_url, **options)


async def test_streams_text_usage_and_request_shape(server: FakeOpenAI) -> None:
    server.push(
        Reply(
            "The README says hello.",
            chunks=4,
            usage={
                "prompt_tokens": 30,
                "completion_tokens": 6,
                "prompt_tokens_details": {"cached_tokens": 12},
            },
        )
    )
    deltas: list[str] = []
    async with make(server, temperature=0.2, max_tokens=100) as model:
        response = await model.complete(MESSAGES, [], on_delta=deltas.append)
    assert response.content == "The README says hello."
    assert len(deltas) == 4 and "".join(deltas) == response.content
    assert response.tool_calls == [] and response.format_errors == []
    assert response.finish_reason == "stop"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30, 6)
    assert response.usage.cached_tokens == 12
    [request] = server.requests
    assert request["model"] == "test-model" and request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert "tools" not in request
    assert request["temperature"] == 0.2 and request["max_tokens"] == 100
    assert request["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "What is in README.md?"},
    ]
    assert server.headers[0]["authorization"] == "Bearer sk-test"


async def test_reasoning_content_is_collected(server: FakeOpenAI) -> None:
    server.push(Reply("Answer.", reasoning="First I think, then I answer."))
    async with make(server) as model:
        response = await model.complete(MESSAGES, [])
    assert response.reasoning == "First I think, then I answer."
    assert response.content == "Answer."


async def test_native_tool_calls_are_assembled_from_deltas(server: FakeOpenAI) -> None:
    server.push(
        Reply(
            "Let me look.",
            tool_calls=[
                {"id": "call_a", "name": "read_file", "arguments": {"path": "README.md"}},
                {"id": "call_b", "name": "read_file", "arguments": {"path": "docs/ü.md"}},
            ],
        )
    )
    async with make(server) as model:
        response = await model.complete(MESSAGES, TOOLS)
    assert response.content == "Let me look."
    assert response.tool_calls == [
        ToolCall(id="call_a", name="read_file", arguments={"path": "README.md"}),
        ToolCall(id="call_b", name="read_file", arguments={"path": "docs/ü.md"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == TOOLS


async def test_native_history_is_sent_as_tool_messages(server: FakeOpenAI) -> None:
    server.push(Reply("Done."))
    history = [
        *MESSAGES,
        Step(
            role=Role.ASSISTANT,
            tool_calls=[ToolCall(id="call_1", name="read_file", arguments={"path": "README.md"})],
        ),
        Step(role=Role.TOOL, tool_results=[ToolResult(call_id="call_1", content="hello")]),
    ]
    async with make(server) as model:
        await model.complete(history, TOOLS)
    sent = server.requests[0]["messages"]
    assert sent[2]["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": '{"path": "README.md"}',
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "hello"}


async def test_invalid_json_arguments_are_kept_for_the_registry(server: FakeOpenAI) -> None:
    server.push(Reply(tool_calls=[{"name": "read_file", "arguments": '{"path": "READ'}]))
    async with make(server) as model:
        response = await model.complete(MESSAGES, TOOLS)
    [call] = response.tool_calls
    assert call.name == "read_file"
    assert call.arguments == {INVALID_JSON_KEY: '{"path": "READ'}


async def test_text_tool_format_sends_the_prompt_and_parses_markup(server: FakeOpenAI) -> None:
    markup = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
    server.push(Reply(f"Reading it.\n{markup}", chunks=7))
    history = [
        *MESSAGES,
        Step(
            role=Role.ASSISTANT,
            content="First.",
            tool_calls=[ToolCall(id="call_1", name="read_file", arguments={"path": "b.txt"})],
        ),
        Step(role=Role.TOOL, tool_results=[ToolResult(call_id="call_1", content="bee")]),
    ]
    deltas: list[str] = []
    async with make(server, tool_format="text") as model:
        response = await model.complete(history, TOOLS, on_delta=deltas.append)
    assert response.content == "Reading it."
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("read_file", {"path": "a.txt"})
    ]
    assert response.tool_calls[0].id.startswith("call_")
    assert response.raw == f"Reading it.\n{markup}"
    assert "<tool_call>" not in "".join(deltas) and "Reading it." in "".join(deltas)
    request = server.requests[0]
    assert "tools" not in request
    sent = request["messages"]
    assert sent[0]["content"].endswith(render_tools_prompt(TOOLS))
    assert sent[2]["role"] == "assistant" and "tool_calls" not in sent[2]
    assert sent[2]["content"].startswith("First.\n<tool_call>")
    assert sent[3] == {"role": "user", "content": "<tool_response>\nbee\n</tool_response>"}


async def test_text_markup_errors_become_format_errors(server: FakeOpenAI) -> None:
    server.push(Reply('<tool_call>{"name": "read_file", "arguments": {"path": }</tool_call>'))
    async with make(server) as model:
        response = await model.complete(MESSAGES, TOOLS)
    assert response.tool_calls == []
    [error] = response.format_errors
    assert error.startswith("Your tool call #1 is not valid JSON")


async def test_429_with_retry_after_ms_then_success(server: FakeOpenAI) -> None:
    server.push(
        Fail(429, "Rate limit reached", type="rate_limit_error", headers={"retry-after-ms": "20"}),
        Fail(429, "Rate limit reached", headers={"retry-after": "0"}),
        Reply("ok"),
    )
    async with make(server) as model:
        response = await model.complete(MESSAGES, [])
    assert response.content == "ok"
    assert len(server.requests) == 3


async def test_5xx_until_retries_run_out(server: FakeOpenAI) -> None:
    server.push(*[Fail(503, "overloaded")] * 4)
    async with make(server, max_retries=2) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(MESSAGES, [])
    message = str(caught.value)
    assert server.base_url in message and "503" in message and "overloaded" in message
    assert "after 3 attempts" in message
    assert len(server.requests) == 3


async def test_context_length_error_becomes_context_too_long(server: FakeOpenAI) -> None:
    server.push(
        Fail(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            code="context_length_exceeded",
            type="invalid_request_error",
        )
    )
    async with make(server) as model:
        with pytest.raises(ContextTooLong) as caught:
            await model.complete(MESSAGES, [])
    assert "the prompt (about" in str(caught.value) and "/compress" in str(caught.value)
    assert "test-model" in str(caught.value)
    assert len(server.requests) == 1


async def test_vllm_style_context_error_without_code(server: FakeOpenAI) -> None:
    server.push(
        Fail(
            400,
            "This model's maximum context length is 2048 tokens. However, you requested 4000.",
            type="BadRequestError",
            openai_shape=False,
        )
    )
    async with make(server) as model:
        with pytest.raises(ContextTooLong):
            await model.complete(MESSAGES, [])


async def test_401_names_where_to_set_the_key(server: FakeOpenAI) -> None:
    server.push(Fail(401, "Incorrect API key provided", type="invalid_request_error"))
    async with make(server) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(MESSAGES, [])
    message = str(caught.value)
    assert "refused the API key" in message and "IFLOW_API_KEY" in message
    assert "--api-key" in message and "apiKey" in message
    assert len(server.requests) == 1


async def test_404_is_not_retried_and_names_the_model(server: FakeOpenAI) -> None:
    server.push(Fail(404, "The model `test-model` does not exist", type="invalid_request_error"))
    async with make(server) as model:
        with pytest.raises(ModelError, match="check the model name 'test-model'"):
            await model.complete(MESSAGES, [])
    assert len(server.requests) == 1


async def test_server_rejecting_stream_options_is_retried_without(server: FakeOpenAI) -> None:
    server.reject_stream_options = True
    server.push(Reply("fine"), Reply("again"))
    async with make(server) as model:
        first = await model.complete(MESSAGES, [])
        second = await model.complete(MESSAGES, [])
    assert (first.content, second.content) == ("fine", "again")
    assert first.usage is None
    assert ["stream_options" in r for r in server.requests] == [True, False, False]


async def test_broken_stream_is_retried_without_repeating_deltas(server: FakeOpenAI) -> None:
    server.push(Reply("Hello there, world.", chunks=4, error_after=2), Reply("Hello there, world."))
    deltas: list[str] = []
    async with make(server) as model:
        response = await model.complete(MESSAGES, [], on_delta=deltas.append)
    assert response.content == "Hello there, world."
    assert "".join(deltas) == "Hello there, world."
    assert len(server.requests) == 2


async def test_timeout_is_retried(server: FakeOpenAI) -> None:
    server.push(Hang(1.0), Reply("late but fine"))
    async with make(server, timeout=0.3) as model:
        response = await model.complete(MESSAGES, [])
    assert response.content == "late but fine"


async def test_an_answer_that_is_not_a_chat_stream(server: FakeOpenAI) -> None:
    server.push(Raw("<html>Welcome to nginx</html>", media_type="text/html"))
    async with make(server) as model:
        with pytest.raises(ModelError, match="without any chat-completion chunks"):
            await model.complete(MESSAGES, [])


async def test_garbled_stream_data_is_retried_then_reported(server: FakeOpenAI) -> None:
    server.push(Raw("data: {not json\n\n"), Raw("data: {not json\n\n"))
    async with make(server, max_retries=1) as model:
        with pytest.raises(ModelError, match="streamed data that is not JSON"):
            await model.complete(MESSAGES, [])
    assert len(server.requests) == 2


async def test_unreachable_server() -> None:
    url = closed_port_url()
    model = OpenAIModel("m", base_url=url, api_key="k", max_retries=1, backoff_base=0.01)
    async with model:
        with pytest.raises(ModelError) as caught:
            await model.complete(MESSAGES, [])
    assert "could not reach the model server" in str(caught.value) and url in str(caught.value)


def test_count_tokens_is_the_estimate() -> None:
    from iflow.models import estimate_messages

    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert model.count_tokens(MESSAGES, TOOLS) == estimate_messages(MESSAGES, TOOLS)
    assert model.name == "m" and model.context_limit == 131072


def test_bad_tool_format_is_refused() -> None:
    with pytest.raises(ValueError, match="tool_format"):
        OpenAIModel("m", base_url="http://127.0.0.1:9/v1", tool_format="xml")  # type: ignore[arg-type]


async def test_an_output_cap_is_sent_by_default(server: FakeOpenAI) -> None:
    server.push(Reply("ok"))
    async with make(server) as model:
        await model.complete(MESSAGES, [])
    assert server.requests[0]["max_tokens"] == DEFAULT_OUTPUT_TOKENS


async def test_a_reasoning_model_gets_max_completion_tokens_once_it_asks(
    server: FakeOpenAI,
) -> None:
    """OpenAI's reasoning models answer 400 to ``max_tokens``: the call is made again with
    ``max_completion_tokens``, and every later call sends that at once; no cap: neither."""
    server.reasoning_model = True
    server.push(Reply("first"), Reply("second"))
    async with make(server) as model:
        assert (await model.complete(MESSAGES, [])).content == "first"
        assert (await model.complete(MESSAGES, [])).content == "second"
    sent = [("max_tokens" in r, r.get("max_completion_tokens")) for r in server.requests]
    assert sent == [(True, None), (False, DEFAULT_OUTPUT_TOKENS), (False, DEFAULT_OUTPUT_TOKENS)]
    server.reset()
    server.reasoning_model = True
    server.push(Reply("uncapped"))
    async with make(server, max_tokens=None) as model:
        assert (await model.complete(MESSAGES, [])).content == "uncapped"
    assert not {"max_tokens", "max_completion_tokens"} & set(server.requests[0])


async def test_a_server_without_a_tool_parser_gets_the_tools_in_the_prompt(
    server: FakeOpenAI,
) -> None:
    """vLLM started without ``--enable-auto-tool-choice`` answers 400 to a ``tools`` parameter
    (the first thing a user of a small local model met: every prompt failed): the call is made
    again with the tools in the system prompt and calls read from ``<tool_call>`` markup, and
    every later call sends them so at once."""
    refusal = (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    markup = '<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>'
    server.push(
        Fail(400, refusal, type="BadRequestError", openai_shape=False), Reply(markup), Reply("ok")
    )
    async with make(server) as model:
        first = await model.complete(MESSAGES, TOOLS)
        assert [(c.name, c.arguments) for c in first.tool_calls] == [
            ("read_file", {"path": "README.md"})
        ]
        assert (await model.complete(MESSAGES, TOOLS)).content == "ok"
        assert model.tool_format == "text"
    assert ["tools" in r for r in server.requests] == [True, False, False]
    assert "read_file" in server.requests[1]["messages"][0]["content"]


async def test_a_model_that_runs_on_is_cancelled_at_the_call_timeout(server: FakeOpenAI) -> None:
    server.push(Endless())
    started = time.monotonic()
    async with make(server, call_timeout=1.0) as model:
        with pytest.raises(ModelError, match="did not finish one answer within 1 s"):
            await model.complete(MESSAGES, [])
    assert time.monotonic() - started < 5
    assert server.gone.wait(10)  # the request was cancelled: the server stopped generating


async def test_an_answer_cut_at_the_output_limit_is_not_a_finish(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    from iflow.agent import Agent
    from iflow.config import AgentConfig
    from iflow.errors import FormatError
    from iflow.workspace import LocalWorkspace

    server.push(*[Reply("I will now explain at grea", finish_reason="length")] * 3)
    async with make(server) as model, LocalWorkspace(tmp_path) as ws:
        agent = Agent(model, ws, config=AgentConfig(headless=True))
        end = await agent.run("explain")
        await agent.aclose()
    assert isinstance(end, FormatError) and "cut at its output limit" in str(end)
    assert end.exit_code != 0 and agent.final_answer == ""
    reminders = [s.content for s in agent.trajectory.steps if s.role is Role.TOOL]
    assert reminders and "cut off at the output limit" in reminders[0]


async def test_an_interrupted_call_stops_the_server_generating(server: FakeOpenAI) -> None:
    import asyncio

    server.push(Endless())
    async with make(server) as model:
        call = asyncio.ensure_future(model.complete(MESSAGES, []))
        await asyncio.sleep(0.5)
        call.cancel()  # what Ctrl+C does to the running turn
        with pytest.raises(asyncio.CancelledError):
            await call
    assert server.gone.wait(10)
