"""The tool gate: a model's tool call checked, approved and run, its events emitted.

Between a model's answer and the workspace sits one gate (the agent loop calls nothing else to
act): the call is validated against the tools offered in the current approval mode, a call
that needs approval goes to the approver (denied outright when headless), one approved for good
is remembered, and the tool runs. Every call ends with a :class:`ToolFinished` event, run or not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ale.trajectory import ToolCall, ToolResult
from iflow.approval import ApprovalPolicy, ApprovalRequest, Approver, denial_message
from iflow.events import EventSink, Notice, ToolFinished, ToolStarted
from iflow.hooks import HookEvent, HookRunner, HookVerdict, tool_input, tool_response
from iflow.tools import Tool, ToolContext, ToolRegistry


class ToolGate:
    """Runs tool calls under an approval policy."""

    def __init__(
        self,
        policy: ApprovalPolicy,
        approver: Approver,
        *,
        headless: bool,
        emit: EventSink,
        hooks: HookRunner | None = None,
        before_change: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.policy = policy
        self.approver = approver
        self.headless = headless
        self.emit = emit
        self.hooks = hooks
        self.before_change = before_change
        """Awaited before a call that may change files runs (the agent checkpoints them)."""
        """PreToolUse hooks decide before approval; PostToolUse hooks see each result."""

    async def execute(
        self, call: ToolCall, offered: ToolRegistry, every: ToolRegistry, ctx: ToolContext
    ) -> ToolResult:
        """``call``'s result: ``offered`` are the tools of the current mode, ``every`` all the
        agent has (a known tool outside the mode is refused with the mode named)."""
        checked = offered.validate(call)
        if isinstance(checked, ToolResult):
            result = self._refused(call, checked, offered, every)
        else:
            tool, _ = checked
            self.emit(
                ToolStarted(
                    call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    title=tool.describe(call.arguments),
                )
            )
            verdict = await self._hooks("PreToolUse", call, {})
            stopped = _blocked(call, verdict)
            if stopped is None:
                stopped = await self._denied(call, tool, verdict)
            result = stopped if stopped is not None else await self._run(call, tool, offered, ctx)
        self._finished(call, result)
        return result

    def _refused(
        self, call: ToolCall, invalid: ToolResult, offered: ToolRegistry, every: ToolRegistry
    ) -> ToolResult:
        """The result of a call that did not validate: a denial when the current mode does not
        offer the tool, else ``invalid`` marked as rejected."""
        if call.name in every and call.name not in offered:  # refused by the mode: a denial
            return ToolResult(
                call_id=call.id,
                is_error=True,
                content=f"{call.name} is not available in {self.policy.mode} mode; "
                "only read-only tools can be used now.",
                metadata={"denied": True, "mode": self.policy.mode},
            )
        # an unknown tool, arguments that are not JSON or not the tool's
        meta = {**invalid.metadata, "rejected": True}
        return invalid.model_copy(update={"metadata": meta})

    async def _denied(
        self, call: ToolCall, tool: Tool, verdict: HookVerdict | None
    ) -> ToolResult | None:
        """Ask for approval where the policy or a PreToolUse hook wants it: the denial, or None
        when the call may run (remembered when approved for good)."""
        decided = verdict.decision if verdict is not None else None
        asks = decided == "ask" or (
            decided != "allow"
            and not tool.trusted
            and self.policy.needs_approval(tool.kind, call.arguments, tool.name)
        )
        if not asks:
            return None
        request = ApprovalRequest(
            tool=tool.name,
            kind=tool.kind,
            title=tool.describe(call.arguments),
            arguments=call.arguments,
        )
        decision = "deny" if self.headless else await self.approver(request)
        if decision == "deny":
            return ToolResult(
                call_id=call.id,
                is_error=True,
                content=denial_message(
                    request,
                    headless=self.headless,
                    mode=self.policy.mode,
                    hook_reason=(verdict.reason or "") if decided == "ask" and verdict else None,
                ),
                metadata={"denied": True, **({"hook": True} if decided == "ask" else {})},
            )
        if decision == "allow_always":
            self.policy.remember(tool.kind, call.arguments, tool.name)
        return None

    async def _run(
        self, call: ToolCall, tool: Tool, offered: ToolRegistry, ctx: ToolContext
    ) -> ToolResult:
        """Run an approved call (checkpointing first when it may change files); a
        PostToolUse hook that blocks adds its reason to the result."""
        changes = tool.kind in ("edit", "execute", "mcp") or tool.name == "task"  # a sub-agent
        if self.before_change is not None and changes:
            await self.before_change()
        result = await offered.call(call, ctx)
        cwd = self.hooks.cwd if self.hooks is not None else Path.cwd()
        response = tool_response(call.name, call.arguments, result.content, result.is_error, cwd)
        after = await self._hooks("PostToolUse", call, {"tool_response": response})
        if after is not None and after.decision == "block" and after.reason:
            result = result.model_copy(
                update={"content": f"{result.content}\n\nA hook says: {after.reason}"}
            )
        return result

    async def _hooks(
        self, event: HookEvent, call: ToolCall, extra: dict[str, Any]
    ) -> HookVerdict | None:
        if self.hooks is None or not self.hooks.wants(event, call.name):
            return None
        payload = {"tool_input": tool_input(call.name, call.arguments, self.hooks.cwd), **extra}
        return await self.hooks.run(
            event,
            payload,
            tool=call.name,
            warn=lambda t: self.emit(Notice(text=t, level="warning")),
        )

    def _finished(self, call: ToolCall, result: ToolResult) -> None:
        self.emit(
            ToolFinished(
                call_id=call.id,
                name=call.name,
                content=result.content,
                is_error=result.is_error,
                metadata=result.metadata,
            )
        )


def _blocked(call: ToolCall, verdict: HookVerdict | None) -> ToolResult | None:
    """The result of a call a PreToolUse hook denies or stops, else None."""
    if verdict is None or (verdict.decision != "deny" and verdict.stop is None):
        return None
    reason = verdict.reason or verdict.stop or "no reason given"
    return ToolResult(
        call_id=call.id,
        is_error=True,
        content=f"A hook blocked this {call.name} call: {reason}",
        metadata={"denied": True, "hook": True},
    )
