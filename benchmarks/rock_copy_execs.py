"""rock's copies: one exec each way, and the reward read from the logs already copied out.

Every verification (a `rock bench` trial, a synthesized task's checks, an RL episode) copies
the tests in, runs them, copies /logs/verifier out and reads the reward. Each exec costs the
engine about 50 ms of CPU (dockerd, containerd, runc, a shell in the sandbox), and a copy
took two: unpack, then check and merge; tar out, then check. The reward was then read from
the sandbox again, reward.json (absent: one exec) and reward.txt (two). Now a copy in checks
and merges in the exec that unpacks it, a copy out prints its digests after its tar, and the
reward is read from the copy of the logs: 2 execs where there were 7.

Measured in one sandbox (rock's Docker backend, runc): a verification's copies, the tests
of a demo task in and the verifier's logs out with their reward, --rounds times each way,
interleaved. The baseline, in the same run, is the same copies made as they were before,
from the same module's scripts (PREPARE then FINISH in, PACK then FINISH out, and the two
reward reads). The figure is the baseline's time over rock's, in wall time and in CPU of the
whole machine (the engine's share included), per verification.

Usage: python benchmarks/rock_copy_execs.py [--rounds N]
"""

from __future__ import annotations

import argparse
import posixpath
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _rockbench import machine

from rock.backends import _copy
from rock.backends.base import SandboxError, pack_upload
from rock.backends.docker import DockerBackend
from rock.backends.docker_sandbox import DockerSandbox
from rock.engine import connect
from rock.models import SandboxSpec
from rock.verifier.run import REWARD_JSON, REWARD_TXT, VERIFIER_LOGS

TESTS = {
    "test.sh": "#!/bin/bash\npython3 -m pytest -q /tests/test_outputs.py\n",
    "test_outputs.py": "def test_output():\n    assert open('/app/answer.txt').read() == '3\\n'\n",
}
"""The shape of a demo task's tests: a script and a test file."""


def _cpu() -> float:
    """CPU seconds the whole machine has spent (all processes, the engine's too)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for v in fields) - int(fields[3]) - int(fields[4])  # less idle, iowait
    return busy / 100.0


def rock_now(box: DockerSandbox, tests: Path, out: Path) -> bytes:
    """A verification's copies as rock makes them."""
    box.upload(tests, "/tests")
    box.download(VERIFIER_LOGS, out)
    return (out / "reward.txt").read_bytes()


def before(box: DockerSandbox, tests: Path, out: Path) -> bytes:
    """The same copies, two execs each, and the reward read from the sandbox after them."""
    copier = _copy.Copier(box)
    data, target = pack_upload(tests, "/tests")
    expected = _copy.manifest(data, "tests")
    stage = posixpath.join(target, _copy.STAGE_PREFIX + secrets.token_hex(4))
    new = copier._step(_copy.PREPARE, target, stage, "1", stdin=data).stdout.decode()
    copier._step(_copy.FINISH, target, stage, new, "check-merge", stdin=expected.check_lines())
    reward = b""
    for path in (VERIFIER_LOGS, REWARD_JSON, REWARD_TXT):
        parent, base = posixpath.split(path)
        packed = copier._step(_copy.PACK, parent, base, max_output=1 << 62)
        if packed.exit_code == _copy.MISSING:
            continue
        got = _copy.manifest(packed.stdout, path)
        copier._step(_copy.FINISH, parent, "", "", "check", stdin=got.check_lines())
        reward = packed.stdout
    return reward


def _time(
    fn: Callable[[DockerSandbox, Path, Path], bytes], box: DockerSandbox, tests: Path, out: Path
) -> tuple[float, float]:
    began, cpu = time.monotonic(), _cpu()
    got = fn(box, tests, out)
    if b"1" not in got:
        raise SystemExit(f"rock_copy_execs: {fn.__name__} did not read the reward back")
    return time.monotonic() - began, _cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="verifications per variant")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    backend = DockerBackend(connect(), daemon_id="bench-copy")
    with tempfile.TemporaryDirectory() as tmp, backend.create(SandboxSpec()) as box:
        tests = Path(tmp) / "tests"
        tests.mkdir()
        for name, text in TESTS.items():
            (tests / name).write_text(text)
        made = box.exec(
            f"mkdir -p /app {VERIFIER_LOGS} && echo 3 > /app/answer.txt && "
            f"echo 1 > {REWARD_TXT} && seq 200 > {VERIFIER_LOGS}/test-output.txt"
        )
        if made.exit_code != 0:
            raise SandboxError(f"rock_copy_execs: set-up failed: {made.stderr_text}")
        rows: dict[str, list[float]] = {"rock": [0.0, 0.0], "before": [0.0, 0.0]}
        for i in range(args.rounds * 2 + 4):
            name = "rock" if i % 2 else "before"
            wall, cpu = _time(rock_now if i % 2 else before, box, tests, Path(tmp) / f"o{i}")
            if i >= 4:  # the first two of each warm up
                rows[name][0] += wall / args.rounds
                rows[name][1] += cpu / args.rounds
    labels = {"rock": "rock (2 execs)", "before": "baseline: before (7 execs)"}
    for name, (wall, cpu) in rows.items():
        print(f"{labels[name]:27s} a verification's copies {wall * 1000:5.0f} ms wall, "
              f"{cpu * 1000:5.0f} ms CPU")  # fmt: skip
    (wall, cpu), (base_wall, base_cpu) = rows["rock"], rows["before"]
    print(
        f"a verification's copies: {base_wall / wall:.2f}x faster ({base_cpu / cpu:.2f}x less "
        "CPU) than the copies before"
    )


if __name__ == "__main__":
    main()
