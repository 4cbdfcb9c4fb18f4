"""The agent loop: one model call, its tool calls run, their observations back, until an end.

``run`` → ``_loop`` → ``step`` (fit the context, :mod:`.context`; query the model, record its
answer) → ``_act`` (check the answer and run its calls through the tool gate of
:mod:`iflow.gate`, :mod:`.answers`; record the results). The ends of a run are exceptions
(:class:`iflow.errors.AgentEnd`) that :meth:`Agent.run` catches and returns, recording
the failure mode in the trajectory. Every step is appended both to ``history`` (what
the model sees, which compression rewrites) and to ``trajectory`` (the full record in
the shared schema), by :mod:`.records`. The same loop drives the TUI, headless runs, rock bench,
synthesis and training rollouts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from ale.trajectory import (
    Role,
    Step,
    Usage,
)
from iflow.agent.answers import AnswerChecks
from iflow.agent.budget import RunBudget
from iflow.agent.context import ContextWindow
from iflow.agent.records import Records
from iflow.approval import ApprovalPolicy, Approver, Mode, allow_all, offered_kinds
from iflow.checkpoints import Checkpoints
from iflow.config import AgentConfig
from iflow.context.loop import LoopDetector
from iflow.context.tokens import TokenMeter
from iflow.errors import (
    AgentEnd,
    AgentTimeout,
    ContextLengthExceeded,
    ContextTooLong,
    Finished,
    IflowError,
    Interrupted,
    ModelError,
    ModelFailed,
    StoppedByHook,
)
from iflow.events import (
    AssistantDelta,
    AssistantMessage,
    Event,
    EventSink,
    Notice,
    RunStarted,
    TurnStarted,
)
from iflow.gate import ToolGate
from iflow.hooks import HookRunner
from iflow.models.base import Model, ModelResponse
from iflow.plan import TodoList
from iflow.prompts import (
    COMPACT_TOOLS,
    system_prompt,
)
from iflow.tools import Tool, ToolContext, ToolRegistry, default_tools
from iflow.workspace.base import Workspace

if TYPE_CHECKING:
    from iflow.agent import Agent
    from iflow.mcp.hub import McpHub
from iflow.workspace.shell import ShellSession

TurnHook = Callable[["Agent"], Awaitable[None] | None]


INTERRUPTED_ANSWER = "(interrupted by the user before answering)"
"""The answer a turn the user cut off leaves in the history."""


def _chosen_tools(config: AgentConfig, tools: list[Tool] | None, mcp: McpHub | None) -> list[Tool]:
    """The tools an agent has: ``tools``, else the default ones (those of the compact
    profile only, under it), and the MCP servers' tools beside them."""
    chosen = tools or default_tools(output_limit=config.tool_output_limit)
    if config.prompt_profile == "compact" and tools is None:
        by_name = {t.name: t for t in chosen}
        chosen = [by_name[name] for name in COMPACT_TOOLS if name in by_name]
    if mcp is not None:
        chosen = [*chosen, *mcp.tools(taken={t.name for t in chosen})]
    return chosen


class AgentLoop(ContextWindow, AnswerChecks, Records):
    """The agent's loop and what it holds: a model, a workspace, tools, and the conversation
    so far (:class:`iflow.agent.Agent` adds its session and sub-agents)."""

    def __init__(
        self,
        model: Model,
        workspace: Workspace,
        *,
        config: AgentConfig | None = None,
        tools: list[Tool] | None = None,
        approver: Approver | None = None,
        on_event: EventSink | None = None,
        after_turn: TurnHook | None = None,
        memory: str = "",
        prompt: str | None = None,
        shell: ShellSession | None = None,
        name: str = "iflow",
        mcp: McpHub | None = None,
        hooks: HookRunner | None = None,
    ) -> None:
        self.model = model
        self.mcp = mcp
        """The session's MCP servers (their tools are offered beside the built-in ones); the
        agent stops them in :meth:`aclose`."""
        self.workspace = workspace
        self.config = config or AgentConfig()
        self.on_event = on_event
        self.after_turn = after_turn
        self.memory = memory
        self.name = name
        self.all_tools = ToolRegistry(_chosen_tools(self.config, tools, mcp))
        self.hooks = hooks
        """Commands run on the agent's events (:mod:`iflow.hooks`)."""
        self.gate = self._new_gate(approver or allow_all, hooks)
        self.checkpoints: Checkpoints | None = None
        """The session's turns and file checkpoints (set by :func:`iflow.runner.build_agent`
        for a saved session): what :meth:`rewind` restores."""
        self.shell = shell or ShellSession(workspace)
        self.todos = TodoList()
        self.ctx = ToolContext(
            workspace=workspace, shell=self.shell, todos=self.todos, agent=cast("Agent", self)
        )
        self._custom_prompt = prompt
        self.history: list[Step] = [Step(role=Role.SYSTEM, content=self._system_prompt())]
        self.trajectory = self._new_trajectory()
        self.loops = LoopDetector(self.config.loop_threshold, self.config.fail_threshold)
        self.turn = 0
        """Model calls made in this agent's life (across runs)."""
        self._prefix: list[Step] = []
        """Turns the next run continues from (:meth:`continue_from`)."""
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd = 0.0
        self.final_answer = ""
        self.policy_version: int | None = None
        """Set by the trainer: recorded on every assistant step."""
        self._set_tools()
        self._inner: asyncio.Task[AgentEnd] | None = None
        self._interrupting = False
        self._since_todo = 0
        self._format_errors = 0
        self.budget = RunBudget()
        """What the run under way has spent against its limits."""

    # -- set-up ----------------------------------------------------------------------------

    def _new_gate(self, approver: Approver, hooks: HookRunner | None) -> ToolGate:
        """The gate the agent's tool calls go through, under the config's approval mode (it
        checkpoints the files before a call that may change them)."""
        return ToolGate(
            ApprovalPolicy(self.config.approval_mode),
            approver,
            headless=self.config.headless,
            emit=self.emit,
            hooks=hooks,
            before_change=self._before_change,
        )

    def _system_prompt(self) -> str:
        if self._custom_prompt is not None:
            return self._custom_prompt
        return system_prompt(
            workspace=self.workspace.kind,
            cwd=self.workspace.root,
            mode=self.policy.mode,
            memory=self.memory,
            profile=self.config.prompt_profile,
        )

    def _set_tools(self) -> None:
        self.tools = self.all_tools.only(offered_kinds(self.policy.mode))
        self.schemas = self.tools.schemas(compact=self.config.prompt_profile == "compact")
        self.meter = TokenMeter(
            self.model, self.schemas, exact=bool(getattr(self.model, "exact_tokens", False))
        )

    @property
    def policy(self) -> ApprovalPolicy:
        """The approval policy the tool gate applies (a sub-agent shares its parent's)."""
        return self.gate.policy

    @policy.setter
    def policy(self, policy: ApprovalPolicy) -> None:
        self.gate.policy = policy

    @property
    def approver(self) -> Approver:
        """Who decides the calls that need approval (the TUI asks its user)."""
        return self.gate.approver

    @approver.setter
    def approver(self, approver: Approver) -> None:
        self.gate.approver = approver

    def set_mode(self, mode: Mode) -> None:
        """Switch the approval mode (the TUI's ``/mode``); the system prompt follows."""
        self.policy.mode = mode
        self.config = self.config.model_copy(update={"approval_mode": mode})
        self._set_tools()
        if self.history and self.history[0].role is Role.SYSTEM:
            self.history[0] = Step(role=Role.SYSTEM, content=self._system_prompt())

    def set_model(self, model: Model) -> None:
        """Go on with another model (the TUI's ``/model NAME``): the conversation stays, the
        token meter and the trajectory's model follow."""
        self.model = model
        self.trajectory.model = model.name
        self._set_tools()

    def emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def context_used(self) -> int:
        """Tokens the prompt takes now."""
        return self.meter.count(self.history)

    # -- a run -----------------------------------------------------------------------------

    async def run(self, prompt: str) -> AgentEnd:
        """Give the agent ``prompt`` and let it work until an end; return that end."""
        self._interrupting = False
        self.budget = RunBudget()
        self.final_answer = ""
        started_at, started = datetime.now(UTC), time.monotonic()
        self.emit(
            RunStarted(
                prompt=prompt,
                model=self.model.name,
                workspace=self.workspace.kind,
                mode=self.policy.mode,
            )
        )
        if self.checkpoints is not None:
            self.checkpoints.begin(prompt, len(self.history), len(self.trajectory.steps))
        self._inner = asyncio.create_task(self._loop(prompt))
        try:
            end = await self._inner
        except asyncio.CancelledError:
            if not self._interrupting:
                raise
            end = Interrupted("the run was interrupted; the session is kept and you can go on.")
            self._close_dangling_calls("interrupted by the user before it ran")
            if self.history and self.history[-1].role is Role.USER:
                # the model's answer was cut off: say so, so that the next prompt does not
                # follow a user message with another, which chat templates requiring
                # alternating roles refuse
                self._append(Step(role=Role.ASSISTANT, content=INTERRUPTED_ANSWER))
        finally:
            self._inner = None
        self._record_end(end, started_at, time.monotonic() - started)
        await self._after_turn()
        return end

    async def _before_change(self) -> None:
        if self.checkpoints is None:
            return
        try:
            await self.checkpoints.before_change()
        except (IflowError, OSError) as exc:  # a checkpoint that fails must not stop the work
            self.emit(Notice(text=f"The files could not be checkpointed: {exc}", level="warning"))

    def interrupt(self) -> bool:
        """Stop the running turn (Ctrl+C); ``run`` returns :class:`Interrupted`. False when idle."""
        if self._inner is None or self._inner.done():
            return False
        self._interrupting = True
        self._inner.cancel()
        return True

    async def _loop(self, prompt: str) -> AgentEnd:
        if self.hooks is not None:
            first = not any(s.role is Role.USER for s in self.history)
            try:
                prompt = await self.hooks.on_prompt(prompt, first=first, warn=self._warn)
            except StoppedByHook as end:
                return end
        self._append(Step(role=Role.USER, content=prompt, timestamp=datetime.now(UTC)))
        self._take_prefix()
        deadline = asyncio.timeout(self.config.max_wall_sec)
        try:
            async with deadline:
                while True:
                    self.budget.check(self.config)
                    try:
                        await self.step()
                    except Finished:
                        if await self._stop_blocked():
                            continue
                        raise
        except AgentEnd as end:
            return end
        except TimeoutError:
            if not deadline.expired():
                raise
            self._close_dangling_calls("stopped: the run's time limit passed")
            return AgentTimeout(
                f"the run passed its time limit of {self.config.max_wall_sec:g} s; "
                "raise max_wall_sec to give it longer."
            )

    def _warn(self, text: str) -> None:
        self.emit(Notice(text=text, level="warning"))

    async def _stop_blocked(self) -> bool:
        """Whether a Stop hook sends the agent on instead of finishing (its reason told)."""
        reason = await self.hooks.on_stop(warn=self._warn) if self.hooks is not None else None
        if reason is None:
            return False
        self.final_answer = ""
        self._append(
            Step(
                role=Role.USER,
                content=f"<reminder>A Stop hook says you are not done: {reason}</reminder>",
                timestamp=datetime.now(UTC),
            )
        )
        return True

    async def step(self) -> None:
        """One turn: fit the context, call the model, run its tool calls, record everything."""
        self.turn += 1
        self.budget.turns += 1
        self.emit(TurnStarted(turn=self.turn))
        await self._fit_context()
        covered = len(self.history)
        response = await self._query()
        self._account(response, covered)
        self._append(
            Step(
                role=Role.ASSISTANT,
                content=response.content,
                reasoning=response.reasoning,
                tool_calls=response.tool_calls,
                usage=response.usage,
                prompt_token_ids=response.prompt_token_ids,
                token_ids=response.token_ids,
                logprobs=response.logprobs,
                policy_version=(
                    response.policy_version
                    if response.policy_version is not None
                    else self.policy_version
                ),
                timestamp=datetime.now(UTC),
                mark=response.mark,
                extra=dict(response.extra),
            )
        )
        self.emit(
            AssistantMessage(
                content=response.content,
                reasoning=response.reasoning,
                tool_calls=[c.model_dump() for c in response.tool_calls],
            )
        )
        await self._act(response)

    async def _act(self, response: ModelResponse) -> None:
        """Run the answer's tool calls, record their results, and raise the run's end if the
        answer brought one (finish, a loop, too many unusable answers)."""
        results, notes, end = self._check_answer(response)
        ran, finish, end = await self._run_calls(response.tool_calls, notes, end)
        results += ran
        notes += self._reminders(response.tool_calls)
        if results or notes:
            self._append(
                Step(
                    role=Role.TOOL,
                    tool_results=results,
                    content="\n\n".join(notes),
                    timestamp=datetime.now(UTC),
                )
            )
        await self._after_turn()
        if end is not None:
            raise end
        if finish is not None:
            self.final_answer = finish or response.content
            raise Finished("the agent called finish.")

    async def _query(self) -> ModelResponse:
        on_delta = (lambda text: self.emit(AssistantDelta(text=text))) if self.on_event else None
        for attempt in (1, 2):
            try:
                return await self.model.complete(self.history, self.schemas, on_delta=on_delta)
            except ContextTooLong as exc:
                if attempt == 2 or not await self.compress(force=True):
                    raise ContextLengthExceeded(str(exc)) from exc
            except ModelError as exc:
                raise ModelFailed(str(exc)) from exc
        raise AssertionError("unreachable")

    def _account(self, response: ModelResponse, covered: int) -> None:
        usage = response.usage or Usage()
        prompt = usage.prompt_tokens if usage.prompt_tokens is not None else self.context_used()
        completion = usage.completion_tokens or len(response.token_ids or []) or 0
        self.meter.reported(covered, usage.prompt_tokens)
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.budget.tokens += prompt + completion
        if usage.cost_usd:
            self.cost_usd += usage.cost_usd
            self.budget.cost_usd += usage.cost_usd

    async def _after_turn(self) -> None:
        if self.after_turn is not None:
            result = self.after_turn(cast("Agent", self))
            if result is not None:
                await result

    async def aclose(self) -> None:
        """Release the shell session's state and stop the MCP servers (the workspace belongs
        to the caller)."""
        await self.shell.close()
        if self.mcp is not None:
            await self.mcp.aclose()
