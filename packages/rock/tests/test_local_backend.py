"""The local backend against real host processes and a real scratch directory (no Docker)."""

from __future__ import annotations

import io
import os
import secrets
import signal
import stat
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock.backends._shell import SessionError
from rock.backends.base import PathEscape, SandboxError, SandboxNotFound
from rock.backends.local import LocalBackend
from rock.backends.local_sandbox import LocalSandbox
from rock.models import ExecResult, SandboxSpec


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "sb", daemon_id="pytest")


@pytest.fixture
def sandbox(backend: LocalBackend) -> Iterator[LocalSandbox]:
    sb = backend.create()
    try:
        yield sb
    finally:
        sb.delete()


def _processes_with(marker: str, program: str = "") -> list[str]:
    """Command lines of live processes that mention ``marker`` (zombies have none), and
    that run ``program`` when given."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and cmdline.startswith(program.encode()):
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def _sleeping(marker: str, within: float = 3.0) -> bool:
    """Wait for a ``sleep`` mentioning ``marker`` to run: a fork execs a moment later, and
    ``setsid sleep`` has left its session once it is ``sleep``."""
    end = time.monotonic() + within
    while not _processes_with(marker, "sleep\0") and time.monotonic() < end:
        time.sleep(0.02)
    return bool(_processes_with(marker, "sleep\0"))


def _gone(marker: str, within: float = 3.0) -> list[str]:
    """Wait for every process mentioning ``marker`` to die; return any that did not."""
    end = time.monotonic() + within
    while (left := _processes_with(marker)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


# --- exec --------------------------------------------------------------------


def test_exec_exit_code_and_streams(sandbox: LocalSandbox) -> None:
    result = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert not result.timed_out and not result.oom_killed and result.duration_sec > 0
    assert sandbox.exec(["sh", "-c", "kill -TERM $$"]).exit_code == 128 + 15


def test_exec_argv_cwd_env_and_no_host_env(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_TEST_LEAK", "leaked")
    sb = backend.create(SandboxSpec(env={"FROM_SPEC": "spec", "GREETING": "overridden"}))
    try:
        sb.write_file("/sub/keep", b"")
        script = 'pwd; echo "$GREETING|$FROM_SPEC|${ROCK_TEST_LEAK-unset}|$HOME|$ROCK_SANDBOX_ID"'
        result = sb.exec(["sh", "-c", script], cwd="/sub", env={"GREETING": "hi there"})
        assert result.stdout_text == f"{sb.root}/sub\nhi there|spec|unset|{sb.root}|{sb.id}\n"
        assert sb.exec("pwd", cwd="sub").stdout_text == f"{sb.root}/sub\n"
        assert sb.exec("pwd").stdout_text == f"{sb.root}\n"
        names = {line.split("=", 1)[0] for line in sb.exec("env").stdout_text.splitlines()}
        assert "ROCK_TEST_LEAK" not in names and {"PATH", "LANG", "TERM"} <= names
        with pytest.raises(SandboxError, match="working directory /nope does not exist"):
            sb.exec("true", cwd="/nope")
        missing = sb.exec(["no-such-program-rock"])
        assert missing.exit_code == 127 and b"not found" in missing.stderr
    finally:
        sb.delete()


def test_exec_is_binary_safe_with_stdin(sandbox: LocalSandbox) -> None:
    payload = bytes(range(256)) * 1024  # larger than a pipe buffer
    assert sandbox.exec("cat", stdin=payload).stdout == payload
    assert sandbox.exec("cat; echo end").stdout == b"end\n"  # no stdin: EOF at once
    assert sandbox.exec("head -c 3", stdin=payload).stdout == b"\x00\x01\x02"


def test_large_output_is_capped_and_counted(sandbox: LocalSandbox) -> None:
    result = sandbox.exec("head -c 300000 /dev/zero", max_output_bytes=1000)
    assert len(result.stdout) == 1000 and result.stdout_truncated and result.stdout_total == 300000
    result = sandbox.exec("head -c 300000 /dev/zero >&2", max_output_bytes=1000)
    assert len(result.stderr) == 1000 and result.stderr_truncated and result.stderr_total == 300000
    assert not result.stdout_truncated and result.stdout == b""


def test_timeout_kills_the_whole_tree_and_sandbox_stays_usable(sandbox: LocalSandbox) -> None:
    tag = f"{secrets.randbelow(10**6):06d}"
    command = (
        f"sleep 3001.{tag} & (sleep 3002.{tag} &); setsid sleep 3003.{tag} & "
        f"(setsid sleep 3004.{tag} &); sleep 3005.{tag}; echo never"
    )
    result = sandbox.exec(command, timeout=1)
    assert result.timed_out and result.exit_code == 137 and b"never" not in result.stdout
    assert not _gone(f".{tag}")
    assert sandbox.exec("echo still here").stdout_text == "still here\n"


def test_background_children_do_not_hold_the_command_and_stop_kills_them(
    sandbox: LocalSandbox,
) -> None:
    tag = f"{secrets.randbelow(10**6):06d}"
    result = sandbox.exec(f"sleep 3006.{tag} & echo started", timeout=10)
    assert result.ok and result.stdout_text == "started\n" and not result.timed_out
    assert _sleeping(f".{tag}"), "the background child should still run"
    sandbox.stop()
    assert sandbox.status()["state"] == "stopped"
    assert not _gone(f".{tag}")
    assert sandbox.exec("echo back").stdout_text == "back\n"  # a command restarts it
    assert sandbox.status()["state"] == "running"


def test_interrupt_kills_running_commands_only(sandbox: LocalSandbox) -> None:
    tag = f"{secrets.randbelow(10**6):06d}"
    results: list[ExecResult] = []
    worker = threading.Thread(
        target=lambda: results.append(
            sandbox.exec(f"(setsid sleep 3008.{tag} &); sleep 3009.{tag}")
        )
    )
    with sandbox.session() as session:
        worker.start()
        assert _sleeping(f"3009.{tag}")
        assert sandbox.interrupt() == 1
        worker.join(5)
        (result,) = results
        assert result.exit_code == 137 and not result.timed_out
        assert not _gone(f".{tag}")
        assert session.run("echo session lives").output_text == "session lives\n"
    assert sandbox.interrupt() == 0


def test_interrupt_with_a_tag_stops_that_command_alone(sandbox: LocalSandbox) -> None:
    from rock.models import ExecRequest

    tag = f"{secrets.randbelow(10**6):06d}"
    results: dict[str, ExecResult] = {}

    def run(name: str, seconds: str) -> None:
        request = ExecRequest(command=f"sleep {seconds}.{tag}; echo done", tag=name, timeout=30)
        results[name] = sandbox.run(request)

    workers = [
        threading.Thread(target=run, args=("long", "3011")),
        threading.Thread(target=run, args=("short", "2")),
    ]
    for worker in workers:
        worker.start()
    assert _sleeping(f"3011.{tag}")
    assert sandbox.interrupt("long") == 1
    for worker in workers:
        worker.join(10)
    assert results["long"].exit_code == 137 and results["short"].stdout == b"done\n"


# --- sessions ----------------------------------------------------------------


@pytest.fixture(params=["default", "ignored"])
def sigint(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run a test as is, and again with SIGINT ignored here, as in a process started in
    the background by a script: the sandbox's shells must still be interruptible."""
    before = signal.getsignal(signal.SIGINT)
    if request.param == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint")
def test_session_keeps_state_and_survives_timeouts(sandbox: LocalSandbox) -> None:
    with sandbox.session() as session:
        assert session.run("pwd").output_text == f"{sandbox.root}\n"
        setup = "mkdir -p work && cd work && export ROCK_X=42 && f() { echo fn$1; }"
        assert session.run(setup).exit_code == 0
        result = session.run("pwd; echo $ROCK_X; f 1")
        assert result.output_text == f"{sandbox.root}/work\n42\nfn1\n" and result.exit_code == 0
        assert session.run("false").exit_code == 1
        assert session.run("cat").exit_code == 0  # stdin is /dev/null, never the protocol
        slow = session.run("sleep 60; echo never", timeout=1)
        assert slow.timed_out and not slow.session_restarted and b"never" not in slow.output
        assert session.run("echo $ROCK_X; pwd").output_text == f"42\n{sandbox.root}/work\n"
        text = "quotes ' \" and $dollars and\nnewlines and __ROCK_CMD_x"
        assert session.run(f"cat <<'EOF'\n{text}\nEOF").output_text == text + "\n"
        shell = session.shell_pid
    assert not Path(f"/proc/{shell}").exists()  # closing killed and reaped the shell
    with pytest.raises(SessionError, match="closed"):
        session.run("true")


def test_session_interrupts_loops_restarts_when_it_must_and_stop_kills_escapees(
    sandbox: LocalSandbox,
) -> None:
    tag = f"{secrets.randbelow(10**6):06d}"
    with sandbox.session() as session:
        session.run("export KEEP=1")
        loop = session.run("while :; do :; done", timeout=1)
        assert loop.timed_out and not loop.session_restarted
        assert session.run("echo $KEEP").output_text == "1\n"
        stubborn = session.run("trap '' INT; while :; do :; done", timeout=1)
        assert stubborn.timed_out and stubborn.session_restarted  # state lost, and said so
        assert session.run("echo alive $KEEP").output_text == "alive\n"
        session.run(f"(setsid sleep 3007.{tag} &)")
        assert _sleeping(f".{tag}")
    assert _processes_with(f".{tag}")  # a session's escapee outlives it, as in docker...
    sandbox.stop()
    assert not _gone(f".{tag}")  # ...until the sandbox stops


def test_spec_workdir_and_env_reach_sessions(backend: LocalBackend) -> None:
    sb = backend.create(SandboxSpec(workdir="/app", env={"A": "1"}))
    try:
        assert (sb.root / "app").is_dir()
        with sb.session() as session:
            assert session.run("pwd; echo $A $HOME").output_text == f"{sb.root}/app\n1 {sb.root}\n"
        assert sb.exec("pwd").stdout_text == f"{sb.root}/app\n"
    finally:
        sb.delete()


# --- files -------------------------------------------------------------------


def test_files_binary_safe_with_modes(sandbox: LocalSandbox, tmp_path: Path) -> None:
    sandbox.write_file("/work/deep/bin.dat", b"\x00\xff\x10", mode=0o751)
    assert sandbox.read_file("/work/deep/bin.dat") == b"\x00\xff\x10"
    assert sandbox.read_file("work/deep/bin.dat") == b"\x00\xff\x10"
    assert stat.S_IMODE((sandbox.root / "work/deep/bin.dat").stat().st_mode) == 0o751
    sandbox.write_file("/work/deep/bin.dat", b"again", mode=0o600)
    assert sandbox.read_file("/work/deep/bin.dat") == b"again"
    assert stat.S_IMODE((sandbox.root / "work/deep/bin.dat").stat().st_mode) == 0o600

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "sub" / "blob").write_bytes(bytes(range(256)))
    (tree / "sub" / "secret").write_bytes(b"s")
    (tree / "sub" / "secret").chmod(0o600)
    sandbox.upload(tree, "/srv/tree")
    assert sandbox.exec("./srv/tree/run.sh").stdout_text == "ran\n"
    assert stat.S_IMODE((sandbox.root / "srv/tree/sub/secret").stat().st_mode) == 0o600
    back = tmp_path / "back"
    sandbox.download("/srv/tree", back)
    assert (back / "sub" / "blob").read_bytes() == bytes(range(256))
    assert stat.S_IMODE((back / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((back / "sub" / "secret").stat().st_mode) == 0o600
    sandbox.download("/work/deep/bin.dat", tmp_path / "one.dat")
    assert (tmp_path / "one.dat").read_bytes() == b"again"
    sandbox.upload(tmp_path / "one.dat", "/single/renamed.dat")
    assert sandbox.read_file("/single/renamed.dat") == b"again"


def test_missing_paths_are_clear_errors(sandbox: LocalSandbox, tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="/nope does not exist in sandbox"):
        sandbox.read_file("/nope")
    with pytest.raises(SandboxError, match="/nope does not exist in sandbox"):
        sandbox.get_archive("/nope")
    sandbox.write_file("/dir/file", b"x")
    with pytest.raises(SandboxError, match=r"/dir in sandbox .* is not a regular file"):
        sandbox.read_file("/dir")
    with pytest.raises(SandboxError, match=r"/dir in sandbox .* is a directory"):
        sandbox.write_file("/dir", b"x")
    with pytest.raises(SandboxError, match="does not exist on this machine"):
        sandbox.upload(tmp_path / "absent", "/x")
    with pytest.raises(SandboxError, match="not a valid tar stream"):
        sandbox.put_archive("/dir", b"not a tar archive at all" * 30)


def test_dotdot_escapes_are_refused(sandbox: LocalSandbox, tmp_path: Path) -> None:
    outside = sandbox.root.parent / "escaped"
    with pytest.raises(PathEscape, match=r"\.\./escaped resolves outside the sandbox root"):
        sandbox.read_file("../escaped")
    with pytest.raises(PathEscape):
        sandbox.write_file("/a/../../escaped", b"x")
    with pytest.raises(PathEscape):
        sandbox.exec("pwd", cwd="../")
    with pytest.raises(PathEscape):
        sandbox.put_archive("../escaped", _tar((_member("f"), b"x")))
    with pytest.raises(PathEscape):
        sandbox.get_archive("/../..")
    (tmp_path / "up.txt").write_text("x")
    with pytest.raises(PathEscape):
        sandbox.upload(tmp_path / "up.txt", "../escaped/up.txt")
    assert not outside.exists()
    # An absolute path is read inside the root, never on the host.
    sandbox.write_file("/etc/passwd", b"mine")
    assert (sandbox.root / "etc/passwd").read_bytes() == b"mine"


def test_symlinks_out_are_refused_and_symlinks_in_work(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"top secret")
    (tmp_path / "outdir").mkdir()
    root = sandbox.root
    (root / "link").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path / "outdir")
    (root / "dangling").symlink_to(tmp_path / "not-yet")
    with pytest.raises(PathEscape, match="link resolves outside the sandbox root"):
        sandbox.read_file("/link")
    with pytest.raises(PathEscape):
        sandbox.write_file("/link", b"overwritten")
    with pytest.raises(PathEscape):
        sandbox.write_file("/dirlink/new", b"x")
    with pytest.raises(PathEscape):
        sandbox.write_file("/dangling", b"x")
    with pytest.raises(PathEscape):
        sandbox.exec("pwd", cwd="/dirlink")
    with pytest.raises(PathEscape):
        sandbox.get_archive("/dirlink")
    with pytest.raises(PathEscape):
        sandbox.put_archive("/dirlink", _tar((_member("f"), b"x")))
    assert secret.read_bytes() == b"top secret"
    assert not (tmp_path / "not-yet").exists() and not list((tmp_path / "outdir").iterdir())

    sandbox.write_file("/data/real.txt", b"inside")
    (root / "inlink").symlink_to("data/real.txt")
    (root / "indir").symlink_to(root / "data")  # absolute, but inside
    assert sandbox.read_file("/inlink") == b"inside"
    assert sandbox.read_file("/indir/real.txt") == b"inside"
    sandbox.write_file("/inlink", b"through")
    assert (root / "data/real.txt").read_bytes() == b"through"
    assert sandbox.exec("pwd", cwd="/indir").stdout_text == f"{root}/data\n"


@pytest.mark.parametrize(
    "members",
    [
        [(_member("../x"), b"x")],
        [(_member("sub/../../x"), b"x")],
        [(_member("/x"), b"x")],
        [(_member("evil", tarfile.SYMTYPE, "{outside}"), None)],
        [(_member("evil", tarfile.SYMTYPE, "../../../x"), None)],
        [(_member("hard", tarfile.LNKTYPE, "{outside}/x"), None)],
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "symlink-out", "relative-symlink-out", "hardlink"],
)
def test_tar_members_leading_out_are_refused(
    sandbox: LocalSandbox,
    tmp_path: Path,
    members: list[tuple[tarfile.TarInfo, bytes | None]],
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(b"keep")
    for info, _ in members:
        info.linkname = info.linkname.replace("{outside}", str(outside))
    with pytest.raises(PathEscape, match=r"archive member .* (outside the sandbox root|absolute)"):
        sandbox.put_archive("/dest/deeper", _tar(*members))
    assert sorted(p.name for p in outside.iterdir()) == ["x"]
    assert (outside / "x").read_bytes() == b"keep"
    assert not (sandbox.root.parent / "x").exists() and not Path("/x").exists()


def test_tar_through_an_existing_symlink_out_is_refused(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (sandbox.root / "d").mkdir()
    (sandbox.root / "d/evil").symlink_to(outside)  # made by a command, say
    archive = _tar((_member("fine"), b"ok"), (_member("evil/planted"), b"x"))
    with pytest.raises(PathEscape, match="archive member evil/planted resolves outside"):
        sandbox.put_archive("/d", archive)
    assert not list(outside.iterdir())
    assert sandbox.read_file("/d/fine") == b"ok"


def test_tar_keeps_modes_links_inside_and_refuses_devices(sandbox: LocalSandbox) -> None:
    directory = _member("bin", tarfile.DIRTYPE)
    directory.mode = 0o700
    tool = _member("bin/tool")
    tool.mode = 0o4775  # setuid is dropped, the rest kept (group write too)
    copy = _member("copy", tarfile.LNKTYPE, "bin/tool")
    copy.mode = tool.mode  # a hard link's member carries the inode's mode
    archive = _tar(
        (_member(".", tarfile.DIRTYPE), None),
        (directory, None),
        (tool, b"#!/bin/sh\necho tool\n"),
        (_member("alias", tarfile.SYMTYPE, "bin/tool"), None),
        (copy, None),
    )
    sandbox.put_archive("/opt", archive)
    root = sandbox.root
    assert stat.S_IMODE((root / "opt/bin").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "opt/bin/tool").stat().st_mode) == 0o775
    assert os.readlink(root / "opt/alias") == "bin/tool"
    assert sandbox.exec("opt/alias").stdout_text == "tool\n"
    assert sandbox.read_file("/opt/copy") == b"#!/bin/sh\necho tool\n"
    device = _member("dev0", tarfile.CHRTYPE)
    with pytest.raises(SandboxError, match="device file"):
        sandbox.put_archive("/opt", _tar((device, None)))
    assert not (root / "opt/dev0").exists()


# --- lifecycle ---------------------------------------------------------------


def test_snapshot_then_create_from_it(backend: LocalBackend, sandbox: LocalSandbox) -> None:
    sandbox.write_file("/app/marker", b"snap", mode=0o640)
    (sandbox.root / "app/link").symlink_to("marker")
    image = sandbox.snapshot("rock-test/snapshot:1")
    assert Path(image) == backend.root / "snapshots" / "rock-test_snapshot_1"
    (listed,) = backend.images()
    assert listed["id"] == image and listed["tags"] == ["rock-test_snapshot_1"]
    sandbox.write_file("/app/marker", b"changed")
    copy = backend.create(SandboxSpec(image=image))
    try:
        assert copy.read_file("/app/marker") == b"snap"
        assert os.readlink(copy.root / "app/link") == "marker"
        assert stat.S_IMODE((copy.root / "app/marker").stat().st_mode) == 0o640
    finally:
        copy.delete()
    assert sandbox.snapshot("rock-test/snapshot:1") == image  # a second snapshot replaces it
    assert (Path(image) / "app/marker").read_bytes() == b"changed"


def test_images_directories_and_names(backend: LocalBackend, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg/mod.py").write_text("x = 1\n")
    sb = backend.create(SandboxSpec(image=str(source)))
    try:
        assert sb.read_file("/pkg/mod.py") == b"x = 1\n"
        sb.write_file("/pkg/mod.py", b"changed")
        assert (source / "pkg/mod.py").read_text() == "x = 1\n"  # a copy, not the source
    finally:
        sb.delete()
    empty = backend.create()  # the default docker image name: an empty root
    try:
        assert list(empty.root.iterdir()) == []
    finally:
        empty.delete()
    with pytest.raises(SandboxError, match="is not a directory on this machine"):
        backend.create(SandboxSpec(image=str(tmp_path / "absent")))
    with pytest.raises(SandboxError, match="is not a directory on this machine"):
        backend.check_spec(SandboxSpec(image="./absent-here"))
    backend.check_spec(SandboxSpec(image=str(source)))
    assert backend.list() == []


def test_list_get_stop_delete(backend: LocalBackend) -> None:
    first, second = backend.create(), backend.create(sandbox_id="my-box.1")
    assert first.id.startswith("sb-") and len(first.id) == 3 + 12
    assert {s.id for s in backend.list()} == {first.id, "my-box.1"}
    assert LocalBackend(backend.root, daemon_id="other").list() == []
    again = backend.get("my-box.1")
    assert again.root == second.root and again.spec == second.spec
    meta = (backend.root / "pytest" / "my-box.1" / "meta.json").read_text()
    assert '"state": "running"' in meta and '"spec"' in meta
    again.stop()
    assert second.status()["state"] == "stopped"
    second.delete()
    assert second.status()["state"] == "deleted"
    assert not (backend.root / "pytest" / "my-box.1").exists()
    second.delete()  # idempotent
    with pytest.raises(
        SandboxNotFound, match=r"no sandbox my-box.1; list them with 'rock sandbox ls'"
    ):
        backend.get("my-box.1")
    with pytest.raises(SandboxNotFound, match="is gone"):
        second.exec("true")
    assert [s.id for s in backend.list()] == [first.id]
    with first:
        pass
    assert backend.list() == []


def test_at_user_directory_is_left_intact(tmp_path: Path) -> None:
    user = tmp_path / "project"
    user.mkdir()
    (user / "README").write_text("mine\n")
    sb = LocalSandbox.at(user, snapshots=tmp_path / "snaps")
    assert sb.exec("cat README").stdout_text == "mine\n"
    sb.write_file("notes.txt", b"agent")
    assert Path(sb.snapshot("proj:1"), "notes.txt").read_bytes() == b"agent"
    with pytest.raises(PathEscape):
        sb.read_file("../")
    sb.delete()
    sb.delete()
    assert (user / "README").read_text() == "mine\n" and (user / "notes.txt").exists()
    assert sb.status()["state"] == "deleted"
    with pytest.raises(SandboxNotFound):
        sb.exec("true")
    with pytest.raises(SandboxError, match="is not a directory"):
        LocalSandbox.at(tmp_path / "absent")


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", "", ".hidden", "a..b", "x\0y"])
def test_bad_ids_are_refused(backend: LocalBackend, bad: str) -> None:
    with pytest.raises(SandboxError, match="is not valid"):
        backend.create(sandbox_id=bad)
    with pytest.raises(SandboxNotFound):
        backend.get(bad)
    assert not any(backend.root.parent.glob("x*"))


def test_duplicate_ids_and_reserved_daemon_are_refused(backend: LocalBackend) -> None:
    with (
        backend.create(sandbox_id="twice"),
        pytest.raises(SandboxError, match="sandbox twice already exists"),
    ):
        backend.create(sandbox_id="twice")
    with pytest.raises(SandboxError, match="reserved"):
        LocalBackend(backend.root, daemon_id="snapshots")
