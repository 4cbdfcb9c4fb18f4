"""Each fault in a task directory is one TaskFormatError naming the file and the field."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from ale.agents import TaskContext
from ale.task import TaskError, TaskFormatError, iter_tasks, load_task, write_task_tb2

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"


@pytest.fixture
def tb1(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / "tb1-hello", tmp_path / "tb1"))


@pytest.fixture
def tb2(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / "tb2-hello", tmp_path / "tb2"))


def _error(task_dir: Path) -> TaskFormatError:
    with pytest.raises(TaskFormatError) as caught:
        load_task(task_dir)
    error = caught.value
    message = str(error)
    assert "\n" not in message
    assert message.endswith(".")
    return error


def _edit(file: Path, old: str, new: str) -> None:
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new))


def test_tb1_missing_instruction(tb1: Path) -> None:
    task_yaml = tb1 / "task.yaml"
    _edit(
        task_yaml,
        'instruction: |-\n  Create the file /app/hello.txt containing the line "Hello, world!".\n',
        "",
    )
    error = _error(tb1)
    assert error.path == task_yaml.resolve()
    assert error.field == "instruction"
    assert f"task.yaml in {tb1.resolve()}" in str(error)
    assert "'instruction'" in str(error)


def test_tb1_empty_instruction(tb1: Path) -> None:
    (tb1 / "task.yaml").write_text("instruction: '   '\n")
    assert _error(tb1).field == "instruction"


def test_tb2_missing_instruction(tb2: Path) -> None:
    (tb2 / "instruction.md").unlink()
    error = _error(tb2)
    assert error.path == (tb2 / "instruction.md").resolve()
    assert "instruction.md" in str(error)
    assert str(tb2.resolve()) in str(error)


def test_tb2_empty_instruction(tb2: Path) -> None:
    (tb2 / "instruction.md").write_text("\n  \n")
    error = _error(tb2)
    assert error.path.name == "instruction.md"
    assert "empty" in str(error)


def test_malformed_toml_names_file_and_line(tb2: Path) -> None:
    (tb2 / "task.toml").write_text('version = "1.0"\n\n[agent]\ntimeout_sec = = 3\n')
    error = _error(tb2)
    assert error.path.name == "task.toml"
    assert f"task.toml in {tb2.resolve()}" in str(error)
    assert "line 4" in str(error)
    assert "TOML" in str(error)


def test_malformed_yaml_names_file_and_line(tb1: Path) -> None:
    (tb1 / "task.yaml").write_text("instruction: hi\ntags: [a, b\ndifficulty: easy\n")
    error = _error(tb1)
    assert error.path.name == "task.yaml"
    assert f"task.yaml in {tb1.resolve()}" in str(error)
    assert "YAML" in str(error)
    assert "line " in str(error)


def test_yaml_that_is_not_a_mapping(tb1: Path) -> None:
    (tb1 / "task.yaml").write_text("- just\n- a list\n")
    assert "mapping" in str(_error(tb1))


def test_tb2_agent_timeout_as_string(tb2: Path) -> None:
    _edit(tb2 / "task.toml", "timeout_sec = 240.0", 'timeout_sec = "abc"')
    error = _error(tb2)
    assert error.field == "agent.timeout_sec"
    assert str(error) == (
        f"task.toml in {tb2.resolve()}: field 'agent.timeout_sec' must be a number, "
        "got 'abc'; fix the value."
    )


def test_tb1_agent_timeout_as_string(tb1: Path) -> None:
    _edit(tb1 / "task.yaml", "max_agent_timeout_sec: 120", "max_agent_timeout_sec: soon")
    error = _error(tb1)
    assert error.field == "max_agent_timeout_sec"
    assert "task.yaml" in str(error)
    assert "'max_agent_timeout_sec' must be a number, got 'soon'" in str(error)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('tags = ["files", "beginner"]', 'tags = "files"', "metadata.tags"),
        ("allow_internet = false", 'allow_internet = "no"', "environment.allow_internet"),
        ('memory = "2G"', 'memory = "lots"', "environment.memory"),
        ("storage_mb = 4096", "storage_mb = 40.5", "environment.storage_mb"),
        ("cpus = 2", "cpus = -1", "environment.cpus"),
        ('env = { GREETING = "Hello, world!" }', "env = { GREETING = 1 }", "verifier.env"),
        ("timeout_sec = 45.0", "timeout_sec = true", "verifier.timeout_sec"),
        ('version = "1.0"', "version = 1.0", "version"),
    ],
)
def test_tb2_wrong_typed_fields(tb2: Path, old: str, new: str, field: str) -> None:
    _edit(tb2 / "task.toml", old, new)
    error = _error(tb2)
    assert error.field == field
    assert f"field '{field}'" in str(error)
    assert "task.toml" in str(error)


def test_tb2_section_that_is_not_a_table(tb2: Path) -> None:
    (tb2 / "task.toml").write_text('agent = "fast"\n')
    assert _error(tb2).field == "agent"


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("difficulty: [easy]", "difficulty"),
        ("tags: files", "tags"),
        ("author_email: 3", "author_email"),
    ],
)
def test_tb1_wrong_typed_fields(tb1: Path, line: str, field: str) -> None:
    with (tb1 / "task.yaml").open("a") as out:
        out.write(line + "\n")
    assert _error(tb1).field == field


def test_dir_with_neither_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    error = _error(tmp_path / "empty")
    assert error.path == (tmp_path / "empty").resolve()
    assert "task.toml" in str(error)
    assert "task.yaml" in str(error)
    assert "not a task" in str(error)


def test_missing_directory(tmp_path: Path) -> None:
    assert "not a directory" in str(_error(tmp_path / "nowhere"))
    with pytest.raises(TaskFormatError):
        list(iter_tasks(tmp_path / "nowhere"))


def test_tb1_missing_run_tests(tb1: Path) -> None:
    (tb1 / "run-tests.sh").unlink()
    assert _error(tb1).path.name == "run-tests.sh"


def test_tb1_missing_dockerfile(tb1: Path) -> None:
    (tb1 / "Dockerfile").unlink()
    (tb1 / "docker-compose.yaml").unlink()
    assert _error(tb1).path.name == "Dockerfile"


def test_tb2_missing_test_sh(tb2: Path) -> None:
    (tb2 / "tests" / "test.sh").unlink()
    assert _error(tb2).path.name == "test.sh"


def test_tb2_without_any_environment(tb2: Path) -> None:
    shutil.rmtree(tb2 / "environment")
    error = _error(tb2)
    assert "docker_image" in str(error)


def test_dataset_with_a_broken_task_raises(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "tb2-hello", tmp_path / "a")
    broken = Path(shutil.copytree(FIXTURES / "tb2-hello", tmp_path / "b"))
    (broken / "task.toml").write_text("[agent\n")
    with pytest.raises(TaskFormatError) as caught:
        list(iter_tasks(tmp_path))
    assert caught.value.path == (broken / "task.toml").resolve()


def test_error_is_a_value_error_and_pickles(tb2: Path) -> None:
    (tb2 / "instruction.md").unlink()
    error = _error(tb2)
    assert isinstance(error, ValueError)
    assert isinstance(error, TaskError)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.path, copy.field) == (str(error), error.path, error.field)


def test_an_unknown_schema_version_is_one_sentence(tb2: Path) -> None:
    _edit(tb2 / "task.toml", 'version = "1.0"', 'version = "2.0"')
    error = _error(tb2)
    assert "declares schema version '2.0', which this loader does not know" in str(error)
    assert "1.0, 1.1, 1.2, 1.3, 1.4" in str(error)


def test_harbor_1_4_names_its_version_schema_version_and_loads(tb2: Path) -> None:
    _edit(tb2 / "task.toml", 'version = "1.0"', 'schema_version = "1.4"')
    assert load_task(tb2).source_format == "tb2"


STEPS_EXAMPLE = Path(__file__).parents[3] / "datasets" / "examples" / "hello-steps"


@pytest.fixture
def steps(tmp_path: Path) -> Path:
    return Path(shutil.copytree(STEPS_EXAMPLE, tmp_path / "steps"))


def test_a_multi_step_task_loads_with_each_step_s_own_parts(steps: Path) -> None:
    task = load_task(steps)
    assert [s.name for s in task.steps] == ["create", "append"]
    create, append = task.steps
    assert create.instruction.startswith("Create the file /app/notes.txt")
    assert create.test_script == steps / "steps" / "create" / "tests" / "test.sh"
    assert create.solution == steps / "steps" / "create" / "solution" / "solve.sh"
    assert create.min_reward == 1.0 and append.min_reward is None
    assert create.verifier is None and append.verifier is not None  # shared, separate
    assert not append.verifier.bundled  # the agent's image, the tests uploaded
    assert create.agent_timeout_sec == 120.0 and create.test_timeout_sec == 60.0
    assert [a.source for a in task.artifacts] == ["/app"] and task.reward_strategy == "mean"
    assert "## Step create" in task.instruction and "## Step append" in task.instruction


def test_a_step_s_verifier_timeout_does_not_come_from_the_task_s(steps: Path) -> None:
    _edit(steps / "task.toml", "[steps.verifier]\ntimeout_sec = 60.0\n\n[[steps]]", "[[steps]]")
    _edit(steps / "task.toml", "[agent]", "[verifier]\ntimeout_sec = 30.0\n\n[agent]")
    create = load_task(steps).steps[0]
    assert create.test_timeout_sec == 600.0  # Harbor's rule: the step's own, else 600


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('name = "append"', 'name = "CREATE"', "have the same name"),
        ('name = "append"', 'name = "con.txt"', "is a device name on Windows"),
        ('name = "append"', 'name = "a/b"', 'holds one of < > : " /'),
        ('name = "append"', 'name = "last."', "ends with a dot or a space"),
        ("min_reward = 1.0", 'min_reward = "all"', "a number or a table of numbers"),
        (
            'environment_mode = "separate"',
            'environment_mode = "shared"\n[steps.verifier.environment]\ncpus = 1',
            "drop one of them",
        ),
        (
            'multi_step_reward_strategy = "mean"',
            'multi_step_reward_strategy = "best"',
            '"mean" or "final"',
        ),
        ('artifacts = ["/app"]', 'artifacts = ["app/../x"]', "absolute paths"),
    ],
)
def test_bad_steps_are_one_sentence(steps: Path, old: str, new: str, says: str) -> None:
    _edit(steps / "task.toml", old, new)
    assert says in str(_error(steps))


def test_a_step_without_instruction_or_tests_is_one_sentence(steps: Path) -> None:
    (steps / "steps" / "append" / "tests" / "test.sh").unlink()
    assert "no steps/append/tests/test.sh and no tests/test.sh" in str(_error(steps))
    (steps / "steps" / "create" / "instruction.md").unlink()
    assert "create has no instruction.md" in str(_error(steps))


def test_a_multi_step_task_s_unknown_schema_version_is_one_sentence(steps: Path) -> None:
    _edit(steps / "task.toml", 'schema_version = "1.4"', 'schema_version = "2.7"')
    assert "declares schema version '2.7'" in str(_error(steps))


@pytest.mark.parametrize(
    ("mode", "internet"), [("public", True), ("no-network", False), ("allowlist", False)]
)
def test_network_mode_replaces_allow_internet(steps: Path, mode: str, internet: bool) -> None:
    _edit(steps / "task.toml", "allow_internet = false", f'network_mode = "{mode}"')
    assert load_task(steps).environment.allow_internet is internet


def test_an_unknown_network_mode_is_one_sentence(steps: Path) -> None:
    _edit(steps / "task.toml", "allow_internet = false", 'network_mode = "some"')
    assert '"public", "no-network" or "allowlist"' in str(_error(steps))


def test_environment_variables_take_this_machine_s_values_or_their_defaults(
    steps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(steps / "task.toml", "allow_internet = false", (
        'allow_internet = false\nworkdir = "/work"\n'
        'env = { A = "plain", B = "${ALE_T_B}", C = "${ALE_T_C:-fallback}" }'
    ))  # fmt: skip
    monkeypatch.setenv("ALE_T_B", "from-host")
    environment = load_task(steps).environment
    assert environment.env == {"A": "plain", "B": "from-host", "C": "fallback"}
    assert environment.workdir == "/work"
    monkeypatch.delenv("ALE_T_B")
    assert "where ALE_T_B is not set; set it, or give a default" in str(_error(steps))


def test_a_relative_workdir_is_one_sentence(steps: Path) -> None:
    _edit(steps / "task.toml", "allow_internet = false", 'allow_internet = false\nworkdir = "app"')
    assert "environment.workdir" in str(_error(steps))


HOOKS = """allow_internet = false

[environment.healthcheck]
command = "test -e /tmp/ready"
interval_sec = 0.5
retries = 4

[[verifier.collect]]
command = "cp /app/state /logs/artifacts/"

[solution]
env = { WORD = "${ALE_T_WORD:-secret}" }
"""


def test_healthchecks_collect_hooks_and_the_solution_s_variables_load(
    steps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(steps / "task.toml", "allow_internet = false\n", HOOKS)
    _edit(steps / "task.toml", 'name = "append"\n', (
        'name = "append"\n\n[steps.healthcheck]\ncommand = "true"\n\n'
        '[[steps.verifier.collect]]\ncommand = "date"\ntimeout_sec = 5\nservice = "db"\n'
    ))  # fmt: skip
    task = load_task(steps)
    check = task.environment.healthcheck
    assert check is not None and check.command == "test -e /tmp/ready"
    assert (check.interval_sec, check.retries, check.timeout_sec, check.start_period_sec) == (
        0.5, 4, 30.0, 0.0,
    )  # fmt: skip
    assert [h.command for h in task.collect] == ["cp /app/state /logs/artifacts/"]
    create, append = task.steps
    assert create.healthcheck is None and append.healthcheck is not None
    assert [h.command for h in create.collect] == ["cp /app/state /logs/artifacts/"]
    assert [(h.command, h.timeout_sec, h.service) for h in append.collect][1] == ("date", 5.0, "db")
    assert task.solution_env == {"WORD": "secret"}
    monkeypatch.setenv("ALE_T_WORD", "from-host")
    assert load_task(steps).solution_env == {"WORD": "from-host"}


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('command = "test -e /tmp/ready"\n', "", "healthcheck.command"),
        ("interval_sec = 0.5", 'interval_sec = "soon"', "healthcheck.interval_sec"),
        ("interval_sec = 0.5", "start_period_sec = -1", "healthcheck.start_period_sec"),
        ("retries = 4", "retries = 1.5", "a whole number"),
        ('command = "cp /app/state /logs/artifacts/"', 'command = ""', "collect[0].command"),
        ("[[verifier.collect]]", "[verifier.collect]", "an array of tables"),
        ("${ALE_T_WORD:-secret}", "${ALE_T_NO_SUCH_WORD}", "solution.env.WORD takes"),
    ],
)
def test_bad_healthchecks_hooks_and_solution_variables_are_one_sentence(
    steps: Path, old: str, new: str, says: str
) -> None:
    _edit(steps / "task.toml", "allow_internet = false\n", HOOKS)
    _edit(steps / "task.toml", old, new)
    assert says in str(_error(steps))


def test_artifact_tables_and_a_step_s_own_artifacts_load(steps: Path) -> None:
    _edit(steps / "task.toml", 'artifacts = ["/app"]', (
        'artifacts = ["/app", { source = "/srv/x", destination = "x/", exclude = ["*.tmp"] }]'
    ))  # fmt: skip
    _edit(steps / "task.toml", 'name = "append"\n', (
        'name = "append"\nartifacts = [{ source = "/var/log/db", service = "db" }]\n'
    ))  # fmt: skip
    task = load_task(steps)
    assert [(a.source, a.destination, a.exclude) for a in task.artifacts] == [
        ("/app", None, []), ("/srv/x", "x", ["*.tmp"]),
    ]  # fmt: skip
    create, append = task.steps
    assert create.artifacts == task.artifacts
    assert [(a.source, a.service) for a in append.artifacts][2] == ("/var/log/db", "db")


@pytest.mark.parametrize("destination", ["/abs", "a/../b", "manifest.json", "a\\\\b"])
def test_a_bad_artifact_destination_is_one_sentence(steps: Path, destination: str) -> None:
    _edit(steps / "task.toml", 'artifacts = ["/app"]', (
        f'artifacts = [{{ source = "/app", destination = "{destination}" }}]'
    ))  # fmt: skip
    assert "artifacts[0].destination" in str(_error(steps))


def test_users_load_and_a_step_s_own_wins(steps: Path) -> None:
    _edit(steps / "task.toml", "[agent]\n", "[agent]\nuser = 1000\n")
    with (steps / "task.toml").open("a") as toml:
        toml.write('\n[verifier]\nuser = "tester"\n')
    _edit(
        steps / "task.toml", 'name = "append"\n', 'name = "append"\n\n[steps.agent]\nuser = "0:0"\n'
    )
    task = load_task(steps)
    assert (task.agent_user, task.verifier_user) == ("1000", "tester")
    create, append = task.steps
    assert (create.agent_user, create.verifier_user) == ("1000", "tester")
    assert (append.agent_user, append.verifier_user) == ("0:0", "tester")
    _edit(steps / "task.toml", "user = 1000", 'user = "bad name"')
    assert "agent.user" in str(_error(steps)) and "a user name or uid" in str(_error(steps))


def test_an_agent_gets_the_instruction_without_its_canary_lines() -> None:
    from ale.task import agent_instruction

    text = "<!-- bench canary GUID 1 -->\n# canary: do not train\n\nDo the thing.\n\n# Notes\n"
    assert agent_instruction(text) == "Do the thing.\n\n# Notes\n"
    plain = "# Title\n\nDo it; the word canary appears later.\n"
    assert agent_instruction(plain) == plain


CONTEXT = """allow_internet = false
skills_dir = "/opt/skills"

[[environment.mcp_servers]]
name = "git"
transport = "stdio"
command = "mcp-server-git"
args = ["-r", "/app"]

[[environment.mcp_servers]]
name = "docs"
transport = "streamable-http"
url = "http://docs:8000/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
"""
PRIOR = (
    '{"schema_version": "ATIF-v1.7", "agent": {"name": "a", "version": "1"}, "steps": ['
    '{"step_id": 1, "source": "user", "message": "earlier"}]}'
)


def test_mcp_servers_skills_and_a_prior_conversation_load(steps: Path) -> None:

    _edit(steps / "task.toml", "allow_internet = false\n", CONTEXT)
    (steps / "steps" / "create" / "trajectory.json").write_text(PRIOR)
    task = load_task(steps)
    git, docs = task.environment.mcp_servers
    assert (git.transport, git.command, git.args) == ("stdio", "mcp-server-git", ["-r", "/app"])
    assert (docs.transport, docs.url) == ("streamable-http", "http://docs:8000/mcp")
    assert docs.headers == {"Authorization": "Bearer ${DOCS_TOKEN}"}  # read when connecting
    assert task.environment.skills_dir == "/opt/skills"
    assert task.prior_trajectory == steps / "steps" / "create" / "trajectory.json"
    context = TaskContext.of(task)
    assert context.prior is not None and context.prior.steps[0].content == "earlier"
    assert TaskContext.of(task, first=False).prior is None
    assert not TaskContext()


def test_a_one_step_task_s_prior_conversation_is_written_again(tb2: Path, tmp_path: Path) -> None:
    (tb2 / "trajectory.json").write_text(PRIOR)
    _edit(tb2 / "task.toml", "[environment]\n", '[environment]\nskills_dir = "/skills"\n')
    task = load_task(tb2)
    assert task.prior_trajectory == tb2 / "trajectory.json"
    again = load_task(write_task_tb2(task, tmp_path / "again"))
    assert again.prior_trajectory is not None and again.prior_trajectory.read_text() == PRIOR
    assert again.environment.skills_dir == "/skills"


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('name = "git"\n', "", "mcp_servers[0].name"),
        ('name = "docs"', 'name = "git"', "a name no other server has"),
        ('transport = "stdio"', 'transport = "websocket"', '"stdio", "sse" or "streamable-http"'),
        ('command = "mcp-server-git"\n', "", "the command of a stdio server"),
        ('url = "http://docs:8000/mcp"\n', "", "the URL of a streamable-http server"),
        ('args = ["-r", "/app"]', 'args = "-r /app"', "mcp_servers[0].args"),
        ('skills_dir = "/opt/skills"', 'skills_dir = "skills"', "environment.skills_dir"),
    ],
)
def test_bad_mcp_servers_and_skills_dir_are_one_sentence(
    steps: Path, old: str, new: str, says: str
) -> None:
    _edit(steps / "task.toml", "allow_internet = false\n", CONTEXT)
    _edit(steps / "task.toml", old, new)
    assert says in str(_error(steps))


@pytest.mark.parametrize(
    ("text", "says"),
    [("{not json", "is not valid JSON"), ('{"steps": []}', "schema_version: must be")],
)
def test_a_bad_prior_conversation_is_one_sentence(tb2: Path, text: str, says: str) -> None:
    (tb2 / "trajectory.json").write_text(text)
    message = str(_error(tb2))
    assert "trajectory.json" in message and says in message and "prior context" in message


def test_phase_network_modes_load_and_a_step_s_own_wins(steps: Path) -> None:
    _edit(steps / "task.toml", "[agent]\n", '[agent]\nnetwork_mode = "no-network"\n')
    with (steps / "task.toml").open("a") as toml:
        toml.write('\n[verifier]\nnetwork_mode = "public"\n')
    _edit(steps / "task.toml", 'name = "append"\n', (
        'name = "append"\n\n[steps.agent]\nnetwork_mode = "public"\n'
    ))  # fmt: skip
    task = load_task(steps)
    assert (task.agent_network, task.verifier_network) == (False, True)
    create, append = task.steps
    assert (create.agent_network, create.verifier_network) == (False, True)
    assert (append.agent_network, append.verifier_network) == (True, True)
    _edit(steps / "task.toml", '"no-network"', '"allowlist"\nallowed_hosts = ["pypi.org"]')
    assert load_task(steps).agent_network is False  # rock cannot open the network to some hosts
    _edit(steps / "task.toml", '"allowlist"', '"offline"')
    assert "agent.network_mode" in str(_error(steps))
