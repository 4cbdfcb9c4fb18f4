"""envd on rock: the in-sandbox half of E2B's API that the ``e2b`` SDK speaks for commands and
files (:mod:`rock.daemon.e2b` serves the REST half and the shapes both share).

Every call names its sandbox in ``E2b-Sandbox-Id`` and carries that sandbox's access token.
Commands are :mod:`rock.daemon.e2b_processes`'s (Start, Connect, List, stdin and pty); here,
files through rock's checked copies and small shell scripts (ListDir, Stat, MakeDir, Move,
Remove), and a folder's changes by polling its listing (CreateWatcher and the WatchDir stream).
"""

from __future__ import annotations

import asyncio
import posixpath
import secrets
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from rock.backends._copy import STAGE_PREFIX
from rock.backends.base import PathMissing
from rock.daemon.e2b_gate import (
    Failed,
    Gate,
    connect_error,
    end_of_stream,
    envelope,
    read_json,
    rest,
    rpc,
    unenvelope,
)
from rock.daemon.e2b_processes import process_routes
from rock.daemon.manager import SandboxManager
from rock.errors import RockError
from rock.models import ExecRequest, ExecResult


def envd_routes(app: FastAPI, gate: Gate) -> None:
    """Add envd's routes to the daemon's ``app``."""
    _file_routes(app, gate)
    _filesystem_routes(app, gate)
    _filesystem_change_routes(app, gate)
    process_routes(app, gate)
    _watch_routes(app, gate)
    _watch_stream_route(app, gate)


WATCH_POLL_SEC = 0.5
"""How often the async WatchDir stream looks at its folder."""


def _file_routes(app: FastAPI, gate: Gate) -> None:
    """envd's plain HTTP file routes: read and write."""

    @app.get("/files", include_in_schema=False)
    async def read(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            path = _path(request.query_params.get("path", ""))
            try:
                data = await run_in_threadpool(gate.manager.read_file, sandbox_id, path)
            except PathMissing:
                raise Failed(404, f"path '{path}' does not exist") from None
            return Response(data, media_type="application/octet-stream")

        return await rest(answer)

    @app.post("/files", include_in_schema=False)
    async def write(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            files: list[tuple[str, bytes]] = []
            if request.headers.get("content-type", "").startswith("multipart/form-data"):
                form = await request.form()
                for part in form.getlist("file"):
                    if isinstance(part, str):
                        continue
                    files.append((_path(part.filename or ""), await part.read()))
            else:
                files.append((_path(request.query_params.get("path", "")), await request.body()))
            if not files:
                raise Failed(400, "no file was sent; send a multipart field named 'file'.")
            user = request.query_params.get("username")
            written = []
            for path, data in files:
                await run_in_threadpool(gate.manager.write_file, sandbox_id, path, data, 0o644)
                if user and user != "root":
                    chown = ExecRequest(command=["chown", user, path], timeout=30)
                    await run_in_threadpool(gate.manager.exec, sandbox_id, chown)
                written.append({"name": posixpath.basename(path), "type": "file", "path": path})
            return JSONResponse(written)

        return await rest(answer)


def _filesystem_routes(app: FastAPI, gate: Gate) -> None:
    """envd's filesystem RPCs that read: ListDir, Stat."""

    @app.post("/filesystem.Filesystem/ListDir", include_in_schema=False)
    async def list_dir(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await read_json(request)
            path = _path(str(body.get("path", "")))
            depth = int(body.get("depth") or 1)
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, path, depth)
            return JSONResponse({"entries": entries})

        return await rpc(answer)

    @app.post("/filesystem.Filesystem/Stat", include_in_schema=False)
    async def stat(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            path = _path(str((await read_json(request)).get("path", "")))
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, path, 0)
            return JSONResponse({"entry": entries[0]})

        return await rpc(answer)


def _filesystem_change_routes(app: FastAPI, gate: Gate) -> None:
    """envd's filesystem RPCs that change: MakeDir, Move, Remove."""

    @app.post("/filesystem.Filesystem/Move", include_in_schema=False)
    async def move(request: Request) -> Response:
        """``files.rename``: the source must exist, and the destination's folder; the
        destination is replaced as ``mv`` replaces it."""

        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await read_json(request)
            source = _path(str(body.get("source", "")))
            target = _path(str(body.get("destination", "")))
            script = 'test -e "$1" -o -L "$1" || exit 3; mv -T -- "$1" "$2"'
            done = await run_in_threadpool(
                gate.manager.exec,
                sandbox_id,
                ExecRequest(command=["sh", "-c", script, "mv", source, target], timeout=60),
            )
            if done.exit_code == 3:
                raise Failed(404, f"path '{source}' does not exist", "not_found")
            if done.exit_code != 0:
                raise Failed(400, done.stderr_text.strip() or "mv failed", "invalid_argument")
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, target, 0)
            return JSONResponse({"entry": entries[0]})

        return await rpc(answer)

    @app.post("/filesystem.Filesystem/MakeDir", include_in_schema=False)
    async def make_dir(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id, path, made = await _on_path(
                gate, request, "test -e {p} && exit 3; mkdir -p {p}"
            )
            if made.exit_code == 3:
                raise Failed(409, f"path '{path}' already exists", "already_exists")
            if made.exit_code != 0:
                raise Failed(400, made.stderr_text.strip() or "mkdir failed", "invalid_argument")
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, path, 0)
            return JSONResponse({"entry": entries[0]})

        return await rpc(answer)

    @app.post("/filesystem.Filesystem/Remove", include_in_schema=False)
    async def remove(request: Request) -> Response:
        async def answer() -> Response:
            _, path, done = await _on_path(
                gate, request, "test -e {p} -o -L {p} || exit 3; rm -rf {p}"
            )
            if done.exit_code == 3:
                raise Failed(404, f"path '{path}' does not exist", "not_found")
            return JSONResponse({})

        return await rpc(answer)


_SNAPSHOT = (
    'p=$1; [ -d "$p" ] || exit 3; '
    'find "$p" -mindepth 1 $2 -printf "%y %s %T@ %m %P\\n" 2>/dev/null; exit 0'
)
"""What a watch compares: each entry under the folder (to depth 1 unless recursive) with its
kind, size, modification time and mode."""


@dataclass
class _Watch:
    """A folder watched by polling: its entries when last looked at."""

    sandbox_id: str
    path: str
    recursive: bool
    seen: dict[str, tuple[str, str, str]] = field(default_factory=dict)


def _look(gate: Gate, watch: _Watch) -> list[dict[str, Any]]:
    """The events since the last look (CREATE, WRITE, CHMOD, REMOVE; a rename shows as a
    REMOVE and a CREATE, as polling sees it), names relative to the folder."""
    depth = "" if watch.recursive else "-maxdepth 1"
    done = gate.manager.exec(
        watch.sandbox_id,
        ExecRequest(command=["sh", "-c", _SNAPSHOT, "rock-watch", watch.path, depth], timeout=30),
    )
    if done.exit_code == 3:
        raise Failed(404, f"path '{watch.path}' does not exist", "not_found")
    now: dict[str, tuple[str, str, str]] = {}
    for line in done.stdout_text.splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5 and not posixpath.basename(parts[4]).startswith(STAGE_PREFIX):
            now[parts[4]] = (parts[1], parts[2], parts[3])  # (not a copy's file in flight)
    events = []
    for name, (size, mtime, mode) in sorted(now.items()):
        before = watch.seen.get(name)
        if before is None:
            events.append({"name": name, "type": "EVENT_TYPE_CREATE"})
        elif before[:2] != (size, mtime):
            events.append({"name": name, "type": "EVENT_TYPE_WRITE"})
        elif before[2] != mode:
            events.append({"name": name, "type": "EVENT_TYPE_CHMOD"})
    events += [{"name": n, "type": "EVENT_TYPE_REMOVE"} for n in sorted(watch.seen.keys() - now)]
    watch.seen = now
    return events


def _watch_routes(app: FastAPI, gate: Gate) -> None:
    """envd's directory watches, by polling the folder's listing: the sync SDK's
    CreateWatcher, GetWatcherEvents and RemoveWatcher."""
    watches: dict[str, _Watch] = {}

    @app.post("/filesystem.Filesystem/CreateWatcher", include_in_schema=False)
    async def create_watcher(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await read_json(request)
            watch = _Watch(
                sandbox_id, _path(str(body.get("path", ""))), bool(body.get("recursive"))
            )
            await run_in_threadpool(_look, gate, watch)  # the starting point
            watcher_id = f"w-{secrets.token_hex(8)}"
            watches[watcher_id] = watch
            return JSONResponse({"watcherId": watcher_id})

        return await rpc(answer)

    @app.post("/filesystem.Filesystem/GetWatcherEvents", include_in_schema=False)
    async def watcher_events(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            watch = watches.get(str((await read_json(request)).get("watcherId") or ""))
            if watch is None or watch.sandbox_id != sandbox_id:
                raise Failed(404, "watcher not found", "not_found")
            return JSONResponse({"events": await run_in_threadpool(_look, gate, watch)})

        return await rpc(answer)

    @app.post("/filesystem.Filesystem/RemoveWatcher", include_in_schema=False)
    async def remove_watcher(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            key = str((await read_json(request)).get("watcherId") or "")
            if key not in watches or watches[key].sandbox_id != sandbox_id:
                raise Failed(404, "watcher not found", "not_found")
            del watches[key]
            return JSONResponse({})

        return await rpc(answer)


def _watch_stream_route(app: FastAPI, gate: Gate) -> None:
    """The async SDK's directory watch: the WatchDir stream."""

    @app.post("/filesystem.Filesystem/WatchDir", include_in_schema=False)
    async def watch_dir(request: Request) -> Response:
        try:
            sandbox_id = gate.sandbox_of(request)
            body = unenvelope(await request.body())
            watch = _Watch(
                sandbox_id, _path(str(body.get("path", ""))), bool(body.get("recursive"))
            )
            await run_in_threadpool(_look, gate, watch)
        except Failed as failed:
            return connect_error(failed)

        async def events() -> AsyncIterator[bytes]:
            yield envelope({"start": {}})  # (a oneof: its member is the field)
            while True:
                await asyncio.sleep(WATCH_POLL_SEC)
                try:
                    found = await run_in_threadpool(_look, gate, watch)
                except (Failed, RockError) as exc:
                    yield end_of_stream("not_found", str(exc))
                    return
                for event in found:
                    yield envelope({"filesystem": event})
                if not found:
                    yield envelope({"keepalive": {}})

        return StreamingResponse(events(), media_type="application/connect+json")


async def _on_path(gate: Gate, request: Request, script: str) -> tuple[str, str, ExecResult]:
    """Run ``script`` (``{p}`` the request's quoted ``path``) in the call's sandbox: the
    sandbox, the path and what the script did."""
    sandbox_id = gate.sandbox_of(request)
    path = _path(str((await read_json(request)).get("path", "")))
    command = script.format(p=shlex.quote(path))
    done = await run_in_threadpool(
        gate.manager.exec, sandbox_id, ExecRequest(command=command, timeout=60)
    )
    return sandbox_id, path, done


def _path(path: str) -> str:
    if not path.startswith("/"):
        raise Failed(
            400, f"path '{path}' is not absolute; give an absolute path.", "invalid_argument"
        )
    return posixpath.normpath(path)


_TYPES = {"f": "FILE_TYPE_FILE", "d": "FILE_TYPE_DIRECTORY", "l": "FILE_TYPE_SYMLINK"}


_FIND = (
    'p={path}; [ -e "$p" ] || [ -L "$p" ] || exit 3; '
    'find "$p" -mindepth {low} -maxdepth {high} '
    "-printf '%y\\t%s\\t%m\\t%u\\t%g\\t%T@\\t%l\\t%M\\t%p\\n' 2>/dev/null; exit 0"
)


def _entries(
    manager: SandboxManager, sandbox_id: str, path: str, depth: int
) -> list[dict[str, Any]]:
    """EntryInfo objects of ``path``'s tree to ``depth`` (0: the path itself)."""
    low, high = (0, 0) if depth == 0 else (1, depth)
    script = _FIND.format(path=shlex.quote(path), low=low, high=high)
    done = manager.exec(sandbox_id, ExecRequest(command=script, timeout=60))
    if done.exit_code == 3:
        raise Failed(404, f"path '{path}' does not exist", "not_found")
    entries = []
    for line in done.stdout_text.splitlines():
        kind, size, mode, owner, group, mtime, target, perms, full = line.split("\t", 8)
        mode_bits = int(mode, 8) | (1 << 31 if kind == "d" else 0)
        entry: dict[str, Any] = {
            "name": posixpath.basename(full) or full,
            "type": _TYPES.get(kind, "FILE_TYPE_FILE"),
            "path": full,
            "size": int(size),
            "mode": mode_bits,
            "permissions": perms,
            "owner": owner,
            "group": group,
            "modifiedTime": datetime.fromtimestamp(float(mtime), UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        }
        if kind == "l":
            entry["isSymlink"] = True
            entry["symlinkTarget"] = target
        entries.append(entry)
    return entries
