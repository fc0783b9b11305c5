"""Schema v2 of the trace store: the operator command table, following a live engine's events,
and what an attached console seeds its board with; migrating a v1 store to it; and schema v4's
signed commands, migrating a v3 store to them."""

from __future__ import annotations

import os
import sqlite3
import stat
import typing
from pathlib import Path
from typing import Any

import pytest

from engine.events import (
    BreakerClosed,
    BreakerOpened,
    BreakerTransitioned,
    BreakerTripped,
    CallSucceeded,
    Event,
    ManifestLoaded,
    ManifestRemoved,
    ToolRegistered,
    TurnStarted,
)
from engine.store import MIGRATIONS, SCHEMA_VERSION, TraceStore, TraceStoreError
from engine.store.command_auth import (
    CommandKeyError,
    command_origin,
    load_or_create_key,
    read_key,
    verify,
)
from engine.store.schema import BREAKER_STATES, BREAKER_TRANSITIONS, MANIFEST_CHANGES, RECORDING_STARTS
from engine.strategies.breaker.machine import BreakerState
from tests.engine.conftest import WALL


@pytest.fixture
def store(tmp_path: Path) -> typing.Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def transition(
    cls: type[BreakerTransitioned], tool: str, at: float, to: BreakerState, *, failures: int = 0,
    half_open_at: float | None = None, actor: str = "engine",
) -> BreakerTransitioned:  # fmt: skip
    return cls(
        at=at, t=at - WALL, tool_id=tool, from_state=BreakerState.CLOSED, to_state=to, reason="r",
        actor=actor, consecutive_failures=failures, half_open_at=half_open_at,
    )  # fmt: skip


def turn(
    turn_id: str, at: float, tool: str, breaker: dict[str, Any] | None = None, digest: str = ""
) -> list[Event]:
    """A one-call turn that succeeded, started with ``breaker`` (a snapshot) and manifest ``digest``."""
    spec = {"id": turn_id, "calls": [{"id": "c", "tool": tool}]}
    return [
        TurnStarted(
            at=at, t=at - WALL, turn_id=turn_id, calls=("c",), deadline_ms=None, spec=spec,
            breakers={tool: breaker} if breaker is not None else None,
            manifests={tool: digest} if digest else None,
        ),
        CallSucceeded(
            at=at, t=at - WALL, tool_id=tool, call_id="c", turn_id=turn_id, attempts=1, latency_ms=1.0
        ),
    ]  # fmt: skip


def loaded(tool: str, at: float, digest: str, version: int, *, timeout_ms: float = 1000.0) -> ManifestLoaded:
    return ManifestLoaded(
        at=at, t=at - WALL, tool_id=tool, path=f"manifests/{tool}.yaml", version=version, digest=digest,
        previous_digest="old", manifest={"id": tool, "timeout_ms": timeout_ms},
    )  # fmt: skip


def states(store: TraceStore) -> dict[str, Any]:
    return {tool.tool_id: tool for tool in store.tool_states().tools}


# --- migration ------------------------------------------------------------------------------


def test_a_v1_store_is_migrated_and_keeps_its_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces.db"
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS[:1])
    with TraceStore(path) as v1:
        assert v1.schema_version == 1
        events = [*turn("t1", WALL, "flight_search"), transition(BreakerTripped, "hotel_search", WALL + 1,
                  BreakerState.FORCED_OPEN, actor="alice")]  # fmt: skip
        v1.write(events, manifests=[("d1", "flight_search", {"timeout_ms": 5})])
        before = v1.counts()
        assert "commands" not in v1.db.table_names()
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS)
    with pytest.raises(
        TraceStoreError, match=f"older than {SCHEMA_VERSION}: open it once read-write to migrate"
    ):
        TraceStore(path, readonly=True)

    with TraceStore(path) as store:
        assert store.schema_version == len(MIGRATIONS) == SCHEMA_VERSION
        assert store.counts() == {**before, "running": 0}
        assert list(store.events()) == events
        # Left running long ago by a writer that was not recorded (schema 1): finished on opening.
        assert store.load_turn("t1").row.outcome == "interrupted"
        assert store.manifest("d1") == {"timeout_ms": 5}
        migrated_at = f"SELECT value FROM meta WHERE key = 'schema_{SCHEMA_VERSION}_at'"
        assert store.db.execute(migrated_at).fetchone() is not None
        indexes = {i.name for t in ("commands", "events", "manifests") for i in store.db.table(t).indexes}
        assert {"commands_pending", "events_breaker_transitions", "events_manifest_changes",
                "manifests_by_tool"} <= indexes  # fmt: skip
        # The new indexes cover the rows written before the migration.
        assert states(store)["hotel_search"].breaker.state is BreakerState.FORCED_OPEN
        assert store.submit_command("reset", "hotel_search") == 1
    with TraceStore(path, readonly=True) as reader:
        assert reader.schema_version == SCHEMA_VERSION
        assert reader.command(1).status == "pending"


def test_a_v3_store_is_migrated_to_signed_commands_and_keeps_its_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "traces.db"
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS[:3])
    with TraceStore(path) as v3:
        assert v3.schema_version == 3
        v3.db.execute(
            "INSERT INTO commands (created_at, action, tool_id, actor, reason, status, applied_at, result,"
            " expires_at) VALUES (?, 'trip', 'flight_search', 'operator:alice', 'drill', 'applied', ?,"
            " 'FORCED_OPEN', ?), (?, 'reset', 'flight_search', 'operator:admin', '', 'pending', NULL, NULL,"
            " NULL)",
            (WALL, WALL + 0.2, WALL + 5, WALL + 1),
        )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            v3.db.execute("UPDATE commands SET status = 'refused' WHERE id = 2")
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS)
    with TraceStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        applied, pending = store.command(1), store.command(2)
        assert (applied.actor, applied.reason, applied.status, applied.result, applied.applied_at) == (
            "operator:alice", "drill", "applied", "FORCED_OPEN", WALL + 0.2
        )  # fmt: skip
        assert (applied.host, applied.pid, applied.mac) == (None, None, None), "sent unsigned, before v4"
        assert [c.id for c in store.pending_commands()] == [2], "the index of pending commands is back"
        assert store.acknowledge_command(pending.id, "refused", "unsigned") is True
        assert store.command(2).status == "refused"
        # Ids are never reused, even once the newest commands are deleted.
        store.db.execute("DELETE FROM commands")
        assert store.submit_command("trip", "hotel_search") == 3
        sql = store.db.execute("SELECT sql FROM sqlite_master WHERE name = 'commands'").fetchone()[0]
        assert "AUTOINCREMENT" in sql and "'refused'" in sql
        assert "commands_v3" not in store.db.table_names()


def test_the_partial_indexes_name_every_breaker_transition_and_manifest_change() -> None:
    """_v2 and _v6 spell the event types out (a migration must never change): the code must agree.
    _v2's transitions are those of its day; _v6's breaker states are every transition since, a
    restored override and a registration."""
    # dataclass(slots=True) makes each class twice: until the collector runs, the first may still be listed.
    transitions = list(dict.fromkeys(f"'{cls.event_type}'" for cls in BreakerTransitioned.__subclasses__()))
    of_v2 = [t for t in transitions if t != "'BreakerRestored'"]
    manifests = f"'{ManifestLoaded.event_type}', '{ManifestRemoved.event_type}'"
    assert (
        f"event_type IN ({', '.join(of_v2)})",
        f"event_type IN ({manifests})",
        f"event_type IN ({', '.join([*transitions, repr(ToolRegistered.event_type)])})",
    ) == (BREAKER_TRANSITIONS, MANIFEST_CHANGES, BREAKER_STATES)


def test_the_seed_and_tail_queries_use_their_indexes(store: TraceStore) -> None:
    def plan(sql: str) -> str:
        return " ".join(str(row[-1]) for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())

    assert "events_breaker_transitions" in plan(
        f"SELECT id FROM events WHERE tool_id = 'a' AND {BREAKER_TRANSITIONS} ORDER BY id DESC LIMIT 1"
    )
    assert "events_manifest_changes" in plan(
        f"SELECT id FROM events WHERE tool_id = 'a' AND {MANIFEST_CHANGES} ORDER BY id DESC LIMIT 1"
    )
    assert "events_breaker_states" in plan(
        f"SELECT id FROM events WHERE tool_id = 'a' AND {BREAKER_STATES} ORDER BY id DESC LIMIT 1"
    )
    assert "events_recording_starts" in plan(
        f"SELECT id FROM events WHERE {RECORDING_STARTS} ORDER BY id DESC LIMIT 1"
    )
    assert "commands_pending" in plan("SELECT id FROM commands WHERE status = 'pending' ORDER BY id LIMIT 5")
    assert "PRIMARY KEY" in plan("SELECT id FROM events WHERE id > 5 ORDER BY id LIMIT 10")


# --- commands -------------------------------------------------------------------------------


def test_commands_are_pending_in_order_until_acknowledged(store: TraceStore) -> None:
    first = store.submit_command("trip", "flight_search", reason="vendor down", now=WALL)
    second = store.submit_command("disable", "hotel_search", expires_in_s=5, now=WALL + 1)
    third = store.submit_command("reset", "flight_search", now=WALL + 2)
    assert [c.id for c in store.pending_commands()] == [first, second, third]
    assert [c.id for c in store.pending_commands(limit=2)] == [first, second]
    command = store.command(first)
    me = command_origin()
    assert (command.action, command.tool_id, command.actor, command.reason, command.host, command.pid) == (
        "trip", "flight_search", me.user, "vendor down", me.host, me.pid
    )  # fmt: skip
    assert (command.status, command.created_at, command.applied_at, command.result) == (
        "pending",
        WALL,
        None,
        None,
    )
    assert store.command(second).expires_at == WALL + 1 + 5
    assert store.command(first).expires_at == WALL + 30, "30 s unless the sender says otherwise"

    assert store.acknowledge_command(first, "applied", "FORCED_OPEN", now=WALL + 0.2) is True
    assert (
        store.acknowledge_command(second, "failed", "unknown tool 'hotel_search'\nregistered: none") is True
    )
    assert store.acknowledge_command(first, "failed", "again") is False, (
        "only a pending command is acknowledged"
    )
    applied, failed = store.command(first), store.command(second)
    assert (applied.status, applied.result, applied.applied_at) == ("applied", "FORCED_OPEN", WALL + 0.2)
    assert (failed.status, failed.result) == ("failed", "unknown tool 'hotel_search'\\nregistered: none")
    assert [c.id for c in store.pending_commands()] == [third]
    assert store.counts().get("commands") is None, "commands are not traces"


def test_bad_commands_are_refused(store: TraceStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="action must be one of trip, reset, disable, got 'explode'"):
        store.submit_command("explode", "flight_search")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a command needs a tool"):
        store.submit_command("trip", "")
    with pytest.raises(ValueError, match="status must be 'applied', 'failed' or 'refused'"):
        store.acknowledge_command(1, "pending", "x")  # type: ignore[arg-type]
    with pytest.raises(TraceStoreError, match=r"no command 42$"):
        store.command(42)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # the table itself refuses them too
        store.db.execute(
            "INSERT INTO commands (created_at, action, tool_id, actor) VALUES (0, 'explode', 'a', 'b')"
        )
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        store.db.execute(
            "INSERT INTO commands (created_at, action, tool_id, actor, status) VALUES (0, 'trip', 'a', 'b',"
            " 'done')"
        )
    with TraceStore(store.path, readonly=True) as reader:
        with pytest.raises(TraceStoreError, match="opened read-only: cannot submit commands"):
            reader.submit_command("trip", "flight_search")
        with pytest.raises(TraceStoreError, match="opened read-only: cannot acknowledge commands"):
            reader.acknowledge_command(1, "applied", "x")


# --- following the events -------------------------------------------------------------------


def test_events_after_an_id_come_in_id_order_a_page_at_a_time(store: TraceStore) -> None:
    events = [e for i in range(5) for e in turn(f"t{i}", WALL + i, "flight_search")]
    store.write(events[:4])
    store.write(events[4:])
    page = store.events_after(0, limit=3)
    assert [i for i, _ in page] == [1, 2, 3]
    assert [e for _, e in page] == events[:3]
    rest = store.events_after(3, limit=100)
    assert [e for _, e in rest] == events[3:]
    assert store.events_after(rest[-1][0]) == []
    with pytest.raises(ValueError, match="limit must be at least 1"):
        store.events_after(0, limit=0)


def test_an_unreadable_event_raises_or_is_skipped_and_reported(store: TraceStore) -> None:
    store.write(turn("t1", WALL, "flight_search"))
    store.db.execute("INSERT INTO events (event_type, at, t, data) VALUES ('FromTheFuture', 1.0, 1.0, '{}')")
    store.write(turn("t2", WALL + 1, "flight_search"))
    with pytest.raises(TraceStoreError, match="event 3 cannot be read: unknown event type 'FromTheFuture'"):
        store.events_after(0)
    skipped: list[tuple[int, str]] = []
    page = store.events_after(0, on_unreadable=lambda i, problem: skipped.append((i, problem)))
    assert [i for i, _ in page] == [1, 2, 4, 5]
    assert skipped == [
        (3, "FromTheFuture: unknown event type 'FromTheFuture' (written by a newer tripwire?)")
    ]


# --- what an attached console seeds from ----------------------------------------------------


def test_an_empty_store_has_no_tools_and_no_events(store: TraceStore) -> None:
    snapshot = store.tool_states()
    assert (snapshot.tools, snapshot.last_event_id, snapshot.newest_at, snapshot.newest_t) == (
        [],
        0,
        None,
        None,
    )


def test_the_newest_breaker_transition_gives_the_state(store: TraceStore) -> None:
    store.write(
        [
            transition(
                BreakerOpened, "flight_search", WALL, BreakerState.OPEN, failures=3, half_open_at=30.0
            ),
            transition(BreakerTripped, "hotel_search", WALL + 1, BreakerState.FORCED_OPEN, actor="alice"),
            transition(
                BreakerOpened, "car_rental", WALL + 2, BreakerState.OPEN, failures=5, half_open_at=32.0
            ),
            transition(BreakerClosed, "car_rental", WALL + 3, BreakerState.CLOSED),
        ]
    )
    snapshot = store.tool_states()
    assert snapshot.last_event_id == 4
    assert (snapshot.newest_at, snapshot.newest_t) == (WALL + 3, 3.0)
    tools = {t.tool_id: t.breaker for t in snapshot.tools}
    assert list(tools) == ["car_rental", "flight_search", "hotel_search"]
    flight = tools["flight_search"]
    assert flight is not None
    assert (flight.state, flight.consecutive_failures, flight.half_open_at, flight.at) == (
        BreakerState.OPEN, 3, 30.0, WALL
    )  # fmt: skip
    assert tools["hotel_search"].state is BreakerState.FORCED_OPEN  # type: ignore[union-attr]
    assert tools["car_rental"].state is BreakerState.CLOSED  # type: ignore[union-attr]
    assert tools["car_rental"].half_open_at is None  # type: ignore[union-attr]


def test_a_turn_that_started_after_the_transition_gives_the_state_it_saw(store: TraceStore) -> None:
    opened = {"state": "OPEN", "consecutive_failures": 4, "consecutive_successes": 0, "half_open_in_s": 12.5}
    store.write(
        [
            transition(BreakerTripped, "flight_search", WALL, BreakerState.FORCED_OPEN, actor="alice"),
            *turn("t1", WALL + 10, "flight_search", opened),  # e.g. the transition's event was pruned
        ]
    )
    breaker = states(store)["flight_search"].breaker
    assert (breaker.state, breaker.consecutive_failures, breaker.half_open_at, breaker.at) == (
        BreakerState.OPEN, 4, 10.0 + 12.5, WALL + 10
    )  # fmt: skip
    # A transition after the turn started wins again.
    store.write([transition(BreakerClosed, "flight_search", WALL + 11, BreakerState.CLOSED, failures=0)])
    assert states(store)["flight_search"].breaker.state is BreakerState.CLOSED
    # A tool seen only in turns without snapshots (recording off): no breaker known.
    store.write(turn("t2", WALL + 12, "hotel_search"))
    assert states(store)["hotel_search"].breaker is None


def test_the_manifest_is_the_newest_of_event_stored_version_and_turn(store: TraceStore) -> None:
    # The version in force when recording began: stored content, no version or file known.
    store.write([], manifests=[("d1", "flight_search", {"timeout_ms": 1000})])
    first = states(store)["flight_search"].manifest
    assert (first.digest, first.content, first.version, first.path) == (
        "d1",
        {"timeout_ms": 1000},
        None,
        None,
    )

    # A reload: the event says the version and the file.
    store.write(
        [loaded("flight_search", WALL + 10**9, "d2", 4)], manifests=[("d2", "flight_search", {"t": 2})]
    )
    second = states(store)["flight_search"].manifest
    assert (second.digest, second.version, second.path) == ("d2", 4, "manifests/flight_search.yaml")
    assert second.content == {"id": "flight_search", "timeout_ms": 1000.0}, "the event carries the manifest"

    # Reverted to d1 (already stored, so its row is old): the newer event wins.
    store.write([loaded("flight_search", WALL + 2 * 10**9, "d1", 5)])
    assert states(store)["flight_search"].manifest.digest == "d1"
    assert states(store)["flight_search"].manifest.version == 5

    # Removed: the defaults apply, no manifest version.
    removed = ManifestRemoved(at=WALL + 3 * 10**9, t=1.0, tool_id="flight_search", path="x.yaml", version=6)
    store.write([removed])
    assert states(store)["flight_search"].manifest is None


def test_a_turns_manifest_digest_finds_the_version_the_event_announced(store: TraceStore) -> None:
    store.write(
        [loaded("hotel_search", WALL, "h2", 3), *turn("t1", WALL + 5, "hotel_search", digest="h2")],
        manifests=[("h2", "hotel_search", {"timeout_ms": 7})],
    )
    # Stored after the turn started (a later batch): the digest is the same, the event names it.
    store.db.execute("UPDATE manifests SET first_seen = ?", (WALL + 9,))
    manifest = states(store)["hotel_search"].manifest
    assert (manifest.digest, manifest.version, manifest.path, manifest.at) == (
        "h2", 3, "manifests/hotel_search.yaml", WALL
    )  # fmt: skip


def test_the_snapshot_is_one_read_of_a_store_another_process_writes(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    with TraceStore(path) as writer, TraceStore(path, readonly=True) as reader:
        writer.write(turn("t1", WALL, "flight_search"), manifests=[("d1", "flight_search", {})])
        snapshot = reader.tool_states()
        assert [t.tool_id for t in snapshot.tools] == ["flight_search"] and snapshot.last_event_id == 2
        writer.write([transition(BreakerTripped, "hotel_search", WALL + 1, BreakerState.FORCED_OPEN)])
        ((_, tripped),) = reader.events_after(snapshot.last_event_id)
        assert isinstance(tripped, BreakerTripped) and tripped.tool_id == "hotel_search"
        assert [t.tool_id for t in reader.tool_states().tools] == ["flight_search", "hotel_search"]


# --- opening without creating ---------------------------------------------------------------


def test_create_false_never_creates_nor_adopts_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "traces.db"
    with pytest.raises(TraceStoreError) as info:
        TraceStore(path, create=False)
    assert str(info.value) == f"{path}: no trace store here"
    assert not path.parent.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(TraceStoreError, match="empty file, not a trace store"):
        TraceStore(empty, create=False)
    assert empty.read_bytes() == b""
    TraceStore(tmp_path / "t.db").close()
    with TraceStore(tmp_path / "t.db", create=False) as store:
        assert store.submit_command("trip", "a") == 1


# --- signed commands and the command key (schema 4) -----------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        "id = id + 100",
        "action = 'disable'",
        "tool_id = 'hotel_search'",
        "reason = 'something else'",
        "actor = 'mallory'",
        "host = 'elsewhere'",
        "pid = pid + 1",
        "created_at = created_at - 1",
        "expires_at = expires_at + 3000",
        "expires_at = NULL",
        "mac = upper(mac)",
    ],
)
def test_the_mac_covers_every_field_of_a_command(store: TraceStore, change: str) -> None:
    command_id = store.submit_command("trip", "flight_search", reason="drill", now=WALL)
    key = store.command_key()
    assert verify(key, store.command(command_id))
    store.db.execute(f"UPDATE commands SET {change}")
    (changed,) = store.command_history()
    assert not verify(key, changed)


def test_the_command_key_is_made_once_owner_only_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "traces.db.key"
    before = os.umask(0)
    try:
        key = load_or_create_key(path)
    finally:
        os.umask(before)
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == key == read_key(path)
    assert [p.name for p in tmp_path.iterdir()] == ["traces.db.key"], "no temporary file left"
    path.write_bytes(b"x" * 31)
    with pytest.raises(CommandKeyError, match="not a command key: 31 bytes, expected 32"):
        load_or_create_key(path)
    assert path.read_bytes() == b"x" * 31, "a bad key is refused, never replaced"


def test_a_key_that_is_not_a_file_of_ours_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.key"
    load_or_create_key(real)
    link = tmp_path / "traces.db.key"
    link.symlink_to(real)
    with pytest.raises(CommandKeyError) as info:
        load_or_create_key(link)
    assert str(info.value) == f"{link}: is a symbolic link, not a command key (left untouched)"
    directory = tmp_path / "other.db.key"
    directory.mkdir()
    with pytest.raises(CommandKeyError, match="not a regular file, so not a command key"):
        load_or_create_key(directory)
    with pytest.raises(CommandKeyError, match="no command key: no engine has served operator commands"):
        read_key(tmp_path / "missing.key")


def test_the_audit_lists_commands_newest_first_by_when_the_engine_answered(store: TraceStore) -> None:
    first = store.submit_command("trip", "flight_search", now=WALL)
    second = store.submit_command("reset", "flight_search", now=WALL + 10)
    forged = store.db.execute(
        "INSERT INTO commands (created_at, action, tool_id, actor) VALUES (0, 'disable', 'a', 'engine')"
    ).lastrowid
    assert forged is not None
    store.acknowledge_command(first, "applied", "FORCED_OPEN", now=WALL + 1)
    store.acknowledge_command(forged, "refused", "unsigned", now=WALL + 20)
    assert [c.id for c in store.command_history()] == [forged, second, first]
    assert [c.id for c in store.command_history(limit=1)] == [forged]
    # Sent "at 0", refused at WALL + 20: found by when the engine answered it.
    assert [c.id for c in store.command_history(since=WALL + 15)] == [forged]
    assert [c.id for c in store.command_history(since=WALL + 5, until=WALL + 15)] == [second]
    assert [c.id for c in store.command_history(until=WALL + 5)] == [first]
    with pytest.raises(ValueError, match="limit must be at least 1"):
        store.command_history(limit=0)


def test_a_service_says_whether_it_takes_commands(store: TraceStore) -> None:
    assert store.taking_commands() is None
    store.set_taking_commands(False)
    assert store.taking_commands() is False
    store.set_taking_commands(True)
    with TraceStore(store.path, readonly=True) as reader:
        assert reader.taking_commands() is True
        with pytest.raises(TraceStoreError, match="opened read-only"):
            reader.set_taking_commands(False)
