"""The offline verifier toolchain: pytest and common plugins, built once, copied into
each container before its tests run.

The packages are pure-Python wheels installed with ``pip --target`` (``--platform any``,
so the same tree works on any python3 in any task image) and zipped into ``site.zip``; the stand-ins of
:mod:`rock.verifier.shim` (uv, uvx, pip, curl, wget, apt-get, pytest) go into
``bin/``. The tree is cached under ``~/.cache/rock/verifier/<digest>/`` (digest of the
requirement list and the shim's source) and packed once per process into a tar that
:func:`install` unpacks at :data:`TOOLCHAIN_DIR` in a sandbox.

How the harness runs tests with it: ``export PATH=/opt/rock-verifier/bin:$PATH``, a
``.pth`` file in the container's site-packages (so ``python -m pytest`` works too), then
the task's test script. Building needs PyPI (or ``--wheels DIR``, a folder of wheels);
running never needs a network. Wheels a user adds (``rock bench toolchain --wheelhouse DIR``,
compiled ones too) travel with it, for the requirements test scripts install that it does
not hold.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

from ale.sandbox import SandboxVerbs
from rock.errors import RockError

TOOLCHAIN_DIR = "/opt/rock-verifier"
REQUIREMENTS = (
    "pytest==9.2.0",
    "pluggy==1.7.0",
    "iniconfig==2.3.1",
    "packaging==26.3",
    "pygments==2.21.0",
    "pytest-json-ctrf==0.6.1",
    "pytest-json-report==1.5.0",
    "pytest-metadata==3.1.1",
    "pytest-timeout==2.4.0",
    "pytest-mock==3.17.0",
    "pytest-asyncio==1.5.0",
    "pytest-xdist==3.8.0",
    "execnet==2.1.2",
    "requests==2.34.2",
    "urllib3==2.8.0",
    "idna==3.20",
    "certifi==2026.10.18",
    "charset-normalizer==3.5.2",
    "exceptiongroup==1.3.1",
    "tomli==2.5.0",
    "typing-extensions==4.16.0",
)
"""What the toolchain holds: pure-Python wheels, pinned so every build is the same."""
SHIM_TOOLS = ("uv", "uvx", "pip", "pip3", "pytest", "py.test", "curl", "wget", "apt-get", "apt")
SHIM_SOURCE = Path(__file__).with_name("shim.py")
PTH_SETUP = (
    'py=$(command -v python3 || command -v python) && "$py" -c "'
    "import site,os,sys; d=[p for p in site.getsitepackages() if p.startswith(sys.prefix)] "
    "or site.getsitepackages(); os.makedirs(d[0], exist_ok=True); "
    f"open(os.path.join(d[0], 'zz-rock-verifier.pth'), 'w').write('{TOOLCHAIN_DIR}/site.zip\\n')"
    '" 2>/dev/null || true'
)
"""Shell that makes the toolchain importable by the container's python3 (after its own
packages), so ``python -m pytest`` works without an install step."""


class ToolchainError(RockError):
    """The toolchain could not be built."""


def cache_root() -> Path:
    return Path(os.environ.get("ROCK_CACHE", "~/.cache/rock")).expanduser() / "verifier"


ZIP_FORMAT = "2: bytecode"
"""How :func:`_zip_tree` lays the packages out (part of the digest, so a change rebuilds)."""


def digest() -> str:
    h = hashlib.sha256()
    h.update(ZIP_FORMAT.encode())
    h.update(sys.implementation.cache_tag.encode())  # whose bytecode the zip carries
    h.update("\n".join(REQUIREMENTS).encode())
    h.update(SHIM_SOURCE.read_bytes())
    return h.hexdigest()[:16]


def toolchain_path() -> Path:
    return cache_root() / digest()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def build(*, wheels: Path | None = None, force: bool = False) -> Path:
    """Build the toolchain tree (no-op when the cached one is complete); return its path."""
    target = toolchain_path()
    if (target / "provided.json").is_file() and not force:
        return target
    for stale in cache_root().glob("*"):  # toolchains of other versions of rock
        if stale.is_dir() and stale.name != target.name and not stale.name.startswith("build-"):
            shutil.rmtree(stale, ignore_errors=True)
    cache_root().mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=cache_root()))
    try:
        site = scratch / "site"
        _pip_install(site, wheels)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with host shebangs
        _zip_tree(site, scratch / "site.zip")
        shutil.rmtree(site)
        _add_stand_ins(scratch)
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def _pip_install(site: Path, wheels: Path | None) -> None:
    """The pinned :data:`REQUIREMENTS` into ``site`` as pure-Python wheels any python3 takes
    (from ``wheels``, a folder of them, when given; else from PyPI)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(site),
        "--only-binary=:all:",
        "--platform",
        "any",
        "--implementation",
        "py",
        "--python-version",
        "3.10",
        "--no-deps",
        *REQUIREMENTS,
    ]
    if wheels is not None:
        cmd[4:4] = ["--no-index", "--find-links", str(wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1][-300:]
        raise ToolchainError(
            f"pip could not fetch the verifier toolchain ({tail}); run this where PyPI "
            "is reachable, or pass --wheels DIR with the wheels of "
            "rock.verifier.toolchain.REQUIREMENTS."
        )


def _add_stand_ins(tree: Path) -> None:
    """The shim and its bin/ wrappers into ``tree``, with what it provides and the PATH line."""
    (tree / "lib").mkdir()
    shutil.copyfile(SHIM_SOURCE, tree / "lib" / "shim.py")
    (tree / "bin").mkdir()
    for tool in SHIM_TOOLS:
        script = tree / "bin" / tool
        script.write_text(_wrapper(tool))
        script.chmod(0o755)
    provided = sorted({_norm(r.split("==")[0]) for r in REQUIREMENTS} | {"uv", "pytest"})
    (tree / "provided.json").write_text(json.dumps(provided))
    (tree / "env").write_text(f'export PATH="{TOOLCHAIN_DIR}/bin:$PATH"\n')


def _zip_tree(tree: Path, target: Path) -> None:
    """``tree`` as one zip (sorted, fixed times): a single file uploads far faster than a
    thousand, and Python imports pure packages, their metadata and entry points from it.

    Each module also goes in compiled, as ``name.pyc`` beside ``name.py`` (where zipimport
    looks, and it never writes bytecode of its own): without it every test run compiled
    pytest again, 0.5 s of CPU against 0.2 s. The bytecode is this interpreter's, marked
    unchecked (the zip's fixed times could not validate it): a container whose python3 has
    another magic number passes over it and compiles the source, as before."""
    with (
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf,
        tempfile.TemporaryDirectory(prefix="pyc-") as scratch,
    ):
        cfile = Path(scratch) / "m.pyc"
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            if "__pycache__" in path.parts:
                continue
            name = path.relative_to(tree).as_posix()
            _add(zf, name, path.read_bytes())
            if path.suffix == ".py" and _compiled(path, f"{TOOLCHAIN_DIR}/site.zip/{name}", cfile):
                _add(zf, name + "c", cfile.read_bytes())


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _compiled(source: Path, shown: str, cfile: Path) -> bool:
    """Whether ``source`` compiled into ``cfile`` as an unchecked-hash .pyc (``shown`` its
    file name in tracebacks); False for a module this interpreter cannot compile (one
    written for a newer Python)."""
    try:
        py_compile.compile(
            str(source), cfile=str(cfile), dfile=shown, doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )  # fmt: skip
    except py_compile.PyCompileError:
        return False
    return True


def _wrapper(tool: str) -> str:
    """bin/<tool>: the shim on python3, or the real tool when the image has no python3."""
    return (
        "#!/bin/sh\n"
        f"# {tool}: rock verifier toolchain stand-in (see {TOOLCHAIN_DIR}/lib/shim.py)\n"
        "py=$(command -v python3 || command -v python)\n"
        f'if [ -n "$py" ]; then exec "$py" {TOOLCHAIN_DIR}/lib/shim.py {tool} "$@"; fi\n'
        f'PATH=$(printf %s "$PATH" | tr : "\\n" | grep -v "^{TOOLCHAIN_DIR}/bin$" | paste -sd: -)\n'
        f'exec {tool} "$@"\n'
    )


_packed: dict[str, bytes] = {}
_pack_lock = threading.Lock()


def wheelhouse() -> Path:
    """Wheels a user added (:func:`add_wheels`): in containers at ``TOOLCHAIN_DIR/wheelhouse``,
    where the pip and uv stand-ins install from before they try an index."""
    return cache_root() / "wheelhouse"


def add_wheels(source: Path) -> list[str]:
    """Copy the wheels in ``source`` (compiled ones too: pip picks those that fit the
    container's Python) into the wheelhouse; the names of all it holds after."""
    wheels = sorted(source.glob("*.whl")) if source.is_dir() else []
    if not wheels:
        raise ToolchainError(
            f"{source} holds no wheels (*.whl); fill it with pip download --only-binary=:all: "
            "--python-version X.Y --platform manylinux2014_x86_64 NAME -d DIR"
        )
    target = wheelhouse()
    target.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        shutil.copyfile(wheel, target / wheel.name)
    return sorted(p.name for p in target.glob("*.whl"))


def _wheels_key() -> str:
    found = sorted(wheelhouse().glob("*.whl"))
    return ",".join(f"{p.name}:{p.stat().st_size}" for p in found)


def archive(*, wheels: Path | None = None) -> bytes:
    """The toolchain as a tar whose members unpack under :data:`TOOLCHAIN_DIR` (with the
    wheelhouse's wheels under ``wheelhouse/``)."""
    key = digest() + "|" + _wheels_key()
    with _pack_lock:
        if key not in _packed:
            tree = build(wheels=wheels)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for item in sorted(tree.iterdir()):
                    tar.add(item, arcname=item.name)
                for wheel in sorted(wheelhouse().glob("*.whl")):
                    tar.add(wheel, arcname=f"wheelhouse/{wheel.name}")
            _packed.clear()
            _packed[key] = buf.getvalue()
        return _packed[key]


def install(sandbox: SandboxVerbs, *, first: str = "") -> None:
    """Unpack the toolchain at :data:`TOOLCHAIN_DIR` in ``sandbox`` and make it importable
    (after the shell ``first``, in the same exec)."""
    sandbox.put_archive(TOOLCHAIN_DIR, archive())
    sandbox.exec(f"{first}; {PTH_SETUP}" if first else PTH_SETUP, timeout=60)


def info() -> dict[str, Any]:
    """Where the toolchain is and what it holds."""
    path = toolchain_path()
    return {
        "path": str(path),
        "built": (path / "provided.json").is_file(),
        "digest": digest(),
        "container_path": TOOLCHAIN_DIR,
        "packages": list(REQUIREMENTS),
        "shims": list(SHIM_TOOLS),
        "wheelhouse": sorted(p.name for p in wheelhouse().glob("*.whl")),
    }
