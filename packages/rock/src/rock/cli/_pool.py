"""``rock pool``: the daemon's warm pools."""

from __future__ import annotations

import time
from typing import Any

import click

from rock.cli._common import (
    POOL_NAME,
    BadInput,
    Progress,
    daemon_options,
    echo_json,
    echo_table,
    main,
    spec_options,
)
from rock.client import Client
from rock.errors import RockError


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
@spec_options
@click.option("--wait", is_flag=True, help="Wait until min-idle sandboxes are idle.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds --wait waits.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pool as JSON.")
@daemon_options
def pool_set(
    client: Client,
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

    if not POOL_NAME.match(name):
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
        with Progress(f"pool {name}: filling") as progress:
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
        echo_json(info)
    else:
        click.echo(_pool_line(info))


@pool.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@daemon_options
def pool_ls(client: Client, as_json: bool) -> None:
    """List the daemon's pools with their idle, in-use and starting counts."""
    pools = client.pools()
    if as_json:
        echo_json(pools)
        return
    echo_table(
        ["NAME", "IDLE", "IN USE", "STARTING", "MIN IDLE", "MAX", "IMAGE"],
        (
            [p.name, p.idle, p.in_use, p.starting, p.min_idle, p.max_total, p.spec.image]
            for p in pools
        ),
    )


@pool.command("rm")
@click.argument("name")
@daemon_options
def pool_rm(client: Client, name: str) -> None:
    """Delete pool NAME: its idle sandboxes go; sandboxes handed out stay."""
    client.delete_pool(name)
    click.echo(name)
