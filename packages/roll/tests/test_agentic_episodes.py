"""What roll makes of an episode's outcome: scored or run again, decided by values."""

from __future__ import annotations

import pytest

from ale.synth.runner import Outcome
from ale.trajectory import AgentInfo, FailureMode, Role, Step, Trajectory
from roll.agentic.episodes import classify
from roll.train import rollout_metrics


def _trajectory(failure: FailureMode | None = None) -> Trajectory:
    return Trajectory(task_id="t", agent=AgentInfo(name="iflow"), failure_mode=failure)


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (Outcome(reward=1.0, trajectory=_trajectory()), None),
        (Outcome(reward=0.0, trajectory=_trajectory(FailureMode.FORMAT_ERROR)), None),
        (Outcome(reward=0.0, trajectory=_trajectory(FailureMode.LIMITS_EXCEEDED)), None),
        (
            Outcome(reward=0.0, trajectory=_trajectory(FailureMode.MODEL_ERROR)),
            FailureMode.MODEL_ERROR,
        ),
        (
            Outcome(failure=FailureMode.AGENT_TIMEOUT, reward=0.0, trajectory=_trajectory()),
            None,
        ),
        (Outcome(failure=FailureMode.AGENT_TIMEOUT, reward=0.0), FailureMode.AGENT_TIMEOUT),
        (Outcome(failure=FailureMode.AGENT_ERROR, reward=0.0), FailureMode.AGENT_ERROR),
        (Outcome(failure=FailureMode.VERIFIER_ERROR), FailureMode.VERIFIER_ERROR),
        (Outcome(), FailureMode.UNKNOWN),
    ],
)
def test_an_outcome_is_scored_or_an_infrastructure_failure(
    outcome: Outcome, expected: FailureMode | None
) -> None:
    assert classify(outcome) == expected


def test_the_error_sentence_is_never_read() -> None:
    """The sentence is for people: what it says does not change the decision."""
    misleading = Outcome(
        failure=FailureMode.SANDBOX_ERROR,
        error="the rock daemon could not be reached; the agent raised a timeout",
    )
    assert classify(misleading) == FailureMode.SANDBOX_ERROR
    quiet = Outcome(failure=FailureMode.DAEMON_UNAVAILABLE, error="x")
    assert classify(quiet) == FailureMode.DAEMON_UNAVAILABLE
    unnamed = Outcome(reward=1.0, error="it all went fine")  # an error with no value
    assert classify(unnamed) == FailureMode.UNKNOWN


def test_rollout_metrics_count_an_agents_turns_from_its_steps() -> None:
    """An agentic trajectory carries no engine turn count: its assistant steps are the turns
    (this metric read 0 for every agentic run)."""
    agentic = _trajectory().model_copy(
        update={
            "steps": [
                Step(role=Role.SYSTEM, content="s"),
                Step(role=Role.USER, content="u"),
                Step(role=Role.ASSISTANT, content="a"),
                Step(role=Role.TOOL, content="t"),
                Step(role=Role.ASSISTANT, content="b"),
            ]
        }
    )
    engine = _trajectory().model_copy(update={"extra": {"roll": {"turns": 4}}})
    assert rollout_metrics([agentic])["rollout/turns_mean"] == 2.0
    assert rollout_metrics([agentic, engine])["rollout/turns_mean"] == 3.0
