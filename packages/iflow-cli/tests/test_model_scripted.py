"""ScriptedModel, and make_model's choice of backend and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ale.trajectory import Role, Step, ToolCall, Usage
from iflow.errors import ConfigError, ContextTooLong, ModelError
from iflow.models import (
    Model,
    ModelResponse,
    OpenAIModel,
    ScriptedModel,
    estimate_messages,
    make_model,
)

MESSAGES = [Step(role=Role.SYSTEM, content="sys"), Step(role=Role.USER, content="do it")]
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


async def test_replays_each_kind_of_response_in_order() -> None:
    prepared = ModelResponse(content="prepared", usage=Usage(prompt_tokens=1))
    model = ScriptedModel(
        [
            'Listing.\n<tool_call>{"name": "ls", "arguments": {"path": "."}}</tool_call>',
            {
                "content": "Reading.",
                "tool_calls": [
                    {"name": "read", "arguments": {"path": "a"}, "id": "call_given"},
                    {"name": "read", "arguments": '{"path": "b"}'},
                ],
                "reasoning": "because",
            },
            prepared,
            "All done.",
        ]
    )
    assert isinstance(model, Model)
    first = await model.complete(MESSAGES, TOOLS)
    assert first.content == "Listing."
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("ls", {"path": "."})]
    assert first.finish_reason == "tool_calls" and first.raw is not None
    second = await model.complete(MESSAGES, TOOLS)
    assert second.content == "Reading." and second.reasoning == "because"
    assert second.tool_calls[0] == ToolCall(id="call_given", name="read", arguments={"path": "a"})
    assert second.tool_calls[1].arguments == {"path": "b"}
    assert (await model.complete(MESSAGES, TOOLS)).content == "prepared"
    last = await model.complete(MESSAGES, TOOLS)
    assert last.content == "All done." and last.tool_calls == [] and last.finish_reason == "stop"
    assert model.remaining == 0


async def test_format_errors_in_text() -> None:
    model = ScriptedModel(['<tool_call>{"name": }</tool_call>'])
    response = await model.complete(MESSAGES, [])
    assert response.tool_calls == [] and len(response.format_errors) == 1


async def test_records_what_it_was_shown() -> None:
    model = ScriptedModel(["one", "two"])
    history = list(MESSAGES)
    await model.complete(history, TOOLS)
    history.append(Step(role=Role.ASSISTANT, content="one"))
    await model.complete(history, [])
    assert [len(c) for c in model.calls] == [2, 3]
    assert model.calls[1][2].content == "one"
    assert model.tool_lists == [TOOLS, []]


async def test_exceptions_are_raised_at_their_turn() -> None:
    model = ScriptedModel(
        [ModelError("boom"), {"error": "too long", "context_too_long": True}, "fine"]
    )
    with pytest.raises(ModelError, match="boom"):
        await model.complete(MESSAGES, [])
    with pytest.raises(ContextTooLong, match="too long"):
        await model.complete(MESSAGES, [])
    assert (await model.complete(MESSAGES, [])).content == "fine"


async def test_running_out_says_how_many_it_had() -> None:
    model = ScriptedModel(["only"])
    await model.complete(MESSAGES, [])
    with pytest.raises(ModelError) as caught:
        await model.complete(MESSAGES, [])
    assert "no more responses (it was given 1)" in str(caught.value)


async def test_deltas_stream_the_content_in_pieces() -> None:
    model = ScriptedModel(['The answer is 42. <tool_call>{"name": "x"}</tool_call>'])
    deltas: list[str] = []
    response = await model.complete(MESSAGES, [], on_delta=deltas.append)
    assert len(deltas) > 1 and "".join(deltas) == response.content == "The answer is 42."


async def test_usage_and_count_tokens_are_the_estimate() -> None:
    model = ScriptedModel(["abcdefgh"], context_limit=1000)
    response = await model.complete(MESSAGES, TOOLS)
    # no prompt count: the agent's meter counts prompts incrementally
    assert response.usage == Usage(completion_tokens=2)
    assert model.count_tokens(MESSAGES, TOOLS) == estimate_messages(MESSAGES, TOOLS)
    assert model.context_limit == 1000 and model.name == "scripted"


@pytest.mark.parametrize(
    ("response", "fragment"),
    [
        ({"content": "x", "tool_call": []}, "unknown keys ['tool_call']"),
        ({"tool_calls": [{"arguments": {}}]}, "tool_calls that are not a list"),
        (42, "is a int"),
    ],
)
def test_bad_scripts_fail_at_construction(response: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        ScriptedModel(["fine", response])  # type: ignore[list-item]


async def test_from_json_and_jsonl_files(tmp_path: Path) -> None:
    listing = tmp_path / "script.json"
    listing.write_text(json.dumps(["a", {"content": "b"}]))
    lines = tmp_path / "script.jsonl"
    lines.write_text('"a"\n\n{"content": "b", "tool_calls": [{"name": "ls"}]}\n')
    for path in (listing, lines):
        model = ScriptedModel.from_file(path, name="demo")
        assert model.name == "demo"
        assert (await model.complete(MESSAGES, [])).content == "a"
        assert (await model.complete(MESSAGES, [])).content == "b"


def test_unreadable_scripts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the script"):
        ScriptedModel.from_file(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("[1,")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        ScriptedModel.from_file(broken)
    mapping = tmp_path / "mapping.json"
    mapping.write_text("{}")
    with pytest.raises(ConfigError, match="not a list"):
        ScriptedModel.from_file(mapping)


# -- make_model -------------------------------------------------------------------------------


def test_make_model_builds_each_provider(tmp_path: Path) -> None:
    scripted = make_model("scripted", script=["hi"], context_limit=99)
    assert isinstance(scripted, ScriptedModel) and scripted.context_limit == 99
    path = tmp_path / "s.json"
    path.write_text('["hi"]')
    assert isinstance(make_model("scripted", script=str(path), name="x"), ScriptedModel)
    remote = make_model(
        "openai", model="gpt-x", base_url="http://127.0.0.1:9/v1", api_key="k", tool_format="text"
    )
    assert isinstance(remote, OpenAIModel)
    assert remote.tool_format == "text" and remote.context_limit == 131072


def test_make_model_ignores_general_options_a_script_does_not_use() -> None:
    model = make_model("scripted", script=["hi"], temperature=0.3, max_tokens=9, tool_format="text")
    assert isinstance(model, ScriptedModel)


@pytest.mark.parametrize(
    ("provider", "kw", "fragment"),
    [
        ("openai", {}, 'no model name is set for the openai provider: set "model"'),
        ("local", {}, 'no model directory is set for the local provider: set "modelPath"'),
        ("scripted", {}, 'no script is set for the scripted provider: set "script"'),
        ("anthropic", {}, "unknown model provider 'anthropic'; use one of openai, local, scripted"),
        ("openai", {"model": "m", "colour": "red"}, "the openai provider does not take colour"),
        ("local", {"model_path": "/nonexistent/model"}, "there is no model directory at"),
        (
            "openai",
            {"model": "m", "tool_format": "xml"},
            'tool_format must be "native", "text" or "brief"',
        ),
    ],
)
def test_make_model_errors_name_the_setting(provider: str, kw: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_model(provider, **kw)
    assert fragment in str(caught.value)


def test_importing_models_does_not_import_torch() -> None:
    code = "import sys, iflow.models; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
