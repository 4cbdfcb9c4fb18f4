"""Which Linux capabilities the bench and synthesis task sets use: the measurement behind
rock's default capability set (``rock.models.DEFAULT_CAPABILITIES``).

The oracle solves every task of ``datasets/terminal-bench-local`` and one task of each
synthesis family (rendered here, seed 1, medium where the family has it), under ``rock bench``, once per
capability set: Docker's default set (the baseline), rock's default set, no capabilities
at all, and rock's set without each of its capabilities in turn. A task that passes with
Docker's set and fails with another needs something that set lacks. Then four probes of
what common terminal tasks do beyond these sets (apt-get, a server on port 80, signalling
another user's process, su) under each set. The figure: tasks passed under each set, as a
ratio of the baseline, the wall time of each pass, and the probes that fail.

Usage: python benchmarks/rock_capabilities.py [--concurrent 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from _rockbench import machine

from ale.synth.family import draft_for, families, get_family
from ale.synth.render import render_task
from rock.backends.docker import DockerBackend
from rock.bench.harness import Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions
from rock.engine import connect
from rock.models import DEFAULT_CAPABILITIES, DOCKER_CAPABILITIES, SandboxSpec

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "datasets" / "terminal-bench-local"


def task_set(into: Path) -> Path:
    """The bench tasks and one rendered task per synthesis family, in one dataset."""
    for task in sorted(BENCH.iterdir()):
        if (task / "task.toml").is_file() or (task / "task.yaml").is_file():
            shutil.copytree(task, into / task.name)
    for name, family in sorted(families().items()):
        level = "medium" if "medium" in family.difficulties else family.difficulties[0]
        render_task(
            draft_for(name, 1, level),
            into / f"synth-{name}",
            family=name,
            category=get_family(name).category,
            difficulty=level,
            seed=1,
        )
    return into


def passed(dataset: Path, out: Path, caps: list[str], concurrent: int) -> tuple[set[str], float]:
    client = connect()
    harness = Harness(
        DockerBackend(client),
        ImageBuilder(client, ImageMap.load()),
        BenchOptions(n_concurrent=concurrent, capabilities=caps),
    )
    started = time.monotonic()
    results = asyncio.run(harness.run(dataset, out, agent="oracle"))
    client.close()
    return set(results.resolved_ids), time.monotonic() - started


PROBES = {
    "apt-get update": "apt-get update -qq 2>&1 | grep -q '^E:' && exit 1 || exit 0",
    "a server on :80": "python3 -c 'import socket; socket.socket().bind((\"0.0.0.0\", 80))'",
    "signal another user's process": (
        "setpriv --reuid 1000 --regid 1000 --clear-groups sleep 30 & sleep 0.3; kill $!"
    ),
    "su to another user": "su -s /bin/sh nobody -c true",
}
"""What common terminal tasks do that the two task sets above happen not to (they run
offline, as root, without servers): each probe runs in a sandbox with the network open."""


def probes(caps: list[str]) -> list[str]:
    """The probes that fail in a sandbox keeping ``caps``."""
    backend = DockerBackend(connect(), daemon_id="bench-capabilities")
    failed = []
    with backend.create(SandboxSpec(capabilities=caps, network="bridge")) as sandbox:
        for name, command in PROBES.items():
            if sandbox.exec(command, timeout=120).exit_code != 0:
                failed.append(name)
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="skip the leave-one-out passes")
    args = parser.parse_args()
    print(machine())
    sets: list[tuple[str, list[str]]] = [
        ("Docker's default (baseline)", list(DOCKER_CAPABILITIES)),
        ("rock's default", list(DEFAULT_CAPABILITIES)),
        ("none", []),
    ]
    if not args.quick:
        sets += [
            (f"rock's without {cap}", [c for c in DEFAULT_CAPABILITIES if c != cap])
            for cap in DEFAULT_CAPABILITIES
        ]
    with tempfile.TemporaryDirectory() as tmp:
        dataset = task_set(Path(tmp) / "tasks")
        total = len(list(dataset.iterdir()))
        base: set[str] = set()
        base_sec = 0.0
        for n, (label, caps) in enumerate(sets):
            ok, sec = passed(dataset, Path(tmp) / f"run-{n}", caps, args.concurrent)
            if n == 0:
                base, base_sec = ok, sec
            lost = sorted(base - ok)
            ratio = len(ok) / len(base) if base else 0.0
            broken = probes(caps)
            print(
                f"{label:<34} {len(ok):>2}/{total} passed ({ratio:.2f}x baseline), "
                f"{sec:5.1f} s ({sec / base_sec:.2f}x)"
                + (f"; tasks failing: {', '.join(lost)}" if lost else "")
                + (f"; probes failing: {', '.join(broken)}" if broken else "")
            )


if __name__ == "__main__":
    main()
