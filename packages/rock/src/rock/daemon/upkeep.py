"""Keeping the daemon true to the engine: reconciliation at start-up, then a
maintenance loop that reaps expired sandboxes, notices dead containers and refills pools.

A mixin of `SandboxManager`, kept in its own file so that each file has one subject.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rock.backends.base import Backend, Sandbox, SandboxError
from rock.daemon.pools import _Pool, _shape
from rock.models import SandboxSpec
from rock.store import SandboxRecord, SandboxState, StateStore, StoreUnavailable, UnknownSandbox

log = logging.getLogger("rock.daemon")

S = SandboxState
_RUNNING = frozenset({S.READY, S.BUSY})


class UpkeepMixin:
    """`reconcile` at start-up and the maintenance loop (`_maintain`)."""

    _lock: threading.RLock
    _pools: dict[str, _Pool]
    _boxes: dict[str, Sandbox]
    _stopped: set[str]
    _paused: set[str]
    _stop: threading.Event
    _wake: threading.Event
    _last_liveness: float
    store: StateStore
    backend: Backend
    daemon_id: str
    metrics: Any
    maintenance_interval: float
    liveness_interval: float

    if TYPE_CHECKING:

        def _destroy(self, sandbox_id: str, reason: str) -> SandboxRecord: ...
        def _fail(self, sandbox_id: str, reason: str) -> None: ...
        def _move(self, sandbox_id: str, state: SandboxState, reason: str) -> SandboxRecord: ...
        def _fill_pools(self) -> None: ...
        @staticmethod
        def _quiet_delete(box: Sandbox) -> None: ...

    def reconcile(self) -> dict[str, int]:
        """Make the engine and the database agree; return counts of what was done.

        Only this daemon's sandboxes are touched: containers labelled with its id that its
        database records, or that a daemon of its own rock home made (a crash left them).
        Others with its id (made from another home, or before rock labelled origins, by a
        daemon whose id this one took over) are counted as foreign and left alone."""
        counts = {"adopted": 0, "removed": 0, "closed": 0, "failed": 0, "foreign": 0}
        rows = {row.id: row for row in self.store.live(self.daemon_id)}
        foreign: set[str] = set()
        for box in self.backend.list():
            row = rows.pop(box.id, None)
            if row is None:
                if self._made_elsewhere(box):
                    foreign.add(box.origin or "an earlier rock")
                    counts["foreign"] += 1
                    continue
                self._quiet_delete(box)
                counts["removed"] += 1
                continue
            counts[self._reconcile_one(box, row)] += 1
        for row in rows.values():
            if row.state == S.ERROR:
                continue  # already closed with its reason
            self._move(row.id, S.DELETED, "its container was gone when the daemon restarted")
            counts["closed"] += 1
        if foreign:
            log.warning(
                "left alone %s containers labelled with this daemon's id %s that another daemon "
                "made (from %s), as they are not in this daemon's database",
                counts["foreign"],
                self.daemon_id,
                ", ".join(sorted(foreign)),
            )
        log.info("reconciled: %s", counts)
        return counts

    def _reconcile_one(self, box: Sandbox, row: SandboxRecord) -> str:
        """Adopt a container its database records, or remove it and close its row; which of
        ``adopted``, ``closed``, ``failed`` or ``removed`` happened."""
        if row.state not in (S.READY, S.BUSY, S.PAUSED, S.STOPPED):
            self._quiet_delete(box)
            self._move(row.id, S.DELETED, f"the daemon stopped while it was {row.state}")
            return "closed"
        status = box.status()
        expected = "paused" if row.state == S.PAUSED else "running"
        if row.state != S.STOPPED and status.get("state") != expected:
            self._quiet_delete(box)
            self._move(
                row.id,
                S.ERROR,
                f"its container was {status.get('state')} when the daemon restarted",
            )
            return "failed"
        pool = self._pools.get(row.pool_key or "")
        if row.state == S.READY and (
            pool is None or _shape(pool.settings.spec) != _shape(box.spec)
        ):
            self._quiet_delete(box)
            self._move(row.id, S.DELETED, "its pool no longer wants it")
            return "removed"
        box.spec = SandboxSpec.model_validate(row.spec_json)
        with self._lock:
            self._boxes[row.id] = box
            if row.state == S.STOPPED:
                self._stopped.add(row.id)
            if row.state == S.PAUSED:
                self._paused.add(row.id)
            if pool is not None:
                pool.members.add(row.id)
                if row.state == S.READY:
                    pool.idle.append(row.id)
        return "adopted"

    def _made_elsewhere(self, box: Sandbox) -> bool:
        """True for a sandbox this daemon's database does not record under its id, made by a
        daemon of another rock home (or of one that did not say where it ran)."""
        if box.origin is None or box.origin == self.backend.origin:
            return False
        try:
            return self.store.get(box.id).daemon_id != self.daemon_id
        except UnknownSandbox:
            return True

    def _maintain(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.maintenance_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self.store.keep_claim(self.daemon_id):
                log.error(
                    "another daemon took the id %s while the database was away; this one "
                    "stops maintaining sandboxes until it is restarted with its own id",
                    self.daemon_id,
                )
                self._stop.set()
                return
            for step in (self._reap, self._check_liveness, self._fill_pools):
                try:
                    step()
                except StoreUnavailable as exc:  # one line, not a traceback a pass
                    log.warning("maintenance waits for the state store: %s", exc)
                    break
                except Exception:  # keep the loop alive; the next pass retries
                    log.exception("maintenance step %s failed", step.__name__)
                    if self.metrics is not None:
                        self.metrics.error("maintenance")

    def _reap(self) -> None:
        now = datetime.now(UTC)
        for row in self.store.expired(now, daemon_id=self.daemon_id):
            if row.expires_at is not None and row.expires_at <= now:
                reason = "its TTL ran out"
            else:
                reason = f"it was idle for more than {row.idle_timeout_sec:g}s"
            self._destroy(row.id, reason)

    def _check_liveness(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._last_liveness < self.liveness_interval:
            return
        self._last_liveness = time.monotonic()
        states = self.backend.states()
        with self._lock:
            watched = list(self._boxes)
            stopped = set(self._stopped)  # (or being stopped by its client: it exits on purpose)
        self._sweep_orphans(states, set(watched))
        for sandbox_id in watched:
            if sandbox_id in stopped:
                continue
            status = states.get(sandbox_id)
            if status is not None and status.get("state") in ("running", "created", "paused"):
                continue  # (paused: a snapshot or a fork is committing its file system)
            try:
                row = self.store.get(sandbox_id)
            except UnknownSandbox:
                continue
            if row.state not in _RUNNING:
                continue
            if status is None:
                reason = "its container disappeared"
            elif status.get("reason"):  # the backend knows why (a cluster's node was lost)
                reason = str(status["reason"])
            else:
                detail = self._boxes[sandbox_id].status() if sandbox_id in self._boxes else {}
                reason = f"its container is {status.get('state')}"
                if detail.get("exit_code") is not None:
                    reason += f" (exit code {detail['exit_code']}"
                    reason += (
                        ", killed for using too much memory)" if detail.get("oom_killed") else ")"
                    )
            self._fail(sandbox_id, reason)

    def _sweep_orphans(self, states: dict[str, dict[str, Any]], watched: set[str]) -> None:
        """Remove containers of this daemon whose sandbox is already closed: those a cluster
        node's lost agent left behind, found again when a new agent is back on the node."""
        for sandbox_id, status in states.items():
            if sandbox_id in watched or status.get("state") == "lost":
                continue
            try:
                row = self.store.get(sandbox_id)
            except UnknownSandbox:
                continue  # not ours to judge
            if row.daemon_id != self.daemon_id or row.state not in (S.ERROR, S.DELETED):
                continue  # starting now, or adopted by reconciliation
            with self._lock:
                if sandbox_id in self._boxes:
                    continue
            try:
                box = self.backend.get(sandbox_id)
            except SandboxError:  # gone meanwhile, or its node with it
                continue
            log.info("removing %s, left behind %s", sandbox_id, row.state_reason or "")
            self._quiet_delete(box)
