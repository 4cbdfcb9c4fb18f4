"""An episode's temporary verifier folder does not outlive a process killed outright: the
folder names the process that made it, and the next process to make one removes those of
processes no longer running (CI left a few empty ones a run, from tests that SIGKILL a run)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from rock import episode_runner
from rock.backends._owner import process_started


def test_the_folders_of_a_process_that_is_gone_go_and_the_living_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(episode_runner, "_swept", False)
    gone = subprocess.Popen(["true"])
    gone.wait()
    mine = f"{os.getpid()}.{process_started(os.getpid())}"
    dead = tmp_path / f"{episode_runner.EPISODE_FOLDER}{gone.pid}.123-abc"
    reused = tmp_path / f"{episode_runner.EPISODE_FOLDER}{os.getpid()}.1-abc"  # pid reused
    alive = tmp_path / f"{episode_runner.EPISODE_FOLDER}{mine}-abc"
    other = tmp_path / "rock-synth-abc"  # a private daemon's home: not this sweep's
    for folder in (dead, reused, alive, other):
        (folder / "verifier").mkdir(parents=True)
    with episode_runner.episode_folder() as made:
        assert Path(made).name.startswith(f"{episode_runner.EPISODE_FOLDER}{mine}-")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [alive.name, other.name, Path(made).name]
        )
    assert not Path(made).exists()


def test_without_proc_nothing_is_judged_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no process's start can be read (no /proc), another process's folder may be in
    use: none is removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(episode_runner, "_swept", False)
    monkeypatch.setattr(episode_runner, "process_started", lambda pid: None)
    theirs = tmp_path / f"{episode_runner.EPISODE_FOLDER}1.0-abc"
    theirs.mkdir()
    with episode_runner.episode_folder() as made:
        assert Path(made).name.startswith(f"{episode_runner.EPISODE_FOLDER}{os.getpid()}.0-")
    assert theirs.is_dir()
