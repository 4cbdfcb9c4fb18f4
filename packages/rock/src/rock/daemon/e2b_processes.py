"""envd's processes on rock: the process RPCs of E2B's in-sandbox API that the ``e2b`` SDK
speaks for commands (:mod:`rock.daemon.e2b_envd` serves the file and folder RPCs).

Commands run through rock's exec, streamed over Connect: Start (its output as it comes, then
its end), SendSignal, List and Connect (to follow one already running). A command started
with stdin reads a FIFO in the sandbox that SendInput appends to and CloseStdin ends; a pty
is ``script``'s terminal reading such a FIFO, resized with ``stty`` (Update). The shell that
holds those FIFOs open is kept here as it runs (:data:`_STDIN_HOLDER`, :data:`_PTY_HOLDER`).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from rock.daemon.e2b_gate import (
    MISSING,
    Failed,
    Gate,
    Process,
    connect_error,
    end_of_stream,
    envelope,
    read_json,
    rpc,
    unenvelope,
)
from rock.models import ExecRequest


def process_routes(app: FastAPI, gate: Gate) -> None:
    """Add envd's process RPCs to the daemon's ``app``."""
    _signal_route(app, gate)
    _start_route(app, gate)
    _process_follow_routes(app, gate)
    _stdin_routes(app, gate)
    _pty_route(app, gate)


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


def _stdin_routes(app: FastAPI, gate: Gate) -> None:
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


def _pty_route(app: FastAPI, gate: Gate) -> None:
    """envd's process RPC that resizes a pty: Update."""

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


def _signal_route(app: FastAPI, gate: Gate) -> None:
    """envd's process RPC that stops a command: SendSignal."""

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


def _start_route(app: FastAPI, gate: Gate) -> None:
    """envd's process RPC that starts a command: Start (streamed)."""

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
