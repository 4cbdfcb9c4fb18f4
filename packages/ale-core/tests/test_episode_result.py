"""An episode's result: whether its reward stands as the agent's, decided by values (what
roll drops and runs again), and the failure modes' meanings kept with the enum."""

from __future__ import annotations

import pytest

from ale.episode import EpisodeResult
from ale.trajectory import AgentInfo, FailureMode, Trajectory


def _trajectory(failure: FailureMode | None = None) -> Trajectory:
    return Trajectory(task_id="t", agent=AgentInfo(name="iflow"), failure_mode=failure)


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (EpisodeResult(reward=1.0, trajectory=_trajectory()), None),
        (EpisodeResult(reward=0.0, trajectory=_trajectory(FailureMode.FORMAT_ERROR)), None),
        (EpisodeResult(reward=0.0, trajectory=_trajectory(FailureMode.LIMITS_EXCEEDED)), None),
        (
            EpisodeResult(reward=0.0, trajectory=_trajectory(FailureMode.MODEL_ERROR)),
            FailureMode.MODEL_ERROR,
        ),
        (
            EpisodeResult(failure=FailureMode.AGENT_TIMEOUT, reward=0.0, trajectory=_trajectory()),
            None,
        ),
        (EpisodeResult(failure=FailureMode.AGENT_TIMEOUT, reward=0.0), FailureMode.AGENT_TIMEOUT),
        (EpisodeResult(failure=FailureMode.AGENT_ERROR, reward=0.0), FailureMode.AGENT_ERROR),
        (EpisodeResult(failure=FailureMode.VERIFIER_ERROR), FailureMode.VERIFIER_ERROR),
        (EpisodeResult(), FailureMode.UNKNOWN),
    ],
)
def test_an_outcome_is_scored_or_an_infrastructure_failure(
    outcome: EpisodeResult, expected: FailureMode | None
) -> None:
    assert outcome.unscored == expected


def test_the_error_sentence_is_never_read() -> None:
    """The sentence is for people: what it says does not change the decision."""
    misleading = EpisodeResult(
        failure=FailureMode.SANDBOX_ERROR,
        error="the rock daemon could not be reached; the agent raised a timeout",
    )
    assert misleading.unscored == FailureMode.SANDBOX_ERROR
    quiet = EpisodeResult(failure=FailureMode.DAEMON_UNAVAILABLE, error="x")
    assert quiet.unscored == FailureMode.DAEMON_UNAVAILABLE
    unnamed = EpisodeResult(reward=1.0, error="it all went fine")  # an error with no value
    assert unnamed.unscored == FailureMode.UNKNOWN


def test_the_environment_s_failures_are_infrastructure_and_the_agent_s_are_not() -> None:
    environment = {m for m in FailureMode if m.is_environment}
    assert environment == {FailureMode.SANDBOX_ERROR, FailureMode.DAEMON_UNAVAILABLE}
    assert all(m.is_infrastructure for m in environment)
    assert (
        FailureMode.MODEL_ERROR.is_infrastructure and FailureMode.VERIFIER_ERROR.is_infrastructure
    )
    agents = [FailureMode.FORMAT_ERROR, FailureMode.AGENT_TIMEOUT, FailureMode.LOOP_DETECTED]
    assert not any(m.is_infrastructure or m.is_environment for m in agents)
