import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from strategies import trajectory

from ale.atif import AtifError, AtifTrajectory, from_atif, read_atif, to_atif, write_atif
from ale.samples import sample_trajectory
from ale.trajectory import Role, Trajectory

FIXTURE = Path(__file__).parent / "fixtures" / "atif" / "external.json"


@given(trajectory())
@settings(max_examples=200, deadline=None)
def test_ale_to_atif_to_ale_is_lossless(traj: Trajectory) -> None:
    doc = to_atif(traj)
    AtifTrajectory.model_validate(doc)  # what we write conforms to ATIF v1.4
    assert from_atif(json.loads(json.dumps(doc))) == traj


@given(trajectory())
@settings(max_examples=100, deadline=None)
def test_atif_to_ale_to_atif_is_lossless(traj: Trajectory) -> None:
    doc = json.loads(json.dumps(to_atif(traj)))
    assert to_atif(from_atif(doc)) == doc


def test_external_document_round_trips_exactly() -> None:
    doc = json.loads(FIXTURE.read_text())
    traj = from_atif(doc)
    assert to_atif(traj) == doc
    # and the ALE view is the natural one
    roles = [s.role for s in traj.steps]
    assert roles == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
        Role.SYSTEM,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    agent_step = traj.steps[2]
    assert agent_step.tool_calls[0].name == "bash"
    assert agent_step.token_ids == [4, 5] and agent_step.logprobs == [-0.1, -0.25]
    assert agent_step.prompt_token_ids == [1, 2, 3]
    assert agent_step.usage is not None and agent_step.usage.cached_tokens == 100
    assert traj.steps[3].tool_results[0].call_id == "call_1"
    assert traj.steps[-1].content == "Done."
    assert traj.model == "qwen3-8b" and traj.agent.extra == {"temperature": 0.7}
    assert traj.usage is not None and traj.usage.prompt_tokens == 120


def test_edits_after_importing_a_foreign_document_survive_its_export() -> None:
    """A document from another writer (no ``extra.ale``) keeps what the mapping cannot
    reproduce as a patch; an edit made to the trajectory after import wins over the patch."""
    doc = json.loads(FIXTURE.read_text())
    traj = from_atif(doc)
    assert to_atif(traj) == doc  # untouched: given back exactly
    traj.steps[1].content = "Create /app/goodbye.txt."
    traj.steps[2].content = "Writing it now."
    traj.notes = "edited"
    out = to_atif(traj)
    assert out["steps"][1]["message"] == "Create /app/goodbye.txt."
    assert out["steps"][2]["message"] == "Writing it now." and out["notes"] == "edited"
    assert out["steps"][0] == doc["steps"][0]  # what was not edited is as it came
    assert from_atif(out).steps[1].content == "Create /app/goodbye.txt."


def test_sample_exports_as_one_agent_step_per_round(tmp_path: Path) -> None:
    traj = sample_trajectory(4, steps=10)
    path = write_atif(traj, tmp_path / "t.json")
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == "ATIF-v1.7" and doc["trajectory_id"] == traj.trajectory_id
    assert doc["session_id"] == traj.trajectory_id
    assert [s["source"] for s in doc["steps"]] == ["system", "user"] + ["agent"] * 4
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, 7))
    assert (
        doc["steps"][2]["observation"]["results"][0]["source_call_id"]
        == doc["steps"][2]["tool_calls"][0]["tool_call_id"]
    )
    assert doc["final_metrics"]["total_steps"] == 6
    assert read_atif(path) == traj


def test_a_document_without_session_or_trajectory_id_is_read_as_v1_7_allows() -> None:
    doc = {"schema_version": "ATIF-v1.7", "agent": {"name": "a", "version": "1"}, "steps": []}
    traj = from_atif(doc)
    assert traj.trajectory_id and traj.steps == []
    assert to_atif(traj) == doc  # given back as it came


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "not a JSON object"),
        (
            {
                "schema_version": "v9",
                "session_id": "s",
                "agent": {"name": "a", "version": "1"},
                "steps": [],
            },
            "schema_version",
        ),
        (
            {
                "schema_version": "ATIF-v1.7",
                "trajectory_id": 7,
                "agent": {"name": "a"},
                "steps": [],
            },
            "trajectory_id",
        ),
        ({"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {}, "steps": []}, "agent"),
        (
            {"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {"name": "a"}, "steps": {}},
            "steps",
        ),
        (
            {
                "schema_version": "ATIF-v1.4",
                "session_id": "s",
                "agent": {"name": "a"},
                "steps": [{"source": "bot", "message": ""}],
            },
            "step 1",
        ),
    ],
)
def test_bad_documents_get_one_clear_error(doc: object, message: str) -> None:
    with pytest.raises(AtifError, match=message):
        from_atif(doc)  # type: ignore[arg-type]


def test_bad_json_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{oops")
    with pytest.raises(AtifError, match=r"bad\.json is not valid JSON \(line 1"):
        read_atif(path)
