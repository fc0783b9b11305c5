"""The console's view model: a pure fold of engine events, tested without Textual."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
import trio.testing

from console.model import (
    EVENTS_KEPT,
    RECENT_CALLS,
    SPARK_S,
    TURNS_KEPT,
    WINDOW_S,
    ConsoleModel,
    ManifestView,
    ToolSeed,
)
from engine import BreakerConfig, Engine, RetryPolicy, ToolManifest
from engine.demo import demo_engine
from engine.events import (
    AttemptFailed,
    BreakerReset,
    BreakerRestored,
    Event,
    ManifestRefused,
    RecordingStarted,
    ToolRegistered,
)
from engine.faults import FaultInjector
from engine.kinds import ErrorKind
from engine.metrics import LATENCY_PRECISION, ToolStats
from engine.outcomes import TurnResult
from engine.scenario import load_scenario, run_scenario
from engine.strategies.breaker.machine import BreakerState
from engine.turn import ToolCall, Turn
from tests.console import factory as f
from tests.console.demo_feed import live_demo

ROOT = Path(__file__).parents[2]


def fold(*events: Event, seeds: tuple[ToolSeed, ...] = ()) -> ConsoleModel:
    model = ConsoleModel(seeds)
    model.apply(events)
    return model


# --- breakers -------------------------------------------------------------------------------


def test_a_restarted_engine_replaces_the_board_with_its_own_tools_as_they_stood() -> None:
    """After a restart the board shows the new run: its tools' states from RecordingStarted (an
    earlier run's trip is not the engine's state), a tool registered later, an override restored;
    a tool of the earlier run only leaves the board."""
    before = fold(
        f.tripped("hotel_search", 1.0), f.opened("retired", 2.0), f.started("hotel_search", "c1", 3.0)
    )
    assert before.tools["hotel_search"].state is BreakerState.FORCED_OPEN
    restart = RecordingStarted(
        at=f.WALL + 10, t=10.0, host="vm", pid=7, keeps_overrides=True,
        breakers={"hotel_search": {"state": "CLOSED", "consecutive_failures": 0, "half_open_at": None},
                  "flights": {"state": "OPEN", "consecutive_failures": 5, "half_open_at": 40.0}},
    )  # fmt: skip
    changes = before.apply(
        [restart, ToolRegistered(at=f.WALL + 11, t=11.0, tool_id="late", state=BreakerState.CLOSED)]
    )
    tools = before.tools
    assert set(tools) == {"hotel_search", "flights", "late"}
    assert (tools["hotel_search"].state, tools["hotel_search"].in_flight) == (BreakerState.CLOSED, {})
    assert (tools["flights"].state, tools["flights"].half_open_at) == (BreakerState.OPEN, 40.0)
    assert changes.tools == {"hotel_search", "flights", "late"}
    restored = BreakerRestored(
        at=f.WALL + 12, t=12.0, tool_id="hotel_search", from_state=BreakerState.CLOSED,
        to_state=BreakerState.FORCED_OPEN, reason="maint", actor="operator:alice@h", consecutive_failures=0,
        set_at=f.WALL,
    )  # fmt: skip
    before.apply([restored])
    assert tools["hotel_search"].state is BreakerState.FORCED_OPEN
    restored_row = tools["hotel_search"].history[-1]
    assert restored_row.actor == "operator:alice@h"
    assert restored_row.reason.startswith("restored on restart (set ") and restored_row.reason.endswith(
        "): maint"
    )


def test_seeds_give_every_tool_its_breaker_and_manifest_before_any_event() -> None:
    manifest = ManifestView(
        "abc123", 4, "manifests/x.yaml", f.WALL, {"circuit_breaker": {"failure_threshold": 3}}
    )
    model = ConsoleModel([ToolSeed("x", BreakerState.OPEN, 3, 42.0, manifest), ToolSeed("y")])
    row = model.tools["x"].row(now=30.0)
    assert (row.state, row.consecutive_failures, row.failure_threshold, row.half_open_at) == (
        BreakerState.OPEN, 3, 3, 42.0,
    )  # fmt: skip
    assert model.tools["y"].row(0.0).state is BreakerState.CLOSED
    assert model.manifest_version == 4


def test_a_breaker_cycle_is_followed_and_kept_as_history() -> None:
    model = fold(
        f.opened("search", 10.0, timeout=30.0), f.half_opened("search", 40.0), f.closed("search", 41.0)
    )
    view = model.tools["search"]
    assert view.state is BreakerState.CLOSED and view.half_open_at is None
    assert [(h.from_state, h.to_state) for h in view.history] == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]


def test_an_open_breaker_shows_when_it_will_half_open() -> None:
    model = fold(f.opened("search", 10.0, timeout=30.0))
    assert model.tools["search"].row(now=12.5).half_open_at == 40.0
    model.apply([f.half_opened("search", 40.0)])
    assert model.tools["search"].row(now=40.1).half_open_at is None


def test_an_operator_trip_names_its_actor_and_reason() -> None:
    model = fold(f.tripped("search", 5.0, actor="operator:alice", reason="vendor maintenance"))
    view = model.tools["search"]
    assert view.state is BreakerState.FORCED_OPEN
    assert (view.history[-1].actor, view.history[-1].reason) == ("operator:alice", "vendor maintenance")


def test_consecutive_failures_come_from_the_engine_and_a_success_ends_the_streak() -> None:
    model = fold(
        f.failed_attempt("search", "c1", 1.0, streak=1),
        f.failed_attempt("search", "c1", 1.2, attempt=2, streak=2),
    )
    assert model.tools["search"].consecutive_failures == 2
    model.apply([f.succeeded("search", "c1", 1.5, attempts=3)])
    assert model.tools["search"].consecutive_failures == 0


def test_without_the_engines_count_the_streak_is_inferred_from_the_classification() -> None:
    model = fold(f.failed_attempt("search", "c1", 1.0), f.failed_attempt("search", "c1", 1.1, attempt=2))
    assert model.tools["search"].consecutive_failures == 2
    model.apply([f.failed_attempt("search", "c1", 1.2, attempt=3, transient=False)])
    assert model.tools["search"].consecutive_failures == 0, "a permanent error: the service answered"


# --- rolling figures ------------------------------------------------------------------------


def one_call(tool: str, call: str, t: float, end: Event) -> tuple[Event, Event]:
    return f.started(tool, call, t), end


def test_rolling_counts_are_the_engines_over_the_last_window() -> None:
    timeout = f.failed_attempt("a", "c4", 4.0, kind=ErrorKind.TIMEOUT, decision="escalate")
    model = fold(
        *one_call("a", "c1", 1.0, f.succeeded("a", "c1", 1.0)),
        *one_call("a", "c2", 2.0, f.call_failed("a", "c2", 2.0)),
        f.rejected("a", "c3", 3.0),
        *one_call("a", "c4", 4.0, timeout),
        *one_call("a", "c5", 70.0, f.succeeded("a", "c5", 70.0)),
    )
    early = model.tools["a"].row(now=5.0)
    w = early.window
    assert (w.calls, w.successes, w.failures, w.rejections, w.timeout_count) == (4, 1, 1, 1, 1)
    assert early.error_percent == pytest.approx(200 / 3)
    late = model.tools["a"].row(now=70.5)
    assert (late.window.successes, late.window.failures, late.error_percent) == (1, 0, 0.0)
    assert model.tools["a"].row(now=70.0 + WINDOW_S + 1).error_percent is None
    assert model.tools["a"].lifetime(now=200.0).successes == 2


def test_the_sparkline_counts_calls_per_second_over_two_minutes() -> None:
    events = [f.started("a", f"c{i}", 100.0 + i // 3) for i in range(9)]  # 3 calls a second
    model = fold(f.started("a", "x", 1.5), *events)
    spark = model.tools["a"].row(now=102.5).spark
    assert len(spark) == SPARK_S
    assert spark[-3:] == (3, 3, 3)
    assert spark[-102] == 1, "101 seconds ago: still on the sparkline"
    assert sum(model.tools["a"].row(now=102.5 + SPARK_S).spark) == 0
    assert model.tools["a"].row(now=102.5).rate == pytest.approx(9 / WINDOW_S)


def test_latency_percentiles_are_the_engines() -> None:
    rng = random.Random(3)
    latencies = [rng.uniform(10, 1000) for _ in range(2000)]
    model = fold(
        *(f.succeeded("a", f"c{i}", 50.0 + i / 400, latency_ms=ms) for i, ms in enumerate(latencies))
    )
    row = model.tools["a"].row(now=55.0)
    ordered = sorted(latencies)
    assert row.p50_ms == pytest.approx(ordered[999], rel=LATENCY_PRECISION)
    assert row.p99_ms == pytest.approx(ordered[1979], rel=LATENCY_PRECISION)


def test_a_row_is_reused_until_its_tool_changes_or_its_window_moves() -> None:
    model = fold(f.started("a", "c1", 1.0), f.succeeded("a", "c1", 1.0))
    view = model.tools["a"]
    first = view.row(now=1.0)
    assert view.row(now=1.5) is first, "nothing changed: the same row"
    model.apply([f.opened("a", 1.5)])
    second = view.row(now=1.5)
    assert second.state is BreakerState.OPEN and second.stats.life.circuit_breaker_opens == 1
    assert view.row(now=1.6) is second
    assert view.row(now=2.1).stats is not second.stats, "a second on, the window has moved"


def test_the_board_takes_busy_tools_figures_in_turns() -> None:
    model = ConsoleModel(ToolSeed(f"t{i}") for i in range(10))
    assert sum(r.stats.window.calls for r in model.rows(now=1.0)) == 0
    model.apply([f.started(f"t{i}", "c1", 1.0) for i in range(10)])
    rows = model.rows(now=1.0, budget=4)
    assert sum(r.stats.window.calls for r in rows) == 4, "four tools took their figures"
    rows = model.rows(now=1.0, budget=4)
    assert sum(r.stats.window.calls for r in rows) == 8, "then the four that waited longest"
    assert sum(r.stats.window.calls for r in model.rows(now=1.0, budget=4)) == 10
    assert all(r.stats.window.calls == 1 for r in model.rows(now=1.0, budget=0)), "all fresh: nothing to take"


# --- calls: in flight and timelines ---------------------------------------------------------


def test_attempts_in_flight_carry_their_deadline_until_they_end() -> None:
    model = fold(f.started("hotels", "c1", 10.0, timeout=30.0), f.started("hotels", "c2", 11.0, timeout=30.0))
    assert sorted(x.deadline for x in model.tools["hotels"].in_flight.values()) == [40.0, 41.0]
    model.apply([f.timed_out("hotels", "c1", 40.0), f.call_failed("hotels", "c1", 40.0)])
    assert [x.call_id for x in model.tools["hotels"].in_flight.values()] == ["c2"]
    model.apply([f.succeeded("hotels", "c2", 12.0)])
    assert not model.tools["hotels"].in_flight


def test_an_attempt_whose_end_was_lost_is_dropped_after_its_deadline() -> None:
    model = fold(f.started("hotels", "c1", 10.0, timeout=30.0))
    assert not model.expire(now=44.0).tools
    changes = model.expire(now=46.0)
    assert changes.tools == {"hotels"} and not model.tools["hotels"].in_flight


def test_a_retry_timeline_has_attempts_backoffs_and_the_outcome() -> None:
    model = fold(
        f.started("search", "c1", 1.0),
        f.failed_attempt("search", "c1", 1.1, delay_ms=100.0),
        f.started("search", "c1", 1.2, attempt=2),
        f.timed_out("search", "c1", 31.2, attempt=2),
        f.failed_attempt("search", "c1", 31.2, attempt=2, decision="retry", delay_ms=200.0),
        f.started("search", "c1", 31.4, attempt=3),
        f.succeeded("search", "c1", 31.6, attempts=3),
    )
    (timeline,) = model.tools["search"].timelines()
    assert [(a.attempt, a.outcome, a.delay_ms) for a in timeline.attempts] == [
        (1, "error", 100.0), (2, "timeout", 200.0), (3, "ok", None),
    ]  # fmt: skip
    assert (timeline.outcome, timeline.start, timeline.end) == ("succeeded", 1.0, 31.6)
    assert model.tools["search"].lifetime(now=32.0).retry_count == 2


def test_the_timeline_shows_the_newest_calls() -> None:
    model = fold(*(f.succeeded("a", f"c{i}", float(i)) for i in range(RECENT_CALLS + 5)))
    timelines = model.tools["a"].timelines()
    assert timelines[0].call_id == "c5" and len(timelines) == RECENT_CALLS


def test_errors_are_kept_newest_last_with_their_classification() -> None:
    model = fold(f.failed_attempt("a", "c1", 1.0, transient=False, decision="escalate"))
    (error,) = model.tools["a"].errors
    assert (error.kind, error.error_class, error.decision) == ("connection_reset", "permanent", "escalate")


# --- turns ----------------------------------------------------------------------------------

CALLS = [
    {"id": "flights", "tool": "flight_search"},
    {"id": "hotels", "tool": "hotel_search"},
    {"id": "compare", "tool": "compare_prices", "depends_on": ["flights", "hotels"], "default": []},
    {"id": "tours", "tool": "activity_search", "depends_on": ["hotels"], "optional": True},
    {"id": "book", "tool": "create_itinerary", "depends_on": ["hotels"]},
]


def test_a_turns_graph_shows_every_outcome_with_its_reason() -> None:
    model = fold(
        f.turn_started("t1", 0.0, CALLS),
        f.started("flight_search", "flights", 0.1, turn="t1"),
        f.rejected("flight_search", "flights", 0.1, turn="t1"),
        f.alternative("flight_search", "flights", 0.1, "t1", "flight_search_backup"),
        f.succeeded("flight_search_backup", "flights", 0.3, turn="t1"),
        f.started("hotel_search", "hotels", 0.1, turn="t1"),
        f.timed_out("hotel_search", "hotels", 30.1, turn="t1"),
        f.call_failed("hotel_search", "hotels", 30.1, turn="t1"),
        f.defaulted("compare_prices", "compare", 30.1, "t1", ("hotels",)),
        f.succeeded("compare_prices", "compare", 30.2, turn="t1"),
        f.skipped("activity_search", "tours", 30.1, "t1", ("hotels",)),
        f.escalated("create_itinerary", "book", 30.1, "t1", ("hotels",)),
    )
    turn = model.turns["t1"]
    labels = {call_id: node.label for call_id, node in turn.calls.items()}
    assert labels == {
        "flights": "alternative used", "hotels": "failed", "compare": "defaulted", "tours": "skipped",
        "book": "escalated",
    }  # fmt: skip
    assert "flight_search_backup" in turn.calls["flights"].reason
    assert "hotels failed" in turn.calls["book"].reason
    assert [n.call_id for n in turn.roots()] == ["flights", "hotels"]
    assert [n.call_id for n in turn.dependants("hotels")] == ["compare", "tours", "book"]
    assert model.current_turn() is turn and not turn.finished
    model.apply([f.turn_finished("t1", 30.3, {c["id"]: "succeeded" for c in CALLS}, outcome="degraded")])
    assert turn.finished and turn.outcome == "degraded"


def test_a_deadline_cuts_off_what_is_still_running() -> None:
    model = fold(
        f.turn_started("t1", 0.0, CALLS[:2], deadline_ms=5000),
        f.started("hotel_search", "hotels", 0.1, turn="t1"),
        f.deadline_exceeded("t1", 5.0, ("hotels",)),
    )
    assert model.turns["t1"].calls["hotels"].status == "timed_out"
    assert not model.tools["hotel_search"].in_flight
    (timeline,) = model.tools["hotel_search"].timelines()
    assert timeline.outcome == "cut" and timeline.attempts[0].outcome == "cut"


def test_a_rejected_call_reads_rejected_in_the_graph() -> None:
    model = fold(f.turn_started("t1", 0.0, CALLS[:1]), f.rejected("flight_search", "flights", 0.1, turn="t1"))
    assert model.turns["t1"].calls["flights"].label == "rejected"


def test_the_current_turn_is_the_newest_running_one_and_only_recent_turns_are_kept() -> None:
    model = fold(*(f.turn_started(f"t{i}", float(i), CALLS[:1]) for i in range(TURNS_KEPT + 3)))
    assert len(model.turns) == TURNS_KEPT and "t0" not in model.turns
    newest = f"t{TURNS_KEPT + 2}"
    model.apply([f.turn_finished(newest, 40.0, {"flights": "succeeded"})])
    current = model.current_turn()
    assert current is not None and current.turn_id == f"t{TURNS_KEPT + 1}"


# --- manifests and the event log ------------------------------------------------------------


def test_a_hot_reload_a_refusal_and_a_fix_are_all_recorded() -> None:
    model = fold(
        f.manifest_loaded("search", 0.0, version=1, digest="aaa", threshold=5),
        f.manifest_loaded("search", 5.0, version=2, digest="bbb", previous="aaa", threshold=3),
    )
    view = model.tools["search"]
    assert view.manifest is not None and (view.manifest.digest, view.failure_threshold) == ("bbb", 3)
    assert model.manifest_version == 2
    changes = model.apply([f.manifest_rejected("manifests/search.yaml", 9.0, "line 3: bad", kept="bbb")])
    assert changes.manifests and "manifests/search.yaml" in model.rejected
    assert view.manifest.digest == "bbb", "the last good version stays in force"
    model.apply([f.manifest_loaded("search", 12.0, version=3, digest="ccc", previous="bbb")])
    assert not model.rejected
    assert [c.what for c in model.manifest_changes] == ["loaded", "reloaded", "rejected", "reloaded"]
    assert model.manifest_change_count == 4
    model.apply([f.manifest_removed("search", 15.0, version=4)])
    assert view.manifest is None and model.manifest_version == 4


def test_the_event_log_keeps_the_newest_events_and_filters_them() -> None:
    model = fold(*(f.succeeded("a" if i % 2 else "b", f"c{i}", float(i)) for i in range(EVENTS_KEPT + 10)))
    rows = model.event_rows()
    assert len(rows) == EVENTS_KEPT and rows[0].seq == 11 and rows[-1].seq == EVENTS_KEPT + 10
    assert [r.seq for r in model.event_rows(since=EVENTS_KEPT + 8)] == [EVENTS_KEPT + 9, EVENTS_KEPT + 10]
    model.apply([f.opened("a", 9999.0)])
    assert [r.event_type for r in model.event_rows("opened")] == ["BreakerOpened"]
    assert model.event_rows("opened")[0].severity == "error"
    assert {r.tool_id for r in model.event_rows(tool_id="b")} == {"b"}


def test_changes_name_exactly_what_moved() -> None:
    model = fold(f.succeeded("a", "c1", 1.0), f.succeeded("b", "c1", 1.0))
    versions = {t: v.version for t, v in model.tools.items()}
    changes = model.apply([f.succeeded("a", "c2", 2.0), f.turn_started("t1", 2.0, CALLS[:1])])
    assert changes.tools == {"a"} and changes.turns == {"t1"} and changes.events == 2
    assert not changes.manifests
    assert model.tools["a"].version == versions["a"] + 1 and model.tools["b"].version == versions["b"]


# --- agreement with the engine --------------------------------------------------------------


def test_folding_the_live_demo_agrees_with_what_the_engine_decided() -> None:
    """The bundled live scenario on virtual time: every breaker state, every call outcome and
    every lifetime metric the model derives from the events is the engine's own."""
    scenario = load_scenario(ROOT / "manifests" / "demo" / "live.yaml")
    assert scenario.faults is not None
    engine = demo_engine(ROOT / "manifests", faults=FaultInjector(scenario.faults), seed=scenario.spec.seed)
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)
    model = ConsoleModel(ToolSeed(t) for t in engine.tool_ids)

    async def play() -> tuple[list[TurnResult], dict[str, BreakerState], dict[str, ToolStats]]:
        async with engine:
            results = await run_scenario(engine, scenario)
            return results, {t: engine.state(t) for t in engine.tool_ids}, engine.stats()

    results, states, stats = anyio.run(
        play, backend="trio", backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)}
    )
    model.apply(events)
    for tool_id in engine.tool_ids:
        assert model.tools[tool_id].state is states[tool_id], tool_id
        mine = model.tools[tool_id].metrics.snapshot(model.last_t or 0.0)
        assert mine.life == stats[tool_id].life, tool_id
    for result in results:
        turn = model.turns[result.turn_id]
        assert turn.outcome == result.outcome
        # The dependency view names a call refused before any attempt (the breaker, a bulkhead, a
        # rate limit: its kind begins its reason) "rejected"; the engine, failed.
        refused = ("circuit_open:", "bulkhead_full:", "throttled:")
        assert {c: n.label for c, n in turn.calls.items()} == {
            c: "rejected" if o.label == "failed" and not o.attempts and o.reason.startswith(refused)
            else o.label
            for c, o in result.outcomes.items()
        }  # fmt: skip
    history = [(h.from_state, h.to_state) for h in model.tools["flight_search"].history]
    assert history == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]


def test_the_live_demo_shows_every_behaviour_within_its_first_minute() -> None:
    """What `tripwire` promises on start: within a minute a breaker opens, half-opens and
    closes, retries back off, a timeout fires and cascades skip, escalate, default and reroute."""
    _, events = live_demo()
    first_minute = [e for e in events if e.t < 60.0]
    kinds = {type(e).__name__ for e in first_minute}
    assert {"BreakerOpened", "BreakerHalfOpened", "BreakerClosed", "ToolTimedOut", "CallSkipped",
            "CallEscalated", "DefaultUsed", "AlternativeUsed", "CallRejected"} <= kinds  # fmt: skip
    backoffs = [e.delay_ms for e in first_minute if isinstance(e, AttemptFailed) and e.decision == "retry"]
    assert backoffs and all(d is not None and d > 0 for d in backoffs)


def test_a_refused_manifest_file_is_listed_with_the_rejected_ones() -> None:
    refused = ManifestRefused(at=0.0, t=0.0, path="manifests/x.yaml", reason="not a regular file (a FIFO)")
    model = fold(refused)
    change = model.rejected["manifests/x.yaml"]
    assert (change.what, change.errors) == ("refused", ("not a regular file (a FIFO)",))


# --- resets (issue 13) ----------------------------------------------------------------------


def reset(tool: str, t: float, *, from_state: BreakerState, failures: int) -> BreakerReset:
    """An operator's reset as the engine announces it: with the count from before the reset."""
    return BreakerReset(
        at=f.WALL + t, t=t, tool_id=tool, from_state=from_state, to_state=BreakerState.CLOSED,
        reason="vendor fixed it", actor="operator:alice", consecutive_failures=failures,
    )  # fmt: skip


def test_a_reset_zeroes_the_failure_count_at_once() -> None:
    model = fold(f.opened("search", 10.0, streak=5))
    assert model.tools["search"].row(12.0).consecutive_failures == 5
    model.apply([reset("search", 13.0, from_state=BreakerState.OPEN, failures=5)])
    row = model.tools["search"].row(13.0)
    assert (row.state, row.consecutive_failures) == (BreakerState.CLOSED, 0), "not 5/5 until the next call"


def test_a_forced_open_breaker_reset_by_an_operator_shows_no_failures() -> None:
    model = fold(
        *(f.failed_attempt("search", "c1", 1.0 + i / 10, attempt=i + 1, streak=i + 1) for i in range(3)),
        replace(f.tripped("search", 2.0), consecutive_failures=3),  # a trip keeps the count
    )
    assert model.tools["search"].consecutive_failures == 3
    model.apply([reset("search", 3.0, from_state=BreakerState.FORCED_OPEN, failures=3)])
    assert model.tools["search"].row(3.0).consecutive_failures == 0


def test_a_call_whose_retry_a_breaker_refused_shows_as_the_failure_it_was() -> None:
    """Issue 22 §8: the retry of one call is refused by the breaker the other's failure opened.
    Both tools ran and failed: the view says so (the refused retry is the reason), never that the
    call was rejected or ended in ``circuit_open``."""
    svc = ToolManifest(
        id="svc",
        retry_policy=RetryPolicy(max_attempts=3, jitter_percent=0),
        circuit_breaker=BreakerConfig(failure_threshold=2),
    )
    engine = Engine([svc], rng=random.Random(7))

    async def down() -> None:
        raise Exception("svc is down")

    engine.register("svc", down)
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)

    async def play() -> TurnResult:
        return await engine.run_turn(Turn([ToolCall("a", "svc"), ToolCall("b", "svc")], id="t1"))

    result = anyio.run(
        play, backend="trio", backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)}
    )
    model = fold(*events, seeds=(ToolSeed("svc"),))
    turn = model.turns["t1"]
    assert turn.outcome == result.outcome == "degraded"
    assert {c: n.label for c, n in turn.calls.items()} == {"a": "failed", "b": "failed"}
    assert sorted(n.reason for n in turn.calls.values()) == [
        "execution_error: circuit breaker for svc is OPEN",
        "execution_error: retry refused: circuit breaker for svc is OPEN",
    ]
    assert [t.outcome for t in model.tools["svc"].timelines()] == ["failed", "failed"]
