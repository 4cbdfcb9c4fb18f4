"""Both workspaces against the same expectations: a LocalWorkspace in tmp_path and a
SandboxWorkspace over a real rock docker sandbox (one per module, a fresh directory per test)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iflow.errors import WorkspaceError
from iflow.workspace import LocalWorkspace, Workspace
from iflow.workspace.sandbox import NO_PYTHON, SandboxWorkspace

IMAGE = "rock/base:bookworm"


async def test_exec_streams_exit_code_env_cwd_and_stdin(workspace: Workspace) -> None:
    out = await workspace.exec("echo out; echo err >&2; exit 3")
    assert (out.exit_code, out.stdout, out.stderr, out.timed_out) == (3, "out\n", "err\n", False)
    assert (await workspace.exec("pwd")).stdout == workspace.root + "\n"
    await workspace.exec("mkdir sub")
    assert (await workspace.exec("pwd", cwd="sub")).stdout == f"{workspace.root}/sub\n"
    out = await workspace.exec('echo "$GREETING"', env={"GREETING": "hi there"})
    assert out.stdout == "hi there\n"
    payload = bytes(range(1, 128)) * 10
    assert (await workspace.exec("cat", stdin=payload)).stdout.encode() == payload
    assert (await workspace.exec("cat")).stdout == ""  # no stdin: end of file at once


async def test_exec_in_a_missing_directory_is_a_workspace_error(workspace: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="does not exist; create it"):
        await workspace.exec("true", cwd="no/such/dir")


async def test_timeout_kills_the_tree_and_keeps_output_so_far(workspace: Workspace) -> None:
    tag = f"iflow-test-{secrets.token_hex(4)}"
    command = f"echo before; (exec -a {tag} sleep 100) & exec -a {tag} sleep 100; echo never"
    out = await workspace.exec(command, timeout=1)
    assert out.timed_out and out.exit_code == 124
    assert out.stdout == "before\n"
    left = await workspace.exec("ps -eo args")
    assert tag not in left.stdout
    assert (await workspace.exec("echo still usable")).stdout == "still usable\n"


async def test_a_background_child_does_not_hold_the_command(workspace: Workspace) -> None:
    out = await workspace.exec("sleep 100 & echo $!", timeout=20)
    assert not out.timed_out and out.exit_code == 0
    await workspace.exec(f"kill {int(out.stdout)}")


async def test_read_and_write_bytes(workspace: Workspace) -> None:
    data = bytes(range(256)) * 3
    await workspace.write_bytes("deep/er/blob.bin", data)
    assert await workspace.read_bytes(f"{workspace.root}/deep/er/blob.bin") == data
    await workspace.write_bytes("deep/er/blob.bin", b"short")
    assert await workspace.read_bytes("deep/er/blob.bin") == b"short"
    with pytest.raises(WorkspaceError, match="does not exist"):
        await workspace.read_bytes("missing.txt")
    with pytest.raises(WorkspaceError, match="is a directory"):
        await workspace.read_bytes("deep")
    with pytest.raises(WorkspaceError, match="is a directory"):
        await workspace.write_bytes("deep", b"x")


async def test_reading_a_pipe_is_refused_instead_of_hanging(workspace: Workspace) -> None:
    await workspace.exec("mkfifo pipe")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        await workspace.read_bytes("pipe")


async def test_write_keeps_the_mode_of_an_existing_file(workspace: Workspace) -> None:
    await workspace.write_bytes("run.sh", b"echo one\n")
    await workspace.exec("chmod 755 run.sh")
    await workspace.write_bytes("run.sh", b"echo two\n")
    assert (await workspace.exec("./run.sh")).stdout == "two\n"


async def test_fsops_run_where_the_files_are(workspace: Workspace) -> None:
    await workspace.write_bytes(".gitignore", b"*.log\n")
    await workspace.write_bytes("src/app.py", b"def handler():\n    return 42\n")
    await workspace.write_bytes("src/app.log", b"def handler in a log\n")
    listing = await workspace.fsop("list", {"path": "src"})
    assert [e["name"] for e in listing["entries"]] == ["app.py"] and listing["ignored"] == 1
    found = await workspace.fsop("glob", {"pattern": "**/*", "path": workspace.root})
    assert set(found["files"]) == {".gitignore", "src/app.py"}
    hits = await workspace.fsop("search", {"pattern": r"return \d+", "path": "."})
    assert [(m["file"], m["line"]) for m in hits["matches"]] == [("src/app.py", 2)]
    info = await workspace.fsop("stat", {"path": "src/app.py"})
    assert info["exists"] and info["type"] == "file" and info["size"] == 29
    assert "invalid" in (await workspace.fsop("search", {"pattern": "(", "path": "."}))["error"]
    assert "Unknown" in (await workspace.fsop("nope", {}))["error"]


def test_local_root_must_exist(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a directory"):
        LocalWorkspace(tmp_path / "missing")
    assert LocalWorkspace(tmp_path).kind == "local"


@pytest.mark.docker
async def test_sandbox_fsop_without_python_says_what_to_use(docker_sandbox: Any) -> None:
    workspace = SandboxWorkspace(docker_sandbox, "/tmp")
    real = docker_sandbox.exec("readlink -f /usr/bin/python3").stdout_text.strip()
    docker_sandbox.exec(["mv", "/usr/bin/python3", "/usr/bin/python3.hidden"])
    try:
        assert await workspace.fsop("glob", {"pattern": "*"}) == {"error": NO_PYTHON}
    finally:
        docker_sandbox.exec(["mv", "/usr/bin/python3.hidden", "/usr/bin/python3"])
    assert real and "files" in await workspace.fsop("glob", {"pattern": "*"})


@pytest.mark.docker
async def test_sandbox_close_deletes_only_an_owned_sandbox(docker_sandbox: Any) -> None:
    from rock.backends.docker import DockerBackend
    from rock.models import SandboxSpec

    await SandboxWorkspace(docker_sandbox, "/").close()
    assert docker_sandbox.status()["state"] == "running"
    backend = DockerBackend(docker_sandbox._client, daemon_id="pytest-iflow")
    owned = backend.create(SandboxSpec(image=IMAGE, memory_mb=128))
    async with SandboxWorkspace(owned, "/", owns=True) as workspace:
        assert workspace.kind == "sandbox"
        assert (await workspace.exec("echo hi")).stdout == "hi\n"
    assert owned.status()["state"] == "deleted"


def test_sandbox_module_imports_without_rock() -> None:
    code = (
        "import sys; sys.modules['rock'] = None\n"
        "import iflow.workspace.sandbox as s, iflow.workspace as w\n"
        "assert 'rock' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
        "print(s.SandboxWorkspace.kind, w.LocalWorkspace.kind)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sandbox local\n"
