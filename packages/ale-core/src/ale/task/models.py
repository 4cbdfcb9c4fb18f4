"""The task model: what an agent is asked to do, where, and how it is checked.

A :class:`Task` is read from a directory in Terminal-Bench 1.0 form
(:mod:`ale.task.tb1`) or Terminal-Bench 2.0 / Harbor form (:mod:`ale.task.tb2`)
and written in the 2.0 form (:mod:`ale.task.writer`). The model holds the
meaning of a task, not the layout of its files: paths point at the files where
they are, so a runner never needs to know which format a task came from.

Timeouts always have a value (the format's default when the file is silent);
resource limits are None when the task does not declare them, leaving the choice
to the runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TB1_AGENT_TIMEOUT_SEC = 180.0
"""Terminal-Bench 1.0's ``max_agent_timeout_sec`` when task.yaml omits it."""
TB1_TEST_TIMEOUT_SEC = 30.0
"""Terminal-Bench 1.0's ``max_test_timeout_sec`` when task.yaml omits it."""
TB2_AGENT_TIMEOUT_SEC = 600.0
"""The agent timeout of a 2.0 / Harbor task whose task.toml has no ``[agent] timeout_sec``."""
TB2_VERIFIER_TIMEOUT_SEC = 600.0
"""Harbor's ``[verifier] timeout_sec`` when task.toml omits it."""

TB2_EXTRA_KEY = "task_toml"
"""Key of :attr:`TaskMetadata.extra` holding the parts of a task.toml outside
``[metadata]`` that ale does not model (unknown tables, unknown keys of
``[agent]``, ``[verifier]`` and ``[environment]``), nested as in the file, so that
writing the task again puts them back where they were."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class TaskMetadata(_Model):
    """Descriptive data about a task; none of it changes how the task runs."""

    difficulty: str | None = None
    """Difficulty label as the author wrote it, e.g. ``easy``, ``medium``, ``hard``."""
    category: str | None = None
    """Category label, e.g. ``software-engineering``."""
    tags: list[str] = Field(default_factory=list)
    """Free-form tags for filtering."""
    author_name: str | None = None
    """Name of the task's author."""
    author_email: str | None = None
    """E-mail address of the task's author."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Every other key read from the task's files, kept as read so nothing is lost
    (for 1.0: ``parser_name``, ``run_tests_in_same_shell``, ...; for 2.0: unknown
    ``[metadata]`` keys, and under ``"task_toml"`` the unknown parts elsewhere)."""


class Healthcheck(_Model):
    """A command that must succeed before the agent starts (Harbor's ``healthcheck``):
    run until it exits 0; failures in the first ``start_period_sec`` do not count, and
    ``retries`` failures in a row after it mean the environment never became healthy."""

    command: str
    """A shell command run in the agent's container."""
    interval_sec: float = Field(default=5.0, gt=0)
    """Pause between tries after the start period."""
    timeout_sec: float = Field(default=30.0, gt=0)
    """Longest one try may take (a try that runs out fails)."""
    start_period_sec: float = Field(default=0.0, ge=0)
    """How long after the start failures do not count."""
    start_interval_sec: float = Field(default=5.0, gt=0)
    """Pause between tries within the start period."""
    retries: int = Field(default=3, ge=1)
    """Failures in a row, after the start period, that give up."""


class CollectHook(_Model):
    """A command run in the agent's container after the agent and before the tests
    (Harbor's ``[[verifier.collect]]``), e.g. to dump state into ``/logs/artifacts``;
    best effort: a hook that fails is recorded and the trial goes on."""

    command: str
    """A shell command line (run by ``bash -c``)."""
    timeout_sec: float = Field(default=60.0, gt=0)
    """Seconds it may run before it is killed (the trial goes on)."""
    service: str = "main"
    """The compose service it runs in; rock runs hooks in the agent's (``main``) only."""
    user: str | None = None
    """Who runs it (a name or uid); None: the image's user."""


class TaskArtifact(_Model):
    """A path in the agent's container kept after the agent (Harbor's ``artifacts``): copied
    out with the trial's files, and into a separate verifier's container at the same path."""

    source: str
    """The absolute path in the container (a file or a directory)."""
    destination: str | None = None
    """Where it goes under the trial's ``artifacts/`` (relative); None: the source's own
    path there (``/var/log/x`` to ``artifacts/var/log/x``)."""
    exclude: list[str] = Field(default_factory=list)
    """Patterns of paths inside a directory that stay behind (as ``tar --exclude``)."""
    service: str = "main"
    """The compose service it comes from; rock collects from the agent's (``main``) only."""


class TaskMcpServer(_Model):
    """An MCP server the task gives its agent (Harbor's ``[[environment.mcp_servers]]``): a
    command run inside the agent's container over stdio, or a URL (SSE or streamable
    HTTP)."""

    name: str
    """The server's name, as the agent knows it."""
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    """Harbor's default is ``sse``."""
    url: str | None = None
    """The endpoint (sse and streamable-http)."""
    command: str | None = None
    """The program to run in the agent's container (stdio)."""
    args: list[str] = Field(default_factory=list)
    """Arguments of ``command`` (stdio)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers; ``${VAR}`` in a value is read from the environment when connecting."""


class TaskEnvironment(_Model):
    """The container the agent works in and the limits it runs under."""

    dockerfile: Path | None = None
    """Absolute path of the Dockerfile that builds the environment, if any."""
    build_context: Path | None = None
    """The directory passed to ``docker build`` as its context."""
    compose_file: Path | None = None
    """Absolute path of the task's docker-compose file, if it has one."""
    image: str | None = None
    """A prebuilt image to use instead of building (Harbor's ``docker_image``)."""
    cpus: float | None = Field(default=None, gt=0)
    """CPUs the container may use; None leaves it to the runner."""
    memory_mb: int | None = Field(default=None, gt=0)
    """Memory limit in MiB; None leaves it to the runner."""
    storage_mb: int | None = Field(default=None, gt=0)
    """Disk limit in MiB; None leaves it to the runner."""
    allow_internet: bool = True
    """Whether the container may reach the network. 1.0 tasks always had a network;
    2.0 tasks read ``allow_internet`` with Harbor's default, True."""
    build_timeout_sec: float | None = Field(default=None, gt=0)
    """Longest time the image build may take; None leaves it to the runner."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the container for every command (Harbor's ``[environment] env``; a
    value written ``${VAR}`` or ``${VAR:-default}`` is taken from this machine's environment
    when the task is read)."""
    workdir: str | None = None
    """The directory commands start in (Harbor's ``workdir``); None: the image's WORKDIR."""
    healthcheck: Healthcheck | None = None
    """What must succeed in the container before the agent starts; None: nothing."""
    os: Literal["linux", "windows"] = "linux"
    """The container's operating system (Harbor's ``os``; rock runs Linux containers)."""
    gpus: int = Field(default=0, ge=0)
    """GPUs the task asks for (Harbor's ``gpus``); rock's sandboxes have none."""
    tpu: bool = False
    """Whether the task asks for a TPU (Harbor's ``tpu`` table)."""
    mcp_servers: list[TaskMcpServer] = Field(default_factory=list)
    """MCP servers the agent may use (Harbor's ``mcp_servers``)."""
    skills_dir: str | None = None
    """A directory in the container holding Agent Skills (``<skill>/SKILL.md`` each, its
    front matter naming and describing it) the agent is told about (Harbor's
    ``skills_dir``)."""


class TaskVerifier(_Model):
    """A verifier that runs in a container of its own, apart from the agent's (Harbor's
    separate verifier mode, as Terminal-Bench 3 uses it): a fresh container per
    verification, into which only the agent container's artifacts are copied."""

    image: str | None = None
    """A prebuilt image that holds the tests at ``/tests`` (its ``docker_image``)."""
    dockerfile: Path | None = None
    """A Dockerfile in the tests directory: the verifier's image is built from it, its
    context that directory, and it holds the tests itself."""
    environment: TaskEnvironment | None = None
    """The verifier container's limits and network (its ``environment`` table); None: the
    agent's."""

    @property
    def bundled(self) -> bool:
        """Whether the image carries the tests (then none are uploaded): a prebuilt image or
        one built from the tests directory; else the agent's image, tests uploaded."""
        return self.image is not None or self.dockerfile is not None


class TaskStep(_Model):
    """One step of a multi-step task (Harbor's ``[[steps]]``): the agent works on its
    instruction in the container the earlier steps left, then the step's tests run."""

    name: str
    """The step's name: its directory under ``steps/``."""
    instruction: str
    """What the agent is asked to do in this step."""
    tests_dir: Path | None = None
    """The step's own tests (``steps/<name>/tests``), copied over the task's ``tests/``."""
    test_script: Path | None = None
    """The script that runs: the step's ``test.sh``, else the task's; None when the
    verifier's image holds the tests."""
    solution: Path | None = None
    """The oracle's script for this step: the step's ``solve.sh``, else the task's."""
    workdir: Path | None = None
    """Files copied into the agent's working directory before the step
    (``steps/<name>/workdir``; a ``setup.sh`` there runs first)."""
    agent_timeout_sec: float = Field(default=TB2_AGENT_TIMEOUT_SEC, gt=0)
    """The step's agent timeout (its own, else the task's)."""
    test_timeout_sec: float = Field(default=TB2_VERIFIER_TIMEOUT_SEC, gt=0)
    """The step's verifier timeout: its own, else 600 s (as Harbor: not the task's)."""
    verifier_env: dict[str, str] = Field(default_factory=dict)
    """The task's verifier environment variables, the step's over them."""
    min_reward: float | dict[str, float] | None = None
    """What the step must reach for the next to run: a number for the ``reward`` key, or a
    threshold per named reward; None: the next always runs."""
    verifier: TaskVerifier | None = None
    """A separate verifier for this step (its own, else the task's); None: the tests run
    in the agent's container."""
    healthcheck: Healthcheck | None = None
    """A check before this step's agent, besides the environment's (run once at the start)."""
    agent_user: str | None = None
    """Who the step's agent runs as: its own ``[steps.agent] user``, else the task's."""
    verifier_user: str | None = None
    """Who the step's tests run as: its own ``[steps.verifier] user``, else the task's."""
    agent_network: bool | None = None
    """Whether the step's agent has the network: its own ``[steps.agent] network_mode``,
    else the task's; None: the environment's."""
    verifier_network: bool | None = None
    """The same for the step's tests (``[steps.verifier] network_mode``)."""
    collect: list[CollectHook] = Field(default_factory=list)
    """The hooks run after this step's agent: the task's, then the step's own."""
    artifacts: list[TaskArtifact] = Field(default_factory=list)
    """What is kept after this step's agent: the task's artifacts, then the step's own."""


class Task(_Model):
    """One task: an instruction, an environment, tests that decide the reward, and
    optionally an oracle solution."""

    id: str
    """The task's name: the name of its directory."""
    source_format: Literal["tb1", "tb2"]
    """The form it was read from: Terminal-Bench 1.0 or 2.0 / Harbor."""
    path: Path
    """Absolute path of the task directory."""
    instruction: str
    """What the agent is asked to do, exactly as written in the task."""
    environment: TaskEnvironment = Field(default_factory=TaskEnvironment)
    """How to build the container and what limits it runs under."""
    tests_dir: Path | None = None
    """The directory of test files copied to ``/tests`` before verifying, if any."""
    test_script: Path
    """The verifier's entry point: ``run-tests.sh`` for 1.0 (pass means exit 0 and
    all tests passed), ``tests/test.sh`` for 2.0 (writes ``/logs/verifier/reward.txt``)."""
    solution: Path | None = None
    """The oracle solution: ``solution.sh`` or ``solution.yaml`` (1.0),
    ``solution/solve.sh`` (2.0); None when the task has none."""
    agent_timeout_sec: float = Field(default=TB2_AGENT_TIMEOUT_SEC, gt=0)
    """Longest time the agent may work (1.0 default 180 s, 2.0 default 600 s)."""
    test_timeout_sec: float = Field(default=TB2_VERIFIER_TIMEOUT_SEC, gt=0)
    """Longest time the tests may run (1.0 default 30 s, 2.0 default 600 s)."""
    verifier_env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set for the verifier (2.0's ``[verifier] env``)."""
    metadata: TaskMetadata = Field(default_factory=TaskMetadata)
    """Descriptive data: difficulty, category, tags, author, and unknown keys."""
    steps: list[TaskStep] = Field(default_factory=list)
    """A multi-step task's steps, in order (then :attr:`instruction` lists them all, for
    people, and each step's own instruction is what the agent gets); empty: one step."""
    reward_strategy: Literal["mean", "final"] = "mean"
    """How a multi-step task's reward comes from its steps': each named reward's mean over
    the steps that were verified, or the last verified step's."""
    verifier: TaskVerifier | None = None
    """A separate verifier container for the task's tests; None: they run in the agent's."""
    artifacts: list[TaskArtifact] = Field(default_factory=list)
    """Paths in the agent's container copied out after the agent (and into a separate
    verifier's container, at the same paths), besides ``/logs/artifacts``."""
    collect: list[CollectHook] = Field(default_factory=list)
    """Commands run in the agent's container after the agent, before the tests."""
    solution_env: dict[str, str] = Field(default_factory=dict)
    """Variables the oracle's solution runs with (Harbor's ``[solution] env``)."""
    agent_user: str | None = None
    """Who the agent's commands run as (Harbor's ``[agent] user``: a name or uid); None:
    the image's user."""
    verifier_user: str | None = None
    """Who the tests run as (``[verifier] user``); None: the image's user."""
    agent_network: bool | None = None
    """Whether the agent has the network while it works (Harbor's ``[agent] network_mode``,
    a phase override: ``public`` True, ``no-network`` False, ``allowlist`` False as rock
    cannot open the network to some hosts only); None: the environment's."""
    verifier_network: bool | None = None
    """The same for the tests (``[verifier] network_mode``); None: the environment's (a
    separate verifier's own environment's)."""
    prior_trajectory: Path | None = None
    """An ATIF trajectory the task ships (``trajectory.json`` beside its instruction, or
    its first step's): the conversation the agent starts from (not the oracle's)."""
