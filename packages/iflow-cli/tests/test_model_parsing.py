"""Tool calls written as <tool_call> markup: the parser, the streaming filter, the prompt."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ale.trajectory import ToolCall
from iflow.models.base import INVALID_JSON_KEY
from iflow.models.parsing import (
    CLOSE,
    OPEN,
    MarkupFilter,
    parse_tool_calls,
    render_call,
    render_tools_prompt,
    text_tool_messages,
    with_tools_prompt,
)

ID = re.compile(r"call_[0-9a-f]{8}")


def calls_of(text: str) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in parse_tool_calls(text)[1]]


def test_plain_text_is_untouched() -> None:
    assert parse_tool_calls("  just words \n") == ("just words", [], [])


def test_one_call_between_text() -> None:
    text = 'Let me see.\n<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>\nok'
    content, calls, errors = parse_tool_calls(text)
    assert content == "Let me see.\n\nok"
    assert [(c.name, c.arguments) for c in calls] == [("ls", {"path": "."})]
    assert ID.fullmatch(calls[0].id) and errors == []


def test_several_calls_get_distinct_ids() -> None:
    text = "".join(
        f'<tool_call>{{"name": "t{i}", "arguments": {{}}}}</tool_call>' for i in range(5)
    )
    _, calls, _ = parse_tool_calls(text)
    assert [c.name for c in calls] == [f"t{i}" for i in range(5)]
    assert len({c.id for c in calls}) == 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "a", "arguments": {"x": 1}}', [("a", {"x": 1})]),  # unclosed
        ('<tool_call><tool_call>{"name": "a"}</tool_call></tool_call>', [("a", {})]),  # duplicate
        ('<tool_call>{"name": "a", "arguments": "{\\"x\\": 2}"}</tool_call>', [("a", {"x": 2})]),
        ('<tool_call>{"name": "a", "arguments": {}, "id": 7, "extra": 1}</tool_call>', [("a", {})]),
        ('<tool_call>{"name": "a", "arguments": {}} and then some</tool_call>', [("a", {})]),
        ('<tool_call>{"name": "a", "parameters": {"y": true}}</tool_call>', [("a", {"y": True})]),
        ('<tool_call>{"function": {"name": "a", "arguments": "{}"}}</tool_call>', [("a", {})]),
        ('<tool_call>```json\n{"name": "a", "arguments": {}}\n```</tool_call>', [("a", {})]),
        ('<tool_call>{"name": "a"}\n{"name": "b"}</tool_call>', [("a", {}), ("b", {})]),
        ('<tool_call>[{"name": "a"}, {"name": "b"}]</tool_call>', [("a", {}), ("b", {})]),
        ('<tool_call>{"name": " a ", "arguments": null}</tool_call>', [("a", {})]),
        # a missing closing tag before the next call: both are read
        ('<tool_call>{"name": "a"}\n<tool_call>{"name": "b"}</tool_call>', [("a", {}), ("b", {})]),
    ],
)
def test_lenient_forms(text: str, expected: list) -> None:
    content, calls, errors = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == expected
    assert errors == [] and OPEN not in content and CLOSE not in content


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '<tool_call>{"name": "a" "arguments": {}}</tool_call>',
            "is not valid JSON (Expecting ','",
        ),
        ("<tool_call></tool_call>", "is empty"),
        ("<tool_call>   ", "is empty"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'has no "name"'),
        ('<tool_call>{"name": 3}</tool_call>', 'has no "name"'),
        ('<tool_call>["ls"]</tool_call>', "is a JSON string, not an object"),
        (
            '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',
            "are a JSON list, not an object",
        ),
        ('<tool_call>{"name": "a", "arguments": "ls -la"}</tool_call>', "not valid JSON"),
        ("<tool_call>[]</tool_call>", "empty list"),
        ("<tool_call>" + "[" * 50_000 + "</tool_call>", "nested too deeply"),
    ],
)
def test_errors_are_one_sentence_for_the_model(text: str, fragment: str) -> None:
    _, calls, errors = parse_tool_calls(text)
    assert calls == [] and len(errors) == 1
    assert fragment in errors[0]
    assert errors[0].startswith(("Your tool call #1", 'The "arguments" of your tool call #1'))
    assert errors[0].endswith(".")


def test_errors_are_numbered_by_position() -> None:
    text = (
        '<tool_call>{"name": "ok"}</tool_call>'
        '<tool_call>{"name": "a", "arguments": {"x": }}</tool_call>'
    )
    _, calls, errors = parse_tool_calls(text)
    assert [c.name for c in calls] == ["ok"]
    assert errors[0].startswith("Your tool call #2 is not valid JSON (Expecting value at char ")
    assert errors[0].endswith('write <tool_call>{"name": ..., "arguments": {...}}</tool_call>.')


def test_stray_and_reassembled_tags_leave_no_markup() -> None:
    content, calls, _ = parse_tool_calls(
        'a </tool_call> b <tool_<tool_call>{"name": "x"}</tool_call>call> c'
    )
    assert [c.name for c in calls] == ["x"]
    assert OPEN not in content and CLOSE not in content


@pytest.mark.parametrize(
    "text",
    [
        OPEN * 200_000,
        CLOSE * 200_000,
        (OPEN + "{") * 100_000,
        OPEN + "{" * 1_000_000,
        OPEN + '{"name": "' + "a" * 1_000_000,
        "<" * 1_000_000,
        (OPEN + CLOSE[:-1]) * 100_000,
    ],
)
def test_huge_inputs_finish(text: str) -> None:
    content, calls, errors = parse_tool_calls(text)
    assert OPEN not in content and CLOSE not in content
    assert isinstance(calls, list) and isinstance(errors, list)


FRAGMENTS = st.sampled_from(
    [OPEN, CLOSE, "<tool_", "call>", "{", "}", "[", "]", '"name"', ": ", '"ls"', ",",
     '"arguments"', '"{}"', "null", "```", "\n", " ", "\\", '"', "\x00", "é", "🙂"]
)  # fmt: skip


def check_invariants(text: str) -> None:
    content, calls, errors = parse_tool_calls(text)
    assert isinstance(content, str)
    assert OPEN not in content and CLOSE not in content
    for call in calls:
        assert isinstance(call, ToolCall) and ID.fullmatch(call.id)
        assert call.name.strip() == call.name != ""
        assert isinstance(call.arguments, dict)
    assert all(isinstance(e, str) and e.endswith(".") for e in errors)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    check_invariants(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(FRAGMENTS | st.text(max_size=5), max_size=40).map("".join))
def test_never_raises_on_markup_soup(text: str) -> None:
    check_invariants(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_never_raises_on_random_bytes(data: bytes) -> None:
    check_invariants(data.decode("utf-8", errors="replace"))
    check_invariants(OPEN + data.decode("latin-1"))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(min_size=1, max_size=20).filter(lambda s: s.strip() == s and s),
    arguments=st.dictionaries(st.text(max_size=8), JSON, max_size=4),
    before=st.text(max_size=20),
)
def test_rendered_calls_parse_back(name: str, arguments: dict, before: str) -> None:
    call = ToolCall(id="call_00000000", name=name, arguments=arguments)
    _, calls, errors = parse_tool_calls(before + "\n" + render_call(call))
    if OPEN in before or CLOSE in before:
        return  # the prefix itself holds markup
    assert errors == []
    assert [(c.name, c.arguments) for c in calls] == [(name, arguments)]


def test_render_call_keeps_invalid_json_as_written() -> None:
    call = ToolCall(id="c", name="ls", arguments={INVALID_JSON_KEY: '{"path": '})
    assert render_call(call) == f'{OPEN}\n{{"name": "ls", "arguments": {{"path": }}\n{CLOSE}'


# -- the streaming filter ---------------------------------------------------------------------


def filtered(pieces: list[str]) -> str:
    markup = MarkupFilter()
    return "".join(markup.feed(p) for p in pieces) + markup.flush()


def test_filter_hides_calls_split_across_pieces() -> None:
    pieces = ["Hello <to", 'ol_call>{"na', 'me": "x"}</tool', "_call> done <", "b>"]
    assert filtered(pieces) == "Hello  done <b>"


def test_filter_hides_an_unclosed_call() -> None:
    assert filtered(["before ", "<tool_call>", '{"name": "x"']) == "before "


@settings(max_examples=300, deadline=None)
@given(st.lists(FRAGMENTS | st.text(max_size=4), max_size=30), st.data())
def test_filter_does_not_depend_on_how_text_is_split(parts: list[str], data: st.DataObject) -> None:
    text = "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert filtered(pieces) == filtered([text])
    if OPEN not in text:
        assert filtered(pieces) == text


# -- the prompt side --------------------------------------------------------------------------

TOOL = {
    "type": "function",
    "function": {
        "name": "run_shell_command",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


def test_tools_prompt_lists_each_schema_and_the_markup() -> None:
    bare = {"name": "finish", "description": "Stop.", "parameters": {"type": "object"}}
    prompt = render_tools_prompt([TOOL, bare])
    lines = prompt.splitlines()
    inside = lines[lines.index("<tools>") + 1 : lines.index("</tools>")]
    schemas = [json.loads(line) for line in inside]
    assert [s["name"] for s in schemas] == ["run_shell_command", "finish"]
    assert schemas[0]["parameters"] == TOOL["function"]["parameters"]
    assert OPEN in prompt and CLOSE in prompt and "<tool_response>" in prompt
    assert render_tools_prompt([]) == ""


def test_with_tools_prompt_appends_to_the_system_message_or_adds_one() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    out = with_tools_prompt(messages, [TOOL])
    assert out[0]["content"] == "Be brief.\n\n" + render_tools_prompt([TOOL])
    assert messages[0]["content"] == "Be brief."  # the input is not changed
    assert with_tools_prompt(messages[1:], [TOOL])[0]["role"] == "system"
    assert with_tools_prompt(messages, []) == messages


def test_text_tool_messages_rewrites_calls_and_results() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
                {"id": "2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "one"},
        {"role": "tool", "tool_call_id": "2", "content": "two"},
    ]
    out = text_tool_messages(messages)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert calls_of(out[1]["content"]) == [("a", {"x": 1}), ("b", {})]
    assert (
        out[2]["content"]
        == "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"
    )
