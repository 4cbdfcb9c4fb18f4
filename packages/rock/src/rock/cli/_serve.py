"""``rock serve``: run the daemon."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import click
from pydantic import ValidationError

from rock.cli._common import POOL_NAME, BadInput, home_option, main, validation_sentence


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
        if not POOL_NAME.match(name):
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
            raise BadInput(f"--pool {item}: {validation_sentence(exc)}") from None
    return pools


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@main.command()
@home_option
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
    type=click.Choice(["docker", "local", "ray"]),
    default="docker",
    show_default=True,
    help="docker containers; local subprocesses in scratch directories; or ray: containers "
    "on the nodes of a Ray cluster, each node's own Docker engine.",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="ADDRESS",
    help="With --backend ray: the cluster's head node, HOST:PORT (default: auto, the cluster "
    "'ray start' made on this machine).",
)
@click.option(
    "--database-url",
    default=None,
    metavar="URL",
    help="SQLAlchemy URL of the state store (default: SQLite in <home>).",
)
@click.option(
    "--daemon-id",
    default=None,
    metavar="ID",
    help="This daemon's identity: its containers carry it as a label, and it takes only "
    "what carries it (default: the id minted for its rock home, in <home>/daemon-id). Give "
    "one to take over a stopped daemon's sandboxes from another home sharing its database; "
    "a daemon already running with it refuses this one.",
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
    "--e2b-stand-ins",
    is_flag=True,
    help="E2B sandboxes without a network get rock bench's offline stand-ins (pytest; pip, "
    "uv, curl from its wheelhouse), as Terminal-Bench tasks run through E2B offline need.",
)
@click.option(
    "--e2b-domain",
    metavar="DOMAIN",
    help="The domain E2B's get_host(port) names a sandbox's ports under ({port}-{id}.DOMAIN), "
    "one that reaches this daemon, e.g. localhost:7480.",
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
    backend: Literal["docker", "local", "ray"],
    ray_address: str | None,
    database_url: str | None,
    daemon_id: str | None,
    pools: dict[str, Any],
    grace: float,
    cleanup: bool,
    log_level: Literal["critical", "error", "warning", "info", "debug"],
    e2b_stand_ins: bool,
    e2b_domain: str | None,
    allow_remote: bool,
) -> None:
    """Run the rock daemon until SIGTERM or Ctrl-C.

    It listens on HOST:PORT, writes its address to <home>/daemon.json and its bearer
    token to <home>/token, and keeps the given warm pools filled.
    """
    from rock.daemon.server import DAEMON_ID, ServeConfig
    from rock.daemon.server import serve as run_daemon
    from rock.store import default_home

    if daemon_id is not None and not DAEMON_ID.fullmatch(daemon_id):
        raise BadInput(
            f"--daemon-id {daemon_id!r} is not a daemon id; use up to 64 letters, digits, "
            "'_', '.' and '-', starting with a letter or digit."
        )

    if not _is_loopback(host) and not allow_remote:
        raise BadInput(
            f"--host {host} is not a loopback address, and the daemon's API runs commands "
            "for anyone who holds its token; pass --allow-remote if you mean to expose it."
        )
    if ray_address is not None and backend != "ray":
        raise BadInput(
            f"--ray-address is for the ray backend, and this daemon uses {backend}; add "
            "--backend ray, or leave the address out."
        )
    config = ServeConfig(
        home=home or default_home(),
        host=host,
        port=port,
        backend=backend,
        ray_address=ray_address,
        database_url=database_url,
        daemon_id=daemon_id,
        pools=pools,
        grace_sec=grace,
        cleanup=cleanup,
        log_level=log_level,
        e2b_stand_ins=e2b_stand_ins,
        e2b_domain=e2b_domain,
    )
    run_daemon(config)
