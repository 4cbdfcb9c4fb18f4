"""A synthesized task's verifier: its plain checks run by python3 alone vs by pytest.

Every synthesized task is verified twice in synthesis (the oracle's run and doing nothing),
and once a trial in RL and in `rock bench`: `make demo` runs about 1,200 of them. A task
whose checks need nothing of pytest now ships `tests/run_checks.py` (:mod:`ale.synth.run_checks`)
and its `test.sh` runs the checks with it; the baseline, measured in the same run, is the
`test.sh` every generated task had before: `pip install -q pytest==8.4.1` (rock's toolchain
stand-in answers it) and `python3 -m pytest` from the toolchain's zip.

Measured in one rock/bench-base container with rock's verifier toolchain installed as a
trial has it (on PATH, importable): a text-count task rendered both ways, its `test.sh` run
--runs times in a row each way after the task's solution, interleaved; the container's CPU
(user + system, from bash's `times`) and the wall time per run. The reward file must say 1
after every run.

Usage: python benchmarks/verifier_plain.py [--runs N]
"""

from __future__ import annotations

import argparse
import io
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from _rockbench import interleaved, machine, timed_in_container

from ale.synth.family import draft_for
from ale.synth.render import TEST_SH, render_task
from rock.bench.images import BENCH_BASE
from rock.engine import connect
from rock.verifier import toolchain


def _tar_of(folder: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return out.getvalue()


def _time(box: Any, tests: str, runs: int) -> tuple[float, float]:
    """(wall seconds, container CPU seconds) of one run of test.sh from the folder ``tests``
    (linked at /tests, where a task's test.sh looks), the mean of ``runs``."""
    loop = (
        f"export PATH={toolchain.TOOLCHAIN_DIR}/bin:$PATH; cd /app; ln -sfn {tests} /tests; "
        f"for i in $(seq {runs}); do rm -f /logs/verifier/reward.txt; "
        "bash /tests/test.sh >/tmp/out 2>&1; "
        '[ "$(cat /logs/verifier/reward.txt)" = 1 ] || { cat /tmp/out; exit 1; }; done'
    )
    return timed_in_container(
        box, loop, runs, f"verifier_plain: the task's tests did not pass ({tests})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="verifier runs each way")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    draft = draft_for("text-count", 3, "easy")
    with tempfile.TemporaryDirectory(prefix="verifier-plain-") as scratch:
        task = render_task(
            draft, Path(scratch) / "task", family="text-count", category="text-processing",
            difficulty="easy", seed=3,
        )  # fmt: skip
        (task / "tests" / "test.sh").write_text(TEST_SH)  # the baseline's copy, beside it
        baseline = _tar_of(task / "tests")
        render_task(
            draft, task, family="text-count", category="text-processing", difficulty="easy",
            seed=3,
        )  # fmt: skip
        plain = _tar_of(task / "tests")
        files = _tar_of(task / "environment" / "rootfs" / "app")
        solution = (task / "solution" / "solve.sh").read_text()
    client = connect()
    box = client.containers.run(BENCH_BASE, ["sleep", "infinity"], detach=True, network_mode="none")
    try:
        box.exec_run(["mkdir", "-p", "/app", "/baseline", "/plain", toolchain.TOOLCHAIN_DIR])
        box.put_archive("/app", files)
        box.put_archive("/baseline", baseline)
        box.put_archive("/plain", plain)
        box.put_archive(toolchain.TOOLCHAIN_DIR, toolchain.archive())
        box.exec_run(["bash", "-c", toolchain.PTH_SETUP])
        code, out = box.exec_run(["bash", "-c", solution], workdir="/app")
        if code != 0:
            raise SystemExit(f"verifier_plain: the task's solution failed: {out!r}")
        rows = interleaved(
            lambda name, n: _time(box, f"/{name}", n), ("baseline", "plain"), args.runs
        )
    finally:
        box.remove(force=True)
    labels = {"baseline": "baseline (pip + pytest)", "plain": "run_checks (python3)"}
    for name, (wall, cpu) in rows.items():
        print(
            f"{labels[name]:24s} a verifier run {wall * 1000:6.0f} ms wall, {cpu * 1000:6.0f} ms CPU"
        )
    (base_wall, base_cpu), (wall, cpu) = rows["baseline"], rows["plain"]
    print(
        f"RATIO CPU per verifier run, pip + pytest (baseline) / run_checks = {base_cpu / cpu:.2f}x"
    )
    print(
        f"RATIO wall per verifier run, pip + pytest (baseline) / run_checks = {base_wall / wall:.2f}x"
    )


if __name__ == "__main__":
    main()
