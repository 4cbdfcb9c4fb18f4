"""Tool calls written as text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Models without native function calling (and servers run without a tool parser) write their
calls into the answer text. :func:`parse_tool_calls` reads them back and never raises: a
malformed call becomes a sentence in ``format_errors`` that the agent shows the model.
:func:`render_tools_prompt` is the other half, the text that tells such a model which tools
exist and how to call them; :func:`text_tool_messages` rewrites a conversation so that earlier
calls and results appear in the same markup.

The parser is a single left-to-right scan with ``str.find`` (no regular expressions), so its
cost is linear in the input whatever the input is.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from ale.trajectory import ToolCall
from iflow.models.base import INVALID_JSON_KEY

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"
_USAGE = 'write <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
_DECODER = json.JSONDecoder()


def new_call_id() -> str:
    """A fresh tool-call id, ``call_`` and 8 hex digits."""
    return f"call_{secrets.token_hex(4)}"


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[str]]:
    """Split a model's text into (text without markup, tool calls, format errors).

    Lenient where the intent is clear: an unclosed tag takes the rest of the text (or the text
    up to the next opening tag) as its JSON; empty duplicate tags are ignored; a code fence
    around the JSON, text after the JSON, extra keys, ``parameters`` instead of ``arguments``,
    the OpenAI ``{"function": {...}}`` shape, arguments given as a JSON string and several
    calls in one tag (successive objects or a JSON list) are all accepted. Each error is one
    sentence for the model, numbered by the call's position in the text.
    """
    if not isinstance(text, str):
        text = str(text)
    pieces: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    number = 0
    pos = 0
    close = -2  # cached position of the next closing tag; -2 means "not looked up yet"
    while True:
        start = text.find(OPEN, pos)
        if start < 0:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos:start])
        body_start = start + len(OPEN)
        if close != -1 and close < body_start:
            close = text.find(CLOSE, body_start)
        next_open = text.find(OPEN, body_start)
        if next_open >= 0 and (close < 0 or next_open < close):
            body, pos = text[body_start:next_open], next_open
            if not body.strip():
                continue  # a duplicate opening tag such as <tool_call><tool_call>{...}
        elif close >= 0:
            body, pos = text[body_start:close], close + len(CLOSE)
        else:
            body, pos = text[body_start:], len(text)
        number += 1
        found, error = _read_body(body, number)
        calls.extend(found)
        if error:
            errors.append(error)
    content = "".join(pieces)
    if CLOSE in content:
        content = content.replace(CLOSE, "")
    if OPEN in content or CLOSE in content:  # joining the pieces formed a new tag
        content = _drop_tags(content)
    return content.strip(), calls, errors


def _read_body(body: str, number: int) -> tuple[list[ToolCall], str | None]:
    """The calls written in one tag's body, or the sentence saying why there are none."""
    source = _strip_fence(body.strip())
    if not source:
        return [], f"Your tool call #{number} is empty; {_USAGE}."
    objects: list[Any] = []
    index = 0
    try:
        while index < len(source) and (not objects or source[index] in "{["):
            value, index = _DECODER.raw_decode(source, index)
            objects.extend(value if isinstance(value, list) else [value])
            while index < len(source) and source[index] in " \t\r\n,":
                index += 1
    except json.JSONDecodeError as exc:
        if not objects:
            return [], (
                f"Your tool call #{number} is not valid JSON ({exc.msg} at char {exc.pos}); "
                f"{_USAGE}."
            )
    except RecursionError:
        return [], f"Your tool call #{number} is nested too deeply to read; {_USAGE}."
    calls: list[ToolCall] = []
    for value in objects:
        call = _to_call(value, number)
        if isinstance(call, str):
            return calls, call
        calls.append(call)
    if not calls:
        return [], f"Your tool call #{number} holds an empty list; {_USAGE}."
    return calls, None


def _to_call(value: Any, number: int) -> ToolCall | str:
    """One decoded JSON value as a call, or the sentence saying what is wrong with it."""
    if not isinstance(value, dict):
        return f"Your tool call #{number} is a JSON {_kind(value)}, not an object; {_USAGE}."
    if isinstance(value.get("function"), dict) and "name" not in value:
        value = value["function"]  # the OpenAI shape {"type": "function", "function": {...}}
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'Your tool call #{number} has no "name" (a string naming the tool); {_USAGE}.'
    name = name.strip()
    arguments = value.get("arguments", value.get("parameters"))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return (
                f'The "arguments" of your tool call #{number} ({name}) are a string that is not '
                "valid JSON; give them as a JSON object."
            )
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return (
            f'The "arguments" of your tool call #{number} ({name}) are a JSON {_kind(arguments)}, '
            "not an object; give them as a JSON object."
        )
    return ToolCall(id=new_call_id(), name=name, arguments=arguments)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__


def _strip_fence(source: str) -> str:
    """``` or ```json fences around the JSON, as models like to write."""
    if not source.startswith("```"):
        return source
    newline = source.find("\n")
    inner = source[newline + 1 :] if newline >= 0 else ""
    end = inner.rfind("```")
    return (inner[:end] if end >= 0 else inner).strip()


def _drop_tags(text: str) -> str:
    """Remove every tag, including ones that form only once another is removed, in one
    pass (a stack of output characters; linear time)."""
    out: list[str] = []
    for char in text:
        out.append(char)
        if char == ">":
            for tag in (OPEN, CLOSE):
                if len(out) >= len(tag) and "".join(out[-len(tag) :]) == tag:
                    del out[-len(tag) :]
                    break
    return "".join(out)


class MarkupFilter:
    """Streamed text with tool-call markup held back, for on_delta callbacks: feed each piece,
    show what comes back, and call :meth:`flush` at the end. Text inside a ``<tool_call>``
    (closed or not) is never shown; text that might start a tag waits until it is clear."""

    def __init__(self) -> None:
        self._pending = ""
        self._inside = False

    def feed(self, piece: str) -> str:
        self._pending += piece
        shown: list[str] = []
        while self._pending:
            tag = CLOSE if self._inside else OPEN
            at = self._pending.find(tag)
            if at >= 0:
                if not self._inside:
                    shown.append(self._pending[:at])
                self._pending = self._pending[at + len(tag) :]
                self._inside = not self._inside
                continue
            keep = _partial_suffix(self._pending, tag)
            if not self._inside:
                shown.append(self._pending[: len(self._pending) - keep])
            self._pending = self._pending[len(self._pending) - keep :]
            break
        return "".join(shown)

    def flush(self) -> str:
        rest = "" if self._inside else self._pending
        self._pending = ""
        return rest


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


# -- the prompt side ---------------------------------------------------------------------------


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool schema in either the OpenAI form ``{"type": "function", "function": {...}}`` or
    the bare ``{"name", "description", "parameters"}`` form, as the bare form."""
    inner = tool.get("function")
    return inner if isinstance(inner, dict) else tool


def render_tools_prompt(tools: list[dict[str, Any]], *, brief: bool = False) -> str:
    """The text block that describes ``tools`` and the call markup to a model without native
    tool calling (appended to the system message). Empty when there are no tools.

    ``brief``: one line per tool, ``name(param, ...): description``, and the markup in one
    sentence: about a fifth of the JSON-schema form's tokens, for small models (the
    ``"brief"`` tool format)."""
    if not tools:
        return ""
    if brief:
        return _render_brief(tools)
    lines = [
        "# Tools",
        "",
        "You can call the tools below. Each is described by a JSON schema:",
        "<tools>",
    ]
    for tool in tools:
        fn = _function(tool)
        described = {
            "name": fn.get("name", ""),
            "description": fn.get("description", ""),
            "parameters": fn.get("parameters", {"type": "object", "properties": {}}),
        }
        lines.append(json.dumps(described, ensure_ascii=False))
    lines += [
        "</tools>",
        "",
        "To call a tool, write a JSON object with its name and arguments inside tool_call tags:",
        OPEN,
        '{"name": "<tool name>", "arguments": {<the arguments as a JSON object>}}',
        CLOSE,
        "Write one tool_call block per call; you may make several calls in one answer. "
        f"Each result comes back to you inside {RESPONSE_OPEN}{RESPONSE_CLOSE} tags.",
    ]
    return "\n".join(lines)


def render_call(call: ToolCall) -> str:
    """One call in the markup :func:`parse_tool_calls` reads."""
    if INVALID_JSON_KEY in call.arguments:
        arguments = str(call.arguments[INVALID_JSON_KEY])
    else:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
    name = json.dumps(call.name, ensure_ascii=False)
    return f'{OPEN}\n{{"name": {name}, "arguments": {arguments}}}\n{CLOSE}'


def _render_brief(tools: list[dict[str, Any]]) -> str:
    lines = ["# Tools", ""]
    for tool in tools:
        fn = _function(tool)
        params = ", ".join((fn.get("parameters") or {}).get("properties") or {})
        description = " ".join(str(fn.get("description", "")).split())
        lines.append(f"{fn.get('name', '')}({params}): {description}")
    lines += [
        "",
        "Call a tool with:",
        OPEN,
        '{"name": "<tool name>", "arguments": {<arguments>}}',
        CLOSE,
        f"Its result comes back inside {RESPONSE_OPEN}{RESPONSE_CLOSE}.",
    ]
    return "\n".join(lines)


def with_tools_prompt(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, brief: bool = False
) -> list[dict]:
    """Chat messages with :func:`render_tools_prompt` appended to the system message (one is
    put first when there is none). The input list is not changed."""
    prompt = render_tools_prompt(tools, brief=brief)
    if not prompt:
        return list(messages)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        head = out[0].get("content") or ""
        out[0]["content"] = f"{head}\n\n{prompt}" if head else prompt
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


def text_tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (as :func:`iflow.models.base.to_openai_messages` makes them) with native
    tool calls and tool results rewritten as markup, for servers and chat templates that know
    only system/user/assistant text: an assistant's calls are appended to its content as
    ``<tool_call>`` blocks, and consecutive ``tool`` messages become one user message of
    ``<tool_response>`` blocks."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            block = f"{RESPONSE_OPEN}\n{message.get('content') or ''}\n{RESPONSE_CLOSE}"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
            continue
        if role == "assistant" and message.get("tool_calls"):
            blocks = [_render_openai_call(c) for c in message["tool_calls"]]
            text = "\n".join(filter(None, [message.get("content") or "", *blocks]))
            out.append({"role": "assistant", "content": text})
            continue
        out.append({"role": role, "content": message.get("content") or ""})
    for message in out:
        message.pop("_tool_results", None)
    return out


def _render_openai_call(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    name = json.dumps(fn.get("name", ""), ensure_ascii=False)
    return f'{OPEN}\n{{"name": {name}, "arguments": {arguments or "{}"}}}\n{CLOSE}'
