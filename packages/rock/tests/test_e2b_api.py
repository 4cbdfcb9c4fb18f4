"""The daemon's E2B API, driven by the official ``e2b`` SDK itself (sync and async), pointed
at the daemon by its own settings: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    BuildException,
    CommandExitException,
    PtySize,
    Sandbox,
    SandboxQuery,
    SandboxState,
    Template,
)
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    SandboxException,
    TimeoutException,
)
from rock_daemons import Running

from rock.daemon.e2b_processes import _PTY_HOLDER, _STDIN_HOLDER

pytestmark = pytest.mark.docker


@pytest.fixture
def e2b_env(daemon: Running, monkeypatch: pytest.MonkeyPatch) -> Running:
    monkeypatch.setenv("E2B_API_URL", daemon.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", daemon.url)
    monkeypatch.setenv("E2B_API_KEY", daemon.token)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    return daemon


def test_the_sync_sdk_creates_runs_streams_and_kills(e2b_env: Running, tmp_path: Path) -> None:
    sandbox = Sandbox.create(timeout=120, metadata={"owner": "tests"}, envs={"GREETING": "hi"})
    try:
        assert sandbox.sandbox_id.startswith("sb-")
        out: list[str] = []
        err: list[str] = []
        result = sandbox.commands.run(
            'echo "$GREETING out"; echo to-err >&2; echo second',
            on_stdout=out.append,
            on_stderr=err.append,
        )
        assert (result.exit_code, result.stdout, result.stderr) == (
            0,
            "hi out\nsecond\n",
            "to-err\n",
        )
        assert "".join(out) == "hi out\nsecond\n" and "".join(err) == "to-err\n"
        assert sandbox.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
        with pytest.raises(CommandExitException) as failed:
            sandbox.commands.run("echo partial; exit 7")
        assert failed.value.exit_code == 7 and failed.value.stdout == "partial\n"
        sandbox.files.write("/tmp/work/note.txt", "written through e2b\n")
        assert sandbox.files.read("/tmp/work/note.txt") == "written through e2b\n"
        names = {e.name: e for e in sandbox.files.list("/tmp/work")}
        assert set(names) == {"note.txt"} and names["note.txt"].size == 20
        with pytest.raises(FileNotFoundException):
            sandbox.files.read("/tmp/nowhere.txt")
        assert sandbox.files.make_dir("/tmp/made") is True
        assert sandbox.files.make_dir("/tmp/made") is False  # already there
        assert sandbox.files.exists("/tmp/made") and not sandbox.files.exists("/tmp/nope")
        sandbox.files.remove("/tmp/made")
        assert not sandbox.files.exists("/tmp/made")
        listed = Sandbox.list().next_items()
        mine = [s for s in listed if s.sandbox_id == sandbox.sandbox_id]
        assert mine and mine[0].metadata == {"owner": "tests"}
        again = Sandbox.connect(sandbox.sandbox_id)
        assert again.commands.run("echo connected").stdout == "connected\n"
        sandbox.set_timeout(300)
    finally:
        assert sandbox.kill() is True
    assert Sandbox.kill(sandbox.sandbox_id) is False  # gone: E2B answers 404, the SDK False


def test_output_streams_while_the_command_runs(e2b_env: Running) -> None:
    sandbox = Sandbox.create()
    try:
        seen: list[tuple[float, str]] = []
        sandbox.commands.run(
            "echo first; sleep 2; echo second",
            on_stdout=lambda line: seen.append((time.monotonic(), line)),
        )
        assert [line for _, line in seen] == ["first\n", "second\n"]
        assert seen[1][0] - seen[0][0] > 1.5  # the first line came before the command ended
    finally:
        sandbox.kill()


def test_a_command_past_its_timeout_is_a_timeout_and_background_kill(e2b_env: Running) -> None:
    sandbox = Sandbox.create()
    try:
        with pytest.raises(TimeoutException):
            sandbox.commands.run("sleep 30", timeout=1)
        kept = sandbox.commands.run("sleep 61", background=True)  # stays: not killed
        handle = sandbox.commands.run("(setsid sleep 62 &); sleep 60", background=True)
        time.sleep(1.0)
        assert handle.pid > 0 and handle.kill() is True  # the escape to a new session too
        assert sandbox.commands.run("echo still here").stdout == "still here\n"
        for _ in range(20):  # a kill takes a moment to land
            left = sandbox.commands.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
            if "sleep 62" not in left:
                break
            time.sleep(0.5)
        assert "sleep 62" not in left and "sleep 60" not in left and "sleep 61" in left
        assert kept.kill() is True
    finally:
        sandbox.kill()


def test_the_async_sdk_does_the_same(e2b_env: Running) -> None:
    async def main() -> None:
        sandbox = await AsyncSandbox.create()
        try:
            result = await sandbox.commands.run("echo async; echo e >&2")
            assert (result.stdout, result.stderr) == ("async\n", "e\n")
            await sandbox.files.write("/tmp/a.txt", b"bytes\x00here")
            assert await sandbox.files.read("/tmp/a.txt", format="bytes") == b"bytes\x00here"
            entries = await sandbox.files.list("/tmp")
            assert "a.txt" in {e.name for e in entries}
        finally:
            await sandbox.kill()

    asyncio.run(main())


def test_the_sdk_s_fork_gives_sandboxes_with_the_files_of_that_moment(e2b_env: Running) -> None:
    """``Sandbox.fork(count=2)``: two sandboxes from one snapshot of the parent's files, each
    on its own from then on (rock carries the file system, not running processes)."""
    parent = Sandbox.create(timeout=120, metadata={"owner": "forks"})
    forks: list[Sandbox] = []
    try:
        parent.files.write("/tmp/state", "before\n")
        made = parent.fork(count=2, timeout=90)
        assert all(isinstance(f, Sandbox) for f in made), made
        forks = [f for f in made if isinstance(f, Sandbox)]
        parent.files.write("/tmp/state", "after\n")
        assert [f.files.read("/tmp/state") for f in forks] == ["before\n", "before\n"]
        forks[0].files.write("/tmp/state", "mine\n")
        assert forks[1].files.read("/tmp/state") == "before\n"
        assert forks[0].commands.run("cat /tmp/state").stdout == "mine\n"
        listed = {s.sandbox_id: s for s in Sandbox.list(query=None).next_items()}
        assert {f.sandbox_id for f in forks} <= set(listed)
        assert listed[forks[0].sandbox_id].metadata == {"owner": "forks"}
    finally:
        for box in forks:
            box.kill()
        parent.kill()
    with pytest.raises(SandboxException, match="sb-nope"):
        Sandbox.fork("sb-nope")


def test_unknown_sandboxes_and_wrong_keys_in_e2b_s_shapes(
    e2b_env: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = httpx.post(
        f"{e2b_env.url}/v2/sandboxes/sb-nope/connect",
        json={},
        headers={"X-API-Key": e2b_env.token},
    )
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == 404 and "sb-nope" in body["message"]
    with pytest.raises(SandboxException, match="sb-nope"):
        Sandbox.connect("sb-nope")
    with pytest.raises(SandboxException):
        Sandbox.set_timeout("sb-nope", 30)
    monkeypatch.setenv("E2B_API_KEY", "not-the-token")
    with pytest.raises(AuthenticationException):
        Sandbox.create()
    envd = httpx.get(
        f"{e2b_env.url}/files",
        params={"path": "/etc/hostname"},
        headers={"E2b-Sandbox-Id": "sb-nope", "X-Access-Token": "wrong"},
    )
    assert envd.status_code == 401 and envd.json()["code"] == 401


def test_rename_moves_a_file_or_folder_and_is_running_ends_with_kill(e2b_env: Running) -> None:
    """``files.rename`` (envd's Move) and ``is_running`` (envd's health of the sandbox the
    call names): True while it runs, False once killed, as E2B's proxy answers."""
    sandbox = Sandbox.create()
    try:
        sandbox.files.write("/tmp/r/a.txt", "moved\n")
        entry = sandbox.files.rename("/tmp/r/a.txt", "/tmp/r/b.txt")
        assert (entry.name, entry.path, entry.size) == ("b.txt", "/tmp/r/b.txt", 6)
        assert sandbox.files.read("/tmp/r/b.txt") == "moved\n"
        assert not sandbox.files.exists("/tmp/r/a.txt")
        folder = sandbox.files.rename("/tmp/r", "/tmp/s")
        assert folder.type is not None and folder.type.value == "dir"
        assert sandbox.files.read("/tmp/s/b.txt") == "moved\n"
        with pytest.raises(FileNotFoundException):
            sandbox.files.rename("/tmp/nothing", "/tmp/else")
        assert sandbox.is_running() is True
    finally:
        sandbox.kill()
    assert sandbox.is_running() is False

    short = Sandbox.create(timeout=2)  # and once its timeout removed it
    for _ in range(60):
        if not short.is_running():
            break
        time.sleep(0.5)
    assert short.is_running() is False

    async def main() -> None:
        box = await AsyncSandbox.create()
        await box.files.write("/tmp/x", "x")
        assert (await box.files.rename("/tmp/x", "/tmp/y")).name == "y"
        assert await box.is_running() is True
        await box.kill()
        assert await box.is_running() is False

    asyncio.run(main())


def test_a_route_rock_does_not_serve_answers_in_the_shape_of_its_api(e2b_env: Running) -> None:
    """E2B's REST shape, Connect's for envd, the daemon's own for its API: never FastAPI's
    ``{"detail": ...}``, on which the SDK failed with ``KeyError: 'code'``."""
    rest = httpx.get(f"{e2b_env.url}/v2/nosuch", headers={"X-API-Key": e2b_env.token})
    assert rest.status_code == 501
    assert rest.json() == {"code": 501, "message": "rock's E2B API does not serve GET /v2/nosuch."}
    envd = httpx.post(
        f"{e2b_env.url}/filesystem.Filesystem/Nosuch",
        json={},
        headers={"E2b-Sandbox-Id": "sb-any", "Content-Type": "application/json"},
    )
    assert envd.status_code == 501 and envd.json()["code"] == "unimplemented"
    own = httpx.get(
        f"{e2b_env.url}/v1/nosuch", headers={"Authorization": f"Bearer {e2b_env.token}"}
    )
    assert own.status_code == 404 and own.json()["error"]["type"] == "NotFound"
    sandbox = Sandbox.create()
    try:
        with pytest.raises(SandboxException, match="does not serve POST /templates/tags"):
            Template.assign_tags("any-template:v1", ["new"])
    finally:
        sandbox.kill()


def test_get_metrics_is_a_sample_of_the_sandbox_now(e2b_env: Running) -> None:
    """One sample (rock keeps no history): a CPU-bound command shows as busy, memory within
    the sandbox's limit, the disk's use and size."""
    sandbox = Sandbox.create()
    try:
        sandbox.commands.run("sh -c 'while :; do :; done' >/dev/null 2>&1", background=True)
        (busy,) = sandbox.get_metrics()
        assert busy.cpu_count >= 1 and 1 < busy.cpu_used_pct <= 100  # (a busy machine shares)
        assert 0 < busy.mem_used < busy.mem_total
        assert 0 < busy.disk_used < busy.disk_total
    finally:
        sandbox.kill()


def test_update_network_opens_and_closes_a_sandbox_made_with_one(e2b_env: Running) -> None:
    """``allow_internet_access`` closes and opens the network of a sandbox made open; a
    sandbox made closed has none to open, and egress filters are refused, each in one
    sentence."""
    links = "ls /sys/class/net | grep -v '^lo$' | tr '\\n' ' '"
    sandbox = Sandbox.create(allow_internet_access=True)
    closed = Sandbox.create()
    try:
        assert sandbox.commands.run(links).stdout.split()  # an interface besides loopback
        sandbox.update_network({"allow_internet_access": False})
        assert sandbox.commands.run(links).stdout.split() == []
        sandbox.update_network({"allow_internet_access": True})
        assert sandbox.commands.run(links).stdout.split()
        with pytest.raises(SandboxException, match="was made without a network"):
            closed.update_network({"allow_internet_access": True})
        with pytest.raises(SandboxException, match="filters no egress"):
            sandbox.update_network({"allow_out": ["1.1.1.1"]})
    finally:
        sandbox.kill()
        closed.kill()


def test_pause_then_connect_resumes_where_it_was(e2b_env: Running) -> None:
    """``pause()`` (True, then False when already paused), ``is_running`` False and the
    sandbox listed as paused while it is; ``Sandbox.connect`` resumes it, processes and
    all (Docker's pause keeps memory: a counting loop goes on from its count)."""
    sandbox = Sandbox.create(timeout=60)
    try:
        # written then renamed, as a read between truncate and write would see ""
        loop = "i=0; while :; do i=$((i+1)); echo $i >/tmp/n.w; mv /tmp/n.w /tmp/n; sleep 0.1; done"
        sandbox.commands.run(f"sh -c '{loop}' >/dev/null 2>&1", background=True)
        time.sleep(0.5)
        assert sandbox.pause() is True
        assert sandbox.pause() is False  # already paused
        assert sandbox.is_running() is False
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sandbox.sandbox_id in {s.sandbox_id for s in paused}
        again = Sandbox.connect(sandbox.sandbox_id, timeout=60)
        assert again.is_running() is True
        first = int(again.commands.run("cat /tmp/n").stdout)  # (a copy of a file being
        time.sleep(0.6)  # written is refused as changed while copied)
        assert int(again.commands.run("cat /tmp/n").stdout) > first > 3
    finally:
        sandbox.kill()

    async def main() -> None:
        box = await AsyncSandbox.create()
        try:
            assert await box.pause() is True
            assert await box.is_running() is False
            back = await AsyncSandbox.connect(box.sandbox_id)
            assert (await back.commands.run("echo back")).stdout == "back\n"
        finally:
            await box.kill()

    asyncio.run(main())


def test_snapshots_are_templates_a_sandbox_starts_from(e2b_env: Running) -> None:
    """``create_snapshot`` commits the files of that moment; ``Sandbox.create`` with its id
    starts from them; ``list_snapshots`` finds it by sandbox; ``delete_snapshot`` refuses
    while a sandbox uses it, then removes it (False once gone)."""
    sandbox = Sandbox.create()
    child: Sandbox | None = None
    try:
        sandbox.files.write("/tmp/state", "at the snapshot\n")
        snap = sandbox.create_snapshot(name="first")
        assert snap.snapshot_id.endswith(f"{sandbox.sandbox_id}-first")
        sandbox.files.write("/tmp/state", "after\n")
        listed = Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id).next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        child = Sandbox.create(template=snap.snapshot_id)
        assert child.files.read("/tmp/state") == "at the snapshot\n"
        with pytest.raises(SandboxException, match="used by a sandbox"):
            Sandbox.delete_snapshot(snap.snapshot_id)
        child.kill()
        child = None
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        with pytest.raises(SandboxException, match="is not allowed"):
            sandbox.create_snapshot(name="no spaces")
    finally:
        if child is not None:
            child.kill()
        sandbox.kill()


def test_a_template_built_from_a_dockerfile_with_the_sdk_starts_sandboxes(
    e2b_env: Running, tmp_path: Path
) -> None:
    """``Template().from_dockerfile`` and ``Template.build`` build on rock, offline (the
    Dockerfile's base maps to a local image); COPY, RUN, ENV, WORKDIR and the SDK's own
    ``USER user`` arrive; ``alias_exists`` and ``get_tags`` see it; a sandbox from it has
    its files, its user and the template's limits; a failing step is a BuildException with
    its lines; an alias never built does not exist."""
    (tmp_path / "app.py").write_text("print('from the template')\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11-slim\nENV GREETING=hello\nWORKDIR /srv\n"
        "COPY app.py /srv/app.py\nRUN echo built > /srv/mark\n"
    )
    logs: list[str] = []
    template = Template(file_context_path=str(tmp_path)).from_dockerfile(
        str(tmp_path / "Dockerfile")
    )
    info = Template.build(
        template, name="rock-test-tpl:v1", cpu_count=1, memory_mb=512,
        on_build_logs=lambda entry: logs.append(entry.message),
    )  # fmt: skip
    assert info.template_id and any("is ready" in line for line in logs)
    assert Template.alias_exists("rock-test-tpl") and not Template.alias_exists("rock-never")
    assert [t.tag for t in Template.get_tags("rock-test-tpl")] == ["v1"]
    sandbox = Sandbox.create(template="rock-test-tpl:v1")
    try:
        run = sandbox.commands.run("python3 /srv/app.py; cat /srv/mark; echo $GREETING; whoami")
        assert run.stdout == "from the template\nbuilt\nhello\nuser\n"
        assert sandbox.commands.run("pwd").stdout == "/srv\n"
        (limits,) = sandbox.get_metrics()
        assert limits.mem_total == 512 * 2**20
    finally:
        sandbox.kill()
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11-slim\nRUN echo no-such-step >&2; exit 7\n"
    )
    broken = Template(file_context_path=str(tmp_path)).from_dockerfile(str(tmp_path / "Dockerfile"))
    with pytest.raises(BuildException, match="no-such-step"):
        Template.build(broken, name="rock-test-broken")


def test_e2b_s_user_runs_commands_and_owns_what_it_writes(e2b_env: Running) -> None:
    """The base image has E2B's ``user`` (home /home/user): a command as ``user`` runs as it,
    and a file written as ``user`` is its own; root stays the default, as rock documents."""
    sandbox = Sandbox.create()
    try:
        assert (
            sandbox.commands.run("whoami; echo $HOME", user="user").stdout == "user\n/home/user\n"
        )
        assert sandbox.commands.run("whoami").stdout == "root\n"
        sandbox.files.write("/home/user/notes.txt", "mine\n", user="user")
        owner = sandbox.commands.run("stat -c %U /home/user/notes.txt").stdout
        assert owner == "user\n"
    finally:
        sandbox.kill()


_SERVE = "mkdir -p /tmp/www && echo served > /tmp/www/hello.txt && cd /tmp/www && "
_SERVE += "python3 -m http.server {port} --bind 127.0.0.1 > /tmp/http.log 2>&1"


def _served(sandbox: Sandbox, port: int) -> None:
    sandbox.commands.run(_SERVE.format(port=port), background=True)
    for _ in range(50):  # until it listens
        probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\""
        if sandbox.commands.run(f"{probe} 2>/dev/null && echo up || true").stdout == "up\n":
            return
        time.sleep(0.2)
    raise AssertionError("the web server in the sandbox did not start")


def test_a_port_in_the_sandbox_answers_at_e2b_s_host_name(e2b_env: Running) -> None:
    """``get_host(port)`` names ``{port}-{id}.{domain}``: a request with that Host reaches
    the web server inside (its network closed), with the sandbox's traffic token, or with
    none when it was made with public traffic; nothing listening is 502 in one sentence."""
    sandbox = Sandbox.create()
    public = Sandbox.create(network={"allow_public_traffic": True})
    try:
        _served(sandbox, 8000)
        host = sandbox.get_host(8000)
        assert host.startswith(f"8000-{sandbox.sandbox_id}.")
        token = {"e2b-traffic-access-token": sandbox.traffic_access_token or ""}
        got = httpx.get(f"{e2b_env.url}/hello.txt?x=1", headers={"Host": host, **token})
        assert got.status_code == 200 and got.text == "served\n"
        refused = httpx.get(f"{e2b_env.url}/hello.txt", headers={"Host": host})
        assert refused.status_code == 403 and "traffic access token" in refused.json()["message"]
        idle = httpx.get(f"{e2b_env.url}/", headers={"Host": sandbox.get_host(9), **token})
        assert idle.status_code == 502
        assert idle.json()["message"].startswith("nothing listens on port 9 in sandbox")
        _served(public, 8080)
        free = httpx.get(f"{e2b_env.url}/hello.txt", headers={"Host": public.get_host(8080)})
        assert free.status_code == 200 and free.text == "served\n"
    finally:
        sandbox.kill()
        public.kill()


def test_a_background_command_is_listed_and_connected_to_from_another_handle(
    e2b_env: Running,
) -> None:
    """``commands.list`` shows a running command as it was started; ``commands.connect(pid)``
    gets what it printed before and what it prints after, and its end; once it ended it is
    not listed."""
    sandbox = Sandbox.create()
    try:
        handle = sandbox.commands.run(
            "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.3; done", background=True, cwd="/tmp"
        )
        time.sleep(0.7)
        (listed,) = [p for p in sandbox.commands.list() if p.pid == handle.pid]
        assert listed.cmd == "/bin/bash" and "line$i" in " ".join(listed.args)
        assert listed.cwd == "/tmp"
        again = sandbox.commands.connect(handle.pid)
        result = again.wait()
        assert result.exit_code == 0
        assert result.stdout == "".join(f"line{i}\n" for i in range(1, 7))
        assert handle.pid not in {p.pid for p in sandbox.commands.list()}
        with pytest.raises(SandboxException, match="not found"):
            sandbox.commands.connect(handle.pid)
    finally:
        sandbox.kill()


def test_a_command_started_with_stdin_reads_what_is_sent_until_it_is_closed(
    e2b_env: Running,
) -> None:
    """``stdin=True``, ``send_stdin`` twice, ``close_stdin``: python reads both lines, then
    its end of input, and exits; a command started without stdin refuses input in one
    sentence."""
    sandbox = Sandbox.create()
    try:
        handle = sandbox.commands.run("python3 -u", background=True, stdin=True)
        sandbox.commands.send_stdin(handle.pid, "x = 6\n")
        sandbox.commands.send_stdin(handle.pid, "print(x * 7)\n")
        sandbox.commands.close_stdin(handle.pid)
        result = handle.wait()
        assert (result.exit_code, result.stdout) == (0, "42\n")
        plain = sandbox.commands.run("sleep 20", background=True)
        with pytest.raises(SandboxException, match="started without stdin"):
            sandbox.commands.send_stdin(plain.pid, "x")
        plain.kill()
    finally:
        sandbox.kill()


@pytest.mark.parametrize("holder", ["stdin", "pty"])
def test_closing_stdin_as_the_command_ends_keeps_its_exit_status(
    tmp_path: Path, holder: str
) -> None:
    """CloseStdin's SIGUSR1 interrupts the holder's ``wait``; when the command ended in that
    moment the holder said 138 (128 + SIGUSR1) for a command that exited 0 (seen in CI:
    ``python3 -u`` fed two lines, then its stdin closed). Here the command sends the signal
    to the holder itself as it exits, 20 times."""
    codes = []
    for i in range(20):
        fifo = str(tmp_path / f"in{i}")
        command = ["sh", "-c", f'kill -USR1 "$(cat {fifo}.pid)"; exit 0']
        argv = (
            ["bash", "-c", _STDIN_HOLDER, "rock-stdin", fifo, *command]
            if holder == "stdin"
            else ["bash", "-c", _PTY_HOLDER, "rock-pty", fifo, "24", "80", *command]
        )
        codes.append(subprocess.run(argv, capture_output=True, timeout=30).returncode)
    assert codes == [0] * 20


def test_a_pty_runs_an_interactive_shell_and_resizes(e2b_env: Running) -> None:
    """``pty.create`` starts bash in a terminal: what is typed is run (and echoed, as a
    terminal does), ``resize`` changes the size the program sees, ``exit`` ends it; then a
    program in the pty (python's REPL) answers what is typed."""
    sandbox = Sandbox.create()
    try:
        term = sandbox.pty.create(PtySize(rows=24, cols=80))
        sandbox.pty.send_stdin(term.pid, b"echo hello-$((6*7)); stty size\n")
        time.sleep(1.5)  # (bash has run it at the first size before the resize)
        sandbox.pty.resize(term.pid, PtySize(rows=30, cols=100))
        sandbox.pty.send_stdin(term.pid, b"stty size; python3 -q\n")
        time.sleep(1.5)
        sandbox.pty.send_stdin(term.pid, b"print(6 * 7 + 1)\n")
        sandbox.pty.send_stdin(term.pid, b"exit()\nexit\n")
        seen: list[bytes] = []
        result = term.wait(on_pty=seen.append)
        text = b"".join(seen).decode(errors="replace")
        assert result.exit_code == 0, text
        assert "hello-42" in text and "24 80" in text and "30 100" in text, text
        assert "\r\n43\r\n" in text, text  # the REPL's answer, with a terminal's line ends
        idle = sandbox.pty.create(PtySize(rows=24, cols=80))
        assert sandbox.pty.kill(idle.pid) is True
        with pytest.raises(CommandExitException):
            idle.wait()
    finally:
        sandbox.kill()
    with pytest.raises(SandboxException, match=r"not running|not found"):  # a sandbox gone
        sandbox.pty.create(PtySize(rows=24, cols=80))


def test_a_folder_watch_reports_what_changed_sync_and_async(e2b_env: Running) -> None:
    """``files.watch_dir``: files made, written, re-moded and removed are reported by name
    (polled: a rename shows as a removal and a creation); the async SDK's stream too."""
    sandbox = Sandbox.create()
    try:
        sandbox.files.make_dir("/tmp/w")
        handle = sandbox.files.watch_dir("/tmp/w")
        sandbox.files.write("/tmp/w/a.txt", "one\n")
        made = handle.get_new_events()
        assert [(e.name, e.type.name) for e in made] == [("a.txt", "CREATE")]
        sandbox.commands.run("echo more >> /tmp/w/a.txt; chmod 600 /tmp/w/a.txt")
        assert [e.type.name for e in handle.get_new_events()] == ["WRITE"]
        sandbox.commands.run("chmod 644 /tmp/w/a.txt")
        assert [e.type.name for e in handle.get_new_events()] == ["CHMOD"]
        sandbox.files.remove("/tmp/w/a.txt")
        assert [(e.name, e.type.name) for e in handle.get_new_events()] == [("a.txt", "REMOVE")]
        handle.stop()
    finally:
        sandbox.kill()

    async def main() -> None:
        box = await AsyncSandbox.create()
        try:
            await box.files.make_dir("/tmp/w")
            seen: list[tuple[str, str]] = []
            watch = await box.files.watch_dir(
                "/tmp/w", on_event=lambda e: seen.append((e.name, e.type.name))
            )
            await box.files.write("/tmp/w/b.txt", "b")
            for _ in range(40):
                if seen:
                    break
                await asyncio.sleep(0.1)
            assert seen == [("b.txt", "CREATE")]
            await watch.stop()
        finally:
            await box.kill()

    asyncio.run(main())


def test_the_async_sdk_reaches_the_rest_of_it(e2b_env: Running, tmp_path: Path) -> None:
    """The async SDK over the same routes: stdin, list and connect, a pty, metrics, a network
    update, a snapshot a sandbox starts from, and a template built with AsyncTemplate."""
    from e2b import AsyncTemplate

    async def main() -> None:
        box = await AsyncSandbox.create(allow_internet_access=True)
        child: AsyncSandbox | None = None
        snap = None
        try:
            fed = await box.commands.run("python3 -u", background=True, stdin=True)
            assert fed.pid in {p.pid for p in await box.commands.list()}
            await box.commands.send_stdin(fed.pid, "print(40 + 2)\n")
            follower = await box.commands.connect(fed.pid)  # (before it ends)
            await box.commands.close_stdin(fed.pid)
            assert (await follower.wait()).stdout == "42\n"
            seen: list[bytes] = []
            term = await box.pty.create(PtySize(rows=24, cols=80), on_data=seen.append)
            await box.pty.send_stdin(term.pid, b"echo from-$((40+2)); exit\n")
            assert (await term.wait()).exit_code == 0
            assert b"from-42" in b"".join(seen)
            (metric,) = await box.get_metrics()
            assert metric.mem_total > 0
            await box.update_network({"allow_internet_access": False})
            links = "ls /sys/class/net | grep -v '^lo$' | wc -l"
            assert (await box.commands.run(links)).stdout.strip() == "0"
            await box.files.write("/tmp/kept", "snap\n")
            snap = await box.create_snapshot()
            child = await AsyncSandbox.create(template=snap.snapshot_id)
            assert await child.files.read("/tmp/kept") == "snap\n"
        finally:
            if child is not None:
                await child.kill()
            await box.kill()
            if snap is not None:  # (a snapshot outlives its sandbox, as E2B's do)
                assert await AsyncSandbox.delete_snapshot(snap.snapshot_id)
        (tmp_path / "Dockerfile").write_text("FROM rock/base:bookworm\nRUN echo async > /x\n")
        template = Template(file_context_path=str(tmp_path)).from_dockerfile(
            str(tmp_path / "Dockerfile")
        )
        await AsyncTemplate.build(template, name="rock-test-async:v1")
        built = await AsyncSandbox.create(template="rock-test-async:v1")
        try:
            assert (await built.commands.run("cat /x")).stdout == "async\n"
        finally:
            await built.kill()

    asyncio.run(main())
