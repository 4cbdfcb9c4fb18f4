"""The policy as the iflow agent's model: batched generation for many concurrent episodes.

Below both ways an agent reaches the policy: in-process iflow episodes
(:mod:`roll.agentic`) and the OpenAI-compatible gateway for any other agent
(:mod:`roll.gateway`); so neither folder imports the other for it.

:class:`GenerationQueue` collects the generation requests of every running episode (each
an asyncio task) and serves them in batches through one
:class:`~roll.generation.base.GenerationBackend`: a request waits at most ``wait_ms`` for
others to join, then the batch runs in a worker thread. With a backend whose rows can join a
running batch (:class:`~roll.generation.base.ContinuousBackend`: the HF backend) a request
that arrives while others decode joins them at the next decode step, and each finishes as
soon as its own row does; a backend that batches overlapping calls itself (``batches_itself``:
an inference server, whose engine batches continuously) gets each gathered batch at once,
beside the calls still running; with any other backend new requests queue up for the next
batch. So episodes advance independently (one may be running a shell command while another waits
for tokens), and the backend still sees batches.

:class:`PolicyModel` is one episode's :class:`iflow.models.base.Model`. It keeps the
episode's token sequence itself: the first prompt is the chat template's rendering (as
:func:`iflow.models.local.prompt_token_ids` makes it, tool descriptions included); after
that, the sampled ids are kept exactly as sampled and only the text the template adds for
the new turns (the tool results, the next generation prompt) is tokenised and appended. So
every recorded step's ``prompt_token_ids`` extends the tokens before it, which is what
:func:`ale.chunking.token_view` needs, and the log-probs recorded are those of the tokens
the policy actually produced. When the agent rewrites the history (context compression),
the transcript starts again from the full rendering and the step is marked
``extra["roll"]["rewritten"]``: the trainer splits the trajectory there.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ale.trajectory import Role, Step, Usage
from iflow.errors import ContextTooLong
from iflow.models.base import DeltaCallback, ModelResponse
from iflow.models.local import chat_messages, prompt_token_ids
from iflow.models.parsing import parse_tool_calls
from roll.errors import PromptTooLong
from roll.generation.base import (
    ContinuousBackend,
    DecodeSession,
    Generation,
    GenerationBackend,
    SamplingParams,
)

_MARK = "\u2063roll-end-of-turn\u2063"
T = TypeVar("T")


@dataclass
class _Request:
    prompt: list[int]
    max_new_tokens: int
    future: asyncio.Future[Generation]
    version: int | None = None
    """The backend's policy version when the request started decoding."""

    def resolve(self, result: Generation) -> None:
        if not self.future.done():  # the older version when the backend knows an earlier one
            known = [v for v in (self.version, result.policy_version) if v is not None]
            version = min(known) if known else None
            self.future.set_result(result.model_copy(update={"policy_version": version}))


@dataclass
class QueueStats:
    """What the queue did (for metrics)."""

    batches: int = 0
    """Backend calls: whole batches, or decode steps of a continuous session."""
    rows: int = 0
    """Rows over all those calls."""
    requests: int = 0
    tokens: int = 0
    busy_seconds: float = 0.0
    batch_sizes: list[int] = field(default_factory=list)
    """Rows of each whole batch (a continuous session's steps are counted in ``rows``)."""

    @property
    def mean_batch(self) -> float:
        """Mean rows a backend call decoded together."""
        return self.rows / self.batches if self.batches else 0.0


class GenerationQueue:
    """Batches concurrent generation requests into backend calls (see the module docstring).

    Use inside a running event loop; :meth:`close` (or ``async with``) stops the worker.
    ``paused()`` holds the backend for exclusive use (a weight update) between batches: with a
    continuous backend, no request joins once a pause is asked for, and the pause begins when
    the running rows have finished (a generation never mixes two policy versions).
    """

    def __init__(
        self,
        backend: GenerationBackend,
        params: SamplingParams,
        *,
        max_batch: int = 64,
        wait_ms: float = 5.0,
        seed: int = 0,
    ) -> None:
        self.backend = backend
        self.params = params
        self.max_batch = max_batch
        self.wait = wait_ms / 1000.0
        self.stats = QueueStats()
        self._seeds = itertools.count(seed)
        self._pending: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._holds = 0
        """Pauses asked for: the continuous worker admits nothing while there are any."""
        self._thread: ThreadPoolExecutor | None = None
        """The backend's own thread: decode steps never wait behind sandbox calls in the
        event loop's default executor."""
        self._senders: ThreadPoolExecutor | None = None
        """Threads for overlapping calls to a backend that batches them itself."""
        self._sending: set[asyncio.Task[None]] = set()
        self._drained = asyncio.Event()
        """Set while no overlapping call runs."""
        self._drained.set()
        self._busy_since = 0.0

    def _start(self) -> asyncio.Queue[_Request]:
        if self._pending is None:
            self._pending = asyncio.Queue()
            self._worker = asyncio.create_task(self._serve(), name="roll-generation-queue")
        return self._pending

    async def generate(self, prompt: list[int], max_new_tokens: int | None = None) -> Generation:
        """Sample a continuation of ``prompt`` (batched with whatever else is waiting)."""
        queue = self._start()
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        budget = min(max_new_tokens or self.params.max_new_tokens, self.params.max_new_tokens)
        await queue.put(_Request(list(prompt), max(budget, 1), future))
        return await future

    async def _serve(self) -> None:
        assert self._pending is not None
        if isinstance(self.backend, ContinuousBackend):
            await self._serve_continuous(self.backend)
        elif getattr(self.backend, "batches_itself", False):
            await self._serve_overlapping()
        else:
            while True:
                batch = await self._gather([await self._pending.get()])
                await self._run(batch)

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="roll-generation")
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    async def _gather(self, batch: list[_Request]) -> list[_Request]:
        """``batch`` plus whatever else arrives within ``wait_ms`` (up to ``max_batch``)."""
        assert self._pending is not None
        deadline = time.monotonic() + self.wait
        while len(batch) < self.max_batch:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._pending.get(), timeout))
            except TimeoutError:
                break
        return batch

    async def _serve_overlapping(self) -> None:
        """Send each gathered batch at once, while earlier ones still run (never returns): the
        backend batches them itself. A pause waits until every call has returned."""
        assert self._pending is not None
        if self._senders is None:
            self._senders = ThreadPoolExecutor(self.max_batch, thread_name_prefix="roll-send")
        while True:
            batch = await self._gather([await self._pending.get()])
            async with self._lock:  # not during a pause; the version is the one it is sent with
                for request in batch:
                    request.version = self.backend.policy_version
                if self._drained.is_set():
                    self._busy_since = time.monotonic()
                self._drained.clear()
                task = asyncio.create_task(self._send(batch))
                self._sending.add(task)

    async def _send(self, batch: list[_Request]) -> None:
        try:
            await self._generate(batch, self._senders)
        finally:
            self._sending.discard(asyncio.current_task())
            if not self._sending:
                self.stats.busy_seconds += time.monotonic() - self._busy_since
                self._drained.set()

    async def _generate(self, batch: list[_Request], executor: ThreadPoolExecutor | None) -> None:
        """One backend call per token budget of ``batch``; each request gets its result or
        the call's error."""
        by_budget: dict[int, list[_Request]] = {}
        for request in batch:
            by_budget.setdefault(request.max_new_tokens, []).append(request)
        for budget, requests in by_budget.items():
            params = self.params.model_copy(
                update={"max_new_tokens": budget, "seed": next(self._seeds)}
            )
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    executor, self.backend.generate, [r.prompt for r in requests], params
                )
            except Exception as exc:  # every waiting episode learns of the failure
                for request in requests:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            self.stats.batches += 1
            self.stats.rows += len(requests)
            self.stats.requests += len(requests)
            self.stats.batch_sizes.append(len(requests))
            for request, result in zip(requests, results, strict=True):
                self.stats.tokens += len(result.token_ids)
                request.resolve(result)

    async def _serve_continuous(self, backend: ContinuousBackend) -> None:
        """Serve through decode sessions: requests join between steps (never returns)."""
        assert self._pending is not None
        waiting: list[_Request] = []
        while True:
            if not waiting:
                waiting.append(await self._pending.get())
            waiting = await self._gather(waiting)
            async with self._lock:
                params = self.params.model_copy(update={"seed": next(self._seeds)})
                session = backend.open_session(params)
                active: dict[int, _Request] = {}
                while True:
                    while not self._pending.empty():
                        waiting.append(self._pending.get_nowait())
                    if not self._holds:
                        await self._admit(session, waiting, active)
                    if not active or not await self._step(session, active):
                        break  # idle, or the session failed: the next request opens a new one

    async def _admit(
        self, session: DecodeSession, waiting: list[_Request], active: dict[int, _Request]
    ) -> None:
        """Move the waiting requests that fit into the running session (in arrival order)."""
        joining: list[_Request] = []
        while waiting and len(active) + len(joining) < self.max_batch:
            candidates = [*joining, waiting[0]]
            lengths = [len(r.prompt) for r in candidates]
            if not session.fits(lengths, [r.max_new_tokens for r in candidates]):
                break
            joining.append(waiting.pop(0))
        joining = [r for r in joining if not r.future.done()]  # its episode gave up
        if not joining:
            return
        began = time.monotonic()
        try:
            keys = await self._in_thread(
                session.admit, [r.prompt for r in joining], [r.max_new_tokens for r in joining]
            )
        except Exception as exc:  # the requests that could not start learn why
            for request in joining:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        self.stats.busy_seconds += time.monotonic() - began
        self.stats.requests += len(joining)
        for request in joining:  # weights change only under the lock this runs in
            request.version = self.backend.policy_version
        active.update(zip(keys, joining, strict=True))

    async def _step(self, session: DecodeSession, active: dict[int, _Request]) -> bool:
        """One decode step; False when it failed (every active request then has the error)."""
        began = time.monotonic()
        rows = len(active)
        try:
            finished = await self._in_thread(session.step)
        except Exception as exc:  # every decoding episode learns of the failure
            for request in active.values():
                if not request.future.done():
                    request.future.set_exception(exc)
            active.clear()
            return False
        self.stats.busy_seconds += time.monotonic() - began
        self.stats.batches += 1
        self.stats.rows += rows
        for key, result in finished:
            request = active.pop(key)
            self.stats.tokens += len(result.token_ids)
            request.resolve(result)
        return True

    async def _run(self, batch: list[_Request]) -> None:
        async with self._lock:
            for request in batch:  # weights change only under this lock
                request.version = self.backend.policy_version
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="roll-generation")
            began = time.monotonic()
            await self._generate(batch, self._thread)
            self.stats.busy_seconds += time.monotonic() - began

    @contextlib.asynccontextmanager
    async def paused(self) -> Any:
        """Hold the backend between batches (to change its weights)."""
        self._holds += 1
        try:
            async with self._lock:
                await self._drained.wait()  # overlapping calls sent before the pause
                yield
        finally:
            self._holds -= 1

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
            self._pending = None
        for task in list(self._sending):
            task.cancel()
        self._sending.clear()
        self._drained.set()
        for pool in (self._thread, self._senders):
            if pool is not None:
                pool.shutdown(wait=False)
        self._thread = self._senders = None

    async def __aenter__(self) -> GenerationQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class PolicyModel:
    """One episode's model: the policy behind a :class:`GenerationQueue`."""

    exact_tokens = True

    def __init__(
        self,
        queue: GenerationQueue,
        tokenizer: Any,
        *,
        name: str = "policy",
        context_limit: int = 4096,
        max_new_tokens: int | None = None,
        tool_format: str = "auto",
    ) -> None:
        self.queue = queue
        self.tokenizer = tokenizer
        self.name = name
        self.tool_format: Any = tool_format
        """How tools reach the prompt (:data:`iflow.models.local.ToolFormat`)."""
        self.context_limit = context_limit
        self.max_new_tokens = max_new_tokens or queue.params.max_new_tokens
        self.tokens: list[int] = []
        """The episode's token sequence so far (prompts and sampled ids)."""
        self._seen = 0
        """How many messages the transcript covers (the last one our own answer)."""
        self._history: list[tuple[Any, ...]] = []
        """What those messages said (:func:`said`): a call continues the transcript only
        when its first ``_seen`` messages say the same."""
        self._stopped = True
        """Whether the last answer ended with an end-of-turn token."""
        self._eos = set(_eos_ids(tokenizer))
        self.policy_versions: list[int] = []

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        return len(prompt_token_ids(self.tokenizer, messages, tools, self.tool_format))

    def _render(self, messages: list[Step], tools: list[dict[str, Any]], *, gen: bool) -> str:
        chat, tools_arg = chat_messages(self.tokenizer, messages, tools, self.tool_format)
        return str(
            self.tokenizer.apply_chat_template(
                chat, tools=tools_arg, add_generation_prompt=gen, tokenize=False
            )
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _end_of_turn(self, messages: list[Step], tools: list[dict[str, Any]]) -> str:
        """The text the template writes after an assistant message's content."""
        probe = [*messages[:1], Step(role=Role.ASSISTANT, content=_MARK)]
        text = self._render(probe, tools, gen=False)
        return text[text.index(_MARK) + len(_MARK) :]

    @property
    def seen(self) -> int:
        """How many messages the transcript covers (the last one its own answer)."""
        return self._seen

    def snapshot(self) -> tuple[Any, ...]:
        """The transcript's state, to :meth:`restore` when an answer was not delivered."""
        return (
            list(self.tokens),
            self._seen,
            list(self._history),
            self._stopped,
            len(self.policy_versions),
        )

    def restore(self, state: tuple[Any, ...]) -> None:
        tokens, self._seen, history, self._stopped, versions = state
        self.tokens, self._history = list(tokens), list(history)
        del self.policy_versions[versions:]

    def extends(self, messages: list[Step]) -> bool:
        """Whether ``messages`` continue this transcript: they begin with the messages of the
        last call and its answer (however the client wrote the answer's tool calls back)."""
        if not self._seen or len(messages) <= self._seen:
            return False
        return [said(m) for m in messages[: self._seen]] == self._history

    def prompt_ids(
        self, messages: list[Step], tools: list[dict[str, Any]]
    ) -> tuple[list[int], bool]:
        """The prompt's ids extending the transcript, and whether the history was rewritten."""
        full = self._render(messages, tools, gen=True)
        if self.extends(messages):
            answered = self._render(messages[: self._seen], tools, gen=False)
            if full.startswith(answered):
                eot = self._end_of_turn(messages, tools)
                tail = full[len(answered) :]
                if self._stopped and self.tokens:
                    stop_text = self.tokenizer.decode([self.tokens[-1]])
                    if eot.startswith(stop_text):
                        # the sampled stop token already wrote the start of the end-of-turn
                        eot_rest = eot[len(stop_text) :]
                        if answered.endswith(eot):
                            return self.tokens + self._encode(eot_rest + tail), False
                if answered.endswith(eot):
                    return self.tokens + self._encode(eot + tail), False
        if not self._seen:
            return prompt_token_ids(self.tokenizer, messages, tools, self.tool_format), False
        return prompt_token_ids(self.tokenizer, messages, tools, self.tool_format), True

    def _take_prefix(self, messages: list[Step], tools: list[dict[str, Any]]) -> None:
        """An expert's turns the episode continues from (:func:`is_prefix`) enter the
        transcript as if this policy had written them: each records the prompt it followed
        and the ids of its text as the template writes it, the end-of-turn token included,
        with no log-probs, so the trajectory's token view holds them (for the imitation term;
        they take no RL loss). The steps are the agent's own, so its trajectory has them."""
        for index in range(self._seen, len(messages)):
            step = messages[index]
            if step.role is not Role.ASSISTANT or not is_prefix(step) or step.token_ids:
                continue
            prompt, _ = self.prompt_ids(messages[:index], tools)
            asked = self._render(messages[:index], tools, gen=True)
            answered = self._render(messages[: index + 1], tools, gen=False)
            eot = self._end_of_turn(messages, tools)
            text = answered[len(asked) :] if answered.startswith(asked) else step.content
            text = text[: -len(eot)] if eot and text.endswith(eot) else text
            ids = self._encode(text)
            stop = self._encode(eot)[:1]
            self._stopped = bool(stop) and stop[0] in self._eos
            if self._stopped:
                ids += stop
            step.prompt_token_ids, step.token_ids, step.logprobs = prompt, ids, None
            self.tokens = prompt + ids
            self._seen = index + 1
            self._history = [said(m) for m in messages[: index + 1]]

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        self._take_prefix(messages, tools)
        prompt, rewritten = self.prompt_ids(messages, tools)
        room = self.context_limit - len(prompt)
        if room <= 0:
            raise ContextTooLong(
                f"the prompt ({len(prompt)} tokens) is longer than the policy's context "
                f"({self.context_limit} tokens)"
            )
        queued = self.queue.backend.policy_version
        try:
            generation = await self.queue.generate(prompt, min(self.max_new_tokens, room))
        except PromptTooLong as exc:  # the server's window is smaller than context_limit:
            raise ContextTooLong(str(exc)) from None  # the agent's to handle, as above
        version = queued if generation.policy_version is None else generation.policy_version
        token_ids = list(generation.token_ids)
        self.tokens = prompt + token_ids
        self._seen = len(messages) + 1
        self._stopped = bool(token_ids) and token_ids[-1] in self._eos
        self.policy_versions.append(version)
        raw = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        self._history = [*map(said, messages), said(Step(role=Role.ASSISTANT, content=raw))]
        content, calls, errors = parse_tool_calls(raw)
        if on_delta is not None and content:
            on_delta(content)
        extra: dict[str, Any] = {"roll": {"rewritten": True}} if rewritten else {}
        return ModelResponse(
            content=content,
            tool_calls=calls,
            format_errors=errors,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(token_ids)),
            finish_reason=generation.finish_reason,
            prompt_token_ids=prompt,
            token_ids=token_ids,
            logprobs=list(generation.logprobs),
            policy_version=version,
            raw=raw if raw != content else None,
            extra=extra,
        )


def is_prefix(step: Step) -> bool:
    """Whether ``step`` is a turn of an expert's prefix the episode continues from
    (:attr:`~ale.trajectory.Step.prefix`: chunk-level initialised resampling), not one
    sampled here."""
    return step.prefix


def said(message: Step) -> tuple[Any, ...]:
    """What a message says, to tell a continued history from a rewritten one: an assistant
    turn's text and tool calls (names and arguments; native or as markup in the text, as the
    client chose to write them back), any other message as it is."""
    if message.role is Role.ASSISTANT:
        content, calls, _ = parse_tool_calls(message.content)
        named = [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in message.tool_calls]
        named += [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls]
        return (message.role.value, content.strip(), tuple(named))
    results = tuple((r.call_id, r.content) for r in message.tool_results)
    return (message.role.value, message.content, results)


def _eos_ids(tokenizer: Any) -> list[int]:
    ids = tokenizer.eos_token_id
    if ids is None:
        return []
    return list(ids) if isinstance(ids, list | tuple) else [int(ids)]
