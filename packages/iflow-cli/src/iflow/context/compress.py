"""Compression: when the prompt nears the context limit, older turns become a summary.

The history keeps its head (the system prompt and the first user message) and its
most recent turns; the middle is replaced by one user message holding a summary the
model writes of it, and the todo list. When the model cannot summarise (an error, an
empty answer, or a summary longer than what it replaces) a deterministic fallback
drops the middle with a marker saying how many steps went. A "turn" is an assistant
step and the tool step answering it, so the kept tail never starts with orphaned tool
results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ale.trajectory import Role, Step
from iflow.errors import IflowError
from iflow.models.base import Model
from iflow.plan import TodoList

SUMMARY_PROMPT = """\
You are compressing the history of a coding agent's session so it can continue with a \
smaller context. Below is the part of the conversation being dropped. Write a concise \
summary (at most about 300 words) the agent can continue from: what the user asked, \
what was done (commands run, files read or changed, with paths), what was found, \
decisions and their reasons, errors met and how they were handled, and what remains \
to do. Do not call tools; answer with the summary only.

{transcript}
"""

SUMMARY_HEADER = "[Context compressed: {n} earlier steps were summarised.]"
FALLBACK_HEADER = (
    "[Context compressed: {n} earlier steps were dropped to fit the context window; "
    "re-read files or re-run commands if you need their details.]"
)


@dataclass
class Compression:
    history: list[Step]
    method: Literal["summary", "fallback"]
    dropped: int
    """Steps of the old history that the new one no longer has."""
    summary: Step


def split_point(history: list[Step], keep_recent_turns: int) -> tuple[int, int]:
    """``(head_end, tail_start)``: history[:head_end] and history[tail_start:] are kept."""
    head_end = 1 if history and history[0].role is Role.SYSTEM else 0
    for i in range(head_end, len(history)):
        if history[i].role is Role.USER:
            head_end = i + 1
            break
    starts = [i for i in range(head_end, len(history)) if history[i].role is Role.ASSISTANT]
    if keep_recent_turns <= 0:
        return head_end, len(history)
    if len(starts) <= keep_recent_turns:
        return head_end, starts[0] if starts else len(history)
    return head_end, starts[-keep_recent_turns]


def render_transcript(steps: list[Step], *, limit_chars: int = 60_000) -> str:
    """The dropped steps as plain text for the summariser (long observations clipped)."""
    lines: list[str] = []
    for step in steps:
        if step.role is Role.TOOL:
            for result in step.tool_results:
                tag = "error" if result.is_error else "result"
                lines.append(f"[tool {tag}] {_clip(result.content, 2000)}")
            if step.content:
                lines.append(f"[note] {_clip(step.content, 1000)}")
            continue
        text = step.content
        for call in step.tool_calls:
            text += f"\n[calls {call.name} {call.arguments}]"
        lines.append(f"[{step.role.value}] {_clip(text, 4000)}")
    transcript = "\n".join(lines)
    if len(transcript) > limit_chars:
        half = limit_chars // 2
        transcript = (
            transcript[:half]
            + "\n[... middle of the transcript clipped ...]\n"
            + transcript[-half:]
        )
    return transcript


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n // 2] + " [...] " + text[-n // 2 :]


async def compress(
    history: list[Step],
    model: Model,
    todos: TodoList,
    *,
    keep_recent_turns: int = 4,
    use_model: bool = True,
) -> Compression | None:
    """The compressed history, or None when there is nothing in the middle to drop."""
    head_end, tail_start = split_point(history, keep_recent_turns)
    middle = history[head_end:tail_start]
    if not middle:
        return None
    summary_text = await _summarise(middle, model) if use_model else None
    todo_text = f"\n\n{todos.render()}" if todos.items else ""
    if summary_text:
        body = SUMMARY_HEADER.format(n=len(middle)) + "\n\n" + summary_text + todo_text
        method: Literal["summary", "fallback"] = "summary"
    else:
        body = FALLBACK_HEADER.format(n=len(middle)) + todo_text
        method = "fallback"
    summary = Step(role=Role.USER, content=body, extra={"iflow": {"compression": method}})
    new = [*history[:head_end], summary, *history[tail_start:]]
    return Compression(history=new, method=method, dropped=len(middle), summary=summary)


async def _summarise(middle: list[Step], model: Model) -> str | None:
    transcript = render_transcript(middle)
    prompt = [
        Step(role=Role.SYSTEM, content="You write faithful, compact summaries of agent sessions."),
        Step(role=Role.USER, content=SUMMARY_PROMPT.format(transcript=transcript)),
    ]
    try:
        response = await model.complete(prompt, [])
    except IflowError:
        return None
    text = response.content.strip()
    if not text or response.tool_calls or len(text) >= len(transcript):
        return None
    return text
