"""A docker sandbox starts its commands through one long-lived agent in it, not a
``docker exec`` each (`rock.backends._exec_agent`), and a command sees no difference."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import docker
import pytest

from rock.backends.docker import DockerBackend
from rock.backends.docker_sandbox import DockerSandbox
from rock.images.base import BASE_IMAGE
from rock.models import ExecRequest, ExecResult, SandboxSpec

pytestmark = pytest.mark.docker

_SPEC = SandboxSpec(memory_mb=256, pids_limit=128, env={"FROM_SPEC": "yes"})


@pytest.fixture(scope="module")
def backend(docker_client: docker.DockerClient) -> DockerBackend:
    return DockerBackend(docker_client, daemon_id="pytest-agent")


@pytest.fixture
def sandbox(backend: DockerBackend) -> Iterator[DockerSandbox]:
    with backend.create(_SPEC) as sb:
        yield sb


def _count_execs(sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The programs the sandbox starts by ``docker exec`` from now on."""
    started: list[object] = []
    exec_create = sandbox._api.exec_create

    def counting(container: str, cmd: object, **kwargs: object) -> dict[str, str]:
        started.append(cmd)
        return exec_create(container, cmd, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(sandbox._api, "exec_create", counting)
    return started


def test_a_sandbox_s_commands_start_through_one_exec(
    sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _count_execs(sandbox, monkeypatch)
    for i in range(10):
        result = sandbox.exec(f"echo out {i}; echo err >&2; exit {i}")
        assert (result.exit_code, result.stdout, result.stderr) == (
            i,
            f"out {i}\n".encode(),
            b"err\n",
        )
    assert len(started) == 1, started  # the agent's own


_PROBE = (
    "env | grep -v -e '^ROCK_EXEC_ID=' -e '^_=' | sort; pwd; id; ulimit -a; "
    'read -r line; echo "read: $line"; '
    # the command's root (its wrapper, this shell's parent) leads its own session and process
    # group, as under docker exec
    'read -r s </proc/$$/stat; s=${s##*) }; set -- $s; echo "pgid=$(($3 == $2)) sid=$(($4 == $2))"; '
    # its open files, by builtins (a pipeline's own pipes would come and go in a listing)
    'fds=(/proc/$$/fd/*); echo "fds: ${fds[*]##*/}"; '
    'for f in 0 1 2; do [ -p /proc/$$/fd/$f ] && echo "$f: pipe"; done; '
    "printf '\\0\\377binary'; kill -TERM $$"
)


def _without_hostname(out: bytes) -> bytes:
    """The output less its HOSTNAME line (each sandbox has its own)."""
    return b"\n".join(line for line in out.split(b"\n") if not line.startswith(b"HOSTNAME="))


def test_a_command_sees_what_a_docker_exec_would_give_it(backend: DockerBackend) -> None:
    """Environment (the image's, the sandbox's, the command's), working directory, user,
    limits, stdin, its own session, its open files, binary output and a status from a
    signal: the same through the agent as through ``docker exec``."""
    request = ExecRequest(command=_PROBE, cwd="/tmp", env={"FROM_COMMAND": "1"}, stdin=b"hi\n")
    results: dict[bool, ExecResult] = {}
    for agent in (True, False):
        with DockerBackend(backend.client, daemon_id="pytest-agent", exec_agent=agent).create(
            _SPEC
        ) as sb:
            sb.exec("true")  # (the first command learns whether the image has bash)
            results[agent] = sb.run(request)
            assert (sb._agent is not None) == agent
    by_agent, by_exec = results[True], results[False]
    assert by_exec.exit_code == 143 and b"FROM_SPEC=yes" in by_exec.stdout
    assert (
        b"read: hi\npgid=1 sid=1\nfds: 0 1 2 3\n0: pipe\n1: pipe\n2: pipe\n" in by_exec.stdout
        and by_exec.stdout.endswith(b"\0\377binary")
    )
    assert by_agent.exit_code == by_exec.exit_code
    assert _without_hostname(by_agent.stdout) == _without_hostname(by_exec.stdout)
    assert by_agent.stderr == by_exec.stderr


def test_commands_run_side_by_side_and_one_can_be_interrupted(sandbox: DockerSandbox) -> None:
    results: dict[int, ExecResult] = {}

    def run(i: int) -> None:
        command = "sleep 300" if i == 0 else f"sleep 0.{i}; seq {i * 1000} | tail -1"
        results[i] = sandbox.run(ExecRequest(command=command, tag=f"c{i}", timeout=120))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads[1:]:
        thread.join(60)
    assert sandbox.interrupt("c0") == 1
    threads[0].join(60)
    assert results[0].exit_code == 137 and not results[0].timed_out
    for i in range(1, 6):
        assert results[i].stdout == f"{i * 1000}\n".encode() and results[i].exit_code == 0


def test_a_command_that_kills_the_agent_leaves_the_sandbox_working(
    sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a command does to the agent (here: kills it) costs that command its answer, not
    the sandbox: the next command starts a new agent, and the killer's processes are ended."""
    sandbox.exec("true")
    started = _count_execs(sandbox, monkeypatch)
    killer = sandbox.exec(
        "sleep 333 & for p in /proc/[0-9]*; do "
        '[ "$(cat $p/comm 2>/dev/null)" = rock-exec-agent ] && kill -9 ${p#/proc/}; done; sleep 60',
        timeout=30,
    )
    assert killer.exit_code in (-1, 137) and not killer.timed_out
    after = sandbox.exec("echo still here; ps -eo args")
    assert after.stdout.startswith(b"still here\n") and b"sleep 333" not in after.stdout
    assert sum(1 for cmd in started if "rock-exec-agent" in str(cmd)) == 1


def test_an_agent_whose_daemon_went_ends_what_it_started(sandbox: DockerSandbox) -> None:
    sandbox.exec("true")
    agent = sandbox._agent
    assert agent is not None
    results: list[ExecResult] = []
    runner = threading.Thread(
        target=lambda: results.append(sandbox.run(ExecRequest(command="sleep 444", timeout=120)))
    )
    runner.start()
    for _ in range(100):
        if b"sleep 444" in sandbox.run(ExecRequest(command="ps -eo args", user="root")).stdout:
            break
    agent.close()  # as when the daemon's connection to it goes
    runner.join(60)
    assert not runner.is_alive() and results[0].exit_code != 0
    assert b"sleep 444" not in sandbox.exec("ps -eo args").stdout


def test_a_command_as_another_user_runs_by_exec(
    sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox.exec("true")
    started = _count_execs(sandbox, monkeypatch)
    assert sandbox.run(ExecRequest(command="id -un", user="nobody")).stdout == b"nobody\n"
    assert sandbox.exec("id -un").stdout == b"root\n"
    assert len(started) == 1


def test_a_command_with_a_big_input_runs_by_exec_which_streams_it(
    sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent gets a command's input whole (base64 in its request, held in the sandbox's
    memory): more than 1 MiB goes by exec, which streams it."""
    sandbox.exec("true")
    started = _count_execs(sandbox, monkeypatch)
    small = sandbox.run(ExecRequest(command="wc -c", stdin=b"x" * 1000))
    big = sandbox.run(ExecRequest(command="wc -c", stdin=b"x" * (3 << 20)))
    assert (small.stdout, big.stdout) == (b"1000\n", f"{3 << 20}\n".encode())
    assert len(started) == 1  # the big one's


def test_a_missing_working_directory_is_the_engine_s_answer_as_before(
    sandbox: DockerSandbox,
) -> None:
    result = sandbox.run(ExecRequest(command="pwd", cwd="/no/such/dir"))
    assert result.exit_code != 0 and b"/no/such/dir" in result.stdout + result.stderr


@pytest.fixture(scope="module")
def no_python_image(docker_client: docker.DockerClient) -> Iterator[str]:
    tag = "rock-test/no-python:agent"
    dockerfile = f"FROM {BASE_IMAGE}\nRUN rm -f /usr/bin/python3*\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def test_an_image_without_python_runs_its_commands_by_exec(
    backend: DockerBackend, no_python_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with backend.create(_SPEC.model_copy(update={"image": no_python_image})) as sb:
        started = _count_execs(sb, monkeypatch)
        for i in range(3):
            assert sb.exec(f"echo {i}").stdout == f"{i}\n".encode()
        assert sb._agent is None
        assert len(started) == 4  # one try of the agent, then an exec a command


def test_rock_exec_agent_0_runs_every_command_by_exec(
    docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_EXEC_AGENT", "0")
    with DockerBackend(docker_client, daemon_id="pytest-agent").create(_SPEC) as sb:
        started = _count_execs(sb, monkeypatch)
        for _ in range(3):
            sb.exec("true")
        assert len(started) == 3 and sb._agent is None
