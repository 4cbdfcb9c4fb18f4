"""What every ``rock`` command shares: the root group, errors as one sentence, the
progress spinner, option parsing, output (JSON and tables) and the daemon and spec options.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import click
from pydantic import BaseModel, ValidationError

from rock import __version__
from rock.backends._shell import SessionError
from rock.errors import RockError

POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def fail(exc: Exception) -> None:
    click.echo(f"rock: {exc}", err=True)
    sys.exit(1)


class BadInput(click.ClickException):
    """Input the command cannot use: ``rock: <sentence>`` on stderr, exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"rock: {self.message}", err=True)


def validation_sentence(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid " + "; ".join(parts) + "; fix the option and run it again."


class RockGroup(click.Group):
    """The root group: every rock error below it becomes one sentence and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (RockError, SessionError) as exc:
            fail(exc)
        except ValidationError as exc:
            fail(RockError(validation_sentence(exc)))
        return None


# --- small helpers ----------------------------------------------------------------------


class Progress:
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


def pairs(what: str) -> Callable[[click.Context, click.Parameter, Sequence[str]], dict[str, str]]:
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


def echo_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> None:
    def plain(item: Any) -> Any:
        if isinstance(item, BaseModel):
            return item.model_dump(mode="json")
        if isinstance(item, list | tuple):
            return [plain(i) for i in item]
        if isinstance(item, dict):
            return {k: plain(v) for k, v in item.items()}
        return item

    click.echo(json.dumps(plain(value), indent=2))


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        line = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True))
        click.echo(f"{line}  {row[-1]}".rstrip() if line else row[-1])


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def age(moment: datetime) -> str:
    seconds = max(0, int((datetime.now(UTC) - _utc(moment)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def when(moment: datetime) -> str:
    return _utc(moment).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def exit_status(code: int) -> int:
    """An exit status for this process: negative codes (signals) as the shell shows them."""
    return 128 - code if code < 0 else min(code, 255)


# --- shared options -----------------------------------------------------------------------

home_option = click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="rock home, where 'rock serve' keeps its token and address (default: $ROCK_HOME or ~/.rock).",
)


def daemon_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --home, --url and --retries; hand the command a ``client`` instead."""

    @functools.wraps(func)
    def wrapper(*args: Any, home: Path | None, url: str | None, retries: int, **kwargs: Any) -> Any:
        from rock.client import Client

        with Client(url, home=home, retries=retries) as client:
            return func(*args, client=client, **kwargs)

    for option in reversed(
        [
            home_option,
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
    click.option(
        "--runtime",
        type=click.Choice(["runc", "runsc"]),
        default=None,
        help="'runc' (the default) or 'runsc': gVisor's own kernel between sandbox and host.",
    ),
    click.option(
        "--cap",
        "capabilities",
        multiple=True,
        metavar="NAME",
        help="A Linux capability the sandbox's root keeps (repeatable; replaces the default "
        "set: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID).",
    ),
    click.option("--workdir", default=None, help="Working directory of commands."),
    click.option(
        "--env",
        multiple=True,
        callback=pairs("KEY"),
        metavar="KEY=VALUE",
        help="Environment variable of every command (repeatable).",
    ),
    click.option(
        "--label",
        "labels",
        multiple=True,
        callback=pairs("KEY"),
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
    "runtime",
    "capabilities",
    "workdir",
    "env",
    "labels",
    "ttl_sec",
    "idle_timeout_sec",
)


def spec_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the sandbox spec options; hand the command ``spec_fields``, only those given."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _SPEC_FIELDS}
        given["capabilities"] = list(given["capabilities"]) or None
        fields = {k: v for k, v in given.items() if v is not None and v != {}}
        return func(*args, spec_fields=fields, **kwargs)

    for option in reversed(_SPEC_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


# --- the root -----------------------------------------------------------------------------


@click.group(cls=RockGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rock")
def main() -> None:
    """rock: Docker sandboxes for making, training and evaluating terminal agents."""
