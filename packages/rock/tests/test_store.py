"""The daemon's state store, every test run against SQLite and a real PostgreSQL server.

PostgreSQL comes from $ROCK_TEST_PG_URL (a role that may create databases) or else
from scripts/ensure-postgres.sh, which starts one on 127.0.0.1:55432. Each test gets a
database of its own, dropped afterwards. A server that cannot be had fails the
PostgreSQL tests with the script's reason; ROCK_SKIP_POSTGRES=1 skips them instead.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rock.errors import RockError
from rock.store import (
    ALLOWED_TRANSITIONS,
    IllegalTransition,
    SandboxExists,
    SandboxRecord,
    SandboxState,
    StateStore,
    StoreError,
    UnknownSandbox,
    normalise_url,
)

TABLES = {"sandboxes", "sandbox_transitions", "exec_records"}
S = SandboxState

OpenStore = Callable[..., StateStore]


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None for SQLite (the store's file under home), a fresh database for PostgreSQL."""
    return str(request.getfixturevalue("pg_url")) if backend == "postgresql" else None


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "rock-home"


@pytest.fixture
def open_store(db_url: str | None, home: Path) -> Iterator[OpenStore]:
    """Opens stores on the test's database (as often as a test likes); closes them all."""
    opened: list[StateStore] = []

    def open_(**kwargs: Any) -> StateStore:
        store = StateStore(db_url, home=home, **kwargs)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> StateStore:
    return open_store()


def add(store: StateStore, sandbox_id: str, **overrides: Any) -> SandboxRecord:
    fields: dict[str, Any] = {
        "daemon_id": "d1",
        "backend": "docker",
        "image": "rock-base:latest",
        "spec": {"image": "rock-base:latest", "memory_mb": 512, "env": {"A": "1"}},
        "labels": {"team": "rl"},
    }
    return store.add_sandbox(sandbox_id, **(fields | overrides))


def walk(store: StateStore, sandbox_id: str, *states: SandboxState) -> SandboxRecord:
    record = store.get(sandbox_id)
    for state in states:
        record = store.transition(sandbox_id, state, f"to {state}")
    return record


# --- records ------------------------------------------------------------------------------


def test_add_and_get(store: StateStore) -> None:
    before = datetime.now(UTC)
    added = add(
        store,
        "sb-0123456789ab",
        backend="local",
        labels={"rock.task": "hello", "team": "rl"},
        pool_key="pool-a",
        ttl_sec=600,
        idle_timeout_sec=30.5,
    )
    got = store.get("sb-0123456789ab")
    assert got == added
    assert got.state is S.PENDING and got.state_reason is None and got.container_id is None
    assert (got.daemon_id, got.backend, got.image, got.pool_key) == (
        "d1",
        "local",
        "rock-base:latest",
        "pool-a",
    )
    assert got.spec_json == {"image": "rock-base:latest", "memory_mb": 512, "env": {"A": "1"}}
    assert got.labels == {"rock.task": "hello", "team": "rl"}
    assert got.idle_timeout_sec == 30.5
    for stamp in (got.created_at, got.updated_at, got.last_used_at):
        assert stamp.tzinfo is not None and stamp.utcoffset() == timedelta(0)
        assert before <= stamp <= datetime.now(UTC)
    assert got.expires_at == got.created_at + timedelta(seconds=600)
    [first] = store.history("sb-0123456789ab")
    assert (first.from_state, first.to_state, first.at) == (None, S.PENDING, got.created_at)


def test_add_with_initial_state_and_duplicate_id(store: StateStore) -> None:
    adopted = add(store, "sb-adopted", state="ready", reason="adopted at start-up")
    assert (adopted.state, adopted.state_reason) == (S.READY, "adopted at start-up")
    assert [(t.from_state, t.to_state, t.reason) for t in store.history("sb-adopted")] == [
        (None, S.READY, "adopted at start-up")
    ]
    with pytest.raises(SandboxExists, match=r"sb-adopted.* already recorded"):
        add(store, "sb-adopted")
    assert len(store.history("sb-adopted")) == 1
    with pytest.raises(StoreError, match=r"'running' is not a sandbox state; use one of: pending"):
        add(store, "sb-bad", state="running")
    with pytest.raises(UnknownSandbox):
        store.get("sb-bad")


def test_list_filters(store: StateStore) -> None:
    add(store, "sb-a", labels={"team": "rl", "rock.task": "t1"}, pool_key="p1")
    add(store, "sb-b", labels={"team": "rl", "rock.task": "t2"}, pool_key="p1")
    add(store, "sb-c", labels={"team": "eval"}, daemon_id="d2")
    add(store, "sb-d", labels={})
    walk(store, "sb-b", S.STARTING, S.READY)
    walk(store, "sb-c", S.ERROR)

    def ids(**filters: Any) -> list[str]:
        return [r.id for r in store.list(**filters)]

    assert ids() == ["sb-a", "sb-b", "sb-c", "sb-d"]
    assert ids(states=[S.READY]) == ["sb-b"]
    assert ids(states=["pending", "error"]) == ["sb-a", "sb-c", "sb-d"]
    assert ids(states=[]) == []
    assert ids(daemon_id="d2") == ["sb-c"]
    assert ids(pool_key="p1") == ["sb-a", "sb-b"]
    assert ids(label={"team": "rl"}) == ["sb-a", "sb-b"]
    assert ids(label={"team": "rl", "rock.task": "t2"}) == ["sb-b"]
    assert ids(label={"team": "rl", "rock.task": "t3"}) == []
    assert ids(label={"missing": "x"}) == []
    assert ids(label={}) == ids()
    assert ids(label={"team": "rl"}, states=["pending"], pool_key="p1", daemon_id="d1") == ["sb-a"]


# --- the state machine ----------------------------------------------------------------------


def test_full_lifecycle_with_history(store: StateStore) -> None:
    add(store, "sb-life")
    starting = store.transition("sb-life", S.STARTING, "creating container")
    ready = store.transition("sb-life", "ready", "container up", container_id="c0ffee")
    assert (ready.state, ready.state_reason, ready.container_id) == (
        S.READY,
        "container up",
        "c0ffee",
    )
    walk(store, "sb-life", S.BUSY, S.READY, S.STOPPED, S.READY, S.BUSY, S.ERROR)
    deleted = store.transition("sb-life", S.DELETED)
    assert (deleted.state, deleted.state_reason, deleted.container_id) == (
        S.DELETED,
        None,
        "c0ffee",
    )
    assert starting.updated_at <= ready.updated_at <= deleted.updated_at
    assert deleted.created_at == starting.created_at

    history = store.history("sb-life")
    steps = [(t.from_state, t.to_state) for t in history]
    assert steps == [
        (None, S.PENDING),
        (S.PENDING, S.STARTING),
        (S.STARTING, S.READY),
        (S.READY, S.BUSY),
        (S.BUSY, S.READY),
        (S.READY, S.STOPPED),
        (S.STOPPED, S.READY),
        (S.READY, S.BUSY),
        (S.BUSY, S.ERROR),
        (S.ERROR, S.DELETED),
    ]
    assert [t.reason for t in history[:3]] == [None, "creating container", "container up"]
    assert history[-1].reason is None and history[-2].reason == "to error"
    assert [t.at for t in history] == sorted(t.at for t in history)
    assert history[-1].at == deleted.updated_at
    assert all(t.sandbox_id == "sb-life" for t in history)
    assert len({t.id for t in history}) == len(history)


def test_illegal_transition_names_sandbox_states_and_what_is_allowed(store: StateStore) -> None:
    add(store, "sb-ill")
    walk(store, "sb-ill", S.STARTING)
    with pytest.raises(IllegalTransition) as caught:
        store.transition("sb-ill", S.BUSY, "too early")
    assert str(caught.value) == (
        "Sandbox sb-ill cannot go from starting to busy; "
        "from starting it can go to: deleted, error, ready."
    )
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, RockError)
    record = store.get("sb-ill")
    assert (record.state, record.state_reason) == (S.STARTING, "to starting")
    assert len(store.history("sb-ill")) == 2

    with pytest.raises(IllegalTransition, match="from starting to starting"):
        store.transition("sb-ill", S.STARTING)
    walk(store, "sb-ill", S.DELETED)
    with pytest.raises(IllegalTransition) as final:
        store.transition("sb-ill", S.READY)
    assert str(final.value) == (
        "Sandbox sb-ill cannot go from deleted to ready; from deleted it can go to: nothing, it is final."
    )
    with pytest.raises(StoreError, match="'gone' is not a sandbox state"):
        store.transition("sb-ill", "gone")


def test_every_pair_of_states_follows_the_table(store: StateStore) -> None:
    for n, (source, targets) in enumerate(ALLOWED_TRANSITIONS.items()):
        for target in S:
            sandbox_id = f"sb-{n}-{target}"
            add(store, sandbox_id, state=source)
            if target in targets:
                assert store.transition(sandbox_id, target).state is target
            else:
                with pytest.raises(IllegalTransition):
                    store.transition(sandbox_id, target)
                assert store.get(sandbox_id).state is source


def test_unknown_sandbox(store: StateStore) -> None:
    message = "No sandbox with id 'sb-nope' is recorded in the state store."
    calls: list[Callable[[], object]] = [
        lambda: store.get("sb-nope"),
        lambda: store.transition("sb-nope", S.STARTING),
        lambda: store.touch("sb-nope"),
        lambda: store.history("sb-nope"),
        lambda: store.execs("sb-nope"),
        lambda: store.record_exec(
            "sb-nope",
            command="true",
            exit_code=0,
            timed_out=False,
            started_at=datetime.now(UTC),
            duration_sec=0.1,
            stdout=b"",
            stderr=b"",
        ),
    ]
    for call in calls:
        with pytest.raises(UnknownSandbox) as caught:
            call()
        assert str(caught.value) == message
        assert isinstance(caught.value, KeyError) and isinstance(caught.value, StoreError)
    assert store.list() == []


# --- exec records ----------------------------------------------------------------------------


def test_exec_records_keep_true_sizes_and_bounded_heads(open_store: OpenStore) -> None:
    store = open_store(max_output_chars=16)
    add(store, "sb-exec")
    started = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    stdout = b"ok \xff\xfe bad\x00nul " + "é€😀".encode() * 1000  # invalid UTF-8, a NUL
    stderr = "😀".encode() * 100  # 400 bytes, 4 bytes a character
    first = store.record_exec(
        "sb-exec",
        command="x" * 5000,
        exit_code=None,
        timed_out=True,
        started_at=started,
        duration_sec=30.25,
        stdout=stdout,
        stderr=stderr,
        session_id="sess-1",
    )
    assert (first.stdout_bytes, first.stderr_bytes) == (len(stdout), 400)
    assert first.stdout_head == "ok \ufffd\ufffd bad\ufffdnul é€"
    assert first.stderr_head == "😀" * 16
    assert first.command == "x" * 4096
    assert (first.exit_code, first.timed_out, first.duration_sec) == (None, True, 30.25)
    assert (first.started_at, first.session_id, first.sandbox_id) == (started, "sess-1", "sb-exec")

    for n in range(5):
        store.record_exec(
            "sb-exec",
            command=f"echo {n}",
            exit_code=n,
            timed_out=False,
            started_at=started + timedelta(seconds=n + 1),
            duration_sec=0.01,
            stdout=f"{n}\n".encode(),
            stderr=b"",
        )
    newest = store.execs("sb-exec")
    assert [e.command for e in newest] == [f"echo {n}" for n in range(4, -1, -1)] + ["x" * 4096]
    assert newest[-1] == first
    assert [e.exit_code for e in store.execs("sb-exec", limit=2)] == [4, 3]
    assert newest[0].stdout_head == "4\n" and newest[0].stderr_head == ""
    assert newest[0].session_id is None and newest[0].started_at.tzinfo is not None


def test_exec_heads_default_bound_and_zero(open_store: OpenStore) -> None:
    store = open_store()
    add(store, "sb-big")
    big = b"a" * 100_000
    record = store.record_exec(
        "sb-big",
        command="yes",
        exit_code=0,
        timed_out=False,
        started_at=datetime.now(UTC),
        duration_sec=1.0,
        stdout=big,
        stderr=big,
    )
    assert record.stdout_bytes == 100_000 and record.stdout_head == "a" * 8192
    assert store.execs("sb-big")[0].stderr_head == "a" * 8192
    silent = open_store(max_output_chars=0)
    kept = silent.record_exec(
        "sb-big",
        command="yes",
        exit_code=0,
        timed_out=False,
        started_at=datetime.now(UTC),
        duration_sec=1.0,
        stdout=big,
        stderr=b"",
    )
    assert (kept.stdout_bytes, kept.stdout_head) == (100_000, "")
    with pytest.raises(ValueError, match="max_output_chars must be 0 or more"):
        open_store(max_output_chars=-1)


def test_naive_datetimes_are_refused(store: StateStore) -> None:
    add(store, "sb-naive")
    with pytest.raises(StoreError, match="started_at is a naive datetime"):
        store.record_exec(
            "sb-naive",
            command="true",
            exit_code=0,
            timed_out=False,
            started_at=datetime(2030, 1, 1),
            duration_sec=0.0,
            stdout=b"",
            stderr=b"",
        )
    with pytest.raises(StoreError, match="now is a naive datetime"):
        store.expired(datetime(2030, 1, 1))


# --- reaping, reconciliation, metrics -------------------------------------------------------


def test_expired_by_ttl(store: StateStore) -> None:
    for n, state in enumerate([S.READY, S.BUSY, S.STOPPED, S.PENDING, S.ERROR, S.DELETED]):
        add(store, f"sb-ttl-{n}", ttl_sec=60, state=state)
    add(store, "sb-forever", state=S.READY)
    add(store, "sb-long", ttl_sec=3600, state=S.READY)
    created = store.get("sb-ttl-0").created_at
    last = store.get("sb-ttl-2").created_at

    assert store.expired(created + timedelta(seconds=59)) == []
    assert [r.id for r in store.expired(created + timedelta(seconds=60))] == ["sb-ttl-0"]
    due = store.expired(last + timedelta(seconds=60))
    assert [r.id for r in due] == ["sb-ttl-0", "sb-ttl-1", "sb-ttl-2"]
    assert [r.id for r in store.expired(created + timedelta(days=1))] == [
        "sb-ttl-0",
        "sb-ttl-1",
        "sb-ttl-2",
        "sb-long",
    ]
    assert [r.id for r in store.expired(created + timedelta(days=1), daemon_id="d1")] == [
        r.id for r in store.expired(created + timedelta(days=1))
    ]
    assert store.expired(created + timedelta(days=1), daemon_id="other") == []
    assert store.expired() == []  # nothing is due at the real now


def test_expired_by_idle_timeout(store: StateStore) -> None:
    add(store, "sb-idle", idle_timeout_sec=10, state=S.READY)
    add(store, "sb-stopped", idle_timeout_sec=10, state=S.STOPPED)
    add(store, "sb-busy", idle_timeout_sec=10, state=S.BUSY)
    add(store, "sb-starting", idle_timeout_sec=10, state=S.STARTING)
    add(store, "sb-no-timeout", state=S.READY)
    # the adds may span more than a second on a loaded machine: measure from the first and last
    added = [store.get(i).last_used_at for i in ("sb-idle", "sb-stopped", "sb-busy")]
    used = added[0]

    assert store.expired(min(added) + timedelta(seconds=9)) == []
    due = [r.id for r in store.expired(max(added) + timedelta(seconds=11))]
    assert due == ["sb-idle", "sb-stopped", "sb-busy"]  # a leased sandbox idles too

    store.touch("sb-idle")
    touched = store.get("sb-idle")
    assert touched.last_used_at > used and touched.updated_at == touched.created_at
    later = touched.last_used_at + timedelta(seconds=5)
    assert "sb-idle" not in [r.id for r in store.expired(later)]
    assert "sb-idle" in [r.id for r in store.expired(touched.last_used_at + timedelta(seconds=10))]


def test_live_and_counts_by_state(store: StateStore) -> None:
    add(store, "sb-1")
    add(store, "sb-2", state=S.READY)
    add(store, "sb-3", state=S.BUSY)
    add(store, "sb-4", state=S.ERROR)
    add(store, "sb-5", state=S.READY)
    add(store, "sb-other", daemon_id="d2", state=S.READY)
    walk(store, "sb-5", S.DELETED)

    assert [r.id for r in store.live("d1")] == ["sb-1", "sb-2", "sb-3", "sb-4"]
    assert [r.id for r in store.live("d2")] == ["sb-other"]
    assert store.live("nobody") == []
    assert store.counts_by_state() == {
        "pending": 1,
        "starting": 0,
        "ready": 2,
        "busy": 1,
        "paused": 0,
        "stopped": 0,
        "deleted": 1,
        "error": 1,
    }
    assert store.counts_by_state("d2") == {s.value: int(s is S.READY) for s in S}
    assert store.counts_by_state("nobody") == dict.fromkeys(S, 0)


# --- concurrency ---------------------------------------------------------------------------


def test_concurrent_transitions_on_different_sandboxes_lose_nothing(store: StateStore) -> None:
    threads, steps = 16, 20
    for n in range(threads):
        add(store, f"sb-t{n}")
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        try:
            start.wait()
            store.transition(f"sb-t{n}", S.STARTING)
            store.transition(f"sb-t{n}", S.READY, container_id=f"c{n}")
            for step in range(steps - 2):
                store.transition(f"sb-t{n}", S.BUSY if step % 2 == 0 else S.READY, f"step {step}")
                store.touch(f"sb-t{n}")
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    for n in range(threads):
        history = store.history(f"sb-t{n}")
        assert len(history) == steps + 1
        assert [t.reason for t in history[3:]] == [f"step {s}" for s in range(steps - 2)]
        for before, after in itertools.pairwise(history):
            assert after.from_state == before.to_state
        record = store.get(f"sb-t{n}")
        assert (record.state, record.container_id) == (S.READY, f"c{n}")
    assert store.counts_by_state()["ready"] == threads


def test_racing_transitions_on_one_sandbox_exactly_one_wins(store: StateStore) -> None:
    racers, rounds = 8, 15
    add(store, "sb-race", state=S.READY)
    for round_ in range(rounds):
        start = threading.Barrier(racers)
        won: list[int] = []
        lost: list[BaseException] = []

        def race(
            n: int,
            start: threading.Barrier = start,
            won: list[int] = won,
            lost: list[BaseException] = lost,
        ) -> None:
            start.wait()
            try:
                store.transition("sb-race", S.BUSY, f"racer {n}")
                won.append(n)
            except BaseException as error:  # judged below: each must be IllegalTransition
                lost.append(error)

        workers = [threading.Thread(target=race, args=(n,)) for n in range(racers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert len(won) == 1, f"round {round_}: {len(won)} racers moved ready -> busy"
        assert len(lost) == racers - 1
        assert all(isinstance(exc, IllegalTransition) for exc in lost), lost
        assert all("from busy to busy" in str(exc) for exc in lost)
        assert store.get("sb-race").state_reason == f"racer {won[0]}"
        store.transition("sb-race", S.READY)
    busy = [t for t in store.history("sb-race") if t.to_state is S.BUSY]
    assert len(busy) == rounds
    assert all(t.from_state is S.READY for t in busy)


# --- the database itself ------------------------------------------------------------------


def test_tables_are_created_where_the_store_points(
    backend: str, db_url: str | None, home: Path, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "sqlite":
        db_file = home / "rock.db"
        assert store.dialect == "sqlite" and store.url == f"sqlite:///{db_file}"
        assert db_file.is_file()
        with sqlite3.connect(db_file) as conn:
            names = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            (journal,) = conn.execute("PRAGMA journal_mode").fetchone()
        assert names >= TABLES and journal == "wal"
        # No home given: $ROCK_HOME, created if missing.
        monkeypatch.setenv("ROCK_HOME", str(home.parent / "from-env"))
        with StateStore() as default:
            assert default.url.endswith("/from-env/rock.db")
        assert (home.parent / "from-env" / "rock.db").is_file()
    else:
        assert db_url is not None
        assert store.dialect == "postgresql"
        assert store.url.startswith("postgresql+psycopg://rock:***@")
        assert normalise_url(db_url) == "postgresql+psycopg://" + db_url.split("://", 1)[1]
        with psycopg.connect(db_url) as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
        assert {r[0] for r in rows} >= TABLES
        assert not (home / "rock.db").exists()


def test_reopening_sees_previous_data(open_store: OpenStore) -> None:
    first = open_store()
    add(first, "sb-keep", ttl_sec=60, labels={"k": "v"})
    walk(first, "sb-keep", S.STARTING, S.READY)
    first.record_exec(
        "sb-keep",
        command="echo hi",
        exit_code=0,
        timed_out=False,
        started_at=datetime.now(UTC),
        duration_sec=0.5,
        stdout=b"hi\n",
        stderr=b"",
    )
    before = (first.get("sb-keep"), first.history("sb-keep"), first.execs("sb-keep"))
    first.close()
    with pytest.raises(StoreError, match="is closed"):
        first.get("sb-keep")

    again = open_store()
    assert (again.get("sb-keep"), again.history("sb-keep"), again.execs("sb-keep")) == before
    assert again.transition("sb-keep", S.BUSY).state is S.BUSY
    assert len(again.history("sb-keep")) == 4


def test_lease_hands_a_ready_sandbox_over_once(store: StateStore) -> None:
    add(store, "sb-pool", state=S.READY, pool_key="warm")
    leased = store.lease(
        "sb-pool",
        spec={"image": "x", "env": {"A": "1"}},
        labels={"job": "j1"},
        ttl_sec=60,
        idle_timeout_sec=5,
        reason="acquired from pool warm",
    )
    assert leased.state == S.BUSY and leased.labels == {"job": "j1"}
    assert leased.spec_json["env"] == {"A": "1"} and leased.idle_timeout_sec == 5
    assert leased.expires_at is not None and leased.pool_key == "warm"
    assert [h.to_state for h in store.history("sb-pool")][-1] == S.BUSY
    with pytest.raises(IllegalTransition, match="busy to busy"):
        store.lease("sb-pool", spec={}, labels={})
    with pytest.raises(UnknownSandbox):
        store.lease("sb-none", spec={}, labels={})


def test_exec_records_count_as_use(store: StateStore) -> None:
    before = add(store, "sb-used", state=S.BUSY, idle_timeout_sec=10).last_used_at
    store.record_exec(
        "sb-used",
        command="true",
        exit_code=0,
        timed_out=False,
        started_at=datetime.now(UTC),
        duration_sec=0.01,
        stdout=b"",
        stderr=b"",
    )
    assert store.get("sb-used").last_used_at > before


def test_pools_are_kept_per_daemon(store: StateStore) -> None:
    store.put_pool("d1", "warm", spec={"image": "a"}, min_idle=2, max_total=4)
    store.put_pool("d1", "warm", spec={"image": "b"}, min_idle=1, max_total=3)
    store.put_pool("d2", "other", spec={}, min_idle=0, max_total=1)
    (pool,) = store.pools("d1")
    assert (pool.name, pool.spec_json, pool.min_idle, pool.max_total) == (
        "warm",
        {"image": "b"},
        1,
        3,
    )
    with pytest.raises(StoreError, match="min_idle"):
        store.put_pool("d1", "bad", spec={}, min_idle=5, max_total=2)
    assert store.delete_pool("d1", "warm") and not store.delete_pool("d1", "warm")
    assert store.pools("d1") == [] and [p.name for p in store.pools("d2")] == ["other"]


def test_the_test_role_may_drop_a_database_an_autovacuum_worker_is_in(
    pg_server_url: str,
) -> None:
    """Each PostgreSQL test drops its database WITH (FORCE), which terminates every
    process still in it. An autovacuum worker that happens to be there belongs to no
    role, and only a member of pg_signal_backend may end it: without that membership
    the drop failed once in CI ("must be a member of the role whose process is being
    terminated or member of pg_signal_backend"). scripts/ensure-postgres.sh grants it."""
    with psycopg.connect(pg_server_url) as conn:
        row = conn.execute(
            "SELECT pg_has_role(current_user, 'pg_signal_backend', 'MEMBER')"
        ).fetchone()
    assert row == (True,)
