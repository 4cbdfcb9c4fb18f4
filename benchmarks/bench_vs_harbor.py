"""rock bench against Harbor 0.26 on the same tasks: per-trial harness overhead, wall time,
and what strict mode costs.

Why: rock bench runs Harbor's task format and claims to cost less per trial than Harbor
itself. This measures both on the same machine, the same tasks and the same agent in one
run, so the claim has a figure with its baseline beside it.

How:

1. Set-up. Harbor 0.26.0 in its own virtual environment (Python 3.12) in
   ``~/.cache/ale-tests/harbor-0.26.0``, made here when missing, as
   ``tests/test_harbor_models.py`` makes it. Harbor's docker environment drives
   ``docker compose`` v2; when ``docker compose version`` fails, the plugin is taken from
   Debian trixie's docker-compose package (needs only libc6) into
   ``/usr/local/lib/docker/cli-plugins``.
2. Tasks. ``datasets/terminal-bench-local`` (16 Terminal-Bench 2.0 tasks; ``--tasks N``,
   ``--task NAME`` to choose), copied to a scratch directory with ``allow_internet = true``
   in every ``task.toml``: Harbor's docker environment enforces a closed network only
   through an egress-control sidecar built FROM ``gogost/gost`` (probed with ``alpine``),
   images this machine cannot pull, and refuses a closed task without it. Both harnesses
   run that same copy.
3. rock: ``rock bench run --dataset COPY --agent oracle --n-concurrent 1``, after the
   strict-mode check below has built its images (rock keeps task images by digest).
   Per-trial overhead: results.json's ``overhead_sec`` = trial wall time - image build -
   agent - verifier (so it includes sandbox start, staging the tests, reading the reward,
   records and removal). Shown too: that minus ``setup_sec`` (sandbox start until the
   agent starts), the figure counted like Harbor's below.
4. Harbor: every base image the copied Dockerfiles name (``python:3.11-slim``,
   ``ubuntu:24.04``, the Terminal-Bench bases) that is not on this machine is tagged onto
   the local image rock resolves it to (``ImageBuilder.resolve``: rock/bench-base); its
   compose build (``pull_policy: build``) then finds the base locally and pulls nothing.
   The tags this script added, and only those, are removed afterwards. Then
   ``harbor run --path COPY --agent oracle --env docker --n-concurrent 1`` (default
   options otherwise: it builds each trial's image and deletes it after, ``--delete``).
   Per-trial overhead, from each trial's result.json: (finished_at - started_at) -
   environment_setup (its image build and ``compose up``) - agent_setup - agent_execution -
   verifier. Most of it comes after the verifier: ``compose down`` waits docker's 10 s stop
   timeout, because the main service's ``sh -c "sleep infinity"`` ignores SIGTERM.
   ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps Harbor's model-price library
   from retrying a download this offline machine cannot make.
   Wall time: each harness's command from start to exit.
   Figure: rock's speed as a multiple of Harbor's (Harbor's wall time / rock's).
5. Harbor on rock: the same ``harbor run`` with ``--environment-import-path
   rock.harbor:RockEnvironment --ek stand_ins=true`` (rock's native Harbor environment, its
   sandboxes made by a ``rock serve`` of a scratch home, rock's offline stand-ins on PATH as
   ``rock bench`` gives its verifiers), rock installed beside Harbor in its venv: Harbor's
   own harness, rock's sandboxes. Its speed against Harbor's docker environment is printed
   too.
6. Harbor's E2B environment on rock: ``harbor run --env e2b`` with ``E2B_API_URL``,
   ``E2B_SANDBOX_URL`` and ``E2B_API_KEY`` pointed at a ``rock serve --e2b-stand-ins`` (Harbor
   builds an E2B template from each task's Dockerfile through rock's template API, then runs
   the trial through envd), on the tasks as shipped (closed: the daemon's stand-ins serve
   what their tests fetch), Harbor's ``e2b`` extra installed beside it. Its per-trial time
   against Harbor's docker environment is printed too.
7. Strict mode's cost: ``rock bench check DATASET`` (oracle and nop) against
   ``rock bench check DATASET --strict`` (also the oracle's verifier without rock's
   stand-ins, network open) on the same tasks, as shipped, each at its default 2 trials at
   a time; the wall time of each, the ratio, and the tasks strict mode flags (and whether
   they are the ones Harbor failed).

Usage: python benchmarks/bench_vs_harbor.py [--tasks N] [--task NAME ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _rockbench import machine

from rock.synth.wiring import wait_for_daemon

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import harbor_env  # noqa: E402 - the shared Harbor venv (scripts/harbor_env.py)

HARBOR = harbor_env.HARBOR
HARBOR_VERSION = harbor_env.HARBOR_VERSION
DATASET = REPO / "datasets" / "terminal-bench-local"
ROCK = Path(sys.executable).with_name("rock")
COMPOSE_DEB = (
    "http://deb.debian.org/debian/pool/main/d/docker-compose/docker-compose_2.26.1-4_amd64.deb"
)
COMPOSE_IN_DEB = "usr/libexec/docker/cli-plugins/docker-compose"
COMPOSE_PLUGIN = Path("/usr/local/lib/docker/cli-plugins/docker-compose")
STRICT_FLAG = "passes only with rock's verifier stand-ins"


class SetupError(Exception):
    """Docker or Harbor could not be made ready; the message is one sentence."""


@dataclass
class Trial:
    task: str
    passed: bool
    wall: float
    build_setup: float
    """Image build and environment start (Harbor: environment_setup + agent_setup)."""
    work: float
    """Agent and verifier."""
    overhead: float
    comparable: float
    """Overhead counted as Harbor's is (rock: without sandbox start)."""
    why: str = ""


@dataclass
class Run:
    name: str
    wall: float
    trials: list[Trial] = field(default_factory=list)
    parts: list[tuple[float, float]] = field(default_factory=list)
    """Harbor: each trial's time before its environment set-up and after its verifier."""

    @property
    def failed(self) -> list[Trial]:
        return [t for t in self.trials if not t.passed]


# -- set-up ---------------------------------------------------------------------------------


def _ok(cmd: list[str | Path], timeout: float = 60) -> bool:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ensure_docker() -> None:
    if not shutil.which("docker") or not _ok(["docker", "info"]):
        raise SetupError("Docker is not reachable (docker info failed); start the daemon.")
    if _ok(["docker", "compose", "version"]):
        return
    if not shutil.which("dpkg-deb"):
        raise SetupError("docker compose v2 is missing and dpkg-deb is not here to install it.")
    with tempfile.TemporaryDirectory(prefix="compose-deb-") as tmp:
        deb = Path(tmp) / "docker-compose.deb"
        try:
            with urllib.request.urlopen(COMPOSE_DEB, timeout=120) as resp:
                deb.write_bytes(resp.read())
        except OSError as exc:
            raise SetupError(
                f"docker compose v2 is missing and {COMPOSE_DEB} could not be fetched ({exc})."
            ) from None
        if not _ok(["dpkg-deb", "-x", deb, Path(tmp) / "x"]):
            raise SetupError(f"docker compose v2 is missing and {deb.name} did not unpack.")
        try:
            COMPOSE_PLUGIN.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(tmp) / "x" / COMPOSE_IN_DEB, COMPOSE_PLUGIN)
            COMPOSE_PLUGIN.chmod(0o755)
        except OSError as exc:
            raise SetupError(f"docker compose v2 could not be installed ({exc}).") from None
    if not _ok(["docker", "compose", "version"]):
        raise SetupError(f"docker compose v2 was installed in {COMPOSE_PLUGIN} but does not run.")


@contextmanager
def rock_daemon(home: Path, *options: str) -> Iterator[Path]:
    """A ``rock serve`` of ``home`` on a free port for Harbor on rock; its home."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    home.mkdir(parents=True)
    with (home.parent / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [ROCK, "serve", "--home", home, "--port", str(port), *options],
            stdout=log,
            stderr=log,
        )
    try:
        wait_for_daemon(home, proc, timeout=120)
        yield home
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def ensure_harbor() -> None:
    try:
        harbor_env.ensure_rock_in_harbor(REPO)  # (Harbor first, then rock beside it)
    except harbor_env.HarborUnavailable as exc:
        raise SetupError(str(exc)) from None
    if not _ok([HARBOR, "--help"]):
        raise SetupError(f"{HARBOR} does not run; delete {harbor_env.VENV} to have it made again.")


# -- tasks and base images ------------------------------------------------------------------


def choose_tasks(count: int, names: list[str]) -> list[str]:
    every = sorted(p.name for p in DATASET.iterdir() if (p / "task.toml").is_file())
    if names:
        unknown = sorted(set(names) - set(every))
        if unknown:
            raise SystemExit(f"no task {', '.join(unknown)} in {DATASET}; see its directories.")
        every = [n for n in every if n in names]
    return every[:count] if count else every


def open_copy(tasks: list[str], into: Path) -> None:
    """The tasks copied into ``into`` with their network open (see the module doc)."""
    for name in tasks:
        shutil.copytree(DATASET / name, into / name)
        toml = into / name / "task.toml"
        text = toml.read_text()
        toml.write_text(
            re.sub(r"(?m)^allow_internet\s*=\s*false\s*$", "allow_internet = true", text)
        )


def base_images(tasks: list[str], root: Path) -> dict[str, str]:
    """Each FROM reference of the tasks' Dockerfiles and the local image rock runs it as
    (rock/bench-base is built here when missing, as rock bench would)."""
    from rock.bench.images import ImageBuilder, ImageMap, TaskImageError, rewrite_dockerfile
    from rock.engine import connect

    builder = ImageBuilder(connect(), ImageMap.load())
    bases: dict[str, str] = {}
    for name in tasks:
        dockerfile = root / name / "environment" / "Dockerfile"
        try:
            _, found = rewrite_dockerfile(dockerfile.read_text(), builder.resolve)
            for ref, local in found.items():
                builder.ensure_base(local)
                bases[ref] = local
        except TaskImageError as exc:
            raise SetupError(f"task {name}: {exc}") from None
    return bases


def _has_image(ref: str) -> bool:
    return _ok(["docker", "image", "inspect", ref])


@contextmanager
def tagged(bases: dict[str, str]) -> Iterator[list[str]]:
    """The missing base names tagged onto rock's local images; exactly those untagged after."""
    added: list[str] = []
    try:
        for ref, local in sorted(bases.items()):
            if ref == local or _has_image(ref):
                continue
            if not _ok(["docker", "tag", local, ref]):
                raise SetupError(f"could not tag {local} as {ref} for Harbor's build.")
            added.append(ref)
        yield added
    finally:
        for ref in added:
            if not _ok(["docker", "image", "rm", ref]):
                print(
                    f"warning: could not remove the tag {ref}; remove it by hand", file=sys.stderr
                )


# -- the two harnesses ----------------------------------------------------------------------


def _timed(
    cmd: list[str | Path], log: Path, ok: tuple[int, ...], env: dict[str, str] | None = None
) -> float:
    t0 = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    wall = time.monotonic() - t0
    if done.returncode not in ok:
        tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
        raise SetupError(f"{Path(cmd[0]).name} exited {done.returncode}: {tail[0]} (log {log}).")
    return wall


def run_rock(dataset: Path, out: Path) -> Run:
    from rock.bench.results import failure_reason, read_run

    wall = _timed(
        [ROCK, "bench", "run", "--dataset", dataset, "--agent", "oracle",
         "--n-concurrent", "1", "--output", out / "run"],
        out / "rock.log",
        (0,),
    )  # fmt: skip
    run = Run("rock bench", wall)
    for r in read_run(out / "run").results:
        built = (r.build_sec or 0.0) + (r.setup_sec or 0.0)
        overhead = r.overhead_sec or 0.0
        run.trials.append(
            Trial(
                task=r.task_id,
                passed=bool(r.is_resolved),
                wall=r.total_sec or 0.0,
                build_setup=built,
                work=(r.agent_sec or 0.0) + (r.test_sec or 0.0),
                overhead=overhead,
                comparable=max(0.0, overhead - (r.setup_sec or 0.0)),
                why="" if r.is_resolved else failure_reason(r, out / "run" / r.trial_name),
            )
        )
    return run


def _span(data: dict[str, Any], key: str | None = None) -> float:
    part = data.get(key) if key else data
    if not part or not part.get("started_at") or not part.get("finished_at"):
        return 0.0
    return (_time(part["finished_at"]) - _time(part["started_at"])).total_seconds()


_ERROR_LINE = re.compile(r"error|not found|could not|failed|no such|denied", re.I)


def _harbor_why(data: dict[str, Any], reward: float | None, trial_dir: Path) -> str:
    exc = data.get("exception_info")
    if exc:
        message = (exc.get("exception_message") or "").strip().splitlines()
        return f"{exc.get('exception_type', 'exception')}: {message[0] if message else ''}"
    why = f"reward {reward}"
    stdout = trial_dir / "verifier" / "test-stdout.txt"
    if stdout.is_file():
        lines = [x.strip() for x in stdout.read_text(errors="replace").splitlines()]
        first = next((x for x in lines if _ERROR_LINE.search(x)), None)
        if first:
            why += f"; the verifier's first error line: {first[:160]}"
    return why


def _gap(data: dict[str, Any], start: str | None, end: str | None) -> float:
    """Seconds from ``start``'s start (the trial's when None) to ``end``'s finish (the
    trial's when None)."""
    a = (data.get(start) or {}) if start else data
    b = (data.get(end) or {}) if end else data
    if not a.get("started_at") or not b.get("finished_at"):
        return 0.0
    return (_time(b["finished_at"]) - _time(a["started_at"])).total_seconds()


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def run_harbor(
    dataset: Path, out: Path, rock_home: Path | None = None, *, e2b: bool = False
) -> Run:
    """Harbor's own run: with its docker environment, or (``rock_home``) with rock's, or
    (``e2b``) with its E2B environment pointed at that daemon."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    where = ["--env", "docker"]
    if rock_home is not None and e2b:
        url = json.loads((rock_home / "daemon.json").read_text())["url"]
        token = (rock_home / "token").read_text().strip()
        env |= {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": token}
        where = ["--env", "e2b"]
    elif rock_home is not None:
        env["ROCK_HOME"] = str(rock_home)
        where = ["--environment-import-path", "rock.harbor:RockEnvironment",
                 "--ek", "stand_ins=true"]  # fmt: skip
    wall = _timed(
        [HARBOR, "run", "--path", dataset, "--agent", "oracle", *where,
         "--n-concurrent", "1", "--jobs-dir", out / "jobs", "--job-name", "bench",
         "--yes", "--quiet"],
        out / "harbor.log",
        (0, 1),
        env,
    )  # fmt: skip
    where_run = " e2b on rock" if e2b else " on rock" if rock_home else ""
    run = Run("Harbor 0.26.0" + where_run, wall)
    for result in sorted((out / "jobs" / "bench").glob("*/result.json")):
        data = json.loads(result.read_text())
        rewards = (data.get("verifier_result") or {}).get("rewards") or {}
        reward = rewards.get("reward")
        passed = data.get("exception_info") is None and reward is not None and reward >= 1.0
        total = _span(data)
        built = _span(data, "environment_setup") + _span(data, "agent_setup")
        work = _span(data, "agent_execution") + _span(data, "verifier")
        overhead = max(0.0, total - built - work)
        before = _span(data) - _gap(data, "environment_setup", None)
        after = _span(data) - _gap(data, None, "verifier")
        run.parts.append((before, after))
        run.trials.append(
            Trial(
                task=data.get("task_name") or result.parent.name,
                passed=passed,
                wall=total,
                build_setup=built,
                work=work,
                overhead=overhead,
                comparable=overhead,
                why="" if passed else _harbor_why(data, reward, result.parent),
            )
        )
    if not run.trials:
        raise SetupError(f"Harbor ran no trial; see {out / 'harbor.log'}.")
    return run


# -- strict mode ----------------------------------------------------------------------------


def check(tasks: list[str], out: Path, strict: bool) -> tuple[float, list[dict[str, str]]]:
    cmd: list[str | Path] = [ROCK, "bench", "check", DATASET, "--json", "--output", out]
    for name in tasks:
        cmd += ["--task", name]
    if strict:
        cmd.append("--strict")
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SetupError(f"rock bench check{' --strict' * strict} failed: {last}") from None
    return wall, report["offenders"]


# -- report ---------------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def table(runs: list[Run]) -> None:
    print(
        "| harness | passed / run | total wall | mean wall / trial | mean build + start "
        "| mean agent + verifier | mean overhead / trial | overhead, Harbor's count |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        t = run.trials
        print(
            f"| {run.name} | {sum(x.passed for x in t)} / {len(t)} | {run.wall:.1f} s "
            f"| {_mean([x.wall for x in t]):.2f} s | {_mean([x.build_setup for x in t]):.2f} s "
            f"| {_mean([x.work for x in t]):.2f} s | {_mean([x.overhead for x in t]):.2f} s "
            f"| {_mean([x.comparable for x in t]):.2f} s |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=0, help="The first N tasks (0 = all).")
    parser.add_argument("--task", action="append", default=[], help="Only this task (repeat).")
    parser.add_argument("--keep", type=Path, help="Keep the runs here [default: a temp dir].")
    args = parser.parse_args()
    # a TERM (a timeout) unwinds like ^C, so the tags added for Harbor are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tasks = choose_tasks(args.tasks, args.task)
    try:
        ensure_docker()
        ensure_harbor()
        work = args.keep or Path(tempfile.mkdtemp(prefix="bench-vs-harbor-"))
        for sub in ("tasks", "rock", "harbor", "harbor-rock", "harbor-e2b", "check", "strict"):
            (work / sub).mkdir(parents=True, exist_ok=False)
        open_copy(tasks, work / "tasks")
        print(f"machine: {machine()}")
        print(f"tasks: {len(tasks)} of {DATASET.name}, oracle agent, 1 trial at a time")
        print(f"runs in {work}", flush=True)
        bases = base_images(tasks, work / "tasks")
        plain_wall, plain = check(tasks, work / "check", strict=False)
        strict_wall, offenders = check(tasks, work / "strict", strict=True)
        rock = run_rock(work / "tasks", work / "rock")
        with tagged(bases) as added:
            print(f"tagged for Harbor: {', '.join(added) or 'nothing (all present)'}", flush=True)
            harbor = run_harbor(work / "tasks", work / "harbor")
        with rock_daemon(work / "harbor-rock" / "home") as home:
            on_rock = run_harbor(work / "tasks", work / "harbor-rock", home)
        shipped = work / "shipped"
        shutil.copytree(DATASET, shipped, ignore=lambda d, names: [
            n for n in names if d == str(DATASET) and n not in tasks
        ])  # fmt: skip
        with rock_daemon(work / "harbor-e2b" / "home", "--e2b-stand-ins") as home:
            via_e2b = run_harbor(shipped, work / "harbor-e2b", home, e2b=True)
    except SetupError as exc:
        print(f"bench_vs_harbor: {exc}", file=sys.stderr)
        sys.exit(1)
    print()
    table([harbor, on_rock, via_e2b, rock])
    print()
    print(
        f"rock: {harbor.wall / rock.wall:.2f}x Harbor's speed (wall time {rock.wall:.1f} s vs "
        f"Harbor's {harbor.wall:.1f} s for {len(tasks)} trials); per-trial overhead "
        f"{_mean([t.overhead for t in rock.trials]):.2f} s vs Harbor's "
        f"{_mean([t.overhead for t in harbor.trials]):.2f} s "
        f"({_mean([t.comparable for t in rock.trials]):.2f} s counted as Harbor's is)"
    )
    if harbor.parts:
        before = _mean([p[0] for p in harbor.parts])
        after = _mean([p[1] for p in harbor.parts])
        print(
            f"Harbor's overhead per trial, where: {before:.2f} s before its environment set-up, "
            f"{after:.2f} s after its verifier (artifacts, compose down --rmi local, records), "
            f"{_mean([t.overhead for t in harbor.trials]) - before - after:.2f} s between phases"
        )
    print(
        f"Harbor on rock's environment: {harbor.wall / on_rock.wall:.2f}x the speed of Harbor "
        f"on its docker environment ({on_rock.wall:.1f} s vs {harbor.wall:.1f} s); "
        f"{sum(t.passed for t in on_rock.trials)} of {len(on_rock.trials)} passed"
    )
    print(
        f"Harbor's e2b environment on rock: {harbor.wall / via_e2b.wall:.2f}x the speed of "
        f"Harbor on its docker environment ({via_e2b.wall:.1f} s vs {harbor.wall:.1f} s; mean "
        f"per trial {_mean([t.wall for t in via_e2b.trials]):.2f} s vs "
        f"{_mean([t.wall for t in harbor.trials]):.2f} s); "
        f"{sum(t.passed for t in via_e2b.trials)} of {len(via_e2b.trials)} passed"
    )
    for run in (harbor, on_rock, via_e2b, rock):
        print(f"{run.name}: {len(run.failed)} of {len(run.trials)} trials failed")
        for t in run.failed:
            print(f"  {t.task}: {t.why}")
    flagged = [o for o in offenders if STRICT_FLAG in o["problem"]]
    print()
    print(
        f"strict mode: rock bench check {plain_wall:.1f} s, with --strict {strict_wall:.1f} s: "
        f"{strict_wall / plain_wall:.2f}x; strict flags {len(flagged)} of {len(tasks)} tasks"
        f"{': ' + ', '.join(o['task'] for o in flagged) if flagged else ''}"
    )
    names = {o["task"] for o in flagged}
    lost = {t.task for t in harbor.failed}
    if names or lost:
        same = "the same tasks" if names == lost else "not the same tasks"
        print(f"  Harbor failed {len(lost)} and strict mode flags {len(names)}: {same}")
    others = [o for o in plain if STRICT_FLAG not in o["problem"]]
    for o in others:
        print(f"  check offender {o['task']}: {o['problem']}")


if __name__ == "__main__":
    main()
