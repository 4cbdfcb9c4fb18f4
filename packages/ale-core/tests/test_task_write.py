"""Writing the 2.0 form, and reading back what was written."""

from __future__ import annotations

import shutil
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ale.task import (
    TB2_EXTRA_KEY,
    Task,
    TaskExistsError,
    TaskWriteError,
    load_task,
    load_tb1,
    load_tb2,
    write_task_tb2,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
EXAMPLES = Path(__file__).parents[3] / "datasets" / "examples"

_PATH_FIELDS = {"id", "path", "source_format", "tests_dir", "test_script", "solution"}
_ENV_PATH_FIELDS = {"dockerfile", "build_context", "compose_file"}


def _meaning(task: Task) -> dict[str, Any]:
    """The task without its paths and format: what a round trip must keep."""
    return task.model_dump(
        exclude={**{k: True for k in _PATH_FIELDS}, "environment": _ENV_PATH_FIELDS}
    )


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXUSR)


def test_tb1_to_tb2_round_trip(tmp_path: Path) -> None:
    source = load_tb1(FIXTURES / "tb1-hello")
    dest = write_task_tb2(source, tmp_path / "tb1-hello")
    assert dest == (tmp_path / "tb1-hello").resolve()
    assert _files(dest) == [
        "environment/Dockerfile",
        "environment/data/greeting.txt",
        "instruction.md",
        "solution/solve.sh",
        "task.toml",
        "tests/run-tests.sh",
        "tests/test.sh",
        "tests/test_outputs.py",
    ]
    again = load_task(dest)
    assert again.source_format == "tb2"
    assert again.id == source.id
    assert _meaning(again) == _meaning(source)
    assert again.environment.dockerfile == dest / "environment" / "Dockerfile"
    assert again.environment.compose_file is None  # 1.0's compose file is not carried
    assert again.solution == dest / "solution" / "solve.sh"
    assert (dest / "solution" / "solve.sh").read_bytes() == (
        FIXTURES / "tb1-hello" / "solution.sh"
    ).read_bytes()


def test_tb1_written_task_toml(tmp_path: Path) -> None:
    dest = write_task_tb2(load_tb1(FIXTURES / "tb1-hello"), tmp_path / "t")
    document = tomllib.loads((dest / "task.toml").read_text())
    assert document == {
        "version": "1.0",
        "metadata": {
            "author_name": "Ada Example",
            "author_email": "ada@example.com",
            "difficulty": "easy",
            "category": "file-operations",
            "tags": ["files", "beginner"],
            "parser_name": "pytest",
            "run_tests_in_same_shell": False,
            "expert_time_estimate_min": 1,
        },
        "verifier": {"timeout_sec": 15.5},
        "agent": {"timeout_sec": 120.0},
        "environment": {"allow_internet": True},
    }


def test_tb2_to_tb2_round_trip(tmp_path: Path) -> None:
    source = load_tb2(FIXTURES / "tb2-hello")
    dest = write_task_tb2(source, tmp_path / "copy")
    assert _files(dest) == _files(FIXTURES / "tb2-hello")
    again = load_task(dest)
    assert _meaning(again) == _meaning(source)
    # Unknown tables went back where they were, not under [metadata].
    document = tomllib.loads((dest / "task.toml").read_text())
    assert document["solution"] == {"env": {"MODE": "oracle"}}
    assert document["environment"]["gpus"] == 0
    assert TB2_EXTRA_KEY not in document["metadata"]
    assert document["environment"]["memory_mb"] == 2048
    assert document["environment"]["cpus"] == 2


def test_round_trip_is_stable(tmp_path: Path) -> None:
    first = write_task_tb2(load_tb1(FIXTURES / "tb1-hello"), tmp_path / "one")
    second = write_task_tb2(load_task(first), tmp_path / "two")
    assert _files(first) == _files(second)
    for name in _files(first):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


@pytest.mark.parametrize("example", ["hello-tb1", "hello-tb2"])
def test_examples_round_trip(tmp_path: Path, example: str) -> None:
    source = load_task(EXAMPLES / example)
    assert _meaning(load_task(write_task_tb2(source, tmp_path / example))) == _meaning(source)


def test_permissions_kept(tmp_path: Path) -> None:
    dest = write_task_tb2(load_tb1(FIXTURES / "tb1-hello"), tmp_path / "t")
    for script in ("tests/test.sh", "tests/run-tests.sh", "solution/solve.sh"):
        assert _executable(dest / script), script
    assert not _executable(dest / "environment" / "Dockerfile")
    assert not _executable(dest / "tests" / "test_outputs.py")

    again = write_task_tb2(load_tb2(FIXTURES / "tb2-hello"), tmp_path / "u")
    assert _executable(again / "tests" / "test.sh")
    assert _executable(again / "solution" / "solve.sh")


def test_generated_test_sh_turns_exit_status_into_reward(tmp_path: Path) -> None:
    dest = write_task_tb2(load_tb1(FIXTURES / "tb1-hello"), tmp_path / "t")
    script = (dest / "tests" / "test.sh").read_text()
    assert "bash /tests/run-tests.sh" in script
    assert "/logs/verifier/reward.txt" in script
    # Run it with the container paths moved into tmp_path.
    for exit_code, reward in ((0, "1"), (3, "0")):
        root = tmp_path / f"run{exit_code}"
        (root / "tests").mkdir(parents=True)
        (root / "tests" / "run-tests.sh").write_text(f"exit {exit_code}\n")
        local = script.replace("/tests", str(root / "tests")).replace("/logs", str(root / "logs"))
        done = subprocess.run(["bash", "-c", local], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert (root / "logs" / "verifier" / "reward.txt").read_text().strip() == reward


def test_tb1_solution_yaml_kept(tmp_path: Path) -> None:
    task_dir = Path(shutil.copytree(FIXTURES / "tb1-hello", tmp_path / "src"))
    (task_dir / "solution.sh").unlink()
    (task_dir / "solution.yaml").write_text("- command: echo hi\n")
    dest = write_task_tb2(load_task(task_dir), tmp_path / "out")
    assert (dest / "solution" / "solution.yaml").read_text() == "- command: echo hi\n"
    assert not (dest / "solution" / "solve.sh").exists()
    assert load_task(dest).solution == dest / "solution" / "solution.yaml"


def test_refuses_non_empty_destination(tmp_path: Path) -> None:
    task = load_tb2(FIXTURES / "tb2-hello")
    dest = tmp_path / "dest"
    dest.mkdir()
    write_task_tb2(task, dest)  # an empty directory is fine
    (dest / "keep.txt").write_text("mine\n")
    with pytest.raises(TaskExistsError) as caught:
        write_task_tb2(task, dest)
    assert str(dest.resolve()) in str(caught.value)
    assert "overwrite=True" in str(caught.value)
    assert isinstance(caught.value, FileExistsError)
    assert (dest / "keep.txt").exists()

    write_task_tb2(task, dest, overwrite=True)
    assert not (dest / "keep.txt").exists()
    assert _meaning(load_task(dest)) == _meaning(task)


def test_refuses_to_overlap_the_source(tmp_path: Path) -> None:
    task_dir = Path(shutil.copytree(FIXTURES / "tb2-hello", tmp_path / "src"))
    task = load_task(task_dir)
    for dest in (task_dir, task_dir / "inside", tmp_path):
        with pytest.raises(TaskWriteError, match="overlaps"):
            write_task_tb2(task, dest, overwrite=True)
    assert _files(task_dir) == _files(FIXTURES / "tb2-hello")


def test_extra_none_values_are_left_out(tmp_path: Path) -> None:
    task = load_tb1(FIXTURES / "tb1-hello")
    task.metadata.extra["nothing"] = None
    task.metadata.extra["nested"] = {"a": None, "b": [1, None, 2]}
    dest = write_task_tb2(task, tmp_path / "t")
    extra = load_task(dest).metadata.extra
    assert "nothing" not in extra
    assert extra["nested"] == {"b": [1, 2]}


def test_extra_value_toml_cannot_store(tmp_path: Path) -> None:
    task = load_tb1(FIXTURES / "tb1-hello")
    task.metadata.extra["blob"] = object()
    with pytest.raises(TaskWriteError, match=r"metadata\.extra"):
        write_task_tb2(task, tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_healthchecks_and_collect_hooks_survive_a_round_trip(tmp_path: Path) -> None:
    task_dir = Path(shutil.copytree(FIXTURES / "tb2-hello", tmp_path / "hooked"))
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("gpus = 0\n", (
        'gpus = 0\n\n[environment.healthcheck]\ncommand = "true"\nretries = 2\n\n'
        '[[verifier.collect]]\ncommand = "date > /logs/artifacts/when"\n'
    )))  # fmt: skip
    source = load_task(task_dir)
    assert source.environment.healthcheck is not None and source.collect
    assert source.solution_env == {"MODE": "oracle"}
    again = load_task(write_task_tb2(source, tmp_path / "copy"))
    assert _meaning(again) == _meaning(source)
