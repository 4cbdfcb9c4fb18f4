"""The base image, built from Debian packages when no registry can be pulled from.

``debootstrap`` installs a minimal Debian into a scratch directory with python3,
pip, bash, coreutils, procps, git and tmux; the host's CA bundle is copied in (so
pip works behind a TLS-intercepting proxy the host trusts); then the tree is
``docker import``-ed under :data:`BASE_IMAGE`. Building is a no-op when the image
exists, unless forced.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
from docker.errors import ImageNotFound
from pydantic import BaseModel

from rock.errors import ImageBuildError

BASE_IMAGE = "rock/base:bookworm"
"""The documented name of the base image."""

BASE_PACKAGES = (
    "python3",
    "python3-pip",
    "python3-venv",
    "bash",
    "coreutils",
    "procps",
    "git",
    "tmux",
    "ca-certificates",
    "curl",
    "less",
)
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BASE_LABEL = "dev.ale.rock.base"
RECIPE_LABEL = "dev.ale.rock.base.recipe"
BASE_RECIPE = "2"
"""The version of what is layered on the Debian tree: 2 adds E2B's user ``user`` (home
/home/user, bash), as E2B's base image has it. A base image of an older recipe gets the
layer on its next ``build-base`` (seconds, offline), without a new debootstrap."""
RECIPE_LAYER = f"""\
RUN id -u user >/dev/null 2>&1 || useradd -m -s /bin/bash user
LABEL {RECIPE_LABEL}={BASE_RECIPE}
"""


class BaseImageInfo(BaseModel):
    """What is known about the base image."""

    tag: str
    exists: bool
    id: str | None = None
    size_mb: float | None = None
    created: str | None = None
    recipe: str | None = None
    """The recipe the image was built with (see :data:`BASE_RECIPE`); None before recipes."""


def inspect_base(client: docker.DockerClient, tag: str = BASE_IMAGE) -> BaseImageInfo:
    """Whether the base image exists, and its id and size."""
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return BaseImageInfo(tag=tag, exists=False)
    return BaseImageInfo(
        tag=tag,
        exists=True,
        id=image.short_id,
        size_mb=round(image.attrs.get("Size", 0) / 2**20, 1),
        created=image.attrs.get("Created"),
        recipe=(image.labels or {}).get(RECIPE_LABEL),
    )


def _layer(client: docker.DockerClient, tag: str) -> None:
    """Put :data:`RECIPE_LAYER` on the image ``tag``, under the same tag."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = f"FROM {tag}\n{RECIPE_LAYER}".encode()
        member = tarfile.TarInfo("Dockerfile")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    try:
        client.images.build(
            fileobj=io.BytesIO(context.getvalue()), custom_context=True, tag=tag, rm=True,
            pull=False, network_mode="none",
        )  # fmt: skip
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        raise ImageBuildError(f"the recipe layer of {tag} did not build: {exc}") from None


def host_mirror() -> str:
    """The Debian mirror the host's apt uses, or the default one."""
    for path in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if not path.exists():
            continue
        text = path.read_text(errors="replace")
        match = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M) or re.search(
            r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)/?\s", text, re.M
        )
        if match:
            return match.group(1)
    return DEFAULT_MIRROR


def _ensure_debootstrap(log: Callable[[str], None]) -> str:
    found = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None
    )
    if found:
        return found
    if Path("/etc/debian_version").exists() and os.geteuid() == 0:
        log("installing debootstrap from Debian packages")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], check=False, env=env, capture_output=True)
        done = subprocess.run(
            ["apt-get", "install", "-y", "-q", "debootstrap"],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode == 0 and Path("/usr/sbin/debootstrap").exists():
            return "/usr/sbin/debootstrap"
        raise ImageBuildError(
            f"apt-get could not install debootstrap ({done.stderr.strip()[-200:]}); install it by hand."
        )
    raise ImageBuildError(
        "debootstrap is not installed and this is not Debian as root: install debootstrap, then run this again."
    )


def _run(cmd: list[str], what: str, log: Callable[[str], None]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ImageBuildError(f"{what} failed (exit {done.returncode}): {' | '.join(tail)}")


def _make_rootfs(
    debootstrap: str,
    rootfs: Path,
    *,
    suite: str,
    mirror: str,
    packages: tuple[str, ...],
    log: Callable[[str], None],
) -> None:
    """Install a minimal Debian into ``rootfs``, with the host's CA bundle and no apt caches."""
    log(f"debootstrap {suite} from {mirror} (a few minutes)")
    _run(
        [
            debootstrap,
            "--variant=minbase",
            f"--include={','.join(packages)}",
            suite,
            str(rootfs),
            mirror,
        ],
        "debootstrap",
        log,
    )
    if HOST_CA_BUNDLE.exists():
        log("copying the host CA bundle into the image")
        target = rootfs / IMAGE_CA_BUNDLE.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HOST_CA_BUNDLE, target)
    for cache in ["var/cache/apt/archives", "var/lib/apt/lists"]:
        for item in (rootfs / cache).glob("*"):
            if item.is_file():
                item.unlink()


def _import(
    client: docker.DockerClient,
    rootfs: Path,
    tarball: Path,
    *,
    tag: str,
    suite: str,
    log: Callable[[str], None],
) -> None:
    """Pack ``rootfs`` into ``tarball`` and ``docker import`` it as ``tag``."""
    log("packing the tree")
    _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], "tar", log)
    repository, _, version = tag.rpartition(":")
    if not repository:
        repository, version = tag, "latest"
    changes = [
        'CMD ["/bin/bash"]',
        "ENV LANG=C.UTF-8",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f"ENV SSL_CERT_FILE={IMAGE_CA_BUNDLE}",
        f"ENV REQUESTS_CA_BUNDLE={IMAGE_CA_BUNDLE}",
        f"ENV PIP_CERT={IMAGE_CA_BUNDLE}",
        "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
        f"LABEL {BASE_LABEL}={suite}",
    ]
    log(f"docker import as {tag}")
    try:
        client.api.import_image_from_file(
            str(tarball), repository=repository, tag=version, changes=changes
        )
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker import failed: {exc.explanation or exc}") from None


def build_base(
    client: docker.DockerClient,
    *,
    tag: str = BASE_IMAGE,
    suite: str = DEFAULT_SUITE,
    mirror: str | None = None,
    packages: tuple[str, ...] = BASE_PACKAGES,
    force: bool = False,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[BaseImageInfo, bool]:
    """Build the base image; return its info and whether anything was built."""
    existing = inspect_base(client, tag)
    if existing.exists and not force:
        if existing.recipe == BASE_RECIPE:
            log(f"{tag} already exists ({existing.id}); nothing to do")
            return existing, False
        log(f"{tag} ({existing.id}) is of recipe {existing.recipe or 1}: adding recipe "
            f"{BASE_RECIPE}'s layer")  # fmt: skip
        _layer(client, tag)
        return inspect_base(client, tag), True
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the base image runs debootstrap, which needs root: run it as root."
        )
    debootstrap = _ensure_debootstrap(log)
    mirror = mirror or host_mirror()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rock-base-", dir=workdir) as scratch:
        rootfs = Path(scratch) / "rootfs"
        _make_rootfs(debootstrap, rootfs, suite=suite, mirror=mirror, packages=packages, log=log)
        _import(client, rootfs, Path(scratch) / "rootfs.tar", tag=tag, suite=suite, log=log)
    _layer(client, tag)
    info = inspect_base(client, tag)
    if not info.exists:
        raise ImageBuildError(
            f"docker import reported success but {tag} is not there; read the engine's log."
        )
    log(f"built {tag} ({info.id}, {info.size_mb} MB) in {time.monotonic() - started:.0f} s")
    return info, True
