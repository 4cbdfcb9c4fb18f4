"""The policy as the iflow agent's model: batched generation for many concurrent episodes.

:class:`GenerationQueue` collects the generation requests of every running episode (each
an asyncio task) and serves them in batches through one
:class:`~roll.generation.base.GenerationBackend`: a request waits at most ``wait_ms`` for
others to join, then the batch runs in a worker thread while new requests queue up for the
next one. So episodes advance independently (one may be running a shell command while
another waits for tokens), and the backend still sees batches.

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
import time
from dataclasses import dataclass, field
from typing import Any

from ale.trajectory import Role, Step, Usage
from roll.generation.base import Generation, GenerationBackend, SamplingParams

_MARK = "\u2063roll-end-of-turn\u2063"


@dataclass
class _Request:
    prompt: list[int]
    max_new_tokens: int
    future: asyncio.Future[Generation]


@dataclass
class QueueStats:
    """What the queue did (for metrics)."""

    batches: int = 0
    requests: int = 0
    tokens: int = 0
    busy_seconds: float = 0.0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0


class GenerationQueue:
    """Batches concurrent generation requests into backend calls (see the module docstring).

    Use inside a running event loop; :meth:`close` (or ``async with``) stops the worker.
    ``paused()`` holds the backend for exclusive use (a weight update) between batches.
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
        while True:
            first = await self._pending.get()
            batch = [first]
            deadline = time.monotonic() + self.wait
            while len(batch) < self.max_batch:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._pending.get(), timeout))
                except TimeoutError:
                    break
            await self._run(batch)

    async def _run(self, batch: list[_Request]) -> None:
        by_budget: dict[int, list[_Request]] = {}
        for request in batch:
            by_budget.setdefault(request.max_new_tokens, []).append(request)
        async with self._lock:
            for budget, requests in by_budget.items():
                params = self.params.model_copy(
                    update={"max_new_tokens": budget, "seed": next(self._seeds)}
                )
                began = time.monotonic()
                try:
                    results = await asyncio.to_thread(
                        self.backend.generate, [r.prompt for r in requests], params
                    )
                except Exception as exc:  # every waiting episode learns of the failure
                    for request in requests:
                        if not request.future.done():
                            request.future.set_exception(exc)
                    continue
                self.stats.busy_seconds += time.monotonic() - began
                self.stats.batches += 1
                self.stats.requests += len(requests)
                self.stats.batch_sizes.append(len(requests))
                for request, result in zip(requests, results, strict=True):
                    self.stats.tokens += len(result.token_ids)
                    if not request.future.done():
                        request.future.set_result(result)

    @contextlib.asynccontextmanager
    async def paused(self) -> Any:
        """Hold the backend between batches (to change its weights)."""
        async with self._lock:
            yield

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
            self._pending = None

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
        self._rendered = ""
        """The template's text for those messages."""
        self._stopped = True
        """Whether the last answer ended with an end-of-turn token."""
        self._eos = set(_eos_ids(tokenizer))
        self.policy_versions: list[int] = []

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        from iflow.models.local import prompt_token_ids

        return len(prompt_token_ids(self.tokenizer, messages, tools, self.tool_format))

    def _render(self, messages: list[Step], tools: list[dict[str, Any]], *, gen: bool) -> str:
        from iflow.models.local import chat_messages

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

    def prompt_ids(
        self, messages: list[Step], tools: list[dict[str, Any]]
    ) -> tuple[list[int], bool]:
        """The prompt's ids extending the transcript, and whether the history was rewritten."""
        full = self._render(messages, tools, gen=True)
        if self._seen and len(messages) > self._seen:
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
            from iflow.models.local import prompt_token_ids

            return prompt_token_ids(self.tokenizer, messages, tools, self.tool_format), False
        from iflow.models.local import prompt_token_ids

        return prompt_token_ids(self.tokenizer, messages, tools, self.tool_format), True

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: Any = None,
    ) -> Any:
        from iflow.errors import ContextTooLong
        from iflow.models.base import ModelResponse
        from iflow.models.parsing import parse_tool_calls

        prompt, rewritten = self.prompt_ids(messages, tools)
        room = self.context_limit - len(prompt)
        if room <= 0:
            raise ContextTooLong(
                f"the prompt ({len(prompt)} tokens) is longer than the policy's context "
                f"({self.context_limit} tokens)"
            )
        version = self.queue.backend.policy_version
        generation = await self.queue.generate(prompt, min(self.max_new_tokens, room))
        token_ids = list(generation.token_ids)
        self.tokens = prompt + token_ids
        self._seen = len(messages) + 1
        self._stopped = bool(token_ids) and token_ids[-1] in self._eos
        self.policy_versions.append(version)
        raw = self.tokenizer.decode(token_ids, skip_special_tokens=True)
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


def _eos_ids(tokenizer: Any) -> list[int]:
    ids = tokenizer.eos_token_id
    if ids is None:
        return []
    return list(ids) if isinstance(ids, list | tuple) else [int(ids)]
