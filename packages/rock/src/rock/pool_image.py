"""The image of the task pools (synthesis and RL episodes): the tasks' base image plus the
verifier toolchain, unpacked and compiled ahead of time.

Generated tasks build FROM ``rock/bench-base:bookworm``. Their sandboxes come from a pool
of ``rock/synth-base:<toolchain digest>``, which is that image with one directory added,
``/opt/rock-verifier`` (the offline pytest toolchain ``rock bench`` copies into every
container before its tests). Here it is unpacked from its zip and byte-compiled by the
image's own python3 once, at build time: importing pytest from the zip compiles every
module again in each fresh sandbox (0.9 s a run), from the compiled tree it takes a
fraction of that. Nothing of it is on the agent's paths: the ``.pth`` that makes it
importable is written only when the tests are staged, as ``rock bench`` does.
"""

from __future__ import annotations

import io
import tarfile

import docker
from docker.errors import BuildError, ImageNotFound

from rock.bench.images import BENCH_BASE, ImageBuilder
from rock.errors import RockError
from rock.verifier import toolchain

POOL_REPO = "rock/synth-base"

_DOCKERFILE = f"""\
FROM {BENCH_BASE}
COPY toolchain/ {toolchain.TOOLCHAIN_DIR}/
RUN cd {toolchain.TOOLCHAIN_DIR} && mkdir site && cd site \\
 && python3 -m zipfile -e ../site.zip . && python3 -m compileall -q . >/dev/null \\
 && cd .. && rm site.zip && ln -s site site.zip && chmod -R a+rX {toolchain.TOOLCHAIN_DIR}
LABEL dev.ale.rock.synth-base="1"
"""

PTH_SETUP = toolchain.PTH_SETUP
"""Written at staging time: makes ``/opt/rock-verifier/site.zip`` (here a link to the
compiled tree) importable after the image's own packages."""


def pool_image_tag() -> str:
    return f"{POOL_REPO}:{toolchain.digest()[:12]}"


def ensure_pool_image(client: docker.DockerClient | None = None) -> str:
    """The pool image's tag, building it (and rock/bench-base) when missing."""
    client = client or docker.from_env()
    tag = pool_image_tag()
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    ImageBuilder(client).ensure_base(BENCH_BASE)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = _DOCKERFILE.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tree = toolchain.build()
        for item in sorted(tree.iterdir()):
            tar.add(item, arcname=f"toolchain/{item.name}")
    buf.seek(0)
    try:
        client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    except BuildError as exc:
        lines = [str(c.get("stream", c.get("error", ""))).strip() for c in exc.build_log]
        raise RockError(
            f"building {tag} failed: {' '.join(x for x in lines if x)[-400:]}"
        ) from None
    return tag
