"""Running a task's tests after the agent, and reading what they decided.

Terminal-Bench 2.0: ``bash /tests/test.sh``, then the rewards from
``/logs/verifier/reward.json`` (named rewards) or ``reward.txt`` (one number), read in
Harbor's order; no reward file is a verifier error.
Terminal-Bench 1.0: ``bash /tests/run-tests.sh``, then the pytest summary (``-rA``):
resolved only when every test passed.
Both run with the offline toolchain first on PATH (see :mod:`rock.verifier`).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ale.sandbox import SandboxVerbs
from ale.task import Task
from ale.trajectory import FailureMode
from rock.backends.base import download, upload
from rock.verifier import toolchain

TESTS_DIR = "/tests"
VERIFIER_LOGS = "/logs/verifier"
AGENT_LOGS = "/logs/agent"
REWARD_TXT = f"{VERIFIER_LOGS}/reward.txt"
REWARD_JSON = f"{VERIFIER_LOGS}/reward.json"

_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)")
_STATUS = {
    "PASSED": "passed",
    "XFAIL": "passed",
    "FAILED": "failed",
    "XPASS": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
}


class VerifierOutcome(BaseModel):
    reward: float | None = None
    rewards: dict[str, float] | None = None
    """Every named reward the verifier wrote (reward.txt's one number is ``reward``)."""
    is_resolved: bool = False
    failure_mode: FailureMode = FailureMode.NONE
    error: str | None = None
    parser_results: dict[str, str] | None = None
    exit_code: int | None = None
    duration_sec: float = 0.0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


def parse_pytest_summary(output: str) -> dict[str, str]:
    """Test outcomes from pytest's ``-rA`` short summary: ``{test name: status}``."""
    results: dict[str, str] = {}
    seen: dict[str, str] = {}
    in_summary = False
    for line in output.splitlines():
        if "short test summary info" in line:
            in_summary = True
            continue
        if not in_summary:
            continue
        match = _SUMMARY_LINE.match(line.strip())
        if not match:
            if line.startswith("=") and results:
                in_summary = False
            continue
        status, node = match.groups()
        if node.startswith("["):  # SKIPPED [1] path:line: reason
            rest = line.strip().split(None, 2)
            node = rest[2].split(": ", 1)[0] if len(rest) > 2 else node
        name = node.split("::", 1)[1] if "::" in node else node
        if name in results and results[name] != _STATUS[status]:
            # the same test name in two files: keep both under their full ids
            results[seen.get(name, name)] = results.pop(name)
            name = node
        seen[name] = node
        results[name] = _STATUS[status]
    return results


def read_rewards(text: str, *, json_form: bool) -> dict[str, float]:
    """The rewards in reward.txt (one number: ``{"reward": x}``) or reward.json (a number, or
    an object of named numeric rewards, as Harbor writes and reads them); raises ValueError
    saying what is wrong."""
    if not json_form:
        value = float(text.strip())
        rewards = {"reward": value}
    else:
        data = json.loads(text)
        if _number(data):
            rewards = {"reward": float(data)}
        elif isinstance(data, dict) and data and all(_number(v) for v in data.values()):
            rewards = {str(k): float(v) for k, v in data.items()}
        elif isinstance(data, dict) and "reward" in data and _number(data["reward"]):
            rewards = {"reward": float(data["reward"])}  # with non-numeric detail beside it
        else:
            raise ValueError(
                "reward.json holds neither a number nor an object of named numeric rewards"
            )
    bad = [k for k, v in rewards.items() if not math.isfinite(v)]
    if bad:
        raise ValueError(f"the reward {bad[0]!r} is not a finite number")
    return rewards


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def verdict_of(rewards: dict[str, float]) -> tuple[float, bool]:
    """The trial's reward and whether it is resolved: the ``reward`` key when there is one;
    else the mean of the named rewards, resolved only when every one of them is 1."""
    if "reward" in rewards:
        reward = rewards["reward"]
        return reward, reward >= 1.0 - 1e-9
    reward = sum(rewards.values()) / len(rewards)
    return reward, all(v >= 1.0 - 1e-9 for v in rewards.values())


def stage(task: Task, sandbox: SandboxVerbs, *, stand_ins: bool = True) -> None:
    """Copy the tests in (and the verifier toolchain, unless ``stand_ins`` is false: the
    strict check); make the log directories, in the exec that makes the toolchain
    importable (a copy makes the folders it writes into)."""
    if task.tests_dir is not None and task.tests_dir.is_dir():
        upload(sandbox, task.tests_dir, TESTS_DIR)
    if task.source_format == "tb1":
        upload(sandbox, task.test_script, f"{TESTS_DIR}/run-tests.sh")
    folders = f"mkdir -p {TESTS_DIR} {VERIFIER_LOGS} {AGENT_LOGS}"
    if stand_ins:
        toolchain.install(sandbox, first=folders)
    else:
        sandbox.exec(folders, timeout=60)


def run_verifier(
    task: Task,
    sandbox: SandboxVerbs,
    out_dir: Path,
    *,
    timeout_sec: float,
    env: dict[str, str] | None = None,
) -> VerifierOutcome:
    """Run the task's tests in ``sandbox`` (``env``: their variables, else the task's);
    write stdout/stderr (and /logs/verifier) to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = VerifierOutcome(started_at=datetime.now(UTC))
    script = "test.sh" if task.source_format == "tb2" else "run-tests.sh"
    command = f'export PATH="{toolchain.TOOLCHAIN_DIR}/bin:$PATH"; bash {TESTS_DIR}/{script}'
    variables = {"TEST_DIR": TESTS_DIR, **(task.verifier_env if env is None else env)}
    started = time.monotonic()
    result = sandbox.exec(command, timeout=timeout_sec, env=variables)
    outcome.duration_sec = round(time.monotonic() - started, 3)
    outcome.ended_at = datetime.now(UTC)
    outcome.exit_code = result.exit_code
    (out_dir / "stdout.txt").write_bytes(result.stdout)
    (out_dir / "stderr.txt").write_bytes(result.stderr)
    parsed = parse_pytest_summary(result.stdout_text + "\n" + result.stderr_text)
    outcome.parser_results = parsed or None
    if result.timed_out:
        outcome.failure_mode = FailureMode.TEST_TIMEOUT
        outcome.error = f"the tests ran past their timeout of {timeout_sec:g} s and were killed"
        return outcome
    if result.oom_killed:
        outcome.failure_mode = FailureMode.SANDBOX_ERROR
        outcome.error = "the tests were killed by the sandbox's memory limit"
        return outcome
    if task.source_format == "tb1":
        return _tb1_verdict(outcome, parsed, result.exit_code)
    fetched = _fetch_logs(sandbox, out_dir)
    return _reward_verdict(outcome, sandbox, result.exit_code, fetched)


def _tb1_verdict(
    outcome: VerifierOutcome, parsed: dict[str, str], exit_code: int
) -> VerifierOutcome:
    """A Terminal-Bench 1.0 task's verdict, from its tests' pytest summary: resolved when
    every test passed or was skipped."""
    if not parsed:
        outcome.failure_mode = FailureMode.PARSE_ERROR
        outcome.error = (
            f"run-tests.sh (exit {exit_code}) printed no pytest summary; "
            "run pytest with -rA so each test's outcome is printed"
        )
        return outcome
    outcome.is_resolved = all(s in ("passed", "skipped") for s in parsed.values())
    outcome.reward = 1.0 if outcome.is_resolved else 0.0
    return outcome


def _reward_verdict(
    outcome: VerifierOutcome, sandbox: SandboxVerbs, exit_code: int, fetched: Path | None
) -> VerifierOutcome:
    """A Harbor task's verdict, from the reward its test script wrote (reward.json first,
    then reward.txt): read from ``fetched``, the copy of /logs/verifier just made, or from
    the sandbox when that copy failed (each read there is an exec or two)."""
    for path, json_form in ((REWARD_JSON, True), (REWARD_TXT, False)):  # Harbor's order
        try:
            data = _reward_file(sandbox, path, fetched)
        except Exception:
            continue
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        try:
            outcome.rewards = read_rewards(text, json_form=json_form)
        except (ValueError, TypeError) as exc:
            outcome.failure_mode = FailureMode.VERIFIER_ERROR
            outcome.error = f"{path} holds {text.strip()[:60]!r}, not a reward ({exc})"
            return outcome
        outcome.reward, outcome.is_resolved = verdict_of(outcome.rewards)
        return outcome
    outcome.failure_mode = FailureMode.VERIFIER_ERROR
    outcome.error = (
        f"test.sh (exit {exit_code}) wrote neither {REWARD_TXT} nor {REWARD_JSON}; "
        "the test script must write the reward"
    )
    return outcome


def _reward_file(sandbox: SandboxVerbs, path: str, fetched: Path | None) -> bytes | None:
    """The bytes of the reward file ``path``: a regular file in ``fetched`` (a link there
    points into the sandbox, not at this machine's files, so it counts as none, as the
    sandbox's copy-out refuses one), or None when there is none."""
    if fetched is None:
        return sandbox.read_file(path)
    local = fetched / path.removeprefix(f"{VERIFIER_LOGS}/")
    if local.is_symlink() or not local.is_file():
        return None
    return local.read_bytes()


def _fetch_logs(sandbox: SandboxVerbs, out_dir: Path) -> Path | None:
    """/logs/verifier copied to ``out_dir``/logs; None when it could not be (empty or
    missing: the reward check says enough)."""
    local = out_dir / "logs"
    shutil.rmtree(local, ignore_errors=True)  # (an earlier try's, which must not be read)
    try:
        download(sandbox, VERIFIER_LOGS, local)
    except Exception:
        return None
    return local if local.is_dir() else None
