"""rock bench on a real Docker engine: tasks written here in both Terminal-Bench forms,
each exercising one path of a trial (pass, fail, build failure, missing reward, agent and
test timeouts, unmappable base, invalid task, resume, image cache, the CLI)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rock.backends.docker import DockerBackend
from rock.bench.harness import Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions
from rock.bench.results import read_run
from rock.cli import main

pytestmark = pytest.mark.docker

TEST_SH_UV = """\
#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

TEST_OUT = """\
from pathlib import Path


def test_hello():
    assert Path("/app/out.txt").read_text().strip() == "hello"


def test_no_network_but_loopback():
    assert sorted(p.name for p in Path("/sys/class/net").iterdir()) == ["lo"]


def test_memory_limit_applied():
    v2, v1 = Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    limit = (v2 if v2.exists() else v1).read_text().strip()
    assert limit == str(512 * 2**20)
"""


def _tb2(
    root: Path,
    name: str,
    *,
    solve: str = "echo hello > /app/out.txt\n",
    test_sh: str = TEST_SH_UV,
    tests_py: str = TEST_OUT,
    dockerfile: str = "FROM python:3.11-slim\nWORKDIR /app\n",
    agent_timeout: float = 120,
    test_timeout: float = 120,
    compose: str | None = None,
    internet: bool = False,
) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "instruction.md").write_text("Write hello into /app/out.txt.\n")
    (task / "task.toml").write_text(
        textwrap.dedent(
            f"""\
            version = "1.0"
            [metadata]
            difficulty = "easy"
            category = "testing"
            [agent]
            timeout_sec = {agent_timeout}
            [verifier]
            timeout_sec = {test_timeout}
            [environment]
            cpus = 1
            memory_mb = 512
            allow_internet = {str(internet).lower()}
            """
        )
    )
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    if compose is not None:
        (task / "environment" / "docker-compose.yaml").write_text(compose)
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "tests" / "test_outputs.py").write_text(tests_py)
    (task / "solution" / "solve.sh").write_text(solve)
    return task


def _tb1(root: Path, name: str) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_text(
        textwrap.dedent(
            """\
            instruction: Write hello into /app/out.txt.
            difficulty: easy
            category: testing
            parser_name: pytest
            max_agent_timeout_sec: 120
            max_test_timeout_sec: 120
            """
        )
    )
    (task / "Dockerfile").write_text(
        "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n"
    )
    (task / "run-tests.sh").write_text(
        textwrap.dedent(
            """\
            #!/bin/bash
            apt-get update
            apt-get install -y curl
            curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
            source $HOME/.local/bin/env
            uv venv .tbench-testing
            source .tbench-testing/bin/activate
            uv pip install pytest==8.4.1
            uv run pytest $TEST_DIR/test_outputs.py -rA
            """
        )
    )
    (task / "tests" / "test_outputs.py").write_text(
        "from pathlib import Path\n\n\ndef test_hello():\n"
        '    assert Path("/app/out.txt").read_text().strip() == "hello"\n\n\n'
        "def test_always():\n    assert True\n"
    )
    (task / "solution.sh").write_text("echo hello > /app/out.txt\n")
    return task


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dataset")
    _tb2(root, "good")
    _tb1(root, "tb1-good")
    _tb2(
        root,
        "compose",
        compose="services:\n  main:\n    build:\n      context: .\n"
        "      dockerfile: Dockerfile\n    environment:\n      - MODE=compose\n",
    )
    _tb2(root, "broken-build", dockerfile="FROM python:3.11-slim\nRUN echo boom && exit 3\n")
    _tb2(root, "no-reward", test_sh="#!/bin/bash\necho 'forgot the reward'\n")
    _tb2(root, "slow-agent", solve="sleep 60\necho hello > /app/out.txt\n", agent_timeout=2)
    _tb2(root, "slow-tests", test_sh="#!/bin/bash\nsleep 60\n", test_timeout=2)
    _tb2(root, "unmapped", dockerfile="FROM registry.invalid/nothing:1\n")
    bad = _tb2(root, "bad-toml")
    (bad / "task.toml").write_text("version = \n")
    return root


def _harness(docker_client: Any, **options: Any) -> Harness:
    return Harness(
        DockerBackend(docker_client),
        ImageBuilder(docker_client, ImageMap.load(user_file=None)),
        BenchOptions(**options),
    )


@pytest.fixture(scope="module")
def oracle_run(dataset: Path, docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "oracle"
    asyncio.run(_harness(docker_client, n_concurrent=2).run(dataset, out, agent="oracle"))
    return out


def _trial(run: Path, task: str) -> dict[str, Any]:
    return json.loads((run / f"{task}.1-of-1" / "results.json").read_text())


def test_oracle_resolves_a_2_0_task_offline_with_the_tasks_limits(oracle_run: Path) -> None:
    r = _trial(oracle_run, "good")
    assert r["is_resolved"] is True and r["reward"] == 1.0 and r["failure_mode"] == "none"
    assert r["parser_results"] == {
        "test_hello": "passed",
        "test_no_network_but_loopback": "passed",
        "test_memory_limit_applied": "passed",
    }
    trial = oracle_run / "good.1-of-1"
    assert (trial / "verifier" / "logs" / "ctrf.json").is_file()  # the plugin ran offline
    log = [json.loads(line) for line in (trial / "commands.jsonl").read_text().splitlines()]
    assert log[0]["command"] == "bash /solution/solve.sh" and log[0]["exit_code"] == 0
    assert "$ bash /solution/solve.sh" in (trial / "terminal.log").read_text()
    trajectory = json.loads((trial / "agent" / "trajectory.jsonl").read_text())
    assert trajectory["reward"] == 1.0 and trajectory["verifier"]["passed"] is True
    assert (trial / "agent" / "trajectory.atif.json").is_file()
    for key in ("trial_started_at", "agent_started_at", "test_ended_at", "overhead_sec"):
        assert r[key] is not None


def test_a_1_0_task_is_judged_by_its_pytest_summary(oracle_run: Path) -> None:
    r = _trial(oracle_run, "tb1-good")
    assert r["is_resolved"] is True
    assert r["parser_results"] == {"test_hello": "passed", "test_always": "passed"}


def test_a_compose_task_builds_its_main_service(oracle_run: Path) -> None:
    assert _trial(oracle_run, "compose")["is_resolved"] is True


def test_a_dockerfile_that_fails_is_a_failed_trial_with_the_build_log(oracle_run: Path) -> None:
    r = _trial(oracle_run, "broken-build")
    assert r["failure_mode"] == "build_failed" and r["is_resolved"] is None
    log = (oracle_run / "broken-build.1-of-1" / "build.log").read_text()
    assert "boom" in log and "returned a non-zero code: 3" in log


def test_no_reward_file_is_a_verifier_error(oracle_run: Path) -> None:
    r = _trial(oracle_run, "no-reward")
    assert r["failure_mode"] == "verifier_error" and r["is_resolved"] is False
    assert "reward.txt" in r["error"]


def test_named_rewards_are_kept_and_decide_as_the_task_s_rule_says(
    docker_client: Any, tmp_path: Path
) -> None:
    """reward.json with named rewards and no ``reward`` key (as Harbor's verifiers write it):
    every reward kept, the trial's reward their mean, resolved only when all are met."""
    root = tmp_path / "named"
    for name, style in (("all-met", 1), ("half-met", 0.5)):
        rewards = f'{{"correctness": 1, "style": {style}}}'
        _tb2(root, name, test_sh=f"#!/bin/bash\necho '{rewards}' > /logs/verifier/reward.json\n")
    out = tmp_path / "run"
    asyncio.run(_harness(docker_client, n_concurrent=2).run(root, out, agent="oracle"))
    met, half = _trial(out, "all-met"), _trial(out, "half-met")
    assert met["rewards"] == {"correctness": 1.0, "style": 1.0} and met["is_resolved"] is True
    assert half["rewards"] == {"correctness": 1.0, "style": 0.5} and half["reward"] == 0.75
    assert half["is_resolved"] is False and half["failure_mode"] == "none"
    saved = json.loads((out / "half-met.1-of-1" / "agent" / "trajectory.jsonl").read_text())
    assert saved["verifier"]["detail"]["rewards"] == {"correctness": 1.0, "style": 0.5}


BYTECODE = """#!/bin/bash
python3 -c 'import _pytest.python as m; print(m.__file__)' > /logs/verifier/pytest-file.txt
grep -q '^/opt/rock-verifier/site.zip/_pytest/python.pyc$' /logs/verifier/pytest-file.txt \
  && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""


def test_the_toolchain_s_pytest_is_imported_compiled_in_a_python_3_11_image(
    docker_client: Any, tmp_path: Path
) -> None:
    """In an image whose python3 is this interpreter's version (rock's bench base, Debian's
    3.11), pytest comes from the toolchain's bytecode, not compiled again for every run."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the toolchain carries the bytecode of the interpreter that built it")
    root = tmp_path / "tasks"
    _tb2(root, "compiled", test_sh=BYTECODE)
    out = tmp_path / "run"
    asyncio.run(_harness(docker_client).run(root, out, agent="oracle"))
    shown = (out / "compiled.1-of-1" / "verifier" / "logs" / "pytest-file.txt").read_text()
    assert _trial(out, "compiled")["is_resolved"] is True, shown


PIP_MIXED = """#!/bin/bash
pip install pytest==8.4.2 requests psutil pytest-json-ctrf || exit 0
python3 -c 'import psutil, requests, pytest' && echo 1 > /logs/verifier/reward.txt
"""


def test_pip_installs_what_the_toolchain_holds_and_names_exactly_what_it_lacks(
    docker_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psutil (compiled) is not in the toolchain: the stand-in says so by name, installs the
    rest, and with psutil's wheel in the toolchain's wheelhouse the same script passes."""
    import subprocess
    import sys

    from rock.verifier import toolchain

    monkeypatch.setattr(toolchain, "wheelhouse", lambda: tmp_path / "wheelhouse")
    root = tmp_path / "tasks"
    _tb2(root, "mixed", test_sh=PIP_MIXED)
    first = tmp_path / "without"
    asyncio.run(_harness(docker_client).run(root, first, agent="oracle"))
    stderr = (first / "mixed.1-of-1" / "verifier" / "stderr.txt").read_text()
    assert "pip could not install psutil:" in stderr, stderr
    assert _trial(first, "mixed")["is_resolved"] is False
    wheels = tmp_path / "wheels"
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--only-binary=:all:",
            "--no-deps",
            "--python-version",
            "3.11",
            "--platform",
            "manylinux2014_x86_64",
            "psutil",
            "-d",
            str(wheels),
        ],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stderr
    assert any("psutil" in name for name in toolchain.add_wheels(wheels))
    second = tmp_path / "with"
    asyncio.run(_harness(docker_client).run(root, second, agent="oracle"))
    assert _trial(second, "mixed")["is_resolved"] is True


def test_strict_check_flags_a_task_whose_tests_need_rock_s_stand_ins(tmp_path: Path) -> None:
    """A test script that calls a bare pytest neither the image nor the script installs passes
    only because rock's toolchain puts one on PATH; strict mode runs it as Harbor does."""
    simple = "def test_hello():\n    assert open('/app/out.txt').read().strip() == 'hello'\n"
    reward = "if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    root = tmp_path / "tasks"
    _tb2(
        root,
        "bare-pytest",
        tests_py=simple,
        test_sh="#!/bin/bash\npytest /tests/test_outputs.py -rA\n" + reward,
    )
    _tb2(
        root,
        "installs-pytest",
        tests_py=simple,
        test_sh="#!/bin/bash\npip install pytest==8.4.1\npython -m pytest /tests/test_outputs.py -rA\n"
        + reward,
    )
    runner = CliRunner()
    plain = runner.invoke(main, ["bench", "check", str(root), "--output", str(tmp_path / "a")])
    assert plain.exit_code == 0, plain.output  # with the stand-ins both pass
    strict = runner.invoke(
        main, ["bench", "check", str(root), "--strict", "--output", str(tmp_path / "b")]
    )
    assert strict.exit_code == 1, strict.output
    flagged = [line for line in strict.output.splitlines() if "passes only with rock" in line]
    assert len(flagged) == 1 and flagged[0].startswith("bare-pytest"), strict.output
    assert "last error: /tests/test.sh: line 2: pytest: command not found" in flagged[0]


@pytest.mark.parametrize("max_retries", [0, 1])
def test_a_harness_fault_is_retried_when_asked_and_counted(
    docker_client: Any, tmp_path: Path, max_retries: int
) -> None:
    from bench_fakes import KillsItsFirstSandbox

    KillsItsFirstSandbox.runs = 0
    root = tmp_path / "tasks"
    _tb2(
        root,
        "lost",
        tests_py="def test_hello():\n    assert open('/app/out.txt').read() == 'hello\\n'\n",
    )
    out = tmp_path / "run"
    harness = _harness(docker_client, max_retries=max_retries)
    results = asyncio.run(harness.run(root, out, agent="bench_fakes:KillsItsFirstSandbox"))
    trial = _trial(out, "lost")
    if max_retries:
        assert trial["is_resolved"] is True and trial["retries"] == 1
        assert trial["retried_failures"] == ["sandbox_error"] and results.n_retries == 1
    else:
        assert trial["failure_mode"] == "sandbox_error" and trial["retries"] == 0


def test_an_agent_past_its_timeout_is_stopped_and_still_verified(oracle_run: Path) -> None:
    r = _trial(oracle_run, "slow-agent")
    assert r["failure_mode"] == "agent_timeout"
    assert r["agent_sec"] < 30
    assert r["is_resolved"] is False and r["parser_results"]["test_hello"] == "failed"


def test_tests_past_their_timeout_are_a_test_timeout(oracle_run: Path) -> None:
    r = _trial(oracle_run, "slow-tests")
    assert r["failure_mode"] == "test_timeout" and r["is_resolved"] is False
    assert r["test_sec"] < 30


def test_an_unmappable_base_image_says_how_to_map_it(oracle_run: Path) -> None:
    r = _trial(oracle_run, "unmapped")
    assert r["failure_mode"] == "build_failed"
    assert "registry.invalid/nothing:1" in r["error"] and "--map-image" in r["error"]


def test_an_invalid_task_is_reported_and_the_run_goes_on(oracle_run: Path) -> None:
    results = json.loads((oracle_run / "results.json").read_text())
    assert [Path(i["path"]).name for i in results["invalid_tasks"]] == ["bad-toml"]
    assert "task.toml" in results["invalid_tasks"][0]["reason"]
    assert results["n_resolved"] == 3 and len(results["results"]) == 8
    assert results["accuracy"] == pytest.approx(3 / 8)
    assert results["pass_at_k"] == {"1": pytest.approx(3 / 8)}
    assert set(results["resolved_ids"]) == {"good", "tb1-good", "compose"}


def test_nop_fails_and_images_come_from_the_cache(
    dataset: Path, oracle_run: Path, docker_client: Any, tmp_path: Path
) -> None:
    out = tmp_path / "nop"
    asyncio.run(
        _harness(docker_client).run(dataset, out, agent="nop", task_ids=["good", "tb1-good"])
    )
    for task in ("good", "tb1-good"):
        r = _trial(out, task)
        assert r["is_resolved"] is False and r["failure_mode"] == "none"
        assert r["image_built"] is False  # built by the oracle run, same digest


def test_resume_redoes_only_unfinished_trials(
    dataset: Path, docker_client: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    ids = ["good", "tb1-good"]
    asyncio.run(
        _harness(docker_client, n_attempts=2).run(dataset, out, agent="oracle", task_ids=ids)
    )
    before = {r.trial_name: r.id for r in read_run(out).results}
    assert len(before) == 4
    cut = out / "good.2-of-2"
    (cut / "results.json").unlink()  # as if the run was killed during this trial
    with pytest.raises(ValueError, match="--resume"):
        asyncio.run(_harness(docker_client, n_attempts=2).run(dataset, out, agent="oracle"))
    asyncio.run(
        _harness(docker_client, n_attempts=2).run(
            dataset, out, agent="oracle", task_ids=ids, resume=True
        )
    )
    after = {r.trial_name: r.id for r in read_run(out).results}
    assert after.keys() == before.keys()
    assert [k for k in after if after[k] != before[k]] == ["good.2-of-2"]
    assert read_run(out).pass_at_k == {"1": 1.0, "2": 1.0}


def test_cli_show_and_check(dataset: Path, oracle_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(main, ["bench", "show", str(oracle_run)])
    assert shown.exit_code == 0, shown.output
    assert "pass@1 37.5%" in shown.output and "build_failed" in shown.output
    summary = json.loads(runner.invoke(main, ["bench", "show", str(oracle_run), "--json"]).output)
    assert summary["failure_modes"]["build_failed"] == 2

    gate = tmp_path / "gate"
    shutil.copytree(dataset / "good", gate / "good")
    _tb2(gate, "too-easy", tests_py="def test_nothing():\n    assert True\n")
    checked = runner.invoke(main, ["bench", "check", str(gate), "--output", str(tmp_path / "c")])
    assert checked.exit_code == 1
    assert "too-easy" in checked.output and "passes with nop" in checked.output
    offenders = [
        line.split()[0]
        for line in checked.output.splitlines()
        if "fails" in line or "passes" in line
    ]
    assert offenders == ["too-easy"]
    assert "2 tasks checked, 1 offender(s)" in checked.output

    # the oracle runs under the task's own network policy (nop never has one); its failures
    # say which tests failed and the verifier's last error line
    online = "def test_hello():\n    assert open('/app/out.txt').read().strip() == 'hello'\n"
    policy = tmp_path / "policy"
    _tb2(
        policy,
        "needs-network",
        internet=True,
        solve="test -e /sys/class/net/eth0 && echo hello > /app/out.txt\n",
        tests_py=online,
    )
    _tb2(policy, "wrong-oracle", solve="echo goodbye > /app/out.txt\n", tests_py=online)
    as_asked = runner.invoke(main, ["bench", "check", str(policy), "--output", str(tmp_path / "p")])
    assert as_asked.exit_code == 1, as_asked.output

    def problems(output: str) -> dict[str, str]:
        rows = [line.split(maxsplit=1) for line in output.splitlines() if "with oracle" in line]
        return {task: problem for task, problem in rows}

    found = problems(as_asked.output)
    assert list(found) == ["wrong-oracle"]  # needs-network had the network it asks for
    assert "failed: test_hello" in found["wrong-oracle"], found
    assert "last error: E       AssertionError: assert 'goodbye'" in found["wrong-oracle"], found
    closed = runner.invoke(
        main, ["bench", "check", str(policy), "--no-internet", "--output", str(tmp_path / "q")]
    )
    assert closed.exit_code == 1 and sorted(problems(closed.output)) == [
        "needs-network",
        "wrong-oracle",
    ]

    missing = runner.invoke(main, ["bench", "show", str(tmp_path)])
    assert missing.exit_code == 2 and "run.json" in missing.output
    unknown = runner.invoke(
        main,
        [
            "bench",
            "run",
            "--dataset",
            str(gate),
            "--agent",
            "no-such-agent",
            "--output",
            str(tmp_path / "x"),
        ],
    )
    assert unknown.exit_code == 2 and "no agent named 'no-such-agent'" in unknown.output
