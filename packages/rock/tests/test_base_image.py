from __future__ import annotations

import docker
import pytest

from rock.errors import ImageBuildError
from rock.images.base import (
    BASE_IMAGE,
    BASE_LABEL,
    BASE_RECIPE,
    build_base,
    host_mirror,
    inspect_base,
)

pytestmark = pytest.mark.docker


def _run(client: docker.DockerClient, command: str, network: str = "none") -> str:
    out = client.containers.run(
        BASE_IMAGE, ["bash", "-c", command], network_mode=network, remove=True
    )
    return out.decode()


def test_build_base_is_a_no_op_when_present(docker_client: docker.DockerClient) -> None:
    before = inspect_base(docker_client)
    assert before.exists, "make test builds the base image before the tests"
    info, built = build_base(docker_client)
    assert built is False and info.id == before.id


def test_base_image_has_the_promised_tools(docker_client: docker.DockerClient) -> None:
    out = _run(
        docker_client,
        "python3 --version; pip --version; bash --version | head -1; git --version; tmux -V; ps --version; ls --version | head -1",
    )
    for needle in ["Python 3", "pip ", "GNU bash", "git version", "tmux", "procps", "coreutils"]:
        assert needle in out, out
    labels = docker_client.images.get(BASE_IMAGE).labels
    assert labels.get(BASE_LABEL) == "bookworm"
    assert inspect_base(docker_client).recipe == BASE_RECIPE
    assert _run(docker_client, "id -un user; echo ~user").split() == ["user", "/home/user"]


def test_a_base_image_of_an_older_recipe_gets_the_new_layer_in_place(
    docker_client: docker.DockerClient,
) -> None:
    """An image built before recipes (no recipe label, no E2B user): build-base adds the
    layer under the same tag, offline and without a new debootstrap; then it is a no-op."""
    old = "rock-test/base-recipe-1:bookworm"
    container = docker_client.containers.create(BASE_IMAGE, command=["true"])
    try:
        container.commit(
            repository=old.split(":")[0], tag="bookworm",
            changes=["LABEL dev.ale.rock.base.recipe=1"],
        )  # fmt: skip
    finally:
        container.remove()
    try:
        info, built = build_base(docker_client, tag=old)
        assert built and info.recipe == BASE_RECIPE
        again, rebuilt = build_base(docker_client, tag=old)
        assert not rebuilt and again.id == info.id
    finally:
        docker_client.images.remove(old, force=True)


@pytest.mark.slow
def test_pip_in_the_image_trusts_the_hosts_ca(docker_client: docker.DockerClient) -> None:
    out = _run(
        docker_client,
        "cd /tmp && python3 -m venv v && v/bin/pip download -q --no-deps six -d d && ls d",
        network="bridge",
    )
    assert "six-" in out


def test_a_bad_mirror_fails_with_one_clear_sentence(docker_client: docker.DockerClient) -> None:
    with pytest.raises(ImageBuildError, match=r"^debootstrap failed \(exit \d+\)"):
        build_base(
            docker_client, tag="rock/test-bad-mirror:never", mirror="http://127.0.0.1:9/debian"
        )
    assert not inspect_base(docker_client, "rock/test-bad-mirror:never").exists


def test_host_mirror_is_a_debian_url() -> None:
    assert host_mirror().startswith("http") and host_mirror().endswith("/debian")
