"""The `rock` verbs against a real daemon (`rock serve` in a subprocess) and a real engine."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner, Result

from rock.backends.base import LABEL_DAEMON
from rock.cli import main
from rock.images.base import BASE_IMAGE

_CLEAN_ENV = {"ROCK_URL": None, "ROCK_TOKEN": None, "ROCK_HOME": None}


def rock(*args: str, input: bytes | str | None = None) -> Result:
    return CliRunner(env=_CLEAN_ENV).invoke(main, list(args), input=input)


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[Path]:
    """A `rock serve` subprocess on a free port; yields its home."""
    home = tmp_path_factory.mktemp("rock-home")
    daemon_id = f"pytest-cli-{secrets.token_hex(4)}"
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    log = (home / "serve.log").open("wb")
    command = [sys.executable, "-m", "rock.cli", "serve", "--home", str(home), "--port", "0"]
    command += ["--daemon-id", daemon_id, "--log-level", "warning", "--grace", "2"]
    proc = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not (home / "daemon.json").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rock serve did not start: {(home / 'serve.log').read_text()}")
            time.sleep(0.05)
        yield home
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        # what the daemon left: one list call, no inspect of each, and time to answer (an
        # engine still removing a gVisor sandbox's fork bomb took over 30 s in CI)
        api, waited = docker_client.api, docker_client.api.timeout
        api.timeout = 180
        try:
            for found in api.containers(all=True, filters={"label": f"{LABEL_DAEMON}={daemon_id}"}):
                api.remove_container(found["Id"], force=True)
        finally:
            api.timeout = waited


@pytest.fixture(scope="module")
def box(daemon: Path) -> str:
    """One sandbox made with `rock sandbox create`, shared by the verbs' tests."""
    result = rock(
        "sandbox", "create", "--home", str(daemon), "--label", "suite=cli", "--env", "GREETING=hi"
    )
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


@pytest.mark.docker
def test_create_then_ls_table_and_json(daemon: Path, box: str) -> None:
    assert box.startswith("sb-")
    table = rock("sandbox", "ls", "--home", str(daemon), "--label", "suite=cli")
    assert table.exit_code == 0, table.output
    header, *rows = table.stdout.splitlines()
    assert header.split()[:5] == ["ID", "STATE", "POOL", "IMAGE", "AGE"]
    assert [row.split()[:4] for row in rows] == [[box, "busy", "-", BASE_IMAGE]]

    listed = rock("sandbox", "ls", "--home", str(daemon), "--json", "--state", "busy")
    infos = {info["id"]: info for info in json.loads(listed.stdout)}
    assert infos[box]["labels"] == {"suite": "cli"}
    assert infos[box]["spec"]["env"] == {"GREETING": "hi"}

    as_json = rock("sandbox", "create", "--home", str(daemon), "--no-pool", "--json")
    info = json.loads(as_json.stdout)
    assert info["state"] == "busy" and info["image"] == BASE_IMAGE
    assert rock("sandbox", "rm", "--home", str(daemon), info["id"]).exit_code == 0


@pytest.mark.docker
def test_exec_streams_bytes_and_exit_code(daemon: Path, box: str) -> None:
    home = ["--home", str(daemon)]
    result = rock("sandbox", "exec", *home, box, "printf 'a\\0\\377'; echo oops >&2; exit 3")
    assert result.exit_code == 3
    assert result.stdout_bytes == b"a\x00\xff"
    assert result.stderr == "oops\n"

    argv = rock("sandbox", "exec", *home, "--env", "X=1", "--cwd", "/tmp", box, "--", "env")
    assert argv.exit_code == 0
    assert "X=1" in argv.stdout.splitlines() and "GREETING=hi" in argv.stdout.splitlines()

    piped = rock("sandbox", "exec", *home, "--stdin", box, "--", "wc", "-c", input=b"12345")
    assert (piped.exit_code, piped.stdout.strip()) == (0, "5")


@pytest.mark.docker
def test_exec_timeout_exits_124(daemon: Path, box: str) -> None:
    result = rock("sandbox", "exec", "--home", str(daemon), "--timeout", "0.5", box, "sleep 10")
    assert result.exit_code == 124
    assert "timed out after 0.5s" in result.stderr


@pytest.mark.docker
def test_shell_keeps_state_between_piped_lines(daemon: Path, box: str) -> None:
    lines = "cd /tmp\nexport N=7\npwd\necho n=$N $GREETING\n\nfalse\n"
    result = rock("sandbox", "shell", "--home", str(daemon), box, input=lines)
    assert result.stdout == "/tmp\nn=7 hi\n"
    assert result.exit_code == 1  # the last command's status
    assert "rock:" not in result.output  # no prompt when stdin is not a terminal
    closed = rock("sandbox", "shell", "--home", str(daemon), box, input="true\nexit 4\necho no\n")
    assert (closed.exit_code, closed.stdout) == (4, "")


@pytest.mark.docker
def test_cp_trees_both_ways(daemon: Path, box: str, tmp_path: Path) -> None:
    home = ["--home", str(daemon)]
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "sub" / "blob.bin").write_bytes(bytes(range(256)) * 64)

    assert rock("sandbox", "cp", *home, str(tree), f"{box}:/work/tree").exit_code == 0
    ran = rock("sandbox", "exec", *home, box, "/work/tree/run.sh && ls /work/tree/sub")
    assert ran.stdout == "ran\nblob.bin\n"
    # into an existing directory: under its own name, like docker cp
    assert rock("sandbox", "cp", *home, str(tree / "run.sh"), f"{box}:/work").exit_code == 0
    assert rock("sandbox", "exec", *home, box, "cat /work/run.sh").stdout == "#!/bin/sh\necho ran\n"

    back = tmp_path / "back"
    assert rock("sandbox", "cp", *home, f"{box}:/work/tree", str(back)).exit_code == 0
    assert (back / "sub" / "blob.bin").read_bytes() == bytes(range(256)) * 64
    assert os.access(back / "run.sh", os.X_OK)
    assert rock("sandbox", "cp", *home, f"{box}:/work/tree", str(back)).exit_code == 0
    assert (back / "tree" / "run.sh").exists()  # back exists now: the tree lands inside

    both = rock("sandbox", "cp", *home, str(tree), str(back))
    assert both.exit_code == 2
    assert both.stderr.startswith("rock: exactly one of") and "ID:PATH" in both.stderr
    missing = rock("sandbox", "cp", *home, f"{box}:/no/such", str(tmp_path / "x"))
    assert missing.exit_code == 1 and "/no/such does not exist" in missing.stderr


@pytest.fixture(scope="module")
def gvisor_box(daemon: Path) -> str:
    """A sandbox on gVisor, made with `rock sandbox create --runtime runsc`."""
    result = rock("sandbox", "create", "--home", str(daemon), "--runtime", "runsc", "--no-pool")
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_cp_lands_under_both_runtimes(
    daemon: Path, box: str, gvisor_box: str, runtime: str, tmp_path: Path
) -> None:
    """Under runsc a copy into /tmp exited 0 and never appeared, one into /root/ was listed
    but could not be opened, and a folder into /tmp failed (issue 37)."""
    home = ["--home", str(daemon)]
    target = box if runtime == "runc" else gvisor_box
    probes = tmp_path / "probes.sh"
    probes.write_bytes(b"#!/bin/sh\necho probed\n")
    probes.chmod(0o755)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "data.bin").write_bytes(bytes(range(256)) * 100)

    for dst in (f"{target}:/tmp/probes.sh", f"{target}:/root/"):
        copied = rock("sandbox", "cp", *home, str(probes), dst)
        assert copied.exit_code == 0, copied.output
    ran = rock("sandbox", "exec", *home, target, "/tmp/probes.sh && /root/probes.sh")
    assert (ran.exit_code, ran.stdout) == (0, "probed\nprobed\n"), ran.output
    for dst in (f"{target}:/tmp", f"{target}:/new/place"):
        copied = rock("sandbox", "cp", *home, str(tree), dst)
        assert copied.exit_code == 0, copied.output
    listed = rock(
        "sandbox", "exec", *home, target, "wc -c /tmp/tree/sub/data.bin /new/place/sub/data.bin"
    )
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["25600", "25600", "51200"]
    back = tmp_path / "back"
    assert rock("sandbox", "cp", *home, f"{target}:/tmp/tree", str(back)).exit_code == 0
    assert (back / "sub" / "data.bin").read_bytes() == bytes(range(256)) * 100


def _one_sentence(result: Result, says: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("rock: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr and "Traceback" not in result.output


@pytest.mark.docker
def test_cp_refuses_bad_input_in_one_sentence_and_writes_nothing(
    daemon: Path, box: str, tmp_path: Path
) -> None:
    home = ["--home", str(daemon)]
    small = tmp_path / "small.txt"
    small.write_bytes(b"small\n")
    gone = rock("sandbox", "cp", *home, str(small), "sb-not-there:/tmp/small.txt")
    _one_sentence(gone, "no sandbox sb-not-there")
    outside = rock("sandbox", "cp", *home, str(small), f"{box}:/../../etc/small.txt")
    _one_sentence(outside, "climbs above the root of sandbox")
    outside = rock("sandbox", "cp", *home, f"{box}:/tmp/../../etc/passwd", str(tmp_path / "p"))
    _one_sentence(outside, "climbs above the root of sandbox")
    assert not (tmp_path / "p").exists()
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1 << 20) * 80)
    full = rock("sandbox", "cp", *home, str(big), f"{box}:/dev/shm/big.bin")
    _one_sentence(full, "/dev/shm in sandbox")
    assert "has no room for 80.0 MB; nothing was written" in full.stderr
    left = rock("sandbox", "exec", *home, box, "ls -A /dev/shm /etc/small.txt")
    assert left.stdout == "/dev/shm:\n" and "No such file" in left.stderr


@pytest.mark.docker
def test_logs_show_history_and_commands(daemon: Path, box: str) -> None:
    home = ["--home", str(daemon)]
    rock("sandbox", "exec", *home, box, "echo logged-line; exit 5")
    text = rock("sandbox", "logs", *home, box)
    assert text.exit_code == 0, text.output
    assert "ready -> busy" in text.stdout and "started for a client" in text.stdout
    assert "exit 5" in text.stdout and "echo logged-line; exit 5" in text.stdout
    assert "out| logged-line" in text.stdout

    as_json = json.loads(rock("sandbox", "logs", *home, "--json", box).stdout)
    assert as_json["sandbox"]["id"] == box
    assert [h["to_state"] for h in as_json["sandbox"]["history"]][-1] == "busy"
    last = as_json["commands"][-1]
    assert (last["command"], last["exit_code"]) == ("echo logged-line; exit 5", 5)


@pytest.mark.docker
def test_rm_removes_known_ids_and_reports_unknown(daemon: Path) -> None:
    home = ["--home", str(daemon)]
    made = rock("sandbox", "create", *home, "--no-pool").stdout.strip()
    result = rock("sandbox", "rm", *home, "sb-unknown", made)
    assert result.exit_code == 1
    assert result.stdout == f"{made}\n"
    assert result.stderr == "rock: no sandbox sb-unknown; list them with 'rock sandbox ls'.\n"
    states = json.loads(rock("sandbox", "ls", *home, "--all", "--json").stdout)
    assert {info["id"]: info["state"] for info in states}[made] == "deleted"


@pytest.mark.docker
def test_pool_set_wait_create_from_it_and_rm(daemon: Path) -> None:
    home = ["--home", str(daemon)]
    made = rock("pool", "set", *home, "cli-warm", "--min-idle", "1", "--max-total", "2", "--wait")
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith("pool cli-warm: 1 idle")

    pools = {p["name"]: p for p in json.loads(rock("pool", "ls", *home, "--json").stdout)}
    assert pools["cli-warm"]["idle"] == 1 and pools["cli-warm"]["max_total"] == 2
    table = rock("pool", "ls", *home).stdout.splitlines()
    assert table[0].split()[:2] == ["NAME", "IDLE"] and table[1].split()[:2] == ["cli-warm", "1"]

    taken = rock("sandbox", "create", *home, "--pool", "cli-warm", "--json")
    assert json.loads(taken.stdout)["pool"] == "cli-warm"
    # a change keeps what was not given
    resized = json.loads(rock("pool", "set", *home, "cli-warm", "--min-idle", "0", "--json").stdout)
    assert (resized["min_idle"], resized["max_total"]) == (0, 2)

    assert rock("pool", "rm", *home, "cli-warm").exit_code == 0
    gone = rock("sandbox", "create", *home, "--pool", "cli-warm")
    assert gone.exit_code == 1
    assert gone.stderr == "rock: no pool named cli-warm; list them with 'rock pool ls'.\n"
    rock("sandbox", "rm", *home, json.loads(taken.stdout)["id"])


@pytest.mark.docker
def test_image_ls_through_daemon_and_without_one(daemon: Path, tmp_path: Path) -> None:
    via_daemon = rock("image", "ls", "--home", str(daemon), "--json")
    assert via_daemon.exit_code == 0, via_daemon.output
    assert any(BASE_IMAGE in image["tags"] for image in json.loads(via_daemon.stdout))

    direct = rock("image", "ls", "--home", str(tmp_path), "--url", "http://127.0.0.1:9")
    direct_json = rock("image", "ls", "--url", "http://127.0.0.1:9", "--retries", "0", "--json")
    assert direct.exit_code == 0 and BASE_IMAGE in direct.stdout
    assert "no daemon answers" in direct.stderr
    assert any(BASE_IMAGE in image["tags"] for image in json.loads(direct_json.stdout))


# --- bad input and no daemon: no engine or daemon needed ----------------------------------


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["serve", "--pool", "warm=2"],
            "rock: --pool warm=2 is not NAME=MIN:MAX[:IMAGE]; write it like warm=2:8",
        ),
        (["serve", "--pool", "warm=9:2"], "rock: --pool warm=9:2: MIN (9) must not exceed MAX"),
        (
            ["sandbox", "create", "--env", "NOEQUALS"],
            "rock: --env NOEQUALS is not KEY=VALUE; write it like --env NOEQUALS=value.",
        ),
        (["sandbox", "ls", "--label", "=x"], "rock: --label =x is not KEY=VALUE"),
        (["serve", "--host", "0.0.0.0"], "rock: --host 0.0.0.0 is not a loopback address"),
        (["serve", "--daemon-id", "../x"], "rock: --daemon-id '../x' is not a daemon id"),
    ],
)
def test_bad_input_is_one_sentence(args: list[str], sentence: str, tmp_path: Path) -> None:
    result = rock(*args, "--home", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.startswith(sentence)
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "daemon.json").exists()


def test_serve_host_refusal_says_why(tmp_path: Path) -> None:
    result = rock("serve", "--host", "0.0.0.0", "--home", str(tmp_path))
    assert "runs commands" in result.stderr and "--allow-remote" in result.stderr


@pytest.mark.parametrize(
    "verb",
    [
        ["sandbox", "ls"],
        ["sandbox", "create"],
        ["sandbox", "exec", "sb-1", "true"],
        ["sandbox", "shell", "sb-1"],
        ["sandbox", "cp", "sb-1:/a", "b"],
        ["sandbox", "rm", "sb-1"],
        ["sandbox", "logs", "sb-1"],
        ["pool", "set", "p"],
        ["pool", "ls"],
        ["pool", "rm", "p"],
    ],
)
def test_no_daemon_is_one_sentence_and_quick(verb: list[str], tmp_path: Path) -> None:
    started = time.monotonic()
    result = rock(*verb, "--home", str(tmp_path), "--url", "http://127.0.0.1:9", "--retries", "0")
    assert time.monotonic() - started < 5
    assert result.exit_code == 1
    assert result.stderr.startswith("rock: no rock daemon answers at http://127.0.0.1:9")
    assert "rock serve" in result.stderr and len(result.stderr.splitlines()) == 1


def test_every_verb_has_help() -> None:
    verbs = [
        ["serve"],
        *(["sandbox", v] for v in ("create", "ls", "exec", "shell", "cp", "rm", "logs")),
        *(["pool", v] for v in ("set", "ls", "rm")),
        ["image", "ls"],
    ]
    for verb in verbs:
        result = rock(*verb, "--help")
        assert result.exit_code == 0, verb
        assert len(result.stdout.split("\n\n")[1].strip()) > 20, verb  # a described command


def _cli(*args: str) -> subprocess.Popen[bytes]:
    """`rock ARGS` as a process of its own, to send Ctrl-C (SIGINT) to."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    return subprocess.Popen(
        [sys.executable, "-m", "rock.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # as from a terminal: a test run started in the background (CI) ignores SIGINT, and
        # its children would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


_SLEEPERS = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 3[78]'"


def _running_there(home: Path, box: str, command: str, proc: subprocess.Popen[bytes]) -> None:
    """Wait until ``command`` runs in sandbox ``box``: Ctrl-C sent before then would find
    the CLI still starting (a busy machine takes seconds to import it)."""
    probe = (  # (the pattern's quotes keep it from matching the probe's own command line)
        "for p in /proc/[0-9]*; do a=(); mapfile -d '' -t a <$p/cmdline 2>/dev/null; "
        f'[ "${{a[*]}}" = "{command[0]}""{command[1:]}" ] && echo "${{p#/proc/}}"; done | wc -l'
    )
    deadline = time.monotonic() + 120
    while rock("sandbox", "exec", "--home", str(home), box, probe).stdout.strip() in ("", "0"):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{command!r} did not start in the sandbox"
        time.sleep(0.2)


_STRAYS = (
    "for p in /proc/[0-9]*; do a=(); mapfile -d '' -t a <$p/cmdline 2>/dev/null; "
    'case "${a[*]}" in "sleep 99"[9]|*":()"[{]*) echo "${p#/proc/}";; esac; done | wc -l'
)  # (the patterns' brackets keep this probe from matching its own command line)


GVISOR_BOMBS = pytest.mark.xdist_group("gvisor-bombs")
"""Fork bombs under gVisor run one at a time (with test_process_lifetime's): each takes the
machine's CPU in gVisor's own threads, and two at once on 2 cores starved each other's
keeper (seen in CI)."""


def _none_left(home: Path, box: str) -> Result:
    """Count the issue's processes in ``box`` until none are left (a kill takes a moment to
    land), for three minutes at most (gVisor on a loaded 2-core machine was seen taking more
    than one), each count within 60 s; the last count."""
    deadline = time.monotonic() + 180
    while True:
        left = rock("sandbox", "exec", "--home", str(home), "--timeout", "60", box, _STRAYS)
        if left.stdout.strip() == "0" or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=GVISOR_BOMBS)])
def test_the_issue_s_escapes_through_the_cli_leave_nothing(daemon: Path, runtime: str) -> None:
    """The reproductions of issue 37, as written: a process moved to a new session outlives
    a timeout no more, and a fork bomb leaves nothing behind; the next command runs. Under
    gVisor, at the default pids limit of 512, the bomb holds every pid when the timeout
    comes, so the keeper ends it (its process group, killed until empty)."""
    made = rock("sandbox", "create", "--home", str(daemon), "--runtime", runtime)
    assert made.exit_code == 0, made.output
    box = made.stdout.strip()
    try:
        began = time.monotonic()
        cut = rock(
            "sandbox", "exec", "--home", str(daemon), "--timeout", "3", box, "--",
            "(setsid sleep 999 &); sleep 30",
        )  # fmt: skip
        assert cut.exit_code == 124, cut.output
        left = _none_left(daemon, box)
        assert left.exit_code == 0 and left.stdout.strip() == "0", left.output
        # gone at the timeout: when the command's own `sleep 30` ends, what still writes to
        # its output is reaped anyway, so only a count before then tells
        assert time.monotonic() - began < 25
        bomb = rock(
            "sandbox", "exec", "--home", str(daemon), "--timeout", "40", box, "--",
            'timeout 10 bash -c ":(){ :|:& };:"',
        )  # fmt: skip
        assert bomb.exit_code in (0, 124), bomb.output
        ended = time.monotonic()
        left = _none_left(daemon, box)
        assert left.exit_code == 0 and left.stdout.strip() == "0", (
            f"{left.output.strip()} (the bomb's command exited {bomb.exit_code} after "
            f"{ended - began:.0f} s of the test; counted for {time.monotonic() - ended:.0f} s)"
        )
    finally:
        rock("sandbox", "rm", "--home", str(daemon), box)


@pytest.mark.docker
def test_fork_prints_a_new_sandbox_with_the_files_of_that_moment(daemon: Path) -> None:
    home = ["--home", str(daemon)]
    parent = rock("sandbox", "create", *home).stdout.strip()
    try:
        assert rock("sandbox", "exec", *home, parent, "echo kept > /tmp/f").exit_code == 0
        made = rock("sandbox", "fork", *home, "--count", "2", parent)
        assert made.exit_code == 0, made.output
        forks = made.stdout.split()
        assert len(forks) == 2 and parent not in forks and all(f.startswith("sb-") for f in forks)
        assert rock("sandbox", "exec", *home, forks[1], "cat /tmp/f").stdout == "kept\n"
        assert rock("sandbox", "rm", *home, *forks).exit_code == 0
    finally:
        rock("sandbox", "rm", *home, parent)
    missing = rock("sandbox", "fork", *home, "sb-000000000000")
    assert missing.exit_code == 1 and len(missing.output.strip().splitlines()) == 1
    assert "no sandbox sb-000000000000" in missing.output


@pytest.mark.docker
def test_pause_and_resume_through_the_cli(daemon: Path) -> None:
    home = ["--home", str(daemon)]
    box = rock("sandbox", "create", *home).stdout.strip()
    try:
        paused = rock("sandbox", "pause", *home, box)
        assert paused.exit_code == 0 and paused.stdout == f"{box} paused\n"
        refused = rock("sandbox", "exec", *home, box, "true")
        assert refused.exit_code == 1 and len(refused.output.strip().splitlines()) == 1
        assert f"sandbox {box} is paused; resume it first" in refused.output
        assert rock("sandbox", "resume", *home, box).stdout == f"{box} resumed\n"
        assert rock("sandbox", "exec", *home, box, "echo on").stdout == "on\n"
        again = rock("sandbox", "resume", *home, box)
        assert again.exit_code == 1 and "is busy, not paused" in again.output
    finally:
        rock("sandbox", "rm", *home, box)


@pytest.mark.docker
def test_ctrl_c_in_exec_stops_the_command_in_the_sandbox(daemon: Path, box: str) -> None:
    proc = _cli(  # with a process that left the command's session: it goes too
        "sandbox", "exec", "--home", str(daemon), box, "(setsid sleep 38 &); sleep 37; echo never"
    )
    _running_there(daemon, box, "sleep 37", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)  # well before the command would end
    assert proc.returncode == 130, err
    assert b"interrupted; the command was stopped in the sandbox" in err and b"never" not in out
    left = rock("sandbox", "exec", "--home", str(daemon), box, _SLEEPERS)
    assert left.stdout.strip() == "0"  # nothing left running there


@pytest.mark.docker
def test_ctrl_c_in_shell_stops_the_command_and_keeps_the_shell(daemon: Path, box: str) -> None:
    proc = _cli("sandbox", "shell", "--home", str(daemon), box)
    assert proc.stdin is not None
    proc.stdin.write(b"cd /tmp\nsleep 38\n")
    proc.stdin.flush()
    _running_there(daemon, box, "sleep 38", proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    out, err = proc.communicate(b"pwd\necho after\n", timeout=30)
    assert proc.returncode == 0, err
    assert out.decode().splitlines() == ["/tmp", "after"]  # the same shell, cd and all
    assert b"^C" in err
    left = rock("sandbox", "exec", "--home", str(daemon), box, _SLEEPERS)
    assert left.stdout.strip() == "0"
