"""envd on rock: the in-sandbox half of E2B's API that the ``e2b`` SDK speaks for commands and
files (:mod:`rock.daemon.e2b` serves the REST half and the shapes both share).

Every call names its sandbox in ``E2b-Sandbox-Id`` and carries that sandbox's access token.
Commands run through rock's exec: streamed over Connect (Start; Connect to follow one
already running; List), with stdin (a FIFO in the sandbox that SendInput appends to and
CloseStdin ends) and in a terminal (``script``'s, resized with ``stty``); files through
rock's checked copies and small shell scripts (ListDir, Stat, MakeDir, Move, Remove); a
folder's changes by polling its listing (CreateWatcher and the WatchDir stream).
"""

from __future__ import annotations

import asyncio
import base64
import posixpath
import secrets
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from rock.backends._copy import STAGE_PREFIX
from rock.backends.base import PathMissing
from rock.daemon.e2b_gate import (
    MISSING,
    Failed,
    Gate,
    Process,
    connect_error,
    end_of_stream,
    envelope,
    read_json,
    rest,
    rpc,
    unenvelope,
)
from rock.daemon.manager import SandboxManager
from rock.errors import RockError
from rock.models import ExecRequest, ExecResult


def envd_routes(app: FastAPI, gate: Gate) -> None:
    """Add envd's routes to the daemon's ``app``."""
    _file_routes(app, gate)
    _filesystem_routes(app, gate)
    _filesystem_change_routes(app, gate)
    _process_routes(app, gate)
    _process_follow_routes(app, gate)
    _process_input_routes(app, gate)
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


_READY = 'i=0; while [ ! -e "$1.pid" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; '
"""Wait (up to 30 s) until the command's FIFO is made: Start answers as soon as the command
is launched, and a client may send input before the sandbox has run that far (seen in CI:
the input made a plain file where the FIFO was to be)."""
_READY_TTY = _READY.replace("$1.pid", "$1.tty")
_STDIN_HOLDER = r"""
f=$1; shift
mkfifo -m 600 "$f" || exit 126
# a writer held open by a process of its own, so the command sees no end of input between
# two inputs; CloseStdin ends it (SIGUSR1), the last writer goes, the command reads its end.
# (A trap in this shell cut its wait short, and a command ending in that moment was
# reported as 138 or 255, not its own status.)
sleep 2147483647 3<>"$f" </dev/null >/dev/null 2>&1 &
writer=$!; disown "$writer"  # (its end is no job of this shell to report)
echo "$writer" > "$f.new" && mv -f "$f.new" "$f.pid"  # (last: input and CloseStdin wait)
"$@" <"$f"
rc=$?
kill "$writer" 2>/dev/null
rm -f "$f" "$f.pid"
exit $rc
"""
"""How a command started with ``stdin=True`` runs: reading a FIFO in the sandbox, which
each SendInput appends to (a command of its own, so any backend serves it) and CloseStdin
ends."""


_PTY_HOLDER = r"""
f=$1 rows=$2 cols=$3; shift 3
mkfifo -m 600 "$f" || exit 126
sleep 2147483647 3<>"$f" </dev/null >/dev/null 2>&1 &
writer=$!; disown "$writer"
echo "$writer" > "$f.new" && mv -f "$f.new" "$f.pid"
cmd=$(printf '%q ' "$@")
script -qfec "tty > $f.tty; stty rows $rows cols $cols; exec $cmd" /dev/null <"$f"
rc=$?
kill "$writer" 2>/dev/null
rm -f "$f" "$f.pid" "$f.tty"
exit $rc
"""
"""How a pty runs: the program in a terminal ``script`` makes (util-linux, in any Debian
image), its input the FIFO as above, its size set with ``stty`` (Update resizes it the same
way, and the kernel tells the program with SIGWINCH)."""


def _process_input_routes(app: FastAPI, gate: Gate) -> None:
    """envd's process RPCs that feed a command's stdin: SendInput and CloseStdin."""

    @app.post("/process.Process/SendInput", include_in_schema=False)
    async def send_input(request: Request) -> Response:
        async def answer() -> Response:
            body = await read_json(request)
            sandbox_id, process = _fed(gate, request, body)
            given = body.get("input") or {}
            data = base64.b64decode(str(given.get("stdin") or given.get("pty") or ""))
            feed = ExecRequest(
                command=[
                    "sh",
                    "-c",
                    _READY + '[ -p "$1" ] && cat >> "$1"',
                    "rock-input",
                    str(process.stdin),
                ],
                stdin=data,
                timeout=30,
            )
            await run_in_threadpool(gate.manager.exec, sandbox_id, feed)
            return JSONResponse({})

        return await rpc(answer)

    @app.post("/process.Process/Update", include_in_schema=False)
    async def update(request: Request) -> Response:
        """``pty.resize``: the terminal's rows and columns."""

        async def answer() -> Response:
            body = await read_json(request)
            sandbox_id, process = _fed(gate, request, body)
            size = (body.get("pty") or {}).get("size") or {}
            if not process.pty or not size:
                raise Failed(400, "only a pty's size can be updated.", "invalid_argument")
            rows, cols = int(size.get("rows") or 24), int(size.get("cols") or 80)
            resize = ExecRequest(
                command=["sh", "-c", _READY_TTY + f'stty -F "$(cat "$1.tty")" rows {rows} cols {cols}',
                         "rock-resize", str(process.stdin)],
                timeout=30,
            )  # fmt: skip
            await run_in_threadpool(gate.manager.exec, sandbox_id, resize)
            return JSONResponse({})

        return await rpc(answer)

    @app.post("/process.Process/CloseStdin", include_in_schema=False)
    async def close_stdin(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id, process = _fed(gate, request, await read_json(request))
            close = ExecRequest(
                command=[
                    "sh",
                    "-c",
                    _READY + 'kill -USR1 "$(cat "$1.pid")"',
                    "rock-close",
                    str(process.stdin),
                ],
                timeout=30,
            )
            await run_in_threadpool(gate.manager.exec, sandbox_id, close)
            return JSONResponse({})

        return await rpc(answer)


def _fed(gate: Gate, request: Request, body: dict[str, Any]) -> tuple[str, Process]:
    """The sandbox and the running process an input call names, started with stdin."""
    sandbox_id = gate.sandbox_of(request)
    pid = int((body.get("process") or {}).get("pid") or 0)
    process = gate.processes.get((sandbox_id, pid))
    if process is None:
        raise Failed(404, f"process with pid {pid} not found", "not_found")
    if process.stdin is None:
        raise Failed(
            400,
            f"process {pid} was started without stdin; start it with stdin=True to send it input.",
            "invalid_argument",
        )
    return sandbox_id, process


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


def _process_follow_routes(app: FastAPI, gate: Gate) -> None:
    """envd's process RPCs about processes already started: List and Connect."""

    @app.post("/process.Process/List", include_in_schema=False)
    async def list_processes(request: Request) -> Response:
        """``commands.list``: the processes started through Start that still run."""

        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            rows = [
                {"config": p.config, "pid": pid, **({"tag": p.tag} if p.tag else {})}
                for (box, pid), p in sorted(gate.processes.items())
                if box == sandbox_id
            ]
            return JSONResponse({"processes": rows})

        return await rpc(answer)

    @app.post("/process.Process/Connect", include_in_schema=False)
    async def connect(request: Request) -> Response:
        """``commands.connect(pid)``: the process's output so far, then as it comes, then
        its end, as Start streams them."""
        try:
            sandbox_id = gate.sandbox_of(request)
            selector = unenvelope(await request.body()).get("process") or {}
            pid = int(selector.get("pid") or 0)
            process = gate.processes.get((sandbox_id, pid))
            if process is None:
                raise Failed(404, f"process with pid {pid} not found", "not_found")
        except Failed as failed:
            return connect_error(failed)
        except (ValueError, TypeError) as exc:
            return connect_error(
                Failed(400, f"the request is not valid: {exc}", "invalid_argument")
            )
        return StreamingResponse(
            _follow(process.follow(), sandbox_id, pid, None),
            media_type="application/connect+json",
        )


def _process_routes(app: FastAPI, gate: Gate) -> None:
    """envd's process RPCs that start and stop: Start (streamed) and SendSignal."""

    @app.post("/process.Process/SendSignal", include_in_schema=False)
    async def send_signal(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await read_json(request)
            pid = int((body.get("process") or {}).get("pid") or 0)
            stopped = await run_in_threadpool(gate.manager.interrupt, sandbox_id, f"e2b-{pid}")
            for _ in range(30):  # a process just started may not be running in the sandbox yet
                if stopped or (sandbox_id, pid) not in gate.processes:
                    break
                await asyncio.sleep(0.1)
                stopped = await run_in_threadpool(gate.manager.interrupt, sandbox_id, f"e2b-{pid}")
            if not stopped:
                raise Failed(404, f"process with pid {pid} not found", "not_found")
            return JSONResponse({})

        return await rpc(answer)

    @app.post("/process.Process/Start", include_in_schema=False)
    async def start(request: Request) -> Response:
        try:
            sandbox_id = gate.sandbox_of(request)
            message = unenvelope(await request.body())
            config = message.get("process") or {}
            argv = [str(config.get("cmd") or "")] + [str(a) for a in config.get("args") or []]
            if not argv[0]:
                raise Failed(400, "the process has no cmd.", "invalid_argument")
            given = argv
            pid = next(gate.pids)
            pty = message.get("pty")
            fifo = f"/tmp/.rock-e2b-stdin-{pid}" if message.get("stdin") or pty else None
            if pty:  # a terminal (script's), reading a FIFO that SendInput writes
                size = pty.get("size") or {}
                rows, cols = str(int(size.get("rows") or 24)), str(int(size.get("cols") or 80))
                argv = ["bash", "-c", _PTY_HOLDER, "rock-pty", str(fifo), rows, cols, *argv]
            elif fifo is not None:  # the command reads a FIFO that SendInput writes
                argv = ["bash", "-c", _STDIN_HOLDER, "rock-stdin", fifo, *argv]
            limit = request.headers.get("connect-timeout-ms")
            exec_request = ExecRequest(
                command=argv,
                env={str(k): str(v) for k, v in (config.get("envs") or {}).items()},
                cwd=config.get("cwd") or None,
                user=_user(request),
                timeout=int(limit) / 1000 if limit and int(limit) > 0 else None,
                tag=f"e2b-{pid}",
            )
        except Failed as failed:
            return connect_error(failed)
        except (ValueError, ValidationError) as exc:
            return connect_error(
                Failed(400, f"the request is not valid: {exc}", "invalid_argument")
            )
        started = {
            "cmd": given[0],
            "args": given[1:],
            "envs": exec_request.env,
            **({"cwd": exec_request.cwd} if exec_request.cwd else {}),
        }
        process = Process(config=started, tag=message.get("tag") or None, stdin=fifo, pty=bool(pty))
        return StreamingResponse(
            _process_events(gate, sandbox_id, exec_request, pid, process),
            media_type="application/connect+json",
        )


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


async def _process_events(
    gate: Gate, sandbox_id: str, request: ExecRequest, pid: int, process: Process
) -> AsyncIterator[bytes]:
    """Start's Connect stream of one process: start, its output as it comes, its end (the
    same events go to whoever connects to it meanwhile)."""
    manager = gate.manager
    loop = asyncio.get_running_loop()

    def publish(kind: str, value: Any) -> None:
        process.publish(kind, value)
        if kind in ("end", "failed"):
            gate.processes.pop((sandbox_id, pid), None)

    out = "pty" if process.pty else "stdout"

    def on_output(stream: int, data: bytes) -> None:
        loop.call_soon_threadsafe(publish, out if stream == 1 else "stderr", data)

    def work() -> None:
        try:
            result = manager.exec(sandbox_id, request, on_output)
        except Exception as exc:  # the sandbox's failure travels as the stream's error
            loop.call_soon_threadsafe(publish, "failed", exc)
        else:
            loop.call_soon_threadsafe(publish, "end", result)

    gate.processes[(sandbox_id, pid)] = process
    queue = process.follow()
    # a client that goes away leaves the command running, as E2B does
    loop.run_in_executor(None, work)
    async for chunk in _follow(queue, sandbox_id, pid, request.timeout):
        yield chunk


async def _follow(
    queue: asyncio.Queue[tuple[str, Any]], sandbox_id: str, pid: int, timeout: float | None
) -> AsyncIterator[bytes]:
    """The Connect events of a followed process."""
    yield envelope({"event": {"start": {"pid": pid}}})
    while True:
        kind, value = await queue.get()
        if kind in ("stdout", "stderr", "pty"):
            data = base64.b64encode(value).decode()
            yield envelope({"event": {"data": {kind: data}}})
        elif kind == "end":
            if value.timed_out:
                yield end_of_stream(
                    "deadline_exceeded",
                    f"the command ran past its timeout of {timeout or 0:g} s and was killed",
                )
                return
            code = value.exit_code
            end: dict[str, Any] = {
                "exitCode": code,
                "exited": True,
                "status": f"exit status {code}",
            }
            if code != 0:
                end["error"] = f"exit status {code}"
            yield envelope({"event": {"end": end}})
            yield end_of_stream()
            return
        else:
            missing = isinstance(value, MISSING)
            yield end_of_stream(
                "unavailable" if missing else "internal",
                f"sandbox {sandbox_id} was not found" if missing else str(value),
            )
            return


def _path(path: str) -> str:
    if not path.startswith("/"):
        raise Failed(
            400, f"path '{path}' is not absolute; give an absolute path.", "invalid_argument"
        )
    return posixpath.normpath(path)


def _user(request: Request) -> str | None:
    """The user of an envd call: ``Authorization: Basic base64("<user>:")``."""
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:]).decode()
    except (ValueError, UnicodeDecodeError):
        raise Failed(
            401, "the Authorization header is not valid Basic.", "unauthenticated"
        ) from None
    user = decoded.partition(":")[0]
    return None if user in ("", "root") else user


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
