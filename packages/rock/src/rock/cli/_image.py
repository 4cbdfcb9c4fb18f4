"""``rock doctor`` and ``rock image``: the Docker engine and the images sandboxes start from."""

from __future__ import annotations

import json
import sys

import click

from rock.cli._common import daemon_options, echo_json, echo_table, fail, main
from rock.client import Client
from rock.errors import RockError

# --- doctor -------------------------------------------------------------------------------


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
        fail(exc)
        return
    verb = "built" if built else "already present:"
    click.echo(f"{verb} {info.tag} ({info.id}, {info.size_mb} MB)")


@image.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@daemon_options
def image_ls(client: Client, as_json: bool) -> None:
    """List images sandboxes can start from: the daemon's, or the Docker engine's without one."""
    from rock.backends.docker import engine_images
    from rock.engine import connect
    from rock.errors import DaemonUnreachable
    from rock.models import ImageInfo

    try:
        images = client.images()
    except DaemonUnreachable:
        click.echo("rock: no daemon answers; listing the Docker engine's images.", err=True)
        engine = connect()
        try:
            images = [ImageInfo.model_validate(item) for item in engine_images(engine)]
        finally:
            engine.close()
    images.sort(key=lambda i: (not i.tags, i.tags))
    if as_json:
        echo_json(images)
        return
    echo_table(
        ["ID", "SIZE MB", "CREATED", "TAGS"],
        ([i.id, i.size_mb, i.created[:19], ", ".join(i.tags) or "<none>"] for i in images),
    )
