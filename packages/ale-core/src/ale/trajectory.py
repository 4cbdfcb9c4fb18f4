"""Trajectory schema v1: one episode of an agent in an environment.

A :class:`Trajectory` is what rock records, iflow produces, the synthesis pipeline
filters and roll trains on. It is a plain, versioned pydantic model; one
trajectory is one line of a JSONL file (see :mod:`ale.jsonl`), and it exports to
Terminal-Bench's ATIF losslessly (see :mod:`ale.atif`).

Steps are messages in the order they happened, in chat form: ``system``,
``user``, ``assistant`` (the policy's output, with optional tool calls) and
``tool`` (the environment's observation: results of the tool calls). When the
assistant step was sampled from a trainable policy it also carries the sampled
token ids, the sampling policy's log-probs of those tokens, and the policy
version, so that a trainer can use it without re-tokenising.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = "1.0"
"""The version written into every trajectory. Readers accept any ``1.x``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Role(StrEnum):
    """Who produced a step."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class FailureMode(StrEnum):
    """Why an episode ended without a clean finish: the one enum every package uses
    (a trajectory's ``failure_mode``, a synthesis or training episode's
    :class:`ale.episode.EpisodeResult`, a ``rock bench`` trial's result), so that a package
    decides what a failure means by its value, never by reading an error sentence."""

    NONE = "none"
    """A bench trial that ran through (resolved or not); a trajectory leaves
    ``failure_mode`` absent instead."""
    AGENT_TIMEOUT = "agent_timeout"
    TEST_TIMEOUT = "test_timeout"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    LIMITS_EXCEEDED = "limits_exceeded"
    FORMAT_ERROR = "format_error"
    MODEL_ERROR = "model_error"
    AGENT_ERROR = "unknown_agent_error"
    """The agent raised instead of returning a trajectory."""
    BUILD_FAILED = "build_failed"
    """The task's image did not build."""
    SANDBOX_ERROR = "sandbox_error"
    """No sandbox could be had, or it failed under the episode."""
    DAEMON_UNAVAILABLE = "daemon_unavailable"
    """The rock daemon went away (a restart) or was shutting down under the episode."""
    VERIFIER_ERROR = "verifier_error"
    """The verifier wrote no reward or crashed."""
    PARSE_ERROR = "parse_error"
    """A 1.0-format verifier printed no pytest summary to parse."""
    INTERRUPTED = "interrupted"
    LOOP_DETECTED = "loop_detected"
    """The agent repeated the same action (or kept failing) after a warning."""
    UNKNOWN = "unknown"

    @property
    def is_environment(self) -> bool:
        """The environment failed under the episode: no sandbox could be had, it broke, or
        the daemon holding it went away. Nothing the agent did; the same task from the same
        start may well run through (``rock bench`` tries a trial again)."""
        return self in _ENVIRONMENT

    @property
    def is_infrastructure(self) -> bool:
        """The failure says nothing about the agent or its policy: the environment's (see
        :attr:`is_environment`), the model backend's or the verifier's. An episode ending so
        is run again, never scored (roll); every other ending — a format error, turns or
        time used up, a loop — is the agent's own result."""
        return self in _INFRASTRUCTURE


class StepMark(StrEnum):
    """What a step is for training, beyond who wrote it (it used to travel as keys of
    ``extra``). What the loss makes of each mark is decided once, for SFT and RL alike, by
    :func:`ale.chunking.loss_of`."""

    MISTAKE = "mistake"
    """An expert's planned mistake (synthesis): never a target."""
    RECOVERY = "recovery"
    """The expert's recovery from its mistake: a target like any other turn."""
    IRRELEVANT = "irrelevant"
    """A turn that does not bear on the task: never a target."""
    COPIED = "copied"
    """Context copied in from elsewhere (a task's prior conversation; ATIF's
    ``is_copied_context``): never a target."""


_LEGACY_MARKS = {
    "mistake": StepMark.MISTAKE,
    "recovery": StepMark.RECOVERY,
    "irrelevant": StepMark.IRRELEVANT,
    "masked": StepMark.IRRELEVANT,
}
"""``extra["expert"]`` and ``extra["roll"]["mask"]`` values as the marks they meant."""

_ENVIRONMENT = frozenset({FailureMode.SANDBOX_ERROR, FailureMode.DAEMON_UNAVAILABLE})
_INFRASTRUCTURE = _ENVIRONMENT | {FailureMode.MODEL_ERROR, FailureMode.VERIFIER_ERROR}


class ToolCall(_Model):
    """One call of a tool, as the model asked for it."""

    id: str
    """Identifier that the matching :class:`ToolResult` names in ``call_id``."""
    name: str
    """The tool's name, e.g. ``run_shell_command``."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments as a JSON object."""


class ToolResult(_Model):
    """The environment's answer to one tool call (or to an action without a call)."""

    call_id: str | None = None
    """The ``ToolCall.id`` this answers; None for observations not tied to a call."""
    content: str = ""
    """The observation text the model will read."""
    is_error: bool = False
    """True when the tool failed (bad arguments, non-zero exit, refused)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Structured detail (exit code, duration, truncation) not shown to the model."""


class Usage(_Model):
    """Token counts and cost, of one model call or summed over an episode."""

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)


class Step(_Model):
    """One message of the episode."""

    role: Role
    """Who produced it."""
    content: str = ""
    """The message text (for an assistant step: what the model said besides tool calls)."""
    reasoning: str | None = None
    """The model's separate reasoning text, when the model returns one."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls made by an assistant step."""
    tool_results: list[ToolResult] = Field(default_factory=list)
    """Observations carried by a tool step, one per answered call."""
    timestamp: datetime | None = None
    """When the step was produced."""
    model: str | None = None
    """The model that produced an assistant step, when it differs from the trajectory's."""
    reasoning_effort: str | float | None = None
    """The reasoning effort the model was asked for, if any."""
    usage: Usage | None = None
    """Token counts and cost of the model call that produced this step."""
    prompt_token_ids: list[int] | None = None
    """Token ids of the whole prompt the policy saw for this step."""
    token_ids: list[int] | None = None
    """Token ids the policy sampled for this step (assistant steps only)."""
    logprobs: list[float] | None = None
    """Log-probability of each sampled token under the sampling policy."""
    policy_version: int | None = Field(default=None, ge=0)
    """Version of the policy weights that sampled this step."""
    reward: float | None = None
    """A per-step reward, when the environment gives one."""
    mark: StepMark | None = None
    """What the step is for training (an expert's mistake or recovery, an irrelevant turn,
    copied context); None for an ordinary turn."""
    prefix: bool = False
    """An expert's turn that an RL episode was started after (chunk-level initialised
    resampling), written into the episode rather than sampled in it: never RL's tokens, the
    imitation term's when asked."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Anything else, kept as it is."""

    @model_validator(mode="before")
    @classmethod
    def _marks_from_extra(cls, data: Any) -> Any:
        """Trajectories written before the marks were fields kept them in ``extra``
        (``expert``, ``copied_context``, ``roll.prefix``, ``roll.mask``): read them as the
        fields, so older datasets train as they did."""
        if not isinstance(data, dict) or not isinstance(data.get("extra"), dict):
            return data
        extra = dict(data["extra"])
        if not ({"expert", "copied_context"} & extra.keys() or isinstance(extra.get("roll"), dict)):
            return data
        data = dict(data)
        mark = _LEGACY_MARKS.get(str(extra.pop("expert", "")))
        if extra.pop("copied_context", False):
            mark = StepMark.COPIED
        roll = dict(extra.pop("roll", None) or {})
        if roll.pop("prefix", False):
            data.setdefault("prefix", True)
        masked = roll.pop("mask", None)
        if masked:
            mark = mark or _LEGACY_MARKS.get(str(masked), StepMark.IRRELEVANT)
        if roll:
            extra["roll"] = roll
        if mark is not None:
            data.setdefault("mark", mark)
        data["extra"] = extra
        return data

    @model_validator(mode="after")
    def _check(self) -> Step:
        if self.tool_calls and self.role is not Role.ASSISTANT:
            raise ValueError(
                f"a {self.role.value} step cannot carry tool_calls; only assistant steps call tools"
            )
        if self.tool_results and self.role is not Role.TOOL:
            raise ValueError(
                f"a {self.role.value} step cannot carry tool_results; put observations in a tool step"
            )
        if self.logprobs is not None:
            if self.token_ids is None:
                raise ValueError(
                    "logprobs were given without token_ids; give the sampled token ids too"
                )
            if len(self.logprobs) != len(self.token_ids):
                raise ValueError(
                    f"logprobs has {len(self.logprobs)} entries but token_ids has {len(self.token_ids)}; "
                    "give one log-prob per sampled token"
                )
        return self


class VerifierTest(_Model):
    """One test of the verifier."""

    name: str
    status: Literal["passed", "failed", "error", "skipped"]


class VerifierResult(_Model):
    """What the verifier found."""

    reward: float | None = None
    """The reward it computed (1.0/0.0 for pass/fail tasks)."""
    passed: bool | None = None
    """Whether the task counts as resolved."""
    exit_code: int | None = None
    tests: list[VerifierTest] = Field(default_factory=list)
    """Individual tests, when the verifier reports them."""
    stdout: str | None = None
    stderr: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    """Anything else the verifier reported (e.g. reward.json contents)."""


class Timings(_Model):
    """Wall-clock times of the phases of an episode."""

    started_at: datetime | None = None
    finished_at: datetime | None = None
    setup_sec: float | None = Field(default=None, ge=0)
    """Sandbox start and environment set-up."""
    agent_sec: float | None = Field(default=None, ge=0)
    """The agent's run."""
    verify_sec: float | None = Field(default=None, ge=0)
    """The verifier's run."""
    total_sec: float | None = Field(default=None, ge=0)


class AgentInfo(_Model):
    """The agent scaffold that produced the trajectory."""

    name: str
    version: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    """Agent configuration worth keeping (mode, limits, prompt template id)."""


def _new_id() -> str:
    return uuid.uuid4().hex


class Trajectory(_Model):
    """One episode of an agent in an environment."""

    schema_version: str = SCHEMA_VERSION
    """Version of this schema; readers accept any 1.x."""
    trajectory_id: str = Field(default_factory=_new_id)
    """Unique id of this trajectory."""
    task_id: str | None = None
    """The task the episode ran."""
    episode_id: str | None = None
    """The episode (one attempt at a task); several trajectories may share one when resampled."""
    group_id: str | None = None
    """The rollout group (a task x group size) for group-relative advantages."""
    agent: AgentInfo
    """The agent scaffold."""
    model: str | None = None
    """The model that acted."""
    steps: list[Step] = Field(default_factory=list)
    """The messages, in order."""
    reward: float | None = None
    """The final reward."""
    verifier: VerifierResult | None = None
    """The verifier's detail."""
    timings: Timings | None = None
    usage: Usage | None = None
    """Token counts and cost summed over the episode."""
    failure_mode: FailureMode | None = None
    """Why the episode ended badly; None when it ended cleanly."""
    notes: str | None = None
    """Free text for people."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Anything else, kept as it is."""

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        major = value.split(".", 1)[0]
        if major != SCHEMA_VERSION.split(".", 1)[0]:
            raise ValueError(
                f"schema_version {value!r} is not readable by this ale-core (it reads {SCHEMA_VERSION.split('.')[0]}.x); "
                "upgrade ale-core or convert the file"
            )
        return value

    @property
    def per_step_rewards(self) -> list[float | None]:
        """The reward of every step (None where a step has none)."""
        return [s.reward for s in self.steps]

    def step_count(self, role: Role | None = None) -> int:
        """Number of steps, or of steps with the given role."""
        if role is None:
            return len(self.steps)
        return sum(1 for s in self.steps if s.role is role)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Trajectory` (what ``python -m ale.schema`` prints)."""
    schema = Trajectory.model_json_schema()
    schema["$id"] = f"https://ale.dev/schemas/trajectory-{SCHEMA_VERSION}.json"
    schema["title"] = f"ALE Trajectory v{SCHEMA_VERSION}"
    return schema
