"""rock.verifier.run: the pytest summary parser, rewards, the verifier run (fake sandbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_fakes import (
    FakeSandbox,
    tb2_task,
)

from rock.bench.results import (
    FailureMode,
)
from rock.models import ExecResult
from rock.verifier.run import (
    REWARD_JSON,
    REWARD_TXT,
    parse_pytest_summary,
    read_rewards,
    run_verifier,
    verdict_of,
)

# -- verify ----------------------------------------------------------------------------------
PYTEST_OUTPUT = """\
============================= test session starts ==============================
collected 6 items

tests/test_outputs.py .F.xXE                                             [100%]

=================================== FAILURES ===================================
PASSED tests/decoy.py::test_before_summary
=========================== short test summary info ============================
PASSED tests/test_outputs.py::test_exists
PASSED tests/test_outputs.py::TestFile::test_param[a-1]
XFAIL tests/test_outputs.py::test_expected_failure - known bug
XPASS tests/test_outputs.py::test_unexpected_pass
ERROR tests/test_outputs.py::test_setup_breaks - RuntimeError: boom
FAILED tests/test_outputs.py::test_content - AssertionError: assert 'a' == 'b'
PASSED bare_node_id
=============== 1 failed, 3 passed, 1 xfailed, 1 xpassed, 1 error in 0.12s =====
PASSED tests/after.py::test_after_summary
"""


def test_parse_pytest_summary_reads_each_outcome() -> None:
    assert parse_pytest_summary(PYTEST_OUTPUT) == {
        "test_exists": "passed",
        "TestFile::test_param[a-1]": "passed",
        "test_expected_failure": "passed",
        "test_unexpected_pass": "failed",
        "test_setup_breaks": "error",
        "test_content": "failed",
        "bare_node_id": "passed",
    }


def test_parse_pytest_summary_without_a_summary_is_empty() -> None:
    assert parse_pytest_summary("") == {}
    assert parse_pytest_summary("PASSED tests/t.py::test_x\n1 passed\n") == {}


@pytest.mark.parametrize(
    ("text", "json_form", "expected"),
    [
        ("1\n", False, {"reward": 1.0}),
        ("  0.25  ", False, {"reward": 0.25}),
        ("0", False, {"reward": 0.0}),
        ("0.5", True, {"reward": 0.5}),
        ("1", True, {"reward": 1.0}),
        ('{"reward": 1}', True, {"reward": 1.0}),
        ('{"reward": 0.75, "tests": 4}', True, {"reward": 0.75, "tests": 4.0}),
        ('{"reward": 0.5, "note": "half"}', True, {"reward": 0.5}),
        ('{"correctness": 1, "style": 0.5}', True, {"correctness": 1.0, "style": 0.5}),
    ],
)
def test_read_rewards_keeps_every_named_reward(
    text: str, json_form: bool, expected: dict[str, float]
) -> None:
    assert read_rewards(text, json_form=json_form) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rewards", "reward", "resolved"),
    [
        ({"reward": 1.0, "tests": 4.0}, 1.0, True),  # the reward key decides
        ({"reward": 0.5}, 0.5, False),
        ({"correctness": 1.0, "style": 1.0}, 1.0, True),  # without one: all must be met
        ({"correctness": 1.0, "style": 0.5}, 0.75, False),
    ],
)
def test_named_rewards_give_the_trial_its_reward_and_resolution(
    rewards: dict[str, float], reward: float, resolved: bool
) -> None:
    assert verdict_of(rewards) == (pytest.approx(reward), resolved)


@pytest.mark.parametrize("text", ["true", "[1]", '"1"', '{"a": "x"}', "{}", '{"a": 1, "b": true}'])
def test_read_rewards_refuses_json_without_numeric_rewards(text: str) -> None:
    with pytest.raises(ValueError, match="neither a number nor an object of named numeric"):
        read_rewards(text, json_form=True)


def test_read_rewards_refuses_a_reward_that_is_not_finite() -> None:
    with pytest.raises(ValueError, match="'reward' is not a finite number"):
        read_rewards("nan", json_form=False)


def test_read_rewards_refuses_text_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="could not convert string to float: 'passed'"):
        read_rewards("passed\n", json_form=False)
    with pytest.raises(ValueError):
        read_rewards("{not json", json_form=True)


def test_run_verifier_reads_the_reward_file(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    sandbox = FakeSandbox(ExecResult(exit_code=0, stdout=b"ok\n"), {REWARD_TXT: b"1\n"})
    outcome = run_verifier(task, sandbox, tmp_path / "v", timeout_sec=30)
    assert outcome.reward == 1.0 and outcome.is_resolved
    assert outcome.failure_mode == FailureMode.NONE
    assert (tmp_path / "v" / "stdout.txt").read_bytes() == b"ok\n"
    command, kwargs = sandbox.commands[0]
    assert command.endswith("bash /tests/test.sh")
    assert "/opt/rock-verifier/bin" in command
    assert kwargs["timeout"] == 30 and kwargs["env"]["TEST_DIR"] == "/tests"


def test_run_verifier_reward_json_below_one_is_not_resolved(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    sandbox = FakeSandbox(ExecResult(exit_code=1), {REWARD_JSON: b'{"reward": 0.5}'})
    outcome = run_verifier(task, sandbox, tmp_path / "v", timeout_sec=30)
    assert outcome.reward == 0.5 and not outcome.is_resolved
    assert outcome.failure_mode == FailureMode.NONE


def test_run_verifier_without_reward_is_a_verifier_error(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    outcome = run_verifier(
        task, FakeSandbox(ExecResult(exit_code=3)), tmp_path / "v", timeout_sec=30
    )
    assert outcome.failure_mode == FailureMode.VERIFIER_ERROR
    assert outcome.reward is None and not outcome.is_resolved
    assert "exit 3" in outcome.error
    assert REWARD_TXT in outcome.error and REWARD_JSON in outcome.error


def test_run_verifier_with_a_garbled_reward_names_the_file(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    sandbox = FakeSandbox(ExecResult(exit_code=0), {REWARD_TXT: b"PASS"})
    outcome = run_verifier(task, sandbox, tmp_path / "v", timeout_sec=30)
    assert outcome.failure_mode == FailureMode.VERIFIER_ERROR
    assert REWARD_TXT in outcome.error and "'PASS'" in outcome.error


def test_run_verifier_timeout_is_a_test_timeout(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    sandbox = FakeSandbox(ExecResult(exit_code=137, timed_out=True), {REWARD_TXT: b"1"})
    outcome = run_verifier(task, sandbox, tmp_path / "v", timeout_sec=12)
    assert outcome.failure_mode == FailureMode.TEST_TIMEOUT
    assert not outcome.is_resolved
    assert "timeout of 12 s" in outcome.error


def test_same_test_name_in_two_files_keeps_both_outcomes() -> None:
    out = (
        "=========================== short test summary info ============================\n"
        "PASSED tests/test_a.py::test_x\n"
        "FAILED tests/test_b.py::test_x - assert 0\n"
        "SKIPPED [1] tests/test_c.py:4: not here\n"
        "========================= 1 failed, 1 passed in 0.1s ==========================\n"
    )
    got = parse_pytest_summary(out)
    assert got["tests/test_a.py::test_x"] == "passed"
    assert got["tests/test_b.py::test_x"] == "failed"
    assert got["tests/test_c.py:4"] == "skipped"


@pytest.mark.docker
def test_the_reward_is_read_from_the_logs_copied_out(tmp_path: Path, docker_client: Any) -> None:
    """/logs/verifier is copied out whole, so the reward comes from that copy and not from
    two more copies out (one exec or two each). A reward file that is a link points into the
    sandbox: it counts as none, as a copy out of the sandbox refuses it, and never reads the
    file of this machine it names."""
    from rock.backends.docker import DockerBackend
    from rock.models import SandboxSpec
    from rock.verifier.run import stage

    host_file = tmp_path / "host-reward.json"
    host_file.write_text('{"reward": 1}')
    task = tb2_task(tmp_path)
    (task.tests_dir / "test.sh").write_text(
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
        f"ln -s {host_file} /logs/verifier/reward.json\n"
    )
    backend = DockerBackend(docker_client, daemon_id="pytest")
    with backend.create(SandboxSpec(memory_mb=256, pids_limit=128)) as sandbox:
        stage(task, sandbox)
        reads: list[str] = []
        real = sandbox.read_file
        sandbox.read_file = lambda path: reads.append(path) or real(path)  # type: ignore[method-assign]
        outcome = run_verifier(task, sandbox, tmp_path / "v", timeout_sec=30)
    assert reads == []
    assert outcome.failure_mode == FailureMode.NONE
    assert outcome.reward == 0.0 and not outcome.is_resolved
    assert (tmp_path / "v" / "logs" / "reward.txt").read_text() == "0\n"


def test_staging_is_the_copies_and_one_exec(tmp_path: Path) -> None:
    """The tests and the toolchain are copied in (each copy makes the folders it writes
    into); one exec then makes the log folders and the toolchain importable."""
    from rock.verifier import toolchain
    from rock.verifier.run import AGENT_LOGS, TESTS_DIR, VERIFIER_LOGS, stage

    sandbox = FakeSandbox(ExecResult(exit_code=0))
    stage(tb2_task(tmp_path), sandbox)
    assert [directory for directory, _ in sandbox.archives] == [TESTS_DIR, toolchain.TOOLCHAIN_DIR]
    [(command, _)] = sandbox.commands
    assert command.startswith(f"mkdir -p {TESTS_DIR} {VERIFIER_LOGS} {AGENT_LOGS}; ")
    assert command.endswith(toolchain.PTH_SETUP)
    strict = FakeSandbox(ExecResult(exit_code=0))
    stage(tb2_task(tmp_path / "strict"), strict, stand_ins=False)
    assert [c for c, _ in strict.commands] == [f"mkdir -p {TESTS_DIR} {VERIFIER_LOGS} {AGENT_LOGS}"]
