"""Sessions: atomic saves, prefix lookup, and corrupt files that never hide the others."""

from __future__ import annotations

import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic_core import PydanticSerializationError

from ale.trajectory import Role, Step, ToolCall, ToolResult, Usage
from iflow.errors import SessionError
from iflow.sessions import SessionData, SessionStore, clip_title


def make_session(store: SessionStore, session_id: str | None = None) -> SessionData:
    call = ToolCall(id="c1", name="run_shell_command", arguments={"command": "ls"})
    steps = [
        Step(role=Role.SYSTEM, content="You are iflow."),
        Step(role=Role.USER, content="list the files"),
        Step(
            role=Role.ASSISTANT,
            content="Looking.",
            tool_calls=[call],
            usage=Usage(prompt_tokens=12, completion_tokens=3),
            timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        ),
        Step(role=Role.TOOL, tool_results=[ToolResult(call_id="c1", content="a.txt\nb.txt")]),
    ]
    data = SessionData(
        id=session_id or store.new_id(),
        cwd="/tmp/project",
        title=clip_title("list the files"),
        model="qwen",
        provider="scripted",
        history=steps[:2],
        todos=[{"content": "look", "status": "in_progress"}],  # as TodoList.dump() gives
        turns=1,
        tokens_used=15,
        extra={"note": "kept"},
    )
    data.trajectory.steps = list(steps)
    data.trajectory.model = "qwen"
    return data


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "home" / ".iflow" / "sessions")


def test_new_id_sorts_by_time_and_is_unique() -> None:
    ids = {SessionStore.new_id() for _ in range(50)}
    assert len(ids) == 50
    for session_id in ids:
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", session_id)


def test_round_trip_keeps_history_trajectory_and_todos(store: SessionStore) -> None:
    data = make_session(store)
    path = store.save(data)
    assert path == store.root / f"{data.id}.json"

    loaded = store.load(data.id)
    assert loaded == data
    assert loaded.trajectory.steps[2].tool_calls[0].arguments == {"command": "ls"}
    assert loaded.history[1].content == "list the files"
    assert loaded.todos == [{"content": "look", "status": "in_progress"}]


def test_save_sets_updated_at(store: SessionStore) -> None:
    data = make_session(store)
    before = data.updated_at
    store.save(data)
    assert data.updated_at >= before
    assert store.load(data.id).updated_at == data.updated_at


def test_load_by_unique_prefix(store: SessionStore) -> None:
    first = make_session(store, "20260101-100000-aaaaaa")
    second = make_session(store, "20260102-100000-bbbbbb")
    store.save(first)
    store.save(second)
    assert store.load("20260102").id == second.id
    assert store.load("20260101-1").id == first.id


def test_ambiguous_prefix_names_the_candidates(store: SessionStore) -> None:
    store.save(make_session(store, "20260101-100000-aaaaaa"))
    store.save(make_session(store, "20260101-110000-bbbbbb"))
    with pytest.raises(SessionError) as info:
        store.load("20260101")
    message = str(info.value)
    assert "matches 2 sessions" in message
    assert "20260101-100000-aaaaaa" in message
    assert "20260101-110000-bbbbbb" in message


def test_no_match_says_how_to_list(store: SessionStore) -> None:
    store.save(make_session(store, "20260101-100000-aaaaaa"))
    with pytest.raises(SessionError, match="iflow --list-sessions"):
        store.load("2027")
    with pytest.raises(SessionError, match="not a session id"):
        store.load("../etc/passwd")


def test_corrupt_file_is_a_clear_error_and_others_still_work(store: SessionStore) -> None:
    good = make_session(store, "20260101-100000-aaaaaa")
    store.save(good)
    bad_path = store.root / "20260102-100000-bbbbbb.json"
    bad_path.write_text('{"id": "20260102-100000-bbbbbb", "cwd": ', encoding="utf-8")
    bad_bytes = bad_path.read_bytes()

    with pytest.raises(SessionError) as info:
        store.load("20260102")
    message = str(info.value)
    assert str(bad_path) in message
    assert "move or delete it" in message

    assert store.load(good.id) == good
    summaries, warnings = store.list()
    assert [s.id for s in summaries] == [good.id]
    assert len(warnings) == 1
    assert str(bad_path) in warnings[0]
    assert bad_path.read_bytes() == bad_bytes  # never touched


def test_invalid_session_content_and_wrong_id(store: SessionStore) -> None:
    store.root.mkdir(parents=True)
    (store.root / "20260101-000000-aaaaaa.json").write_text('{"id": "x"}', encoding="utf-8")
    (store.root / "20260101-000000-bbbbbb.json").write_bytes(b"\xff\xfe\x00garbage")
    other = make_session(store, "20260101-000000-cccccc")
    (store.root / "20260101-000000-dddddd.json").write_text(
        other.model_dump_json(), encoding="utf-8"
    )
    summaries, warnings = store.list()
    assert summaries == []
    assert len(warnings) == 3
    joined = "\n".join(warnings)
    assert "cwd: Field required" in joined
    assert "does not match its name" in joined
    with pytest.raises(SessionError, match=r"aaaaaa\.json is not a valid session"):
        store.load("20260101-000000-aaaaaa")


def test_latest_skips_a_newer_corrupt_file_with_a_warning(store: SessionStore) -> None:
    older = make_session(store, "20260101-100000-aaaaaa")
    store.save(older)
    bad_path = store.root / "20260102-100000-bbbbbb.json"
    bad_path.write_text("not json", encoding="utf-8")
    stamp = (store.root / f"{older.id}.json").stat().st_mtime
    os.utime(bad_path, (stamp + 10, stamp + 10))

    latest, warnings = store.latest()
    assert latest.id == older.id
    assert str(bad_path) in warnings[0]
    assert warnings[-1] == f"resuming the older session {older.id} instead."


def test_latest_is_the_most_recently_saved(store: SessionStore) -> None:
    first = make_session(store, "20260101-100000-aaaaaa")
    second = make_session(store, "20260102-100000-bbbbbb")
    store.save(second)
    store.save(first)
    path = store.root / f"{first.id}.json"
    stamp = (store.root / f"{second.id}.json").stat().st_mtime
    os.utime(path, (stamp + 10, stamp + 10))
    latest, warnings = store.latest()
    assert latest.id == first.id
    assert warnings == []


def test_latest_without_sessions(store: SessionStore) -> None:
    with pytest.raises(SessionError, match="no saved sessions"):
        store.latest()
    store.root.mkdir(parents=True)
    (store.root / "20260101-100000-aaaaaa.json").write_text("{", encoding="utf-8")
    with pytest.raises(SessionError, match="can be read"):
        store.latest()


def test_list_is_newest_first(store: SessionStore) -> None:
    ids = ["20260101-100000-aaaaaa", "20260102-100000-bbbbbb", "20260103-100000-cccccc"]
    for session_id in [ids[1], ids[0], ids[2]]:
        store.save(make_session(store, session_id))
    summaries, warnings = store.list()
    assert warnings == []
    assert [s.id for s in summaries] == [ids[2], ids[0], ids[1]]  # by save time
    assert summaries[0].title == "list the files"
    assert summaries[0].turns == 1
    assert summaries[0].cwd == "/tmp/project"


def test_atomic_save_leaves_no_temporary_files(store: SessionStore) -> None:
    data = make_session(store)
    for turn in range(3):
        data.turns = turn
        store.save(data)
    assert sorted(p.name for p in store.root.iterdir()) == [f"{data.id}.json"]


def test_failed_save_keeps_the_previous_file(store: SessionStore) -> None:
    data = make_session(store)
    store.save(data)
    before = (store.root / f"{data.id}.json").read_bytes()
    data.extra["unserialisable"] = object()
    with pytest.raises(PydanticSerializationError):
        store.save(data)
    assert (store.root / f"{data.id}.json").read_bytes() == before
    assert sorted(p.name for p in store.root.iterdir()) == [f"{data.id}.json"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_permissions(store: SessionStore) -> None:
    path = store.save(make_session(store))
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_delete(store: SessionStore) -> None:
    data = make_session(store)
    store.save(data)
    store.delete(data.id)
    assert not (store.root / f"{data.id}.json").exists()
    with pytest.raises(SessionError, match="no saved session"):
        store.delete(data.id)


def test_clip_title() -> None:
    assert clip_title("  fix\n the   bug ") == "fix the bug"
    clipped = clip_title("x" * 200, limit=20)
    assert len(clipped) == 20
    assert clipped.endswith("…")
