"""The ``rock`` command: the daemon (``serve``), its sandboxes, pools and images, and ``doctor``.

Every verb that talks to the daemon takes ``--home`` (where ``rock serve`` left its
address and token) and ``--url``; errors are one sentence on stderr after ``rock:``,
exit 1; bad input is exit 2.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import itertools
import json
import os
import posixpath
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import click
from pydantic import BaseModel, ValidationError

from rock import __version__
from rock.backends._shell import SessionError
from rock.errors import RockError

_STATES = ("pending", "starting", "ready", "busy", "stopped", "deleted", "error")
_POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_REMOTE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$")


def _fail(exc: Exception) -> None:
    click.echo(f"rock: {exc}", err=True)
    sys.exit(1)


class BadInput(click.ClickException):
    """Input the command cannot use: ``rock: <sentence>`` on stderr, exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"rock: {self.message}", err=True)


def _validation_sentence(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid " + "; ".join(parts) + "; fix the option and run it again."


class _RockGroup(click.Group):
    """The root group: every rock error below it becomes one sentence and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (RockError, SessionError) as exc:
            _fail(exc)
        except ValidationError as exc:
            _fail(RockError(_validation_sentence(exc)))
        return None


# --- small helpers ----------------------------------------------------------------------


class _Progress:
    """A spinner line on stderr for work that may take seconds.

    It shows only after ``delay`` seconds and only when stderr is a terminal, so piped
    and ``--json`` output never sees it.
    """

    _FRAMES = "|/-\\"

    def __init__(self, text: str, *, delay: float = 0.3) -> None:
        self.text = text
        self._delay = delay
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False
        self._stream = sys.stderr

    def update(self, text: str) -> None:
        self.text = text

    def __enter__(self) -> Self:
        self._stream = sys.stderr
        if self._stream.isatty():
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def _spin(self) -> None:
        if self._done.wait(self._delay):
            return
        for frame in itertools.cycle(self._FRAMES):
            self._stream.write(f"\r\033[K{frame} {self.text}")
            self._stream.flush()
            self._shown = True
            if self._done.wait(0.1):
                return

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            self._stream.write("\r\033[K")
            self._stream.flush()


def _pairs(what: str) -> Callable[[click.Context, click.Parameter, Sequence[str]], dict[str, str]]:
    """A click callback turning repeated ``KEY=VALUE`` options into a dict."""

    def parse(_: click.Context, param: click.Parameter, values: Sequence[str]) -> dict[str, str]:
        flag = param.opts[0] if param.opts else f"--{param.name}"
        out: dict[str, str] = {}
        for item in values:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise BadInput(
                    f"{flag} {item} is not {what}=VALUE; write it like {flag} {key or what}=value."
                )
            out[key] = value
        return out

    return parse


def _json(value: BaseModel | list[BaseModel] | dict[str, Any]) -> None:
    def plain(item: Any) -> Any:
        if isinstance(item, BaseModel):
            return item.model_dump(mode="json")
        if isinstance(item, list):
            return [plain(i) for i in item]
        if isinstance(item, dict):
            return {k: plain(v) for k, v in item.items()}
        return item

    click.echo(json.dumps(plain(value), indent=2))


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        line = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True))
        click.echo(f"{line}  {row[-1]}".rstrip() if line else row[-1])


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _age(moment: datetime) -> str:
    seconds = max(0, int((datetime.now(UTC) - _utc(moment)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _when(moment: datetime) -> str:
    return _utc(moment).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _exit_status(code: int) -> int:
    """An exit status for this process: negative codes (signals) as the shell shows them."""
    return 128 - code if code < 0 else min(code, 255)


# --- shared options -----------------------------------------------------------------------

_home_option = click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="rock home, where 'rock serve' keeps its token and address (default: $ROCK_HOME or ~/.rock).",
)


def _daemon_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --home, --url and --retries; hand the command a ``client`` instead."""

    @functools.wraps(func)
    def wrapper(*args: Any, home: Path | None, url: str | None, retries: int, **kwargs: Any) -> Any:
        from rock.client import Client

        with Client(url, home=home, retries=retries) as client:
            return func(*args, client=client, **kwargs)

    for option in reversed(
        [
            _home_option,
            click.option(
                "--url",
                default=None,
                metavar="URL",
                help="The daemon's URL (default: $ROCK_URL, else the one in <home>/daemon.json).",
            ),
            click.option(
                "--retries",
                type=click.IntRange(min=0),
                default=2,
                show_default=True,
                help="Times to retry when the daemon does not answer.",
            ),
        ]
    ):
        wrapper = option(wrapper)
    return wrapper


_SPEC_OPTIONS = [
    click.option("--image", default=None, help="Image to start (default: rock/base:bookworm)."),
    click.option(
        "--memory", "memory_mb", type=click.IntRange(min=1), default=None, help="Memory limit, MiB."
    ),
    click.option(
        "--cpus", type=click.FloatRange(min=0, min_open=True), default=None, help="CPU limit."
    ),
    click.option(
        "--pids", "pids_limit", type=click.IntRange(min=1), default=None, help="Process limit."
    ),
    click.option(
        "--network",
        type=click.Choice(["none", "bridge"]),
        default=None,
        help="'none' (the default) cuts the sandbox off; 'bridge' opens it.",
    ),
    click.option("--workdir", default=None, help="Working directory of commands."),
    click.option(
        "--env",
        multiple=True,
        callback=_pairs("KEY"),
        metavar="KEY=VALUE",
        help="Environment variable of every command (repeatable).",
    ),
    click.option(
        "--label",
        "labels",
        multiple=True,
        callback=_pairs("KEY"),
        metavar="KEY=VALUE",
        help="Label recorded with the sandbox (repeatable).",
    ),
    click.option(
        "--ttl",
        "ttl_sec",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Delete the sandbox this many seconds after it is created.",
    ),
    click.option(
        "--idle-timeout",
        "idle_timeout_sec",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Delete the sandbox after this many seconds without a command.",
    ),
]
_SPEC_FIELDS = (
    "image",
    "memory_mb",
    "cpus",
    "pids_limit",
    "network",
    "workdir",
    "env",
    "labels",
    "ttl_sec",
    "idle_timeout_sec",
)


def _spec_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the sandbox spec options; hand the command ``spec_fields``, only those given."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _SPEC_FIELDS}
        fields = {k: v for k, v in given.items() if v is not None and v != {}}
        return func(*args, spec_fields=fields, **kwargs)

    for option in reversed(_SPEC_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


# --- the root -----------------------------------------------------------------------------


@click.group(cls=_RockGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rock")
def main() -> None:
    """rock: Docker sandboxes for making, training and evaluating terminal agents."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json: bool) -> None:
    """Report whether a Docker engine answers, its version, and whether the base image exists.

    Exits 0 when both are there, 1 otherwise.
    """
    from rock.engine import START_HINT, probe
    from rock.images.base import BASE_IMAGE, inspect_base

    engine, client = probe()
    base = inspect_base(client) if client is not None else None
    ok = engine.reachable and base is not None and base.exists
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": ok,
                    "engine": engine.model_dump(),
                    "base_image": base.model_dump() if base else None,
                },
                indent=2,
            )
        )
        sys.exit(0 if ok else 1)
    if engine.reachable:
        click.echo(
            f"engine      : answers at {engine.host} (Docker {engine.server_version}, API {engine.api_version})"
        )
        click.echo(
            f"              {engine.os}, storage {engine.storage_driver}, cgroup v{engine.cgroup_version}"
        )
    else:
        click.echo(f"engine      : NO engine answers at {engine.host}; {START_HINT}")
    if base is None:
        click.echo(f"base image  : unknown ({BASE_IMAGE}; needs an engine to check)")
    elif base.exists:
        click.echo(f"base image  : {base.tag} present ({base.id}, {base.size_mb} MB)")
    else:
        click.echo(f"base image  : {base.tag} MISSING; build it with 'rock image build-base'")
    click.echo("status      : ok" if ok else "status      : not ready")
    sys.exit(0 if ok else 1)


# --- serve --------------------------------------------------------------------------------


def _parse_pools(_: click.Context, __: click.Parameter, values: Sequence[str]) -> dict[str, Any]:
    from rock.models import PoolSettings, SandboxSpec

    pools: dict[str, PoolSettings] = {}
    for item in values:
        name, sep, rest = item.partition("=")
        parts = rest.split(":", 2)
        if not sep or len(parts) < 2 or not all(p.strip().isdigit() for p in parts[:2]):
            raise BadInput(
                f"--pool {item} is not NAME=MIN:MAX[:IMAGE]; write it like "
                f"{name or 'warm'}=2:8 or {name or 'warm'}=2:8:rock/base:bookworm."
            )
        if not _POOL_NAME.match(name):
            raise BadInput(
                f"--pool {item}: {name!r} is not a pool name; use letters, digits, '_', '.' "
                "and '-', starting with a letter or digit."
            )
        min_idle, max_total = int(parts[0]), int(parts[1])
        if min_idle > max_total or max_total < 1:
            raise BadInput(
                f"--pool {item}: MIN ({min_idle}) must not exceed MAX ({max_total}) and MAX must be "
                "at least 1; write it like warm=2:8."
            )
        spec = SandboxSpec(image=parts[2]) if len(parts) == 3 and parts[2] else SandboxSpec()
        try:
            pools[name] = PoolSettings(spec=spec, min_idle=min_idle, max_total=max_total)
        except ValidationError as exc:
            raise BadInput(f"--pool {item}: {_validation_sentence(exc)}") from None
    return pools


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@main.command()
@_home_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=7480,
    show_default=True,
    help="Port to listen on (0 picks a free one; see <home>/daemon.json).",
)
@click.option(
    "--backend",
    type=click.Choice(["docker", "local"]),
    default="docker",
    show_default=True,
    help="docker containers, or local subprocesses in scratch directories.",
)
@click.option(
    "--database-url",
    default=None,
    metavar="URL",
    help="SQLAlchemy URL of the state store (default: SQLite in <home>).",
)
@click.option(
    "--daemon-id",
    default="default",
    show_default=True,
    help="Name of this daemon; its containers carry it as a label.",
)
@click.option(
    "--pool",
    "pools",
    multiple=True,
    callback=_parse_pools,
    metavar="NAME=MIN:MAX[:IMAGE]",
    help="A warm pool to keep (repeatable), e.g. warm=2:8.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds running commands get to finish at shutdown.",
)
@click.option(
    "--cleanup", is_flag=True, help="Delete every sandbox at shutdown, even with TTL left."
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a --host that is not a loopback address (anyone with the token runs commands).",
)
def serve(
    home: Path | None,
    host: str,
    port: int,
    backend: str,
    database_url: str | None,
    daemon_id: str,
    pools: dict[str, Any],
    grace: float,
    cleanup: bool,
    log_level: str,
    allow_remote: bool,
) -> None:
    """Run the rock daemon until SIGTERM or Ctrl-C.

    It listens on HOST:PORT, writes its address to <home>/daemon.json and its bearer
    token to <home>/token, and keeps the given warm pools filled.
    """
    from rock.daemon.server import ServeConfig
    from rock.daemon.server import serve as run_daemon
    from rock.store import default_home

    if not _is_loopback(host) and not allow_remote:
        raise BadInput(
            f"--host {host} is not a loopback address, and the daemon's API runs commands "
            "for anyone who holds its token; pass --allow-remote if you mean to expose it."
        )
    config = ServeConfig(
        home=home or default_home(),
        host=host,
        port=port,
        backend=backend,
        database_url=database_url,
        daemon_id=daemon_id,
        pools=pools,
        grace_sec=grace,
        cleanup=cleanup,
        log_level=log_level,
    )
    run_daemon(config)


# --- sandboxes ----------------------------------------------------------------------------


@main.group()
def sandbox() -> None:
    """Create, use and remove sandboxes of the daemon."""


@sandbox.command("create")
@_spec_options
@click.option("--pool", default=None, help="Take the sandbox from this warm pool.")
@click.option("--no-pool", is_flag=True, help="Always start a new sandbox, even if a pool fits.")
@click.option("--json", "as_json", is_flag=True, help="Print the sandbox's info as JSON.")
@_daemon_options
def sandbox_create(
    client: Any, spec_fields: dict[str, Any], pool: str | None, no_pool: bool, as_json: bool
) -> None:
    """Start a sandbox (or take one from a warm pool) and print its id."""
    if pool is not None and no_pool:
        raise BadInput("--pool and --no-pool contradict each other; pass one of them.")
    what = f"pool {pool}" if pool else spec_fields.get("image", "the base image")
    with _Progress(f"getting a sandbox from {what}"):
        box = client.create(pool=pool, use_pools=not no_pool, **spec_fields)
    if as_json:
        _json(box.info)
    else:
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
    callback=_pairs("KEY"),
    metavar="KEY=VALUE",
    help="Only sandboxes with this label (repeatable; all must match).",
)
@click.option("--pool", default=None, help="Only sandboxes of this pool.")
@click.option("--all", "include_deleted", is_flag=True, help="Include deleted sandboxes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_daemon_options
def sandbox_ls(
    client: Any,
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
        _json(boxes)
        return
    _table(
        ["ID", "STATE", "POOL", "IMAGE", "AGE", "REASON"],
        (
            [b.id, b.state, b.pool or "-", b.image, _age(b.created_at), b.state_reason or ""]
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
    callback=_pairs("KEY"),
    metavar="KEY=VALUE",
    help="Environment variable for the command (repeatable).",
)
@click.option("--stdin", "forward_stdin", is_flag=True, help="Send this process's stdin to it.")
@_daemon_options
def sandbox_exec(
    client: Any,
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
    result = box.exec(
        command[0] if len(command) == 1 else list(command),
        timeout=timeout or None,
        cwd=cwd,
        env=env,
        stdin=stdin,
    )
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
    if result.oom_killed:
        click.echo("rock: the command was killed for using too much memory.", err=True)
    if result.timed_out:
        click.echo(f"rock: the command timed out after {timeout:g}s and was killed.", err=True)
        sys.exit(124)
    sys.exit(_exit_status(result.exit_code))


@sandbox.command("shell")
@click.argument("sandbox_id", metavar="ID")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds each line may run before it is interrupted (0: no limit).",
)
@_daemon_options
def sandbox_shell(client: Any, sandbox_id: str, timeout: float) -> None:
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
            result = session.run(command, timeout=timeout or None)
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
            status = 124 if result.timed_out else _exit_status(result.exit_code)
    sys.exit(status)


def _split_remote(arg: str) -> tuple[str, str] | None:
    match = _REMOTE.match(arg)
    return (match.group(1), match.group(2)) if match else None


@sandbox.command("cp")
@click.argument("src")
@click.argument("dst")
@_daemon_options
def sandbox_cp(client: Any, src: str, dst: str) -> None:
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
        with _Progress(f"copying {src} to {sandbox_id}:{path}"):
            box.upload(local, path.rstrip("/") or "/")
    else:
        local = Path(dst)
        name = posixpath.basename(path.rstrip("/"))
        if name and (dst.endswith(os.sep) or local.is_dir()):
            local = local / name
        with _Progress(f"copying {sandbox_id}:{path} to {local}"):
            box.download(path, local)


@sandbox.command("rm")
@click.argument("sandbox_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the removed sandboxes as JSON.")
@_daemon_options
def sandbox_rm(client: Any, sandbox_ids: tuple[str, ...], as_json: bool) -> None:
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
        _json(removed)
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
@_daemon_options
def sandbox_logs(client: Any, sandbox_id: str, limit: int, as_json: bool) -> None:
    """Show a sandbox's state history and the commands run in it, oldest first."""
    info = client.info(sandbox_id)
    commands = list(reversed(client.logs(sandbox_id, limit)))
    if as_json:
        _json({"sandbox": info, "commands": commands})
        return
    click.echo(f"sandbox {info.id} ({info.state}, image {info.image})")
    click.echo("history:")
    for step in info.history:
        move = f"{step.from_state or '-'} -> {step.to_state}"
        click.echo(f"  {_when(step.at)}  {move:<22}  {step.reason or ''}".rstrip())
    click.echo(f"commands ({len(commands)}):")
    for record in commands:
        code = "timeout" if record.timed_out else f"exit {record.exit_code}"
        click.echo(
            f"  {_when(record.started_at)}  {code:<8} {record.duration_sec:7.2f}s  {record.command}"
        )
        for label, head in (("out", record.stdout_head), ("err", record.stderr_head)):
            for line in _head(head):
                click.echo(f"      {label}| {line}")


# --- pools --------------------------------------------------------------------------------


@main.group()
def pool() -> None:
    """Warm pools: started sandboxes kept waiting so that create takes milliseconds."""


def _pool_line(info: Any) -> str:
    return (
        f"pool {info.name}: {info.idle} idle, {info.in_use} in use, {info.starting} starting "
        f"(min idle {info.min_idle}, max {info.max_total}, image {info.spec.image})"
    )


@pool.command("set")
@click.argument("name")
@click.option("--min-idle", type=click.IntRange(0, 1000), default=None, help="Sandboxes kept idle.")
@click.option(
    "--max-total", type=click.IntRange(1, 10000), default=None, help="Most sandboxes alive."
)
@_spec_options
@click.option("--wait", is_flag=True, help="Wait until min-idle sandboxes are idle.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds --wait waits.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pool as JSON.")
@_daemon_options
def pool_set(
    client: Any,
    name: str,
    min_idle: int | None,
    max_total: int | None,
    spec_fields: dict[str, Any],
    wait: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Create pool NAME or change it; options not given keep the pool's current values."""
    from rock.backends.base import PoolNotFound
    from rock.models import SandboxSpec

    if not _POOL_NAME.match(name):
        raise BadInput(
            f"{name!r} is not a pool name; use letters, digits, '_', '.' and '-', "
            "starting with a letter or digit."
        )
    try:
        current = client.pool(name)
    except PoolNotFound:
        current = None
    spec = (current.spec if current else SandboxSpec()).model_copy(update=spec_fields)
    spec = SandboxSpec.model_validate(spec.model_dump())  # check the merged values
    if min_idle is None:
        min_idle = current.min_idle if current else 1
    if max_total is None:
        max_total = current.max_total if current else max(8, min_idle)
    info = client.set_pool(name, spec, min_idle=min_idle, max_total=max_total)
    if wait:
        deadline = time.monotonic() + timeout
        with _Progress(f"pool {name}: filling") as progress:
            while info.idle < info.min_idle:
                if time.monotonic() > deadline:
                    raise RockError(
                        f"pool {name} has {info.idle} of {info.min_idle} idle sandboxes after "
                        f"{timeout:g}s; check 'rock pool ls' and the daemon's log."
                    )
                time.sleep(0.2)
                info = client.pool(name)
                progress.update(
                    f"pool {name}: {info.idle}/{info.min_idle} idle, {info.starting} starting"
                )
    if as_json:
        _json(info)
    else:
        click.echo(_pool_line(info))


@pool.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_daemon_options
def pool_ls(client: Any, as_json: bool) -> None:
    """List the daemon's pools with their idle, in-use and starting counts."""
    pools = client.pools()
    if as_json:
        _json(pools)
        return
    _table(
        ["NAME", "IDLE", "IN USE", "STARTING", "MIN IDLE", "MAX", "IMAGE"],
        (
            [p.name, p.idle, p.in_use, p.starting, p.min_idle, p.max_total, p.spec.image]
            for p in pools
        ),
    )


@pool.command("rm")
@click.argument("name")
@_daemon_options
def pool_rm(client: Any, name: str) -> None:
    """Delete pool NAME: its idle sandboxes go; sandboxes handed out stay."""
    client.delete_pool(name)
    click.echo(name)


# --- images -------------------------------------------------------------------------------


@main.group()
def image() -> None:
    """Build and inspect images."""


@image.command("build-base")
@click.option("--tag", default=None, help="Image name to build (default: rock/base:bookworm).")
@click.option(
    "--suite", default="bookworm", show_default=True, help="Debian suite for debootstrap."
)
@click.option(
    "--mirror", default=None, help="Debian mirror URL (default: the one the host's apt uses)."
)
@click.option("--force", is_flag=True, help="Rebuild even when the image exists.")
def build_base_cmd(tag: str | None, suite: str, mirror: str | None, force: bool) -> None:
    """Build the Debian base image with debootstrap and docker import (a no-op when it exists)."""
    from rock.engine import connect
    from rock.images.base import BASE_IMAGE, build_base

    try:
        client = connect()
        info, built = build_base(
            client,
            tag=tag or BASE_IMAGE,
            suite=suite,
            mirror=mirror,
            force=force,
            log=lambda line: click.echo(f"[build-base] {line}", err=True),
        )
    except RockError as exc:
        _fail(exc)
        return
    verb = "built" if built else "already present:"
    click.echo(f"{verb} {info.tag} ({info.id}, {info.size_mb} MB)")


@image.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_daemon_options
def image_ls(client: Any, as_json: bool) -> None:
    """List images sandboxes can start from: the daemon's, or the Docker engine's without one."""
    from rock.engine import connect
    from rock.errors import DaemonUnreachable
    from rock.models import ImageInfo

    try:
        images = client.images()
    except DaemonUnreachable:
        click.echo("rock: no daemon answers; listing the Docker engine's images.", err=True)
        engine = connect()
        try:
            images = [
                ImageInfo(
                    id=item.short_id,
                    tags=list(item.tags),
                    size_mb=round((item.attrs.get("Size") or 0) / 2**20, 1),
                    created=item.attrs.get("Created", ""),
                )
                for item in engine.images.list()
            ]
        finally:
            engine.close()
    images.sort(key=lambda i: (not i.tags, i.tags))
    if as_json:
        _json(images)
        return
    _table(
        ["ID", "SIZE MB", "CREATED", "TAGS"],
        ([i.id, i.size_mb, i.created[:19], ", ".join(i.tags) or "<none>"] for i in images),
    )


if __name__ == "__main__":
    main()
