"""The rock agent of one machine of a Ray cluster: a Ray actor pinned to its node that
drives that node's Docker engine for the daemon (`rock.backends.cluster`).

It holds a `DockerBackend` on the engine its node's environment names (``DOCKER_HOST``, as
``ray start`` was given it), keeps the node's sandboxes and sessions, and answers the
daemon's verbs by sandbox id. Everything it takes and returns is plain data or rock's
pydantic models, so that it crosses Ray's object store; its errors are rock's own exceptions,
which the daemon re-raises as they are.
"""

from __future__ import annotations

import os
import queue
import secrets
import socket
import threading
from collections.abc import Iterator
from typing import Any

from rock.backends.base import Sandbox, SandboxNotFound, Session
from rock.backends.docker import DockerBackend
from rock.engine import connect, engine_host
from rock.errors import EngineUnavailable
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec, SessionResult


class NodeAgent:
    """One node's sandboxes; made by the daemon as a threaded Ray actor on that node."""

    def __init__(self, daemon_id: str, origin: str | None = None) -> None:
        self._boxes: dict[str, Sandbox] = {}
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._refused: EngineUnavailable | None = None
        try:
            client = connect()
        except EngineUnavailable as exc:  # said by describe(), the daemon's first call
            self._refused = exc
            return
        client.api.timeout = 300
        self.backend = DockerBackend(client, daemon_id=daemon_id, origin=origin)

    # --- the node ---------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """What placement needs: the engine's CPUs and memory, its runtimes, where it is;
        `EngineUnavailable` when the node's engine does not answer."""
        if self._refused is not None:
            raise self._refused
        info = self.backend.client.info()
        return {
            "host": socket.gethostname(),
            "engine": engine_host(),
            "cpus": float(info.get("NCPU") or 1),
            "memory_mb": int(info.get("MemTotal") or 1 << 30) >> 20,
            "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        }

    def pid(self) -> int:
        """This agent's process (the tests kill it to lose the node)."""
        return os.getpid()

    def check_spec(self, spec: SandboxSpec) -> None:
        self.backend.check_spec(spec)

    def images(self) -> list[dict[str, Any]]:
        return self.backend.images()

    def build_image(self, context: bytes, dockerfile: str, name: str) -> dict[str, Any]:
        """Build an image on this node's engine from a context tar (see the daemon's
        ``build_image``); rock's ImageBuildError or InvalidRequest when it cannot."""
        from rock.bench.images import ImageBuilder, TaskImageError, build_context_tar
        from rock.errors import ImageBuildError, InvalidRequest

        try:
            done = build_context_tar(ImageBuilder(self.backend.client), context, dockerfile, name)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        except TaskImageError as exc:
            tail = " | ".join(exc.log.strip().splitlines()[-3:])
            raise ImageBuildError(f"{exc}" + (f" (last lines: {tail})" if tail else "")) from None
        return done.model_dump()

    def remove_image(self, tag: str) -> None:
        self.backend.remove_image(tag)

    def states(self) -> dict[str, dict[str, Any]]:
        return self.backend.states()

    def list(self) -> list[tuple[str, SandboxSpec, str | None]]:
        """Each sandbox of the daemon's on this node: its id, spec and origin."""
        boxes = self.backend.list()
        with self._lock:
            for box in boxes:
                self._boxes.setdefault(box.id, box)
        return [(box.id, box.spec, box.origin) for box in boxes]

    # --- one sandbox ------------------------------------------------------------------

    def create(self, spec: SandboxSpec, sandbox_id: str) -> str | None:
        """Start the sandbox; return its container id."""
        box = self.backend.create(spec, sandbox_id=sandbox_id)
        with self._lock:
            self._boxes[sandbox_id] = box
        return getattr(getattr(box, "container", None), "id", None)

    def get(self, sandbox_id: str) -> SandboxSpec:
        return self._box(sandbox_id).spec

    def _box(self, sandbox_id: str) -> Sandbox:
        with self._lock:
            box = self._boxes.get(sandbox_id)
        if box is None:
            box = self.backend.get(sandbox_id)  # SandboxNotFound when it is not here
            with self._lock:
                self._boxes[sandbox_id] = box
        return box

    def run(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        return self._box(sandbox_id).run(request)

    def run_streaming(self, sandbox_id: str, request: ExecRequest) -> Iterator[Any]:
        """Yield ``(stream, bytes)`` as the command writes, then its `ExecResult`."""
        box = self._box(sandbox_id)
        chunks: queue.Queue[tuple[int, bytes] | None] = queue.Queue()
        outcome: list[ExecResult | BaseException] = []

        def work() -> None:
            try:
                outcome.append(box.run_streaming(request, lambda s, b: chunks.put((s, b))))
            except BaseException as exc:  # handed to the caller below
                outcome.append(exc)
            finally:
                chunks.put(None)

        threading.Thread(target=work, daemon=True).start()
        while (chunk := chunks.get()) is not None:
            yield chunk
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        yield outcome[0]

    def interrupt(self, sandbox_id: str, tag: str | None) -> int:
        return self._box(sandbox_id).interrupt(tag)

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self._box(sandbox_id).read_file(path)

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int) -> None:
        self._box(sandbox_id).write_file(path, data, mode)

    def put_archive(self, sandbox_id: str, directory: str, data: bytes) -> None:
        self._box(sandbox_id).put_archive(directory, data)

    def get_archive(self, sandbox_id: str, path: str) -> bytes:
        return self._box(sandbox_id).get_archive(path)

    def set_network(self, sandbox_id: str, on: bool) -> None:
        self._box(sandbox_id).set_network(on)

    def pause(self, sandbox_id: str) -> None:
        self._box(sandbox_id).pause()

    def resume(self, sandbox_id: str) -> None:
        self._box(sandbox_id).resume()

    def snapshot(self, sandbox_id: str, tag: str) -> str:
        return self._box(sandbox_id).snapshot(tag)

    def status(self, sandbox_id: str) -> dict[str, Any]:
        try:
            return self._box(sandbox_id).status()
        except SandboxNotFound:
            return {"state": "deleted"}

    def stop(self, sandbox_id: str) -> None:
        self._box(sandbox_id).stop()

    def delete(self, sandbox_id: str) -> None:
        with self._lock:
            box = self._boxes.pop(sandbox_id, None)
        if box is None:
            try:
                box = self.backend.get(sandbox_id)
            except SandboxNotFound:
                return
        box.delete()

    # --- sessions ---------------------------------------------------------------------

    def open_session(self, sandbox_id: str, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> str:
        session = self._box(sandbox_id).session(max_output_bytes=max_output_bytes)
        session_id = secrets.token_hex(6)
        with self._lock:
            self._sessions[session_id] = session
        return session_id

    def session_run(self, session_id: str, command: str, timeout: float | None) -> SessionResult:
        return self._session(session_id).run(command, timeout=timeout)

    def session_interrupt(self, session_id: str) -> None:
        self._session(session_id).interrupt()

    def session_close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def _session(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SandboxNotFound(f"no session {session_id} on this node; open a new one.")
        return session
