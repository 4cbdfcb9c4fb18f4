"""The loss marks are typed fields of a step, read back from the ``extra`` keys older
trajectories kept them in, carried through ATIF, and turned into a loss by one decision
(:func:`ale.chunking.loss_of`) that SFT and RL share."""

from __future__ import annotations

import pytest

from ale.atif import from_atif, to_atif
from ale.chunking import Loss, loss_of
from ale.trajectory import AgentInfo, Role, Step, StepMark, Trajectory


@pytest.mark.parametrize(
    ("step", "loss"),
    [
        (Step(role=Role.ASSISTANT, content="ls"), Loss.TARGET),
        (Step(role=Role.ASSISTANT, mark=StepMark.RECOVERY), Loss.TARGET),
        (Step(role=Role.ASSISTANT, mark=StepMark.MISTAKE), Loss.NONE),
        (Step(role=Role.ASSISTANT, mark=StepMark.IRRELEVANT), Loss.NONE),
        (Step(role=Role.ASSISTANT, mark=StepMark.COPIED), Loss.NONE),
        (Step(role=Role.ASSISTANT, prefix=True), Loss.IMITATION),
        (Step(role=Role.ASSISTANT, prefix=True, mark=StepMark.RECOVERY), Loss.IMITATION),
        (Step(role=Role.ASSISTANT, prefix=True, mark=StepMark.MISTAKE), Loss.NONE),
    ],
)
def test_one_decision_makes_a_loss_of_the_marks(step: Step, loss: Loss) -> None:
    assert loss_of(step) is loss


@pytest.mark.parametrize(
    ("extra", "mark", "prefix", "left"),
    [
        ({"expert": "mistake"}, StepMark.MISTAKE, False, {}),
        ({"expert": "recovery", "note": 1}, StepMark.RECOVERY, False, {"note": 1}),
        ({"copied_context": True}, StepMark.COPIED, False, {}),
        ({"roll": {"prefix": True}}, None, True, {}),
        ({"roll": {"prefix": True, "rewritten": True}}, None, True, {"roll": {"rewritten": True}}),
        ({"roll": {"mask": "masked"}}, StepMark.IRRELEVANT, False, {}),
        ({"roll": {"mask": True}}, StepMark.IRRELEVANT, False, {}),
        ({"roll": {"rewritten": True}}, None, False, {"roll": {"rewritten": True}}),
    ],
)
def test_a_trajectory_written_before_the_fields_reads_its_marks_from_extra(
    extra: dict[str, object], mark: StepMark | None, prefix: bool, left: dict[str, object]
) -> None:
    step = Step.model_validate({"role": "assistant", "content": "x", "extra": extra})
    assert (step.mark, step.prefix, step.extra) == (mark, prefix, left)


def test_the_marks_survive_atif() -> None:
    trajectory = Trajectory(
        task_id="t",
        agent=AgentInfo(name="expert"),
        steps=[
            Step(role=Role.USER, content="before", mark=StepMark.COPIED),
            Step(role=Role.USER, content="do it"),
            Step(role=Role.ASSISTANT, content="oops", mark=StepMark.MISTAKE),
            Step(role=Role.ASSISTANT, content="fixed", mark=StepMark.RECOVERY, prefix=True),
        ],
    )
    doc = to_atif(trajectory)
    assert [s.get("is_copied_context", False) for s in doc["steps"]] == [True, False, False, False]
    back = from_atif(doc)
    assert [(s.mark, s.prefix) for s in back.steps] == [
        (s.mark, s.prefix) for s in trajectory.steps
    ]
    assert all(s.extra == {} for s in back.steps)
