"""gVisor (runsc) against Docker's own runtime (runc, the baseline) for rock sandboxes, in
one run: start time, exec round trip, a CPU-bound command and a file-heavy one.

Each sandbox is made by rock's Docker backend with the default spec (no network, 1 CPU,
1 GiB), once per runtime, alternating, so drift hits both. Start: ``create`` until the
first command has answered. Exec: ``true`` through ``exec``. CPU: a Python loop of 3
million additions. Files: 2,000 small files written, listed and removed (system calls,
where gVisor's own kernel costs most). Figures are medians; the ratio is runsc / runc.

Usage: python benchmarks/rock_runtimes.py [--starts 8] [--execs 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _rockbench import machine

from rock.backends.docker import DockerBackend
from rock.engine import connect
from rock.models import SandboxSpec

CPU = "python3 -c 'n = 0\nfor i in range(3_000_000): n += i'"
FILES = (
    "mkdir -p /tmp/f && cd /tmp/f && for i in $(seq 2000); do echo $i > $i; done "
    "&& ls | wc -l >/dev/null && cd / && rm -rf /tmp/f"
)


def timed(run) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=8)
    parser.add_argument("--execs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    backend = DockerBackend(connect(), daemon_id="bench-runtimes")
    runtimes = ("runc", "runsc")
    figures: dict[str, dict[str, list[float]]] = {
        r: {"start": [], "exec": [], "cpu": [], "files": []} for r in runtimes
    }
    for _ in range(args.starts):
        for runtime in runtimes:
            t = time.perf_counter()
            sandbox = backend.create(SandboxSpec(runtime=runtime))
            try:
                assert sandbox.exec("true").exit_code == 0
                figures[runtime]["start"].append(time.perf_counter() - t)
            finally:
                sandbox.delete()
    sandboxes = {r: backend.create(SandboxSpec(runtime=r)) for r in runtimes}
    try:
        for sandbox in sandboxes.values():
            for _ in range(5):
                sandbox.exec("true")  # warm
        for _ in range(args.execs):
            for runtime, sandbox in sandboxes.items():
                figures[runtime]["exec"].append(timed(lambda s=sandbox: s.exec("true")))
        for _ in range(args.rounds):
            for runtime, sandbox in sandboxes.items():
                for name, command in (("cpu", CPU), ("files", FILES)):
                    t = time.perf_counter()
                    done = sandbox.exec(command, timeout=300)
                    figures[runtime][name].append(time.perf_counter() - t)
                    assert done.exit_code == 0, done.stderr_text
    finally:
        for sandbox in sandboxes.values():
            sandbox.delete()
    labels = {
        "start": "start (create to first answer)",
        "exec": "exec round trip (true)",
        "cpu": "CPU-bound (3M Python additions)",
        "files": "file-heavy (2,000 files)",
    }
    for key, label in labels.items():
        runc = statistics.median(figures["runc"][key])
        runsc = statistics.median(figures["runsc"][key])
        unit, scale = ("ms", 1000) if key == "exec" else ("s", 1)
        print(
            f"{label:<34} runc {runc * scale:8.3f} {unit}   runsc {runsc * scale:8.3f} {unit}"
            f"   runsc/runc {runsc / runc:5.2f}x"
        )


if __name__ == "__main__":
    main()
