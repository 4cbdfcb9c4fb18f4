"""Held verifiers: a short round of tail batching scores only the groups it keeps.

A short round (:mod:`roll.schedule`) launches more groups than it trains on and cuts the
others once enough have finished. With a fast policy most of an episode's cost is its
verifier (the task's tests in its sandbox), so scoring a group that is then cut is waste,
and on a small machine it slows down the groups that are kept. RollPacker scores only the
responses a round keeps; here, in a short round, an episode that is done acting waits before
its verifier (the ``before_verifier`` seam of :class:`ale.episode.EpisodeRunner`) until
its group is **admitted**:

- a group is ready once every one of its episodes is done acting (or has ended without
  reaching its verifier: abandoned after infrastructure failures);
- ready groups are admitted in the order they got ready, while fewer than ``keep`` admitted
  groups are live (verifying, or scored);
- an admitted group that failed whole for infrastructure reasons frees its place for the
  next ready one.

The round then keeps the ``keep`` groups that finished acting first, and the groups it cuts
— still acting, or waiting — never ran their verifiers (counted as
``episodes/cut_unverified``). Once admitted, a group's episodes pass straight on (an episode
run again after an infrastructure failure too), so holding costs a kept group nothing but the
wait for its own slowest episode, which it waits for anyway. With Ray the episodes wait in
their rollout worker, which reports the group done acting (:meth:`GroupGate.acted`) and
hears of its admission (:mod:`roll.agentic.ray_workers`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Admission:
    """The admissions of one short round (see the module docstring)."""

    def __init__(self, keep: int, on_cut_waiting: Callable[[], None]) -> None:
        self.keep = keep
        self.on_cut_waiting = on_cut_waiting
        """Called for each episode cut while it waited before its verifier."""
        self.live = 0
        """Admitted groups not failed."""
        self._ready: list[GroupGate] = []

    def group(self, size: int) -> GroupGate:
        """The gate of a new group of ``size`` episodes."""
        return GroupGate(size, on_ready=self._queue, on_cut_waiting=self.on_cut_waiting)

    def failed(self, gate: GroupGate) -> None:
        """``gate``'s group ended with no scored episode: admitted, it frees its place."""
        if gate.admitted:
            gate.admitted = False
            self.live -= 1
            self._admit()

    def _queue(self, gate: GroupGate) -> None:
        self._ready.append(gate)
        self._admit()

    def _admit(self) -> None:
        while self._ready and self.live < self.keep:
            gate = self._ready.pop(0)
            gate.admitted = True
            self.live += 1
            gate.opened.set()


class GroupGate:
    """One group's gate: :meth:`episode` gives each episode its ``before_verifier``;
    ``on_ready`` hears when the group is done acting, and :attr:`opened` lets it verify."""

    def __init__(
        self,
        size: int,
        *,
        on_ready: Callable[[GroupGate], None],
        on_cut_waiting: Callable[[], None],
    ) -> None:
        self.size = size
        self.on_ready = on_ready
        self.on_cut_waiting = on_cut_waiting
        self.settled = 0
        """Episodes done acting, or ended without reaching their verifier."""
        self.arrived = 0
        """Episodes that reached their verifier."""
        self.admitted = False
        self.opened = asyncio.Event()

    def episode(self) -> EpisodeGate:
        return EpisodeGate(self)

    def acted(self, arrived: int) -> None:
        """Every episode is done acting, ``arrived`` of them waiting (as a rollout worker
        reports its group's gate, :mod:`roll.agentic.ray_workers`)."""
        self.settled, self.arrived = self.size, arrived
        if arrived:
            self.on_ready(self)

    def _settle(self, arrived: bool) -> None:
        self.settled += 1
        self.arrived += arrived
        if self.settled == self.size and self.arrived:  # every episode done acting: ready
            self.on_ready(self)


class EpisodeGate:
    """One episode's ``before_verifier``: it waits there until its group is admitted."""

    def __init__(self, group: GroupGate) -> None:
        self.group = group
        self.settled = False

    async def __call__(self) -> None:
        group = self.group
        if not self.settled:
            self.settled = True
            group._settle(arrived=True)
        if group.opened.is_set():
            return
        try:
            await group.opened.wait()
        except asyncio.CancelledError:  # its group was cut while it waited: no verifier ran
            group.on_cut_waiting()
            raise

    def ended(self) -> None:
        """The episode is over (scored, abandoned or cut)."""
        if not self.settled:
            self.settled = True
            self.group._settle(arrived=False)
