"""``rock sandbox``: create, list, use, copy into and remove the daemon's sandboxes."""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import re
import secrets
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, get_args

import click

from rock.cli._common import (
    BadInput,
    Progress,
    age,
    daemon_options,
    echo_json,
    echo_table,
    exit_status,
    main,
    pairs,
    spec_options,
    when,
)
from rock.client import Client
from rock.models import ExecRequest, SandboxStateName

T = TypeVar("T")

_STATES = get_args(SandboxStateName)
_REMOTE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$")


@main.group()
def sandbox() -> None:
    """Create, use and remove sandboxes of the daemon."""


@sandbox.command("create")
@spec_options
@click.option("--pool", default=None, help="Take the sandbox from this warm pool.")
@click.option("--no-pool", is_flag=True, help="Always start a new sandbox, even if a pool fits.")
@click.option("--json", "as_json", is_flag=True, help="Print the sandbox's info as JSON.")
@daemon_options
def sandbox_create(
    client: Client, spec_fields: dict[str, Any], pool: str | None, no_pool: bool, as_json: bool
) -> None:
    """Start a sandbox (or take one from a warm pool) and print its id."""
    if pool is not None and no_pool:
        raise BadInput("--pool and --no-pool contradict each other; pass one of them.")
    what = f"pool {pool}" if pool else spec_fields.get("image", "the base image")
    with Progress(f"getting a sandbox from {what}"):
        box = client.create(pool=pool, use_pools=not no_pool, **spec_fields)
    if as_json:
        echo_json(box.info)
    else:
        click.echo(box.id)


@sandbox.command("fork")
@click.argument("sandbox_id", metavar="ID")
@click.option(
    "--count",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="How many sandboxes start from the one snapshot.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the forks' info as JSON.")
@daemon_options
def sandbox_fork(client: Client, sandbox_id: str, count: int, as_json: bool) -> None:
    """Start new sandboxes from ID's files as they are now; print their ids, one a line.

    A fork has ID's spec (limits, runtime, environment, working directory) and a copy of its
    file system; running processes and a shell session's state are not carried. What either
    does afterwards, the other does not see."""
    with Progress(f"forking {sandbox_id}"):
        boxes = client.sandbox(sandbox_id).fork(count)
    if as_json:
        echo_json([box.info for box in boxes])
    else:
        for box in boxes:
            click.echo(box.id)


@sandbox.command("ls")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(_STATES),
    help="Only sandboxes in this state (repeatable).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    callback=pairs("KEY"),
    metavar="KEY=VALUE",
    help="Only sandboxes with this label (repeatable; all must match).",
)
@click.option("--pool", default=None, help="Only sandboxes of this pool.")
@click.option("--all", "include_deleted", is_flag=True, help="Include deleted sandboxes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@daemon_options
def sandbox_ls(
    client: Client,
    states: tuple[str, ...],
    labels: dict[str, str],
    pool: str | None,
    include_deleted: bool,
    as_json: bool,
) -> None:
    """List the daemon's sandboxes, oldest first."""
    boxes = client.list(
        state=list(states) or None, labels=labels, pool=pool, include_deleted=include_deleted
    )
    if as_json:
        echo_json(boxes)
        return
    echo_table(
        ["ID", "STATE", "POOL", "IMAGE", "AGE", "REASON"],
        (
            [b.id, b.state, b.pool or "-", b.image, age(b.created_at), b.state_reason or ""]
            for b in boxes
        ),
    )


@sandbox.command("exec")
@click.argument("sandbox_id", metavar="ID")
@click.argument("command", nargs=-1, required=True)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds before the command is killed (0: no limit).",
)
@click.option("--cwd", default=None, help="Working directory of the command.")
@click.option(
    "--env",
    multiple=True,
    callback=pairs("KEY"),
    metavar="KEY=VALUE",
    help="Environment variable for the command (repeatable).",
)
@click.option("--stdin", "forward_stdin", is_flag=True, help="Send this process's stdin to it.")
@daemon_options
def sandbox_exec(
    client: Client,
    sandbox_id: str,
    command: tuple[str, ...],
    timeout: float,
    cwd: str | None,
    env: dict[str, str],
    forward_stdin: bool,
) -> None:
    """Run COMMAND in sandbox ID and exit with its exit code (124 when it timed out).

    One argument is a bash command line ('ls -l | wc -l'); several are an argv run
    without a shell. Put '--' before a command that has options of its own:
    rock sandbox exec sb-1234 -- ls -la /
    """
    stdin = sys.stdin.buffer.read() if forward_stdin else None
    box = client.sandbox(sandbox_id)
    tag = "cli-" + secrets.token_hex(6)
    request = ExecRequest(
        command=command[0] if len(command) == 1 else list(command),
        timeout=timeout or None,
        cwd=cwd,
        env=env,
        stdin=stdin,
        tag=tag,
    )
    stopped = False
    try:
        result = interruptible(lambda: box.run(request), lambda: box.interrupt(tag))
    except Interrupted as interrupted:
        result, stopped = interrupted.result, True
    for out, data in ((sys.stdout, result.stdout), (sys.stderr, result.stderr)):
        out.flush()
        out.buffer.write(data)
        out.buffer.flush()
    if result.stdout_truncated:
        click.echo(
            f"rock: stdout was cut to {len(result.stdout)} of {result.stdout_total} bytes.",
            err=True,
        )
    if result.stderr_truncated:
        click.echo(
            f"rock: stderr was cut to {len(result.stderr)} of {result.stderr_total} bytes.",
            err=True,
        )
    if stopped:  # what it wrote before Ctrl-C is above
        click.echo("rock: interrupted; the command was stopped in the sandbox.", err=True)
        sys.exit(130)
    if result.oom_killed:
        click.echo("rock: the command was killed for using too much memory.", err=True)
    if result.timed_out:
        click.echo(f"rock: the command timed out after {timeout:g}s and was killed.", err=True)
        sys.exit(124)
    sys.exit(exit_status(result.exit_code))


@sandbox.command("shell")
@click.argument("sandbox_id", metavar="ID")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds each line may run before it is interrupted (0: no limit).",
)
@daemon_options
def sandbox_shell(client: Client, sandbox_id: str, timeout: float) -> None:
    """A line-by-line shell in sandbox ID: each line runs in one persistent bash session.

    cd, variables and functions carry over between lines. 'exit' or end of input closes
    the session; the exit status is the last command's. Lines can be piped in:
    printf 'cd /tmp\\npwd\\n' | rock sandbox shell sb-1234
    """
    box = client.sandbox(sandbox_id)
    stdin = sys.stdin
    interactive = stdin.isatty()
    out = sys.stdout.buffer
    prompt = f"rock:{sandbox_id}$ "
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing for input())
    status = 0
    with box.session() as session:
        while True:
            if interactive:
                try:
                    line = input(prompt)
                except EOFError:
                    click.echo("", err=True)
                    break
                except KeyboardInterrupt:
                    click.echo("", err=True)
                    continue
            else:
                line = stdin.readline()
                if not line:
                    break
            command = line.rstrip("\r\n")
            words = command.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "exit" and len(words) <= 2:
                if len(words) == 2 and words[1].isdigit():
                    status = int(words[1])
                break
            try:
                result = interruptible(
                    functools.partial(session.run, command, timeout=timeout or None),
                    session.interrupt,
                )
            except Interrupted as stopped:
                result = stopped.result  # the shell stays, as after Ctrl-C in bash
                click.echo("^C", err=True)
            out.write(result.output)
            out.flush()
            if result.output_truncated:
                click.echo("rock: the output was cut.", err=True)
            if result.session_restarted:
                click.echo(
                    "rock: the shell had to be restarted; its cwd and variables are lost.",
                    err=True,
                )
            if result.timed_out:
                click.echo(f"rock: the command timed out after {timeout:g}s.", err=True)
            status = 124 if result.timed_out else exit_status(result.exit_code)
    sys.exit(status)


class Interrupted(Exception):
    """Ctrl-C came while a command ran in the sandbox, and it was stopped there."""

    def __init__(self, result: Any) -> None:
        super().__init__("interrupted")
        self.result = result


def interruptible(call: Callable[[], T], stop: Callable[[], object]) -> T:
    """``call()`` (a command in the sandbox) in a thread of its own, so that Ctrl-C here
    stops the command there (``stop``) instead of leaving it running; then
    :class:`Interrupted` carries what the stopped command returned."""
    done: list[T] = []
    failed: list[BaseException] = []
    finished = threading.Event()  # not Thread.join: a join cut by Ctrl-C can lose the thread

    def work() -> None:
        try:
            done.append(call())
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)
        finally:
            finished.set()

    threading.Thread(target=work, daemon=True).start()
    interrupted = False
    while not finished.is_set():
        try:
            finished.wait(0.1)
        except KeyboardInterrupt:
            if not interrupted:
                interrupted = True
                stop()
    if failed:
        raise failed[0]
    if interrupted:
        raise Interrupted(done[0])
    return done[0]


def _split_remote(arg: str) -> tuple[str, str] | None:
    match = _REMOTE.match(arg)
    return (match.group(1), match.group(2)) if match else None


@sandbox.command("cp")
@click.argument("src")
@click.argument("dst")
@daemon_options
def sandbox_cp(client: Client, src: str, dst: str) -> None:
    """Copy files or trees between this machine and a sandbox, like docker cp.

    Exactly one of SRC and DST is ID:PATH with an absolute PATH. A directory copied to a
    path that does not exist becomes that path; copied to an existing directory (or a
    path ending in '/'), it goes inside it under its own name. Modes are kept.

    \b
    rock sandbox cp ./project sb-1234:/work/project
    rock sandbox cp sb-1234:/work/project/out ./out
    """
    remote_src, remote_dst = _split_remote(src), _split_remote(dst)
    if (remote_src is None) == (remote_dst is None):
        raise BadInput(
            f"exactly one of {src} and {dst} must be ID:PATH (a path in a sandbox); write it "
            "like rock sandbox cp ./dir sb-1234:/work/dir."
        )
    sandbox_id, path = remote_src or remote_dst  # type: ignore[misc]
    if not path.startswith("/"):
        raise BadInput(
            f"{sandbox_id}:{path} needs an absolute path in the sandbox, like {sandbox_id}:/work."
        )
    box = client.sandbox(sandbox_id)
    if remote_dst is not None:
        local = Path(src)
        if not local.exists():
            raise BadInput(f"{src} does not exist on this machine; check the path.")
        name = local.resolve().name
        if path.endswith("/") or (
            path != "/" and box.exec(["test", "-d", path], timeout=30).exit_code == 0
        ):
            path = posixpath.join(path, name)
        with Progress(f"copying {src} to {sandbox_id}:{path}"):
            box.upload(local, path.rstrip("/") or "/")
    else:
        local = Path(dst)
        name = posixpath.basename(path.rstrip("/"))
        if name and (dst.endswith(os.sep) or local.is_dir()):
            local = local / name
        with Progress(f"copying {sandbox_id}:{path} to {local}"):
            box.download(path, local)


@sandbox.command("pause")
@click.argument("sandbox_id", metavar="ID")
@daemon_options
def sandbox_pause(client: Client, sandbox_id: str) -> None:
    """Freeze a sandbox in use: its processes stop where they are, memory and files kept; it
    does not expire while paused. Commands are refused until 'rock sandbox resume ID'."""
    client.sandbox(sandbox_id).pause()
    click.echo(f"{sandbox_id} paused")


@sandbox.command("resume")
@click.argument("sandbox_id", metavar="ID")
@daemon_options
def sandbox_resume(client: Client, sandbox_id: str) -> None:
    """Let a paused sandbox go on; its timeout starts again."""
    client.sandbox(sandbox_id).resume()
    click.echo(f"{sandbox_id} resumed")


@sandbox.command("rm")
@click.argument("sandbox_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the removed sandboxes as JSON.")
@daemon_options
def sandbox_rm(client: Client, sandbox_ids: tuple[str, ...], as_json: bool) -> None:
    """Delete sandboxes. Unknown ids are reported (exit 1); the others are still removed."""
    from rock.backends.base import SandboxNotFound

    removed, missing = [], 0
    for sandbox_id in sandbox_ids:
        try:
            removed.append(client.delete(sandbox_id))
        except SandboxNotFound as exc:
            click.echo(f"rock: {exc}", err=True)
            missing += 1
    if as_json:
        echo_json(removed)
    else:
        for info in removed:
            click.echo(info.id)
    sys.exit(1 if missing else 0)


def _head(text: str, lines: int = 3, width: int = 160) -> list[str]:
    kept = text.splitlines()[:lines]
    return [line if len(line) <= width else line[: width - 3] + "..." for line in kept]


@sandbox.command("logs")
@click.argument("sandbox_id", metavar="ID")
@click.option(
    "--limit",
    type=click.IntRange(1, 10000),
    default=100,
    show_default=True,
    help="Most recent commands to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the sandbox and its commands.")
@daemon_options
def sandbox_logs(client: Client, sandbox_id: str, limit: int, as_json: bool) -> None:
    """Show a sandbox's state history and the commands run in it, oldest first."""
    info = client.info(sandbox_id)
    commands = list(reversed(client.logs(sandbox_id, limit)))
    if as_json:
        echo_json({"sandbox": info, "commands": commands})
        return
    click.echo(f"sandbox {info.id} ({info.state}, image {info.image})")
    click.echo("history:")
    for step in info.history:
        move = f"{step.from_state or '-'} -> {step.to_state}"
        click.echo(f"  {when(step.at)}  {move:<22}  {step.reason or ''}".rstrip())
    click.echo(f"commands ({len(commands)}):")
    for record in commands:
        code = "timeout" if record.timed_out else f"exit {record.exit_code}"
        click.echo(
            f"  {when(record.started_at)}  {code:<8} {record.duration_sec:7.2f}s  {record.command}"
        )
        for label, head in (("out", record.stdout_head), ("err", record.stderr_head)):
            for line in _head(head):
                click.echo(f"      {label}| {line}")
