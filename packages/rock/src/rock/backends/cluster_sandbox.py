"""The ray backend's sandboxes, each on one node of the cluster, and the node as placement
sees it; every verb of a sandbox is a call to its node's rock agent, made through the
backend (which loses the node when its agent is gone).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import ray

from rock.backends.base import NodeLost, Sandbox, SandboxError
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec, SessionResult

T = TypeVar("T")


@dataclass
class Node:
    """One node of the cluster as placement sees it."""

    node_id: str
    name: str
    agent: Any
    cpus: float
    memory_mb: int
    runtimes: list[str]
    sandboxes: dict[str, SandboxSpec] = field(default_factory=dict)
    starting: int = 0

    def free(self, spec: SandboxSpec) -> tuple[float, int]:
        """How much room the node has left for ``spec`` (higher is better)."""
        cpus = sum(s.cpus for s in self.sandboxes.values()) + spec.cpus * (self.starting + 1)
        memory = sum(s.memory_mb for s in self.sandboxes.values())
        memory += spec.memory_mb * (self.starting + 1)
        share = min(1 - cpus / self.cpus, 1 - memory / self.memory_mb)
        return share, -(len(self.sandboxes) + self.starting)


class NodeCalls(Protocol):
    """What a sandbox uses of the backend (`rock.backends.cluster.RayBackend`)."""

    def call(self, node: Node, method: str, *args: Any) -> Any:
        """One verb on ``node``'s agent."""

    def wait(self, node: Node, get: Callable[[], T]) -> T:
        """``get()`` of an agent's answer, a dead agent as `NodeLost`."""

    def forget(self, sandbox_id: str) -> None:
        """Drop a deleted sandbox from the backend's books."""


class RaySandbox(Sandbox):
    """A sandbox on one node of the cluster: every verb is a call to that node's agent."""

    def __init__(
        self,
        backend: NodeCalls,
        node: Node,
        sandbox_id: str,
        spec: SandboxSpec,
        container_id: str | None,
        origin: str | None = None,
    ) -> None:
        self._backend = backend
        self._node = node
        self.id = sandbox_id
        self.spec = spec
        self.container_id = container_id
        self.placement = node.name
        self.origin = origin

    def _call(self, method: str, *args: Any) -> Any:
        return self._backend.call(self._node, method, self.id, *args)

    def run(self, request: ExecRequest) -> ExecResult:
        result: ExecResult = self._call("run", request)
        return result

    def run_streaming(
        self, request: ExecRequest, on_output: Callable[[int, bytes], None] | None
    ) -> ExecResult:
        if on_output is None:
            return self.run(request)
        stream = self._node.agent.run_streaming.options(num_returns="streaming").remote(
            self.id, request
        )

        def pump() -> ExecResult:
            for ref in stream:
                item = ray.get(ref)
                if isinstance(item, ExecResult):
                    return item
                on_output(*item)
            raise SandboxError(f"node {self._node.name} ended a command without its result.")

        return self._backend.wait(self._node, pump)

    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> RaySession:
        return RaySession(self, self._call("open_session", max_output_bytes))

    def read_file(self, path: str) -> bytes:
        data: bytes = self._call("read_file", path)
        return data

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._call("write_file", path, data, mode)

    def put_archive(self, directory: str, data: bytes) -> None:
        self._call("put_archive", directory, data)

    def get_archive(self, path: str) -> bytes:
        data: bytes = self._call("get_archive", path)
        return data

    def status(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = self._call("status")
        except NodeLost as exc:
            return {"state": "lost", "reason": str(exc)}
        return state

    def interrupt(self, tag: str | None = None) -> int:
        count: int = self._call("interrupt", tag)
        return count

    def set_network(self, on: bool) -> None:
        self._call("set_network", on)

    def pause(self) -> None:
        self._call("pause")

    def resume(self) -> None:
        self._call("resume")

    def snapshot(self, tag: str) -> str:
        image: str = self._call("snapshot", tag)
        return image

    def stop(self) -> None:
        self._call("stop")

    def delete(self) -> None:
        """Remove the container; a sandbox of a lost node is only forgotten (its container
        went with the node, or is removed when an agent is back on it)."""
        with contextlib.suppress(NodeLost):
            self._call("delete")
        self._backend.forget(self.id)


class RaySession:
    """A persistent shell in a sandbox of the cluster, kept by the owning node's agent."""

    def __init__(self, box: RaySandbox, session_id: str) -> None:
        self._box = box
        self._id = session_id

    def _call(self, method: str, *args: Any) -> Any:
        return self._box._backend.call(self._box._node, method, self._id, *args)

    def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        result: SessionResult = self._call("session_run", command, timeout)
        return result

    def interrupt(self) -> None:
        self._call("session_interrupt")

    def close(self) -> None:
        self._call("session_close")
