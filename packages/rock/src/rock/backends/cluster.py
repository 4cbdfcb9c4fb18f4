"""The ray backend: one daemon's sandboxes spread over the machines of a Ray cluster.

Each alive node of the cluster gets a rock agent (`rock.backends.node_agent.NodeAgent`), a
Ray actor pinned to that node that drives the node's own Docker engine. A new sandbox goes
to the node with the most free capacity (CPU and memory its engine has, less what the
sandboxes already placed there may use; then the fewest sandboxes), so warm pools spread
as they fill; every later verb (exec, sessions, files) goes to the node that owns it.

Nodes come and go. The cluster is looked at again on every liveness pass of the daemon
(`states`): a node that joined gets an agent and work from then on; a node whose agent
cannot be reached (the machine, its raylet or the agent died) is lost, and each of its
sandboxes is reported ``lost`` with the reason, which the daemon records as the error of
each one before refilling pools elsewhere. If the node is still there, a new agent is
started on it and the containers the lost one left behind are removed by the daemon.

The sandboxes themselves, and the node each is on, are `rock.backends.cluster_sandbox`.
Without Ray installed, nothing here is imported: the docker backend is the default.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rock.backends._owner import Holder
from rock.backends.base import (
    Backend,
    ImageMissing,
    NodeLost,
    Sandbox,
    SandboxError,
    SandboxNotFound,
)
from rock.backends.cluster_sandbox import Node, RaySandbox
from rock.backends.node_agent import NodeAgent
from rock.errors import EngineUnavailable, RockError
from rock.models import SandboxSpec

log = logging.getLogger("rock.cluster")

T = TypeVar("T")

AGENT_CONCURRENCY = 256
"""Calls one agent serves at once (each running command holds one)."""
DESCRIBE_TIMEOUT = 60.0
"""Seconds a new agent has to start and describe its node."""
RESTART_AFTER = 5.0
"""Seconds before an agent that died is started again on a node that is still alive."""
ENGINE_RETRY_AFTER = 60.0
"""Seconds before a node whose Docker engine did not answer is tried again."""
CLAIM_WAIT = 30.0
"""Seconds a daemon waits for the hold of a daemon id whose holder does not answer (Ray
is ending the actor of a daemon that was killed) before it gives up."""

_Agent: Any = ray.remote(NodeAgent)


class DaemonClaim:
    """The daemon id's hold on the cluster: a named actor of the daemon's own namespace,
    which Ray ends (freeing its name) when the daemon's process ends."""

    NAME = "rock-daemon"

    def __init__(self, holder: str) -> None:
        self.holder = holder

    def who(self) -> str:
        return self.holder


_Claim: Any = ray.remote(num_cpus=0)(DaemonClaim)


class RayBackend(Backend):
    """Sandboxes on the nodes of the Ray cluster at ``address``, labelled as ``daemon_id``'s."""

    name = "ray"

    def __init__(
        self, address: str, *, daemon_id: str = "default", origin: str | None = None
    ) -> None:
        self.daemon_id = daemon_id
        self.origin = origin
        self._claim: Any = None
        _check_reachable(address)
        try:
            ray.init(
                address=address,
                namespace=f"rock-{daemon_id}",
                log_to_driver=False,
                configure_logging=False,
                ignore_reinit_error=True,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EngineUnavailable(
                f"no Ray cluster answers at {address} ({str(exc).splitlines()[0][:160]}); start "
                "one with 'ray start --head' and give its address, or use --backend docker."
            ) from None
        self._lock = threading.RLock()
        self._nodes: dict[str, Node] = {}
        self._lost: dict[str, str] = {}
        """Sandboxes of lost nodes, with the reason, until the daemon has closed them."""
        self._retry_at: dict[str, float] = {}
        """When a node whose agent died, or whose engine did not answer, is tried again."""
        self._refreshing = threading.Lock()
        self.refresh()
        if not self._nodes:
            raise EngineUnavailable(
                f"no node of the Ray cluster at {address} has a Docker engine its rock agent "
                "can reach; start dockerd on the nodes (each node's DOCKER_HOST names its own)."
            )

    def claim(self) -> None:
        """Hold the daemon id on the cluster until :meth:`release`: a second daemon with the
        same id is refused in one sentence while this process lives. The hold of a daemon
        that was killed goes with it: Ray ends its actor, which takes a moment."""
        if self._claim is not None:
            return
        me = Holder.this_process(self.origin or "")
        deadline = time.monotonic() + CLAIM_WAIT
        while True:
            try:
                self._claim = _Claim.options(name=DaemonClaim.NAME).remote(me.describe())
                return
            except ValueError:  # the name is taken in this namespace
                pass
            try:
                holder = ray.get_actor(DaemonClaim.NAME)
                who = str(ray.get(holder.who.remote(), timeout=10))
            except Exception:  # gone, or going: its daemon died
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                who = "its holder does not answer"
            raise RockError(
                f"another rock daemon holds the daemon id {self.daemon_id!r} on this Ray "
                f"cluster ({who}); stop it, or give this daemon another id."
            )

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            with contextlib.suppress(Exception):  # the cluster went away first
                ray.kill(claim)

    # --- the cluster --------------------------------------------------------------------

    def refresh(self) -> None:
        """Start agents on nodes that have none; lose the nodes Ray says are dead (one
        caller at a time: another finds the work under way and goes on)."""
        if not self._refreshing.acquire(blocking=False):
            return
        try:
            self._refresh()
        finally:
            self._refreshing.release()

    def _refresh(self) -> None:
        alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        with self._lock:
            gone = [node_id for node_id in self._nodes if node_id not in alive]
        for node_id in gone:
            self._lose(node_id, "Ray reports the node dead")
        now = time.monotonic()
        for node_id, facts in alive.items():
            with self._lock:
                if node_id in self._nodes or now < self._retry_at.get(node_id, 0.0):
                    continue
            self._join(node_id, facts.get("NodeManagerAddress", "?"))

    def _join(self, node_id: str, address: str) -> None:
        agent = _Agent.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            num_cpus=0,
            max_concurrency=AGENT_CONCURRENCY,
            max_restarts=0,
        ).remote(self.daemon_id, self.origin)
        try:
            facts: dict[str, Any] = ray.get(agent.describe.remote(), timeout=DESCRIBE_TIMEOUT)
        except (RayActorError, RayTaskError, GetTimeoutError) as exc:
            cause = exc.cause if isinstance(exc, RayTaskError) else exc
            log.warning(
                "node %s (%s) gets no sandboxes: its rock agent could not start (%s)",
                node_id[:8],
                address,
                str(cause).splitlines()[0][:200] if str(cause) else type(cause).__name__,
            )
            ray.kill(agent)
            wait = ENGINE_RETRY_AFTER if isinstance(cause, EngineUnavailable) else RESTART_AFTER
            self._retry_at[node_id] = time.monotonic() + wait
            return
        node = Node(
            node_id=node_id,
            name=f"{facts['host']}/{node_id[:8]}",
            agent=agent,
            cpus=facts["cpus"],
            memory_mb=facts["memory_mb"],
            runtimes=facts["runtimes"],
        )
        for sandbox_id, spec, _ in ray.get(agent.list.remote()):
            node.sandboxes[sandbox_id] = spec
        with self._lock:
            self._nodes[node_id] = node
        log.info(
            "node %s joined: engine %s, %s sandboxes",
            node.name,
            facts["engine"],
            len(node.sandboxes),
        )

    def _lose(self, node_id: str, reason: str) -> None:
        with self._lock:
            node = self._nodes.pop(node_id, None)
            if node is None:
                return
            self._retry_at[node_id] = time.monotonic() + RESTART_AFTER
            why = f"its node {node.name} was lost ({reason})"
            for sandbox_id in node.sandboxes:
                self._lost[sandbox_id] = why
        log.warning(
            "node %s lost (%s): %s sandboxes with it", node.name, reason, len(node.sandboxes)
        )
        with contextlib.suppress(Exception):  # already gone
            ray.kill(node.agent)

    def call(self, node: Node, method: str, *args: Any) -> Any:
        """One verb on ``node``'s agent."""
        return self.wait(node, lambda: ray.get(getattr(node.agent, method).remote(*args)))

    def wait(self, node: Node, get: Callable[[], T]) -> T:
        """``get()`` of an agent's answer: its error as rock raised it, a dead agent as
        `NodeLost` (and the node lost)."""
        try:
            return get()
        except RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, RockError | OSError | ValueError):
                raise cause from None
            raise SandboxError(f"node {node.name} failed: {cause}") from None
        except RayActorError as exc:
            self._lose(node.node_id, _death(exc))
            raise NodeLost(
                f"node {node.name} was lost ({_death(exc)}); create a new sandbox."
            ) from None

    def owner(self, sandbox_id: str) -> Node:
        with self._lock:
            for node in self._nodes.values():
                if sandbox_id in node.sandboxes:
                    return node
            reason = self._lost.get(sandbox_id)
        if reason is not None:
            raise NodeLost(f"sandbox {sandbox_id} is gone: {reason}; create a new one.")
        raise SandboxNotFound(f"no sandbox {sandbox_id}; list them with 'rock sandbox ls'.")

    # --- Backend ------------------------------------------------------------------------

    def _place(self, spec: SandboxSpec, *, tried: frozenset[str] = frozenset()) -> Node:
        with self._lock:
            fits = [
                n
                for n in self._nodes.values()
                if (spec.runtime in n.runtimes or spec.runtime == "runc") and n.node_id not in tried
            ]
            if not fits and tried:
                raise ImageMissing(
                    f"image {spec.image} is on no node of the cluster that can start it; "
                    "build or load it on the nodes (each node's engine has its own images)."
                )
            if not fits:
                raise SandboxError(
                    f"no node of the cluster can start a {spec.runtime} sandbox now "
                    f"({len(self._nodes)} nodes take sandboxes); add one, or ask for runtime runc."
                )
            node = max(fits, key=lambda n: n.free(spec))
            node.starting += 1
            if log.isEnabledFor(logging.DEBUG):
                room = ", ".join(f"{n.name} {n.free(spec)[0]:.2f}" for n in fits)
                log.debug("placing a sandbox on node %s (room: %s)", node.name, room)
            return node

    def create(self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None) -> Sandbox:
        spec = spec or SandboxSpec()
        sandbox_id = sandbox_id or "sb-" + secrets.token_hex(6)
        node, container_id = self._on_a_node(spec, "create", spec, sandbox_id)
        with self._lock:
            node.sandboxes[sandbox_id] = spec
        return RaySandbox(self, node, sandbox_id, spec, container_id)

    def check_spec(self, spec: SandboxSpec) -> None:
        """Some node can start ``spec`` (has its runtime and its image)."""
        self._on_a_node(spec, "check_spec", spec)

    def _on_a_node(self, spec: SandboxSpec, method: str, *args: Any) -> tuple[Node, Any]:
        """``method`` on the best node for ``spec``; a node without its image passes it to
        the next best one."""
        tried: set[str] = set()
        while True:
            node = self._place(spec, tried=frozenset(tried))
            try:
                return node, self.call(node, method, *args)
            except ImageMissing:
                tried.add(node.node_id)
            finally:
                with self._lock:
                    node.starting -= 1

    def get(self, sandbox_id: str) -> Sandbox:
        node = self.owner(sandbox_id)
        return RaySandbox(self, node, sandbox_id, node.sandboxes[sandbox_id], None)

    def list(self) -> builtins.list[Sandbox]:
        self.refresh()
        out: builtins.list[Sandbox] = []
        for node in self._alive():
            try:
                found = self.call(node, "list")
            except NodeLost:
                continue
            with self._lock:
                node.sandboxes.update({sid: spec for sid, spec, _ in found})
            out += [RaySandbox(self, node, sid, spec, None, origin) for sid, spec, origin in found]
        return out

    def states(self) -> dict[str, dict[str, Any]]:
        self.refresh()
        out: dict[str, dict[str, Any]] = {}
        for node in self._alive():
            try:
                found = self.call(node, "states")
            except NodeLost:
                continue
            with self._lock:
                for sandbox_id in found:
                    if sandbox_id not in node.sandboxes:  # left by a lost agent of this node
                        node.sandboxes[sandbox_id] = SandboxSpec()
            out.update(found)
        with self._lock:
            for sandbox_id, reason in self._lost.items():
                out.setdefault(sandbox_id, {"state": "lost", "reason": reason})
        return out

    def images(self) -> builtins.list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for node in self._alive():
            for image in self.call(node, "images"):
                seen.setdefault(image["id"], image)
        return builtins.list(seen.values())

    def build_image(self, context: bytes, dockerfile: str, name: str) -> dict[str, Any]:
        """Build on the node with the most room (sandboxes of the image are placed there:
        placement tries the nodes until one has it)."""
        node = self._place(SandboxSpec())
        try:
            built: dict[str, Any] = self.call(node, "build_image", context, dockerfile, name)
        finally:
            with self._lock:
                node.starting -= 1
        return built

    def remove_image(self, tag: str) -> None:
        for node in self._alive():  # (a snapshot is on the node of its sandbox)
            with contextlib.suppress(Exception):
                self.call(node, "remove_image", tag)

    def _alive(self) -> builtins.list[Node]:
        with self._lock:
            return builtins.list(self._nodes.values())

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._lost.pop(sandbox_id, None)
            for node in self._nodes.values():
                node.sandboxes.pop(sandbox_id, None)


def _check_reachable(address: str) -> None:
    """Refuse at once an address where nothing listens (Ray itself retries for minutes)."""
    if address == "auto" or address.startswith("ray://") or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise EngineUnavailable(
            f"no Ray cluster answers at {address} ({getattr(exc, 'strerror', None) or exc}); "
            "start one with 'ray start --head' and give its HOST:PORT, or use --backend docker."
        ) from None


def _death(exc: RayActorError) -> str:
    text = str(exc).strip().splitlines()
    first = next((line for line in text if "died" in line or "dead" in line), None)
    return (first or "its rock agent died").strip()[:200]
