import pytest
from hypothesis import given
from hypothesis import strategies as st

from ale.chunking import NO_CHUNK, TokenViewError, chunk_ids, chunk_spans, num_chunks, token_view
from ale.samples import sample_trajectory
from ale.trajectory import AgentInfo, Role, Step, Trajectory


def test_empty() -> None:
    assert chunk_ids([], []) == []
    assert chunk_spans([]) == []


def test_all_policy_is_one_chunk() -> None:
    assert chunk_ids([5, 6, 7], [1, 1, 1]) == [0, 0, 0]


def test_all_environment_has_no_chunk() -> None:
    assert chunk_ids([5, 6], [0, 0]) == [NO_CHUNK, NO_CHUNK]


def test_alternating() -> None:
    assert chunk_ids(list(range(6)), [1, 0, 1, 0, 1, 0]) == [0, -1, 1, -1, 2, -1]
    assert chunk_spans([1, 0, 1, 0, 1, 0]) == [(0, 1), (2, 3), (4, 5)]


def test_prompt_then_runs_then_trailing_observation() -> None:
    mask = [0, 0, 1, 1, 0, 1, 1, 1, 0, 0]
    assert chunk_ids(list(range(10)), mask) == [-1, -1, 0, 0, -1, 1, 1, 1, -1, -1]
    assert chunk_spans(mask) == [(2, 4), (5, 8)]


def test_run_at_the_end() -> None:
    assert chunk_spans([0, 1, 1]) == [(1, 3)]


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="one mask entry per token"):
        chunk_ids([1, 2], [1])


@given(st.lists(st.booleans(), max_size=200))
def test_chunks_are_the_maximal_runs(mask: list[bool]) -> None:
    ids = chunk_ids([0] * len(mask), mask)
    spans = chunk_spans(mask)
    assert num_chunks(mask) == len(spans) == len({i for i in ids if i != NO_CHUNK})
    for k, (start, end) in enumerate(spans):
        assert all(ids[i] == k for i in range(start, end))
        assert start == 0 or not mask[start - 1]
        assert end == len(mask) or not mask[end]
    assert all((i == NO_CHUNK) == (not m) for i, m in zip(ids, mask, strict=True))
    # chunk ids increase along the sequence
    seen = [i for i in ids if i != NO_CHUNK]
    assert seen == sorted(seen)


def test_token_view_of_a_sample() -> None:
    traj = sample_trajectory(3, steps=12)
    view = token_view(traj)
    assistant = [i for i, s in enumerate(traj.steps) if s.role is Role.ASSISTANT]
    assert num_chunks(view.policy_mask) == len(assistant)
    last = traj.steps[assistant[-1]]
    assert view.token_ids == last.prompt_token_ids + last.token_ids
    ids = view.chunk_ids()
    for k, index in enumerate(assistant):
        owned = [t for t, o in zip(view.token_ids, view.step_index, strict=True) if o == index]
        assert owned == traj.steps[index].token_ids
        assert [c for c, o in zip(ids, view.step_index, strict=True) if o == index] == [k] * len(
            owned
        )
    assert [lp for lp, m in zip(view.logprobs, view.policy_mask, strict=True) if not m] == [
        None
    ] * (len(view.token_ids) - sum(view.policy_mask))


def _traj(*steps: Step) -> Trajectory:
    return Trajectory(agent=AgentInfo(name="t"), steps=list(steps))


def test_token_view_needs_prompts() -> None:
    with pytest.raises(TokenViewError, match="no prompt_token_ids"):
        token_view(_traj(Step(role=Role.ASSISTANT, token_ids=[1])))


def test_token_view_refuses_rewritten_context() -> None:
    first = Step(role=Role.ASSISTANT, prompt_token_ids=[1, 2], token_ids=[3])
    second = Step(role=Role.ASSISTANT, prompt_token_ids=[9, 9, 9, 4], token_ids=[5])
    with pytest.raises(TokenViewError, match="split the trajectory at that step"):
        token_view(_traj(first, second))


def test_split_segments_cuts_where_a_prompt_stops_extending() -> None:
    from ale.chunking import split_segments

    def answer(prompt: list[int], ids: list[int]) -> Step:
        return Step(
            role=Role.ASSISTANT, prompt_token_ids=prompt, token_ids=ids, logprobs=[0.0] * len(ids)
        )

    steps = [
        Step(role=Role.USER, content="a"),
        answer([1, 2], [3]),
        Step(role=Role.USER, content="b"),
        answer([1, 2, 3, 4], [5]),  # extends [1, 2, 3]
        Step(role=Role.USER, content="summary"),
        answer([1, 9], [6]),  # rewritten: a new part, opened by the observation before it
        Step(role=Role.USER, content="c"),
        answer([1, 9, 6, 7], [8]),
    ]
    whole = Trajectory(agent=AgentInfo(name="a"), steps=steps, reward=0.5)
    with pytest.raises(TokenViewError):
        token_view(whole)
    first, second = split_segments(whole)
    assert [s.content for s in first.steps if s.role is Role.USER] == ["a", "b"]
    assert [s.content for s in second.steps if s.role is Role.USER] == ["summary", "c"]
    assert token_view(first).token_ids == [1, 2, 3, 4, 5]
    assert token_view(second).token_ids == [1, 9, 6, 7, 8]
    assert (first.extra["segment"], second.extra["segment"]) == (0, 1)
    assert first.reward == second.reward == 0.5
    assert first.trajectory_id == second.trajectory_id == whole.trajectory_id
    assert split_segments(first) == [first]  # nothing to cut: the same object back
