"""Time to the TUI's first frame: `iflow` started in a pseudo-terminal vs a bare Textual app.

`iflow` runs as a real process in a 120x40 pty (TERM=xterm-256color), with HOME set to a
temporary directory whose ~/.iflow/settings.json chooses the scripted provider and a
script file. The clock runs from spawn until the screen output (escape sequences
stripped) shows the status bar's text: that is the first frame. "Ready" is when the
status bar names the model, i.e. the agent has been built (after the first frame).
Baseline: the same measurement of a minimal Textual app (one Label) in the same pty
set-up, measured in the same run, interleaved. Every child is quit with Ctrl+Q and
its process group killed if it lingers.
Goal: first frame in under 1.5 s.

Usage: python benchmarks/iflow_tui_first_frame.py [--n 5]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

COLUMNS, ROWS = 120, 40
GOAL_SEC = 1.5
_ANSI = re.compile(
    rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|P[^\x1b]*\x1b\\|[@-Z\\-_])"
)
_BARE = (
    "from textual.app import App\n"
    "from textual.widgets import Label\n"
    "class Bare(App):\n"
    "    def compose(self):\n"
    "        yield Label('bare textual first frame')\n"
    "Bare().run()\n"
)
FIRST_FRAME = b"ctrl+c twice quits"
"""Text of iflow's status bar, there from the first frame."""
READY = b"scripted"
"""The model's name, shown in the status bar once the agent is built."""


def machine() -> str:
    cpu = "unknown cpu"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def iflow_command() -> list[str]:
    script = Path(sys.executable).with_name("iflow")
    found = str(script) if script.exists() else shutil.which("iflow")
    return [found] if found else [sys.executable, "-m", "iflow.cli"]


def measure(command: list[str], cwd: Path, home: Path, marks: list[bytes]) -> list[float]:
    """Seconds from spawn until each of ``marks`` has appeared on the screen, in order."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
    env.update(HOME=str(home), TERM="xterm-256color", COLUMNS=str(COLUMNS), LINES=str(ROWS))
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    os.close(slave)
    raw, times = b"", []
    try:
        deadline = started + 60
        while len(times) < len(marks):
            if time.perf_counter() > deadline or proc.poll() is not None:
                tail = _ANSI.sub(b"", raw)[-600:].decode(errors="replace")
                raise SystemExit(
                    f"{command[0]} drew no {marks[len(times)]!r}; last output:\n{tail}"
                )
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                raw += os.read(master, 65536)
            except OSError:
                continue
            now = time.perf_counter()
            screen = _ANSI.sub(b"", raw)
            while len(times) < len(marks) and marks[len(times)] in screen:
                times.append(now - started)
    finally:
        _stop(proc, master)
    return times


def _stop(proc: subprocess.Popen[bytes], master: int) -> None:
    """Quit with Ctrl+Q (draining the pty meanwhile); kill the process group if it lingers."""
    with contextlib.suppress(OSError):
        os.write(master, b"\x11")
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            with contextlib.suppress(OSError):
                os.read(master, 65536)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(3)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything the child left in its group
    proc.wait()
    os.close(master)


def pct50(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="starts of each app")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iflow-tui-bench-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        (home / ".iflow").mkdir(parents=True)
        work.mkdir()
        (home / "script.json").write_text(json.dumps(["Hello from the script."]))
        settings = {"provider": "scripted", "script": "script.json", "sessionsDir": "sessions"}
        (home / ".iflow" / "settings.json").write_text(json.dumps(settings))
        bare_cmd = [sys.executable, "-c", _BARE]
        iflow_cmd = iflow_command()
        measure(bare_cmd, work, home, [b"bare textual first frame"])  # warm the disk cache
        measure(iflow_cmd, work, home, [FIRST_FRAME])
        bare: list[float] = []
        first: list[float] = []
        ready: list[float] = []
        for _ in range(args.n):
            bare += measure(bare_cmd, work, home, [b"bare textual first frame"])
            frame, built = measure(iflow_cmd, work, home, [FIRST_FRAME, READY])
            first.append(frame)
            ready.append(built)
    ratio = pct50(first) / pct50(bare)
    print(f"machine: {machine()}")
    print(f"terminal: pty {COLUMNS}x{ROWS}, TERM=xterm-256color; command: {' '.join(iflow_cmd)}")
    print(
        f"bare Textual app (baseline): p50 {pct50(bare):.3f} s, min {min(bare):.3f} s (n={args.n})"
    )
    print(f"iflow first frame:           p50 {pct50(first):.3f} s, min {min(first):.3f} s")
    print(f"iflow agent ready:           p50 {pct50(ready):.3f} s, min {min(ready):.3f} s")
    verdict = "met" if pct50(first) < GOAL_SEC else "NOT met"
    print(f"goal: first frame < {GOAL_SEC} s ({verdict})")
    print(f"RATIO iflow first frame / bare Textual first frame p50 = {ratio:.2f}x")


if __name__ == "__main__":
    main()
