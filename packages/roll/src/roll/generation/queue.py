"""Batched generation for many concurrent episodes: one queue in front of a backend.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from roll.generation.base import (
    ContinuousBackend,
    DecodeSession,
    Generation,
    GenerationBackend,
    SamplingParams,
)

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
