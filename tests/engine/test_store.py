"""The trace store: SQLite persistence of turns, events, attempts, breaker transitions and manifests.

Store-level tests write events directly. Engine-level tests run real turns on trio's MockClock
with a :class:`TraceRecorder` attached (its writer thread runs in real time, which is fine);
the few that need real waits on the writer thread run on asyncio.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import sqlite3
import stat
import typing
from dataclasses import fields
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from sqlite_utils import Database

from engine import BreakerConfig, Engine, RetryPolicy, ToolManifest
from engine.events import (
    EVENT_TYPES,
    AttemptFailed,
    AttemptStarted,
    BreakerOpened,
    BreakerTripped,
    CallSucceeded,
    Event,
    ManifestLoaded,
    RecordingStarted,
    ToolResultSent,
    TurnFinished,
    TurnStarted,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.store import (
    APPLICATION_ID,
    MIGRATIONS,
    ExportRefused,
    TraceRecorder,
    TraceStore,
    TraceStoreError,
    TurnRow,
)
from engine.store.codec import codec_of
from engine.strategies.breaker.machine import BreakerState
from engine.turn import ToolCall, Turn
from tests.engine.conftest import WALL, Scripted, make_engine

pytestmark = pytest.mark.anyio


# --- building events ----------------------------------------------------------------------


def _value_for(name: str, hint: Any, i: int) -> Any:
    """A non-default value of the field's type (with characters JSON must escape)."""
    union = typing.get_origin(hint) in (typing.Union, type(int | None))
    options = typing.get_args(hint) if union else (hint,)
    solid = [o for o in options if o is not type(None)]
    hint = solid[0] if solid else hint
    origin = typing.get_origin(hint) or hint
    if isinstance(origin, type) and issubclass(origin, Enum):
        members = list(origin)
        return members[i % len(members)]
    if origin is bool:
        return True
    if origin is int:
        return 40 + i
    if origin is float:
        return 1.25 + i
    if origin is str:
        return f'{name} "quoted" \\ é\n{i}'
    if origin is tuple:
        return ("a", f"b{i}")
    if origin is dict:
        return {"k": [1, 2.5, None, "é"], "n": {"deep": True}}
    return {"any": [i, "x"], "nested": {"ok": None}}


def every_event(turn_id: str | None = "t-all") -> list[Event]:
    """One event of every registered class, every field set to a non-default value."""
    events = []
    for i, cls in enumerate(EVENT_TYPES.values()):
        hints = typing.get_type_hints(cls)
        kwargs = {f.name: _value_for(f.name, hints[f.name], i) for f in fields(cls)}
        kwargs["at"], kwargs["t"] = WALL + i, 10.0 + i
        if "turn_id" in kwargs:
            kwargs["turn_id"] = turn_id
        events.append(cls(**kwargs))
    return events


def turn_events(
    turn_id: str,
    at: float,
    *,
    tools: tuple[str, ...] = ("flight_search", "hotel_search"),
    outcome: str | None = "ok",
    failures: int = 1,
) -> list[Event]:
    """A synthetic turn: per tool, ``failures`` failed attempts then a success; finished unless
    ``outcome`` is None (still running)."""
    calls = tuple(f"c{i}" for i in range(len(tools)))
    spec = {"id": turn_id, "calls": [{"id": c, "tool": tool} for c, tool in zip(calls, tools, strict=True)]}
    out: list[Event] = [
        TurnStarted(
            at=at, t=at - WALL, turn_id=turn_id, calls=calls, deadline_ms=60_000.0, spec=spec, seed="5"
        )
    ]
    for call, tool in zip(calls, tools, strict=True):
        for attempt in range(1, failures + 2):
            out.append(
                AttemptStarted(
                    at=at, t=0.0, tool_id=tool, call_id=call, turn_id=turn_id, attempt=attempt,
                    timeout_ms=1000.0, deadline=1.0,
                )
            )  # fmt: skip
            if attempt <= failures:
                out.append(
                    AttemptFailed(
                        at=at, t=0.0, tool_id=tool, call_id=call, turn_id=turn_id, attempt=attempt,
                        error="HTTP 503", error_type="HTTPError", kind=ErrorKind.SERVICE_UNAVAILABLE,
                        classification=ErrorClass.TRANSIENT, rule="status_code", reason="503",
                        status_code=503, circuit_breaker_state=BreakerState.CLOSED, retry_count=attempt - 1,
                        decision="retry", decision_reason="transient", latency_ms=5.0,
                    )
                )  # fmt: skip
        out.append(
            CallSucceeded(
                at=at, t=0.0, tool_id=tool, call_id=call, turn_id=turn_id, attempts=failures + 1,
                latency_ms=9.0, attempt_ms=3.0, value={"tool": tool},
            )
        )  # fmt: skip
    if outcome is not None:
        out.append(
            TurnFinished(
                at=at + 0.5, t=0.5, turn_id=turn_id, summary=f"{turn_id} done",
                statuses=dict.fromkeys(calls, "succeeded"), executed=len(calls), duration_ms=500.0,
                outcome=outcome,
            )
        )  # fmt: skip
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> typing.Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces" / "traces.db") as opened:
        yield opened


# --- round trips --------------------------------------------------------------------------


def test_every_event_type_round_trips(store: TraceStore) -> None:
    events = every_event()
    assert {type(e) for e in events} == set(EVENT_TYPES.values())
    store.write(events)
    assert list(store.events()) == events


def test_the_generated_row_encoder_writes_the_same_json_as_the_general_one() -> None:
    for event in every_event():
        codec = codec_of(type(event))
        fast = codec.row(event)
        assert fast is not None, type(event)
        assert fast == codec.slow_row(event), type(event)


def test_values_the_fast_encoder_does_not_expect_still_round_trip(store: TraceStore) -> None:
    odd = [
        AttemptStarted(
            at=WALL, t=math.inf, tool_id="a", call_id="c", turn_id=None, attempt=1, timeout_ms=1.0,
            deadline=math.inf,
        ),
        AttemptFailed(
            at=WALL, t=0.0, tool_id="a", call_id="c", turn_id=None, attempt=1, error="x", error_type="E",
            kind=ErrorKind.TIMEOUT, classification=ErrorClass.TRANSIENT, rule="r", reason="r",
            status_code="503",  # type: ignore[arg-type]  # not an int: the general encoder takes over
            circuit_breaker_state=BreakerState.OPEN, retry_count=0, decision="retry", decision_reason="",
        ),
        CallSucceeded(
            at=WALL, t=0.0, tool_id="a", call_id="c", attempts=1, latency_ms=1, attempt_ms=math.nan,
            value={"set": "kept", "tuple": [1, 2]},
        ),
    ]  # fmt: skip
    store.write(odd)
    back = list(store.events())
    assert back[0] == odd[0]
    assert back[1] == odd[1]
    assert math.isnan(back[2].attempt_ms)  # type: ignore[attr-defined]
    assert back[2].value == odd[2].value  # type: ignore[attr-defined]


def test_rows_from_older_or_newer_writers_still_decode(store: TraceStore) -> None:
    (failed,) = [e for e in turn_events("t1", WALL) if isinstance(e, AttemptFailed)][:1]
    store.write([failed])
    # An older writer did not know has_partial; a newer one added a field this code does not know.
    store.db.execute(
        "UPDATE events SET data = json_set(json_remove(data, '$.has_partial'), '$.added_later', 1)"
    )
    (back,) = store.events()
    assert back == failed


def test_a_write_is_one_transaction(store: TraceStore) -> None:
    with pytest.raises(TypeError):
        store.write([*turn_events("t1", WALL), object()])  # type: ignore[list-item]
    assert store.counts() == {
        "attempts": 0, "events": 0, "manifests": 0, "turn_tools": 0, "turns": 0, "running": 0
    }  # fmt: skip
    store.write(turn_events("t1", WALL))  # the store is still usable
    assert store.counts()["turns"] == 1


# --- turns from a real engine -------------------------------------------------------------


def travel_engine(**kwargs: Any) -> tuple[Engine, Turn]:
    """flight_search fails twice (its breaker opens) and hands over to its backup; hotels succeed;
    compare runs on both."""
    flights = ToolManifest(
        id="flight_search",
        retry_policy=RetryPolicy(initial_delay_ms=10, max_attempts=2),
        circuit_breaker=BreakerConfig(failure_threshold=2),
        alternatives=("flight_search_backup",),
    )
    engine = make_engine(flights, record=True, **kwargs)
    engine.register("flight_search", Scripted(ConnectionResetError("connection reset")))
    engine.register("flight_search_backup", Scripted(["SFO-JFK 08:15"]))
    engine.register("hotel_search", Scripted({"hotel": "Ritz"}))
    engine.register("compare_prices", Scripted(129.5))
    turn = Turn(
        [
            ToolCall("flights", "flight_search", {"origin": "SFO"}),
            ToolCall("hotels", "hotel_search", {"city": "New York"}),
            ToolCall("compare", "compare_prices", depends_on=["flights", "hotels"]),
        ],
        id="trip",
    )
    return engine, turn


async def test_a_real_turn_is_stored_as_it_happened(store: TraceStore) -> None:
    engine, turn = travel_engine()
    emitted: list[Event] = []
    engine.subscribe(emitted.append, direct=True)
    recorder = TraceRecorder(store).attach(engine)
    async with engine:
        result = await engine.run_turn(turn)
    recorder.close()

    stored = store.load_turn("trip")
    end = next(i for i, e in enumerate(emitted) if isinstance(e, TurnFinished))
    in_turn, after = emitted[: end + 1], emitted[end + 1 :]
    assert stored.events == in_turn, "every event, in the order it was emitted"
    # First every tool's breaker as recording started, then the manifest versions in force (an
    # engine announces only reloads).
    everything = list(store.events())
    started = everything[0]
    assert isinstance(started, RecordingStarted)
    assert started.breakers.keys() == set(engine.tool_ids)
    assert {b["state"] for b in started.breakers.values()} == {"CLOSED"}
    versions = len(engine.manifests.entries)
    assert [type(e) for e in everything[1 : versions + 1]] == [ManifestLoaded] * versions
    versions += 1
    # While run_turn waited for the commit, virtual time ran on: the breaker half-opened, outside the turn.
    assert everything[versions + len(in_turn) :] == after
    assert {id(e) for e in in_turn} == {id(e) for e in result.trace.events}, "the turn's trace, all of it"
    assert any(isinstance(e, BreakerOpened) for e in stored.events), "breaker transitions belong to the turn"
    assert stored.row == TurnRow(
        turn_id="trip",
        started_at=WALL,
        ended_at=WALL,
        duration_ms=pytest.approx(result.duration_s * 1000),
        outcome=result.outcome,
        summary=result.summary,
        calls=3,
        executed=result.executed,
        tools=("compare_prices", "flight_search", "flight_search_backup", "hotel_search"),
    )
    assert stored.spec == turn.spec
    assert stored.seed == next(e for e in emitted if isinstance(e, TurnStarted)).seed
    tools = {"flight_search", "flight_search_backup", "hotel_search", "compare_prices"}
    assert set(stored.breakers or {}) == set(stored.manifests or {}) == tools
    for tool, digest in (stored.manifests or {}).items():
        assert store.manifest(digest) == engine.manifest(tool).model_dump(mode="json")

    attempts = [(a.call_id, a.tool_id, a.attempt, a.outcome, a.kind, a.value) for a in stored.attempts]
    assert sorted(attempts, key=repr) == sorted(
        [
            ("flights", "flight_search", 1, "error", "connection_reset", None),
            ("flights", "flight_search", 2, "error", "connection_reset", None),
            ("flights", "flight_search_backup", 1, "ok", None, ["SFO-JFK 08:15"]),
            ("hotels", "hotel_search", 1, "ok", None, {"hotel": "Ritz"}),
            ("compare", "compare_prices", 1, "ok", None, 129.5),
        ],
        key=repr,
    )
    events_by_id = {versions + i + 1: e for i, e in enumerate(in_turn)}
    for a in stored.attempts:  # each attempt row points at the event it came from
        assert isinstance(events_by_id[a.event_id], AttemptFailed | CallSucceeded)
        assert events_by_id[a.event_id].call_id == a.call_id  # type: ignore[attr-defined]
    assert store.list_turns(tool="flight_search_backup").rows == [stored.row]


async def test_manifest_versions_are_snapshotted_at_attach_and_on_reload(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "flight_search.yaml").write_text(
        "tool:\n  id: flight_search\n  timeout_ms: 1000\n  side_effect: read_only\n"
    )
    engine = Engine(manifests)
    engine.register("flight_search", Scripted("ok"))
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store).attach(engine)
        first = engine.manifests.digest("flight_search")
        (manifests / "flight_search.yaml").write_text(
            "tool:\n  id: flight_search\n  timeout_ms: 2000\n  side_effect: read_only\n"
        )
        (loaded,) = engine.reload_manifests()
        assert isinstance(loaded, ManifestLoaded)
        recorder.close()
        assert (store.manifest(first) or {})["timeout_ms"] == 1000
        assert (store.manifest(loaded.digest) or {})["timeout_ms"] == 2000
        # The tools' breakers as recording started, the version in force then, and the reload.
        started, in_force, reloaded = store.events()
        assert isinstance(in_force, ManifestLoaded) and isinstance(reloaded, ManifestLoaded)
        assert isinstance(started, RecordingStarted)
        assert (in_force.digest, in_force.previous_digest) == (first, None)
        assert (reloaded.digest, reloaded.previous_digest) == (loaded.digest, first)
        assert store.manifest("nope") is None


def test_ensure_manifest_is_idempotent(store: TraceStore) -> None:
    assert store.ensure_manifest("abc", "flight_search", {"timeout_ms": 5}) is True
    assert store.ensure_manifest("abc", "flight_search", {"timeout_ms": 6}) is False
    assert store.manifest("abc") == {"timeout_ms": 5}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("durability", ["turn", "batch"])
async def test_durability_says_whether_run_turn_waits_for_the_commit(tmp_path: Path, durability: str) -> None:
    path = tmp_path / "t.db"
    engine, turn = travel_engine()
    with TraceStore(path) as store:
        # A batch interval far longer than the test: only the turn's end can make it durable.
        recorder = TraceRecorder(store, durability=durability, batch_ms=60_000).attach(engine)
        assert (engine.recorder is recorder) == (durability == "turn")
        result = await engine.run_turn(turn)
        with TraceStore(path, readonly=True) as reader:
            if durability == "turn":
                assert reader.load_turn("trip").row.outcome == result.outcome != "running"
                assert len(reader.load_turn("trip").events) == len(result.trace)
            else:
                with pytest.raises(TraceStoreError, match="no turn 'trip'"):
                    reader.load_turn("trip")
        assert recorder.flush(5)
        assert store.load_turn("trip").row.outcome == result.outcome
        assert recorder.stats.pending == 0
        recorder.close()
        assert engine.recorder is None


async def test_a_sink_never_raises_into_the_engine(
    store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, turn = travel_engine()

    def broken(tool_id: str) -> Any:
        raise RuntimeError("no manifest for you")

    monkeypatch.setattr(engine, "manifest", broken)  # every manifest snapshot fails
    recorder = TraceRecorder(store).attach(engine)
    result = await engine.run_turn(turn)
    assert result.outcome == "ok"
    assert engine.bus.direct_failures == 0
    recorder.close()
    assert store.load_turn("trip").row.outcome == "ok"
    assert store.counts()["manifests"] == 0


# --- browsing -----------------------------------------------------------------------------

OUTCOMES = ("ok", "degraded", "failed", "timed_out")


def browsing_store(store: TraceStore, n: int = 37) -> list[str]:
    """``n`` turns: every third shares its predecessor's start time (ties), outcomes cycle,
    every other uses car_rental; the last is still running. Returns ids newest first."""
    events: list[Event] = []
    for i in range(n):
        at = WALL + (i - i % 3) * 10
        tools = ("flight_search", "car_rental") if i % 2 else ("hotel_search",)
        outcome = None if i == n - 1 else OUTCOMES[i % 4]
        events += turn_events(f"t{i}", at, tools=tools, outcome=outcome)
    store.write(events[: len(events) // 2])
    store.write(events[len(events) // 2 :])
    return [f"t{i}" for i in sorted(range(n), key=lambda i: (WALL + (i - i % 3) * 10, i), reverse=True)]


def all_pages(store: TraceStore, **kwargs: Any) -> list[TurnRow]:
    rows: list[TurnRow] = []
    cursor = None
    while True:
        page = store.list_turns(limit=4, cursor=cursor, **kwargs)
        rows += page.rows
        assert len(page.rows) <= 4
        if page.next_cursor is None:
            return rows
        cursor = page.next_cursor


def test_list_turns_pages_newest_first_without_duplicates_or_gaps(store: TraceStore) -> None:
    expected = browsing_store(store)
    rows = all_pages(store)
    assert [r.turn_id for r in rows] == expected
    assert rows[0].outcome == "running" and rows[0].ended_at is None
    assert store.list_turns(limit=len(expected)).next_cursor is None
    assert [r.turn_id for r in store.list_turns(limit=3).rows] == expected[:3]


@pytest.mark.parametrize(
    ("filters", "keep"),
    [
        ({"outcome": "degraded"}, lambda i: i % 4 == 1 and i != 36),
        ({"tool": "car_rental"}, lambda i: i % 2 == 1),
        ({"tool": "hotel_search", "outcome": "ok"}, lambda i: i % 2 == 0 and i % 4 == 0 and i != 36),
        ({"since": WALL + 90, "until": WALL + 240}, lambda i: 90 <= (i - i % 3) * 10 < 240),
        ({"outcome": "running"}, lambda i: i == 36),
    ],
)
def test_list_turns_filters_by_outcome_tool_and_time(
    store: TraceStore, filters: dict[str, Any], keep: Any
) -> None:
    expected = [t for t in browsing_store(store) if keep(int(t[1:]))]
    assert expected
    assert [r.turn_id for r in all_pages(store, **filters)] == expected


def test_keyset_pages_stay_put_while_new_turns_arrive(store: TraceStore) -> None:
    expected = browsing_store(store)
    first = store.list_turns(limit=5)
    store.write(turn_events("newest", WALL + 10_000))
    second = store.list_turns(limit=5, cursor=first.next_cursor)
    assert [r.turn_id for r in first.rows + second.rows] == expected[:10]


def test_list_turns_rejects_a_bad_cursor_on_one_line(store: TraceStore) -> None:
    with pytest.raises(TraceStoreError, match=r"invalid cursor 'nonsense'$"):
        store.list_turns(cursor="nonsense")


def test_load_turn_returns_every_event_in_order(store: TraceStore) -> None:
    browsing_store(store)
    expected = turn_events("t5", WALL + 30, tools=("flight_search", "car_rental"), outcome="degraded")
    stored = store.load_turn("t5")
    assert stored.events == expected
    assert stored.row.outcome == "degraded" and stored.row.tools == ("car_rental", "flight_search")
    assert [(a.tool_id, a.attempt, a.outcome) for a in stored.attempts] == [
        ("flight_search", 1, "error"), ("flight_search", 2, "ok"),
        ("car_rental", 1, "error"), ("car_rental", 2, "ok"),
    ]  # fmt: skip
    assert list(store.events(turn_id="t5")) == expected
    with pytest.raises(TraceStoreError) as info:
        store.load_turn("nope")
    assert str(info.value) == f"{store.path}: no turn 'nope'"


def test_events_after_a_turns_end_still_belong_to_it(store: TraceStore) -> None:
    answer = ToolResultSent(
        at=WALL + 1, t=1.0, tool_id="flight_search", call_id="c0", turn_id="t1", content="ok", is_error=False,
        status="succeeded",
    )  # fmt: skip
    store.write([*turn_events("t1", WALL), answer])  # one batch: the turn's row is not stored yet
    late = ToolResultSent(
        at=WALL + 2, t=2.0, tool_id="hotel_search", call_id="c1", turn_id="t1", content="late",
        is_error=False, status="succeeded",
    )  # fmt: skip
    store.write([late])
    assert store.load_turn("t1").events[-2:] == [answer, late]


def test_a_repeated_turn_id_keeps_the_earlier_turn_under_a_new_name(store: TraceStore) -> None:
    store.write(turn_events("t1", WALL, outcome="failed"))
    store.write([*turn_events("t1", WALL + 5, outcome="ok"), *turn_events("t1", WALL + 9, outcome=None)])
    rows = store.list_turns().rows
    assert [(r.turn_id, r.outcome) for r in rows] == [("t1", "running"), ("t1~2", "ok"), ("t1~1", "failed")]
    assert [e.at for e in store.load_turn("t1~1").events][:1] == [WALL]
    assert all(e.turn_id == "t1" for e in store.load_turn("t1~1").events), "events keep the id emitted"  # type: ignore[attr-defined]
    assert len(store.load_turn("t1").events) == len(turn_events("t1", 0, outcome=None))


def test_events_outside_turns_are_kept_and_found_by_time(store: TraceStore) -> None:
    operator = BreakerTripped(
        at=WALL + 100, t=1.0, tool_id="flight_search", from_state=BreakerState.CLOSED,
        to_state=BreakerState.FORCED_OPEN, reason="maintenance", actor="alice", consecutive_failures=0,
    )  # fmt: skip
    store.write([*turn_events("t1", WALL), operator, *turn_events("t2", WALL + 200)])
    assert list(store.events(since=WALL + 50, until=WALL + 150)) == [operator]
    assert store.counts() == {
        "attempts": 8, "events": 21, "manifests": 0, "turn_tools": 4, "turns": 2, "running": 0
    }  # fmt: skip


def test_a_time_range_holds_whole_turns_and_the_events_outside_turns_in_time_order(store: TraceStore) -> None:
    def tripped(at: float, actor: str) -> BreakerTripped:
        return BreakerTripped(
            at=at, t=0.0, tool_id="flight_search", from_state=BreakerState.CLOSED,
            to_state=BreakerState.FORCED_OPEN, reason="drill", actor=actor, consecutive_failures=0,
        )  # fmt: skip

    before, during, after = (
        tripped(WALL + 5, "early"),
        tripped(WALL + 20.2, "alice"),
        tripped(WALL + 40, "late"),
    )
    t1, t2, t3 = turn_events("t1", WALL), turn_events("t2", WALL + 20), turn_events("t3", WALL + 30)
    # t2 finishes at WALL + 20.5, after the range ends: it started inside, so it comes whole.
    store.write([*t1, before, *t2, during, *t3, after])
    selected = list(store.events(since=WALL + 10, until=WALL + 20.4))
    assert selected == [*t2, during]
    assert list(store.events(since=WALL + 10)) == [*t2, during, *t3, after]
    assert list(store.events(since=WALL + 10, chunk=1)) == [*t2, during, *t3, after], "pages join up"
    assert list(store.events(until=WALL + 10)) == [*t1, before]


def test_time_ranges_are_read_through_indexes(store: TraceStore) -> None:
    store.write(turn_events("t1", WALL))
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    list(store.events(since=WALL - 1, until=WALL + 1))
    store._conn.set_trace_callback(None)
    ranged = [sql for sql in statements if "started_at >=" in sql or "at >=" in sql]
    assert len(ranged) == 2, statements
    for sql in ranged:
        plan = " ".join(row[3] for row in store._conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "INDEX" in plan and "TEMP B-TREE" not in plan, (sql, plan)


# --- export and retention -----------------------------------------------------------------


def test_export_a_turn_as_jsonl(store: TraceStore) -> None:
    engine_like = turn_events("t1", WALL)
    store.write([*engine_like, *turn_events("t2", WALL + 10)])
    out = io.StringIO()
    assert store.export_jsonl(out, turn_id="t1") == len(engine_like)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [json.loads(json.dumps(e.to_dict())) for e in engine_like]


def test_export_a_time_range_to_an_owner_only_file(store: TraceStore, tmp_path: Path) -> None:
    store.write([*turn_events("t1", WALL), *turn_events("t2", WALL + 10), *turn_events("t3", WALL + 20)])
    path = tmp_path / "export.jsonl"
    count = store.export_jsonl(path, since=WALL + 5, until=WALL + 15)
    lines = path.read_text().splitlines()
    assert count == len(lines) == len(turn_events("t2", 0))
    assert {json.loads(line)["turn_id"] for line in lines} == {"t2"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_export_of_an_unknown_turn_is_refused(store: TraceStore, tmp_path: Path) -> None:
    store.write(turn_events("t1", WALL))
    with pytest.raises(TraceStoreError) as info:
        store.export_jsonl(tmp_path / "out.jsonl", turn_id="t9")
    assert str(info.value) == f"{store.path}: no turn 't9'"
    assert not (tmp_path / "out.jsonl").exists()


def test_export_never_writes_onto_the_store_it_reads(store: TraceStore, tmp_path: Path) -> None:
    store.write(turn_events("t1", WALL))
    before = store.path.read_bytes()
    (tmp_path / "alias.db").symlink_to(store.path)
    for target in (store.path, tmp_path / "alias.db", store.path.parent / ".." / "traces" / "traces.db"):
        with pytest.raises(ExportRefused, match="that is the trace store being exported"):
            store.export_jsonl(target, force=True)
    assert store.path.read_bytes() == before
    assert store.list_turns().rows[0].turn_id == "t1"


def test_export_replaces_an_existing_file_only_when_forced(store: TraceStore, tmp_path: Path) -> None:
    store.write(turn_events("t1", WALL))
    kept = tmp_path / "kept.jsonl"
    kept.write_text("precious\n")
    with pytest.raises(ExportRefused, match="already exists; pass force=True to replace it"):
        store.export_jsonl(kept)
    assert kept.read_text() == "precious\n"
    assert store.export_jsonl(kept, force=True) == len(turn_events("t1", WALL))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl", "traces"], "no temporary file left"


@pytest.mark.parametrize("cursor", ["nan:1", "inf:1", "1.0:99999999999999999999999", "1.0:-1", "x", ":"])
def test_a_malformed_cursor_is_refused_in_one_line(store: TraceStore, cursor: str) -> None:
    with pytest.raises(TraceStoreError, match="invalid cursor"):
        store.list_turns(cursor=cursor)


def test_time_bounds_take_datetimes(store: TraceStore) -> None:
    store.write([*turn_events("t1", WALL), *turn_events("t2", WALL + 60)])
    since = datetime.fromtimestamp(WALL + 30, tz=UTC)
    assert [r.turn_id for r in store.list_turns(since=since).rows] == ["t2"]
    assert {e.turn_id for e in store.events(until=since)} == {"t1"}  # type: ignore[attr-defined]


def test_prune_by_age(store: TraceStore) -> None:
    outside = BreakerTripped(
        at=WALL, t=0.0, tool_id="x", from_state=BreakerState.CLOSED, to_state=BreakerState.FORCED_OPEN,
        reason="", actor="op", consecutive_failures=0,
    )  # fmt: skip
    store.ensure_manifest("m1", "x", {})
    store.write([outside, *(e for i in range(10) for e in turn_events(f"t{i}", WALL + i * 100))])
    removed = store.prune(older_than_s=450, now=WALL + 1000)
    assert removed == 6  # started before WALL + 550: t0..t5
    assert [r.turn_id for r in store.list_turns().rows] == ["t9", "t8", "t7", "t6"]
    counts = store.counts()
    assert counts["events"] == 4 * len(turn_events("t", 0))
    assert counts["attempts"] == 4 * 4 and counts["turn_tools"] == 4 * 2 and counts["manifests"] == 1
    with pytest.raises(TraceStoreError):
        store.load_turn("t0")


def test_prune_by_count(store: TraceStore) -> None:
    store.write([e for i in range(10) for e in turn_events(f"t{i}", WALL + i)])
    assert store.prune(keep=3) == 7
    assert [r.turn_id for r in store.list_turns().rows] == ["t9", "t8", "t7"]
    assert store.counts()["events"] == 3 * len(turn_events("t", 0))
    assert store.prune(keep=3) == 0
    assert store.prune() == 0


# --- files: creation, refusal, migrations -------------------------------------------------


def test_a_new_store_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "traces.db"
    with TraceStore(path) as store:
        store.write(turn_events("t1", WALL))
        for name in (path, path.with_name("traces.db-wal"), path.with_name("traces.db-shm")):
            assert stat.S_IMODE(name.stat().st_mode) == 0o600, name
        conn = store.db.conn
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.schema_version == len(MIGRATIONS)
        assert set(store.db.table_names()) | set(store.db.view_names()) >= {  # attempts: a view since v5
            "turns",
            "turn_tools",
            "events",
            "attempts",
            "manifests",
            "meta",
        }


def test_an_empty_file_is_adopted_as_an_interrupted_creation(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    path.touch()
    with TraceStore(path) as store:
        store.write(turn_events("t1", WALL))
    with TraceStore(path, readonly=True) as store:
        assert store.load_turn("t1").row.outcome == "ok"


def test_readonly_never_creates(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "traces.db"
    with pytest.raises(TraceStoreError) as info:
        TraceStore(path, readonly=True)
    assert str(info.value) == f"{path}: no trace store here"
    assert not path.parent.exists()


def test_readonly_cannot_write(tmp_path: Path) -> None:
    TraceStore(tmp_path / "t.db").close()
    with TraceStore(tmp_path / "t.db", readonly=True) as store:
        with pytest.raises(TraceStoreError, match="read-only"):
            store.write(turn_events("t1", WALL))
        with pytest.raises(TraceStoreError, match="read-only"):
            store.prune(keep=1)


def _random(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.close()


def _other_application(path: Path) -> None:
    _foreign(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
    conn.close()


def _filled(path: Path) -> None:
    with TraceStore(path) as store:
        store.write([e for i in range(300) for e in turn_events(f"t{i}", WALL + i, tools=("a", "b", "c"))])


def _truncated(path: Path) -> None:
    _filled(path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _garbled(path: Path) -> None:
    _filled(path)
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 8192)


def _newer(path: Path) -> None:
    _filled(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_random, "not a SQLite database, so not a trace store"),
        (_foreign, "a SQLite database that is not a trace store (tables: customers)"),
        (_other_application, "a SQLite database of another application (application_id 0x4d2)"),
        (_truncated, "corrupt: database disk image is malformed"),
        (_garbled, "corrupt: "),
        (_newer, f"schema version 99 is newer than this tripwire supports ({len(MIGRATIONS)})"),
    ],
)
@pytest.mark.parametrize("readonly", [False, True])
def test_a_file_that_is_not_a_healthy_store_is_refused_and_left_untouched(
    tmp_path: Path, make: Any, problem: str, readonly: bool
) -> None:
    path = tmp_path / "traces.db"
    make(path)
    before = sha(path)
    with pytest.raises(TraceStoreError) as info:
        TraceStore(path, readonly=readonly)
    message = str(info.value)
    assert message.startswith(f"{path}: {problem}") and message.endswith(" (left untouched)")
    assert "\n" not in message
    assert sha(path) == before


def test_a_store_locked_by_another_writer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    _filled(path)
    before = sha(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(TraceStoreError) as info:
            TraceStore(path, busy_timeout_ms=50)
        problem = "locked by another writer (still busy after 0.05s)"
        assert str(info.value) == f"{path}: {problem} (left untouched)"
        with TraceStore(path, readonly=True, busy_timeout_ms=50) as reader:  # WAL: readers still read
            assert reader.load_turn("t0").row.outcome == "ok"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sha(path) == before


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceStoreError) as info:
        TraceStore(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, not a trace store (left untouched)"


def test_a_path_under_a_file_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    path = tmp_path / "file" / "traces.db"
    with pytest.raises(TraceStoreError) as info:
        TraceStore(path)
    assert str(info.value) == f"{path}: cannot create: {path.parent} is not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file: permissions cannot refuse it")
def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    _filled(path)
    path.chmod(0o000)
    try:
        with pytest.raises(TraceStoreError) as info:
            TraceStore(path, readonly=True)
        assert str(info.value) == f"{path}: cannot read: Permission denied (left untouched)"
    finally:
        path.chmod(0o600)


def test_readonly_refuses_an_older_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces.db"
    _filled(path)
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", [*MIGRATIONS, lambda db: None])
    newer = len(MIGRATIONS) + 1
    with pytest.raises(TraceStoreError, match=f"older than {newer}: open it once read-write to migrate"):
        TraceStore(path, readonly=True)


def test_migrations_run_once_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces.db"
    with TraceStore(path) as store:
        store.write(turn_events("t1", WALL))
        assert store.schema_version == len(MIGRATIONS)
    applied: list[int] = []

    def v2(db: Database) -> None:
        applied.append(1)
        db.table("turns").add_column("note", str)
        db.execute("UPDATE turns SET note = 'migrated'")

    monkeypatch.setattr("engine.store.schema.MIGRATIONS", [*MIGRATIONS, v2])
    with TraceStore(path) as store:
        assert store.schema_version == len(MIGRATIONS) + 1
        assert store.db.execute("SELECT note FROM turns").fetchall() == [("migrated",)]
        assert store.load_turn("t1").row.outcome == "ok"
    with TraceStore(path) as store:
        assert store.schema_version == len(MIGRATIONS) + 1
    assert applied == [1]


def test_a_failing_migration_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces.db"
    _filled(path)
    before = sha(path)

    def v2(db: Database) -> None:
        db.table("turns").add_column("note", str)
        raise RuntimeError("half way")

    monkeypatch.setattr("engine.store.schema.MIGRATIONS", [*MIGRATIONS, v2])
    with pytest.raises(TraceStoreError) as info:
        TraceStore(path)
    assert str(info.value) == (
        f"{path}: migration to schema version {len(MIGRATIONS) + 1} failed: RuntimeError: half way"
        " (left untouched)"
    )
    assert sha(path) == before
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS)
    with TraceStore(path) as store:
        assert store.schema_version == len(MIGRATIONS)
        assert "note" not in store.db.table("turns").columns_dict
