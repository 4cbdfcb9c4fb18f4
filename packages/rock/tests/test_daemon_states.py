"""Sandboxes through a real daemon past plain exec: paused and resumed (with the reaper
between), built from a context, a port answered through the daemon."""

from __future__ import annotations

import time
from pathlib import Path

import docker
import httpx
import pytest
from rock_daemons import Running

from rock.backends.base import (
    SandboxConflict,
)
from rock.client import Client
from rock.errors import (
    ImageBuildError,
)

pytestmark = pytest.mark.docker


# --- pause and resume --------------------------------------------------------------------


def test_a_paused_sandbox_keeps_its_processes_refuses_calls_and_outlives_its_ttl(
    client: Client,
) -> None:
    """Paused: every process frozen where it was (a counting loop goes on from its count
    after resume), calls refused in one sentence, kept past its TTL; resumed, its TTL
    starts again."""
    box = client.create(ttl_sec=4)
    # written then renamed, as a read between truncate and write would see ""
    loop = "i=0; while :; do i=$((i+1)); echo $i >/tmp/n.w; mv /tmp/n.w /tmp/n; sleep 0.1; done"
    box.exec(f"sh -c '{loop}' >/dev/null 2>&1 &")
    time.sleep(0.5)
    box.pause()
    assert client.info(box.id).state == "paused"
    with pytest.raises(SandboxConflict, match=f"sandbox {box.id} is paused; resume it first"):
        box.exec("true")
    with pytest.raises(SandboxConflict, match="only a sandbox in use"):
        box.pause()
    time.sleep(6)  # past its TTL: a paused sandbox does not expire
    assert client.info(box.id).state == "paused"
    box.resume()
    first = int(box.exec("cat /tmp/n").stdout)
    time.sleep(0.6)
    assert int(box.exec("cat /tmp/n").stdout) > first > 3  # the loop went on from where it was
    with pytest.raises(SandboxConflict, match="is busy, not paused"):
        box.resume()
    for _ in range(60):  # its TTL started again at the resume
        if client.info(box.id).state == "deleted":
            break
        time.sleep(0.5)
    assert client.info(box.id).state == "deleted"


def test_a_maintenance_pass_as_a_sandbox_resumes_does_not_reap_it(
    daemon: Running, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox paused past its TTL and resumed gets its new TTL before it is in use again:
    a maintenance pass landing in between (seen in CI: the next command was refused, "busy
    (resumed by its client); create a new one") finds nothing due."""
    box = client.create(ttl_sec=3)
    box.pause()
    time.sleep(4)  # past its TTL, paused
    manager = daemon.daemon.manager
    transition = manager.store.transition

    def then_a_maintenance_pass(sandbox_id: str, to_state: object, *args: object, **kw: object):
        record = transition(sandbox_id, to_state, *args, **kw)  # type: ignore[arg-type]
        if sandbox_id == box.id and str(to_state) == "busy":
            manager._reap()
        return record

    monkeypatch.setattr(manager.store, "transition", then_a_maintenance_pass)
    box.resume()  # its TTL starts again: 3 s from here
    assert box.exec("echo on").stdout == b"on\n"
    assert client.info(box.id).state == "busy"
    box.delete()


# --- images built from a context -----------------------------------------------------------


def test_the_daemon_builds_an_image_from_a_context_and_sandboxes_start_from_it(
    client: Client, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """A Dockerfile whose base cannot be pulled (offline) maps to the local base image; the
    same context again is a cache hit; a failing step, a missing Dockerfile and a body that
    is no tar are one sentence each."""
    for old in docker_client.images.list(name="rock-bench/daemon-build-test"):
        docker_client.images.remove(old.id, force=True)  # (an earlier run's)
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "hello.txt").write_text("from the context\n")
    (context / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nCOPY hello.txt /opt/hello.txt\nRUN echo built > /opt/mark\n"
    )
    made = client.build_image(context, name="daemon-build-test")
    assert made.built and made.tag.startswith("rock-bench/daemon-build-test:")
    assert made.bases["debian:bookworm-slim"].startswith("rock/")  # a local image for it
    assert client.build_image(context, name="daemon-build-test").built is False
    with client.create(image=made.tag) as box:
        assert box.exec("cat /opt/hello.txt /opt/mark").stdout == b"from the context\nbuilt\n"
    (context / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo broken >&2; exit 3\n")
    with pytest.raises(ImageBuildError, match="docker build of rock-bench/daemon-build-test:"):
        client.build_image(context, name="daemon-build-test")
    with pytest.raises(ImageBuildError, match="there is no Dockerfile at Nope"):
        client.build_image(context, dockerfile="Nope", name="daemon-build-test")
    response = httpx.post(
        f"{client.url}/v1/images/build",
        content=b"not a tar",
        headers={"Authorization": f"Bearer {client.token}"},
    )
    assert response.status_code == 422 and "is not a tar archive" in response.text


def test_a_port_in_a_closed_sandbox_answers_through_the_daemon(client: Client) -> None:
    """``/v1/sandboxes/ID/ports/PORT/PATH``: the request reaches a server inside a sandbox
    without a network, its answer comes back whole; the bearer token is needed; a port
    nothing listens on is 502 in one sentence."""
    with client.create() as box:
        box.exec(
            "mkdir -p /tmp/www && echo served > /tmp/www/hello.txt && cd /tmp/www && "
            "python3 -m http.server 8000 --bind 127.0.0.1 > /tmp/http.log 2>&1 &"
        )
        base = f"{client.url}/v1/sandboxes/{box.id}/ports"
        auth = {"Authorization": f"Bearer {client.token}"}
        for _ in range(50):
            got = httpx.get(f"{base}/8000/hello.txt?x=1", headers=auth)
            if got.status_code != 502:
                break
            time.sleep(0.2)
        assert got.status_code == 200 and got.text == "served\n"
        assert got.headers["content-type"].startswith("text/plain")
        assert httpx.get(f"{base}/8000/nope.txt", headers=auth).status_code == 404
        assert httpx.get(f"{base}/8000/hello.txt").status_code == 401
        idle = httpx.get(f"{base}/9/", headers=auth)
        assert idle.status_code == 502 and "nothing listens on port 9" in idle.text
