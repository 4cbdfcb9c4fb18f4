"""The tool gate: a model's tool call checked, approved and run, its events emitted.

Between a model's answer and the workspace sits one gate (the agent loop calls nothing else to
act): the call is validated against the tools offered in the current approval mode, a call
that needs approval goes to the approver (denied outright when headless), one approved for good
is remembered, and the tool runs. Every call ends with a :class:`ToolFinished` event, run or not.
"""

from __future__ import annotations

from ale.trajectory import ToolCall, ToolResult
from iflow.approval import ApprovalPolicy, ApprovalRequest, Approver, denial_message
from iflow.events import EventSink, ToolFinished, ToolStarted
from iflow.tools import ToolContext, ToolRegistry


class ToolGate:
    """Runs tool calls under an approval policy."""

    def __init__(
        self, policy: ApprovalPolicy, approver: Approver, *, headless: bool, emit: EventSink
    ) -> None:
        self.policy = policy
        self.approver = approver
        self.headless = headless
        self.emit = emit

    async def execute(
        self, call: ToolCall, offered: ToolRegistry, every: ToolRegistry, ctx: ToolContext
    ) -> ToolResult:
        """``call``'s result: ``offered`` are the tools of the current mode, ``every`` all the
        agent has (a known tool outside the mode is refused with the mode named)."""
        checked = offered.validate(call)
        if isinstance(checked, ToolResult):
            if call.name in every and call.name not in offered:
                checked = ToolResult(
                    call_id=call.id,
                    is_error=True,
                    content=f"{call.name} is not available in {self.policy.mode} mode; "
                    "only read-only tools can be used now.",
                )
            self._finished(call, checked)
            return checked
        tool, _ = checked
        self.emit(
            ToolStarted(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                title=tool.describe(call.arguments),
            )
        )
        if not tool.trusted and self.policy.needs_approval(tool.kind, call.arguments, tool.name):
            request = ApprovalRequest(
                tool=tool.name,
                kind=tool.kind,
                title=tool.describe(call.arguments),
                arguments=call.arguments,
            )
            decision = "deny" if self.headless else await self.approver(request)
            if decision == "deny":
                denied = ToolResult(
                    call_id=call.id,
                    is_error=True,
                    content=denial_message(request, headless=self.headless),
                    metadata={"denied": True},
                )
                self._finished(call, denied)
                return denied
            if decision == "allow_always":
                self.policy.remember(tool.kind, call.arguments, tool.name)
        result = await offered.call(call, ctx)
        self._finished(call, result)
        return result

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
