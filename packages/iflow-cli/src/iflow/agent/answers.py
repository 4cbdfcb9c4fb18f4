"""What the agent does with one answer of the model: unusable calls answered as errors, a
plain answer where finish is required reminded, each call run through the tool gate and
watched for loops, the todo list recalled now and then; and the run's end when an answer
brings one."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ale.trajectory import ToolCall, ToolResult
from iflow.errors import AgentEnd, Finished, FormatError, LoopDetected
from iflow.events import Notice, ToolFinished
from iflow.models.base import ModelResponse
from iflow.prompts import FINISH_REMINDER, TODO_REMINDER, TRUNCATED_REMINDER

if TYPE_CHECKING:
    from iflow.agent import Agent


class AnswerChecks:
    """Mixed into :class:`iflow.agent.AgentLoop` (each method works on the agent)."""

    def _check_answer(
        self, response: ModelResponse
    ) -> tuple[list[ToolResult], list[str], AgentEnd | None]:
        """Unusable tool calls answered as errors, a plain answer where finish is required
        reminded, and the end when that happened too often in a row."""
        agent = cast("Agent", self)
        results: list[ToolResult] = []
        notes: list[str] = []
        if response.format_errors:
            agent._format_errors += 1
            results += [ToolResult(content=e, is_error=True) for e in response.format_errors]
            for error in response.format_errors:  # shown as the gate's rejections are
                agent.emit(
                    ToolFinished(
                        call_id="", name="(unparsed call)", content=error, is_error=True,
                        metadata={"rejected": True},
                    )
                )  # fmt: skip
        elif not response.tool_calls and response.finish_reason == "length":
            # cut at the output limit: not an answer to finish on
            agent._format_errors += 1
            notes.append(TRUNCATED_REMINDER)
            agent.emit(
                Notice(text="The model's answer was cut at its output limit.", level="warning")
            )
        elif not response.tool_calls:
            if not agent.config.require_finish:
                agent.final_answer = response.content
                raise Finished("the agent answered without further tool calls.")
            agent._format_errors += 1
            notes.append(FINISH_REMINDER)
        else:
            agent._format_errors = 0
        end: AgentEnd | None = None
        if agent._format_errors >= agent.config.max_format_errors and not response.tool_calls:
            cut = response.finish_reason == "length"
            end = FormatError(
                f"the model's last {agent._format_errors} answers were cut at its output limit; "
                "raise max_output_tokens or ask for less."
                if cut
                else f"the model gave {agent._format_errors} answers in a row without a usable "
                "tool call; check that it supports tool calls (or set tool_format to text)."
            )
        return results, notes, end

    async def _run_calls(
        self, calls: list[ToolCall], notes: list[str], end: AgentEnd | None
    ) -> tuple[list[ToolResult], str | None, AgentEnd | None]:
        """Each call through the gate, watched for loops (a warning goes to ``notes``); once
        the run has ended, the rest are answered as not run. Returns the results, finish's
        summary if it was called, and the end."""
        agent = cast("Agent", self)
        results: list[ToolResult] = []
        finish: str | None = None
        for call in calls:
            if end is not None:
                results.append(
                    ToolResult(call_id=call.id, content="Not run: the run stopped.", is_error=True)
                )
                continue
            result = await agent.gate.execute(call, agent.tools, agent.all_tools, agent.ctx)
            results.append(result)
            verdict = agent.loops.observe(call, result)
            if verdict == "warn":
                notes.append(f"<warning>{agent.loops.describe()}</warning>")
                agent.emit(Notice(level="warning", text=agent.loops.describe()))
            elif verdict == "stop":
                end = LoopDetected(
                    "the agent kept repeating itself after a warning "
                    f"({call.name} with the same arguments, or failing calls in a row); the run was stopped."
                )
            if call.name == "finish" and not result.is_error:
                finish = str(result.metadata.get("summary", ""))
        return results, finish, end

    def _reminders(self, calls: list[ToolCall]) -> list[str]:
        agent = cast("Agent", self)
        if any(c.name == "todo_write" for c in calls):
            agent._since_todo = 0
            return []
        agent._since_todo += 1
        if agent.todos.open_items() and agent._since_todo >= agent.config.todo_reminder_every:
            agent._since_todo = 0
            return [TODO_REMINDER.format(todos=agent.todos.render())]
        return []
