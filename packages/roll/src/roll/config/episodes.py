"""The config sections saying where episodes come from: an in-process environment, tasks
played by an agent in sandboxes, or expert prefixes to resample from."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from roll.config.base import _Section


class EnvConfig(_Section):
    """Where episodes come from (in-process environments; sandboxes arrive with agentic RL)."""

    name: str = "guess"
    """A built-in environment (``roll envs`` lists them) or ``package.module:Class``."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment's constructor."""
    seed: int = 0
    """First environment seed; group ``i`` of step ``s`` uses a seed drawn from this and (s, i)."""


class AgentConfig(_Section):
    """The agent that plays the episodes of ``tasks:``."""

    name: str = "iflow"
    """``iflow``, an agent registered in ``ale.agents`` (what ``rock bench --agent`` takes,
    e.g. ``mini-swe-agent``) or ``package.module:Class``."""
    transport: Literal["auto", "in-process", "gateway"] = "auto"
    """``in-process``: iflow with the policy as its model object (iflow only); ``gateway``: the
    agent calls roll's OpenAI-compatible policy gateway with the base URL and key its episode
    is given (``base_url``, ``api_key`` and ``model`` arguments); ``auto``: in-process for
    iflow, the gateway for any other agent."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """More arguments for the agent (as ``rock bench --agent-kwarg``)."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.transport == "auto":
            object.__setattr__(
                self, "transport", "in-process" if self.name == "iflow" else "gateway"
            )
        if self.transport == "in-process" and self.name != "iflow":
            raise ValueError(
                f"only iflow runs in-process; set tasks.agent.transport: gateway for {self.name!r}"
            )
        return self


class TasksConfig(_Section):
    """Agentic RL: episodes of an agent (iflow by default) on tasks in rock sandboxes
    (instead of ``env``)."""

    dataset: str
    """A dataset directory of Terminal-Bench 2.0 tasks (``DIR/tasks/*``), e.g. from ``rock synth``."""
    pool_size: int = Field(default=4, ge=1)
    """Warm sandboxes kept ready."""
    url: str | None = None
    """A running rock daemon to use; default: the one whose address is in ``home``, else a
    private one for the run."""
    home: str | None = None
    """The rock home of that daemon, where ``rock serve`` keeps its address and token
    (``--home``); default: the token from ``$ROCK_TOKEN``, else ``$ROCK_HOME`` or ``~/.rock``."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """The agent (a name alone takes the defaults for the rest)."""
    prompt_profile: Literal["compact", "default"] = "compact"
    """The iflow agent's system prompt and tools: ``compact`` (a short prompt and four tools:
    shell, read, write, finish) or ``default`` (iflow's own)."""
    tool_format: Literal["text", "brief"] = "text"
    """How the policy sees the tools: ``<tool_call>`` markup with the tools' JSON schemas
    (``text``) or described in one line each (``brief``: for tiny models; SFT with
    ``tools: iflow-brief`` renders trajectories the same way)."""
    max_turns: int = Field(default=8, ge=1)
    """Model turns the iflow agent may take in an episode before it stops unfinished."""
    context_limit: int = Field(default=4096, ge=64)
    """Tokens of the policy's context in an episode: a longer prompt fails the call, and a
    turn samples at most what is left."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts per episode when the infrastructure fails (sandbox, verifier, generation)."""
    daemon_wait: float = Field(default=60.0, gt=0)
    """Seconds an attempt waits for a rock daemon that went away (a restart) to take requests
    again before it fails; episodes its absence broke run again (``infra/daemon_unavailable``)."""
    draw: Literal["random", "balanced", "unsolved"] = "random"
    """How a group's task is drawn: uniformly at random (``random``), or ``balanced`` over
    kinds: tasks with the same ``metadata.tags`` are one kind, the kinds take turns in a
    shuffled order, and within a kind its tasks come in a shuffled order before any repeats,
    so a kind with few tasks is trained as often as a kind with many; or ``unsolved``: as
    ``balanced`` within a kind, but each draw picks a kind with the weight of its failed
    episodes' share over its last 4 finished groups (at least 0.1; 0.5 before any), so the
    kinds the policy has not solved are trained more and solved ones still now and then (the
    draws then follow the groups' outcomes, so they repeat from the seed only as those do)."""
    max_staleness: int = Field(default=0, ge=0)
    """How many policy versions old a group may be when it is trained on: 0 is synchronous
    (a step's episodes start after the previous update); above 0 the next steps' episodes
    run during the update and older groups are dropped (and counted)."""


class ResampleConfig(_Section):
    """Chunk-level initialised resampling from expert trajectories."""

    experts: str | None = None
    """A JSONL of expert trajectories whose actions are replayed: with ``env:``, one per env
    seed; with ``tasks:``, trajectories whose ``task_id`` names a task of the dataset (a
    synthesis run's expert trajectories), replayed once per group in a sandbox of the task
    that each episode of the group gets a fork of (tasks without one run from the start)."""
    self_experts: bool = False
    """With ``tasks:``: a task without an expert takes the policy's first successful
    trajectory of it as its expert (self-sampling); with no ``experts`` file, every task."""
    mode: Literal["sequential", "parallel", "start"] = "sequential"
    """``sequential``: start from the last expert chunk and roll back as groups succeed;
    ``parallel``: start groups at ``anchors`` evenly spread anchors at once; ``start``
    (``tasks:`` only): every group from the task's beginning, nothing replayed, so the
    experts serve the imitation term alone."""
    anchors: int = Field(default=3, ge=1)
    """``parallel``: how many anchors, spread evenly over the expert's chunks (1: the last)."""
    threshold: float = Field(default=0.5, gt=0, le=1)
    """Share of positive episodes at the current anchor that moves it one chunk back."""
    imitation_coef: float = Field(default=0.1, ge=0)
    """Weight of the NLL term for groups without a positive episode: on the expert prefix
    they were started from, or (``tasks:``) on the expert's whole trajectory when they
    started from the task's beginning."""
    imitation_share: float = Field(default=0.0, ge=0, lt=1)
    """Groups whose share of positive episodes is at most this get the term too (0.25 with
    groups of 4: at most one success); 0, the paper's rule: only groups with none."""
