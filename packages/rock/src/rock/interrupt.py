"""SIGTERM and SIGHUP end a long run as Ctrl+C does, so its sandboxes are cleaned up.

A run (``rock bench run``, ``rock synth run``, ``roll train``) cleans up on Ctrl+C: the
KeyboardInterrupt (or asyncio's cancellation of the main task) unwinds it through its
``finally`` blocks, which delete its sandboxes and keep what finished. SIGTERM (``kill``, a
scheduler, ``docker stop``) and SIGHUP (a closed terminal) would end the process at once and
leave its containers running. :class:`Interruptible` sends them down the Ctrl+C path instead,
for the duration of a ``with`` block::

    interrupts = Interruptible()
    try:
        with interrupts:
            asyncio.run(work())  # or plain blocking code
    except KeyboardInterrupt:
        sys.exit(interrupts.exit_status)  # 130 for Ctrl+C, 143 for SIGTERM, 129 for SIGHUP
"""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType, TracebackType
from typing import Any, Self

TERMINATION = (signal.SIGTERM, signal.SIGHUP)
"""The signals :class:`Interruptible` turns into Ctrl+C."""


class Interruptible:
    """Within the block, the first of ``signals`` does what Ctrl+C does there: it calls the
    SIGINT handler in place (asyncio's runner cancels its main task and raises
    KeyboardInterrupt once that has unwound; plain code gets KeyboardInterrupt at once). When
    SIGINT is ignored (a job started in the background) it raises KeyboardInterrupt itself:
    at once in plain code, from the event loop's next callback in asyncio code (then
    ``asyncio.run`` cancels every task and waits for their clean-up).

    Later termination signals are ignored while the run cleans up (a closed terminal may
    send SIGHUP more than once); a second Ctrl+C still cuts the clean-up short. A signal
    ignored on entry (SIGHUP under ``nohup``) stays ignored, and every handler is restored
    on exit. Outside the main thread, where Python cannot set handlers, it changes nothing.
    """

    def __init__(self, signals: tuple[int, ...] = TERMINATION) -> None:
        self.signals = signals
        self.signum: int = signal.SIGINT
        """What ended the run: SIGINT unless one of ``signals`` came first."""
        self._previous: dict[int, Any] = {}

    @property
    def exit_status(self) -> int:
        """The status a shell shows for a process ended by ``signum``: 128 + its number."""
        return 128 + self.signum

    def __enter__(self) -> Self:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._previous = {sig: signal.getsignal(sig) for sig in self.signals}
        for sig, handler in self._previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum != signal.SIGINT:
            return  # already stopping: let the clean-up finish
        self.signum = signum
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise KeyboardInterrupt from None
        # between two callbacks rather than in the middle of a task's step: asyncio.run then
        # cancels every task and waits for their clean-up, as after Ctrl+C
        loop.call_soon_threadsafe(_interrupt)


def _interrupt() -> None:
    raise KeyboardInterrupt
