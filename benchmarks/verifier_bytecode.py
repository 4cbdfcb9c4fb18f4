"""rock's verifier toolchain: a task's tests run with pytest imported from its bytecode.

Every trial of `rock bench`, every synthesized task's verification and every RL episode on
tasks runs the task's test script, most often `python3 -m pytest`, with pytest from the
toolchain's zip. zipimport never writes bytecode, so a zip of sources compiled pytest again
on every run; the toolchain now carries each module's .pyc beside it.

Measured in one rock/bench-base container (python3 3.11, as the interpreter that built the
toolchain): a demo task's verifier command (`python3 -m pytest` on two tests) run --runs
times in a row, with the toolchain's zip (bytecode) and, as the baseline in the same run,
the same zip without its .pyc entries (what every trial ran before). The figure is the
baseline's time over the toolchain's, per run and in CPU seconds of the container (user +
system, from bash's `times`).

Usage: python benchmarks/verifier_bytecode.py [--runs N]
"""

from __future__ import annotations

import argparse
import io
import tarfile
import zipfile
from typing import Any

from _rockbench import interleaved, machine, timed_in_container

from rock.bench.images import BENCH_BASE
from rock.engine import connect
from rock.verifier import toolchain

TESTS = """
from pathlib import Path

def test_source_untouched():
    assert Path("/app/notes.txt").read_text() == "a b c\\n"

def test_output():
    assert Path("/app/answer.txt").read_text().strip() == "3"
"""
"""The shape of a demo task's tests (text-count): two checks of files in /app."""


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _sources_only(archive: bytes) -> bytes:
    """The toolchain's zip without its bytecode: what it was before."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".pyc"):
                dst.writestr(info, src.read(info))
    return out.getvalue()


def _time(box: Any, zip_path: str, runs: int) -> tuple[float, float]:
    """(wall seconds, container CPU seconds) of one verifier run, the mean of ``runs``."""
    loop = (
        f"export PYTHONPATH={zip_path} PYTEST_DISABLE_PLUGIN_AUTOLOAD=1; cd /app; "
        f"for i in $(seq {runs}); do python3 -m pytest -q -p no:cacheprovider /tests/t.py "
        ">/dev/null || exit 1; done"
    )
    return timed_in_container(
        box, loop, runs, "verifier_bytecode: the tests failed in the container"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="verifier runs per variant")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    toolchain.build()
    site = (toolchain.toolchain_path() / "site.zip").read_bytes()
    client = connect()
    box = client.containers.run(BENCH_BASE, ["sleep", "infinity"], detach=True, network_mode="none")
    try:
        box.exec_run(["mkdir", "-p", "/app", "/tests", "/opt/tc"])
        box.put_archive("/app", _tar({"notes.txt": b"a b c\n", "answer.txt": b"3\n"}))
        box.put_archive("/tests", _tar({"t.py": TESTS.encode()}))
        box.put_archive("/opt/tc", _tar({"bytecode.zip": site, "sources.zip": _sources_only(site)}))
        rows = interleaved(
            lambda name, n: _time(box, f"/opt/tc/{name}.zip", n), ("sources", "bytecode"), args.runs
        )
    finally:
        box.remove(force=True)
    for name, (wall, cpu) in rows.items():
        label = "toolchain (bytecode)" if name == "bytecode" else "baseline (sources only)"
        print(f"{label:26s} a verifier run {wall * 1000:6.0f} ms wall, {cpu * 1000:6.0f} ms CPU")
    (base_wall, base_cpu), (wall, cpu) = rows["sources"], rows["bytecode"]
    print(
        f"verifier run with the toolchain's bytecode: {base_wall / wall:.2f}x faster "
        f"({base_cpu / cpu:.2f}x less CPU) than the sources-only zip"
    )


if __name__ == "__main__":
    main()
