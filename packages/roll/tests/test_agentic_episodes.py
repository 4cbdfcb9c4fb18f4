"""What roll makes of an episode's outcome: scored or run again, decided by values."""

from __future__ import annotations

from ale.trajectory import AgentInfo, FailureMode, Role, Step, Trajectory
from roll.train import rollout_metrics


def _trajectory(failure: FailureMode | None = None) -> Trajectory:
    return Trajectory(task_id="t", agent=AgentInfo(name="iflow"), failure_mode=failure)


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
