"""Multi-step tasks (Harbor's 1.4 ``[[steps]]``) on a real Docker engine: steps in one
container, each with its own instruction and tests, ``min_reward`` ending the task, the
rewards combined by the task's strategy, a step's ``setup.sh``, and verifiers in containers
of their own that see only the artifacts (the agent's image with the tests uploaded, or an
image built from the tests' Dockerfile that holds them); and 1.4's ``[environment]`` ``env``,
``workdir`` and ``healthcheck``, ``[[verifier.collect]]`` hooks and ``[solution] env``."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rock.backends.docker import DockerBackend
from rock.bench.harness import Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions

# One worker runs the module: its oracle run (a bench run of several tasks, a minute) is a
# module fixture, which every worker taking one of its tests would run again.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("bench-steps")]

EXAMPLE = Path(__file__).parents[3] / "datasets" / "examples" / "hello-steps"
APPEND_TEST = """\
#!/bin/bash
# in a container of its own: /app came over as an artifact, /tmp/agent-only did not
mkdir -p /logs/verifier
if [ "$(printf 'hello\\nworld')" = "$(cat /app/notes.txt)" ] && [ ! -e /tmp/agent-only ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def _edit(file: Path, old: str, new: str) -> None:
    text = file.read_text()
    assert old in text, old
    file.write_text(text.replace(old, new))


def _variant(root: Path, name: str) -> Path:
    task = Path(shutil.copytree(EXAMPLE, root / name))
    solve = task / "steps" / "append" / "solution" / "solve.sh"
    solve.write_text("#!/bin/bash\necho world >> /app/notes.txt\ntouch /tmp/agent-only\n")
    (task / "steps" / "append" / "tests" / "test.sh").write_text(APPEND_TEST)
    return task


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("steps")
    task = _variant(root, "separate")  # the agent (the oracle here) gets no canary line
    create = task / "steps" / "create" / "instruction.md"
    create.write_text("<!-- terminal-bench-canary GUID 0000 -->\n\n" + create.read_text())
    # no min_reward, the second step unsolved: the mean of 1 and 0, and the last one's 0
    for name, strategy in (("mean", "mean"), ("final", "final")):
        task = _variant(root, name)
        _edit(task / "task.toml", "min_reward = 1.0\n", "")
        _edit(task / "task.toml", '"mean"', f'"{strategy}"')
        (task / "steps" / "append" / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    # the first step's setup.sh fails: no agent, no verifier, the task ends there
    task = _variant(root, "setup")
    (task / "steps" / "create" / "workdir").mkdir()
    (task / "steps" / "create" / "workdir" / "setup.sh").write_text("echo no >&2; exit 3\n")
    # a task of one step whose container gets variables and starts in another directory
    task = Path(shutil.copytree(EXAMPLE.parent / "hello-tb2", root / "env"))
    _edit(task / "task.toml", "allow_internet = false", (
        'allow_internet = false\nworkdir = "/work"\n'
        'env = { GREETING = "${ALE_UNSET_GREETING:-bonjour}" }'
    ))  # fmt: skip
    (task / "solution" / "solve.sh").write_text('#!/bin/bash\necho "$GREETING" > out.txt\n')
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        '[ "$(cat /work/out.txt)" = "bonjour" ] && [ "$PWD" = /work ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n"
    )
    # healthy on the third try; collect hooks (one fails, one names another service) run
    # before the tests; the oracle's solution gets [solution] env
    task = Path(shutil.copytree(EXAMPLE.parent / "hello-tb2", root / "hooks"))
    counter = "n=$(cat /tmp/tries 2>/dev/null || echo 0); echo $((n+1)) > /tmp/tries; [ $n -ge 2 ]"
    _edit(task / "task.toml", "allow_internet = false", (
        "allow_internet = false\n\n[environment.healthcheck]\n"
        f"command = '{counter}'\ninterval_sec = 0.1\nstart_interval_sec = 0.1\nretries = 3\n\n"
        '[[verifier.collect]]\ncommand = "cp /tmp/tries /app/hooked.txt"\n\n'
        '[[verifier.collect]]\ncommand = "echo broken >&2; exit 4"\n\n'
        '[[verifier.collect]]\ncommand = "true"\nservice = "db"\n\n'
        '[solution]\nenv = { WORD = "${ALE_UNSET_WORD:-secret}" }'
    ))  # fmt: skip
    solve = '#!/bin/bash\necho "$WORD-$DEBIAN_FRONTEND" > /app/out.txt\n'
    (task / "solution" / "solve.sh").write_text(solve)
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        '[ "$(cat /app/out.txt)" = secret-noninteractive ] && [ "$(cat /app/hooked.txt)" = 3 ] '
        "&& r=1 || r=0\n"
        "echo $r > /logs/verifier/reward.txt\n"
    )
    # artifacts kept with the trial (at a destination, without what exclude names); one of
    # another service skipped, one that is not there recorded as failed
    task = Path(shutil.copytree(EXAMPLE.parent / "hello-tb2", root / "kept"))
    _edit(task / "task.toml", 'version = "1.0"', (
        'version = "1.0"\nartifacts = ["/app", '
        '{ source = "/srv/data", destination = "data", exclude = ["*.tmp", "cache"] }, '
        '{ source = "/opt/x", service = "db" }, "/nope"]'
    ))  # fmt: skip
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\n"
        "mkdir -p /srv/data/cache /srv/data/deep /logs/artifacts\n"
        "touch /srv/data/keep.txt /srv/data/skip.tmp /srv/data/cache/c /srv/data/deep/d.tmp\n"
        "echo noted > /logs/artifacts/note.txt\n"
    )
    # the agent, the tests and a hook as the users the task names
    task = Path(shutil.copytree(EXAMPLE.parent / "hello-tb2", root / "users"))
    _edit(task / "task.toml", "[agent]\n", "[agent]\nuser = 1000\n")
    _edit(task / "task.toml", "[verifier]\n", '[verifier]\nuser = "1001:1001"\n')
    with (task / "task.toml").open("a") as toml:
        toml.write('\n[[verifier.collect]]\ncommand = "id -u > /tmp/hook"\nuser = "1002"\n')
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nid -u > /tmp/agent\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        '[ "$(cat /tmp/agent)" = 1000 ] && [ "$(cat /tmp/hook)" = 1002 ] && [ "$(id -u)" = 1001 ] '
        "&& r=1 || r=0\necho $r > /logs/verifier/reward.txt\n"
    )
    # phases with their own network: closed environment, open agent, closed tests; and the
    # other way round (Harbor's usual: an open set-up, a closed agent, open tests)
    probe = "ls /sys/class/net | grep -cvx lo"  # interfaces besides loopback
    for name, env_net, agent_mode, verifier_mode, agent_sees, tests_see in (
        ("phases", "false", "public", "no-network", "1", "0"),
        ("phases-closed-agent", "true", "allowlist", "public", "0", "1"),
    ):
        task = Path(shutil.copytree(EXAMPLE.parent / "hello-tb2", root / name))
        _edit(task / "task.toml", "allow_internet = false", f"allow_internet = {env_net}")
        _edit(task / "task.toml", "[agent]\n", f'[agent]\nnetwork_mode = "{agent_mode}"\n')
        _edit(task / "task.toml", "[verifier]\n", f'[verifier]\nnetwork_mode = "{verifier_mode}"\n')
        (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{probe} > /app/agent-net\n")
        (task / "tests" / "test.sh").write_text(
            "#!/bin/bash\n"
            f'[ "$(cat /app/agent-net)" = "{agent_sees}" ] && [ "$({probe})" = "{tests_see}" ] '
            "&& r=1 || r=0\necho $r > /logs/verifier/reward.txt\n"
        )
    # never healthy: the agent never starts
    task = Path(shutil.copytree(EXAMPLE.parent / "hello-tb2", root / "sick"))
    _edit(task / "task.toml", "allow_internet = false", (
        "allow_internet = false\n\n[environment.healthcheck]\n"
        'command = "echo not yet; exit 1"\ninterval_sec = 0.1\nretries = 2'
    ))  # fmt: skip
    # the second step's verifier image is built from its tests' Dockerfile, which holds them
    task = _variant(root, "bundled")
    tests = task / "steps" / "append" / "tests"
    (tests / "Dockerfile").write_text("FROM rock/base:bookworm\nCOPY test.sh /tests/test.sh\n")
    return root


def _harness(docker_client: Any) -> Harness:
    return Harness(
        DockerBackend(docker_client),
        ImageBuilder(docker_client, ImageMap.load(user_file=None)),
        BenchOptions(n_concurrent=2),
    )


@pytest.fixture(scope="module")
def oracle_run(tasks: Path, docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "oracle"
    asyncio.run(_harness(docker_client).run(tasks, out, agent="oracle"))
    return out


def _trial(run: Path, task: str) -> dict[str, Any]:
    return json.loads((run / f"{task}.1-of-1" / "results.json").read_text())


def test_steps_run_in_one_container_and_a_separate_verifier_sees_only_artifacts(
    oracle_run: Path,
) -> None:
    trial = _trial(oracle_run, "separate")
    assert trial["is_resolved"] is True and trial["reward"] == 1.0
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [("create", 1.0), ("append", 1.0)]
    step_dir = oracle_run / "separate.1-of-1" / "steps"
    assert (step_dir / "append" / "artifacts" / "app" / "notes.txt").read_text() == "hello\nworld\n"
    harbor = json.loads((oracle_run / "separate.1-of-1" / "result.json").read_text())
    assert [s["step_name"] for s in harbor["step_results"]] == ["create", "append"]
    assert harbor["step_results"][1]["verifier_result"] == {"rewards": {"reward": 1.0}}


def test_a_verifier_image_built_from_the_tests_dockerfile_holds_its_tests(
    oracle_run: Path,
) -> None:
    trial = _trial(oracle_run, "bundled")
    assert trial["is_resolved"] is True and len(trial["steps"]) == 2


def test_rewards_combine_by_the_task_s_strategy(oracle_run: Path) -> None:
    mean, final = _trial(oracle_run, "mean"), _trial(oracle_run, "final")
    assert [s["reward"] for s in mean["steps"]] == [1.0, 0.0]
    assert mean["reward"] == 0.5 and mean["is_resolved"] is False
    assert final["reward"] == 0.0 and len(final["steps"]) == 2


def test_a_failing_setup_script_ends_the_task_before_its_agent(oracle_run: Path) -> None:
    trial = _trial(oracle_run, "setup")
    (step,) = trial["steps"]
    assert step["failure_mode"] == "build_failed" and "setup.sh exited 3" in step["error"]
    assert step["rewards"] is None and trial["failure_mode"] == "build_failed"


def test_a_step_below_its_min_reward_ends_the_task(
    tasks: Path, docker_client: Any, tmp_path: Path
) -> None:
    out = tmp_path / "nop"
    asyncio.run(_harness(docker_client).run(tasks, out, agent="nop", task_ids=["separate"]))
    trial = _trial(out, "separate")
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [("create", 0.0)]
    assert trial["reward"] == 0.0 and trial["is_resolved"] is False


def test_a_task_s_variables_and_working_directory_are_the_container_s(oracle_run: Path) -> None:
    trial = _trial(oracle_run, "env")
    assert trial["is_resolved"] is True, trial["error"]


def test_a_healthcheck_collect_hooks_and_the_solution_s_variables(oracle_run: Path) -> None:
    trial = _trial(oracle_run, "hooks")
    assert trial["is_resolved"] is True, trial["error"]
    log = (oracle_run / "hooks.1-of-1" / "collect-hooks.log").read_text()
    lines = [line for line in log.splitlines() if not line.startswith("broken")]
    assert lines[0] == "exit 0 `cp /tmp/tries /app/hooked.txt`"
    assert lines[1] == "exit 4 `echo broken >&2; exit 4`"
    assert "service 'db', which this task does not run" in lines[2]


def test_an_environment_that_never_becomes_healthy_runs_no_agent(oracle_run: Path) -> None:
    trial = _trial(oracle_run, "sick")
    assert trial["is_resolved"] is None and trial["reward"] is None  # not graded, as Harbor
    assert trial["failure_mode"] == "sandbox_error"
    assert trial["error"] == (
        "the environment never became healthy: `echo not yet; exit 1` failed 2 times in a row "
        "(exit 1: not yet)"
    )
    assert not (oracle_run / "sick.1-of-1" / "verifier" / "reward.txt").exists()


def test_artifacts_are_kept_with_the_trial_as_harbor_keeps_them(oracle_run: Path) -> None:
    trial = _trial(oracle_run, "kept")
    assert trial["is_resolved"] is True, trial["error"]
    kept = oracle_run / "kept.1-of-1" / "artifacts"
    assert (kept / "app" / "hello.txt").read_text() == "Hello, world!\n"
    assert (kept / "logs" / "artifacts" / "note.txt").read_text() == "noted\n"
    assert sorted(p.name for p in (kept / "data").rglob("*")) == ["deep", "keep.txt"]
    manifest = json.loads((kept / "manifest.json").read_text())
    assert [(m["source"], m["destination"], m["type"], m["status"]) for m in manifest] == [
        ("/logs/artifacts", "logs/artifacts", "directory", "ok"),
        ("/app", "app", "directory", "ok"),
        ("/srv/data", "data", "directory", "ok"),
        ("/opt/x", "opt/x", None, "skipped"),
        ("/nope", "nope", None, "failed"),
    ]


def test_the_agent_the_tests_and_a_hook_run_as_the_users_the_task_names(
    oracle_run: Path,
) -> None:
    trial = _trial(oracle_run, "users")
    assert trial["is_resolved"] is True, trial["error"]


@pytest.mark.parametrize("task", ["phases", "phases-closed-agent"])
def test_the_agent_and_the_tests_get_the_network_their_phase_asks_for(
    oracle_run: Path, task: str
) -> None:
    trial = _trial(oracle_run, task)
    assert trial["is_resolved"] is True, trial["error"]
