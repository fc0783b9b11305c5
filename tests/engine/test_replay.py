"""Record and replay: a recorded turn replays on virtual time with every decision the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio.testing

from engine.demo import demo_engine
from engine.engine import Engine
from engine.events import Event
from engine.faults import FaultInjector
from engine.replay import RecordedAttempt, Recording, ReplayError, decisions, replay, replay_on_virtual_time
from engine.scenario import load_scenario, run_scenario
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted, after, make_engine

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]


def manifest_lookup(engine: Engine) -> Any:
    contents = {engine.manifests.digest(t): engine.manifest(t).model_dump(mode="json") for t in engine.tools}
    return contents.get


async def record_demo() -> tuple[Engine, list[list[Event]]]:
    scenario = load_scenario(ROOT / "manifests" / "demo" / "scenario.yaml")
    assert scenario.faults is not None
    engine = demo_engine(ROOT / "manifests", faults=FaultInjector(scenario.faults), seed=2025, record=True)
    async with engine:
        results = await run_scenario(engine, scenario)
    return engine, [r.trace.events for r in results]


async def test_every_turn_of_the_demo_scenario_replays_identically() -> None:
    engine, turns = await record_demo()
    lookup = manifest_lookup(engine)
    for events in turns:
        recording = Recording.from_events(events, lookup)
        report = await replay(recording)
        assert report.matches, (recording.turn_id, report.mismatches, report.unmatched, report.unused)
        assert report.decisions >= 3
        assert report.result is not None


async def test_a_changed_outcome_is_reported_as_a_mismatch() -> None:
    engine, turns = await record_demo()
    recording = Recording.from_events(turns[0], manifest_lookup(engine))  # plan-trip: flights retried twice
    key = ("flights", "flight_search", 1)
    first = recording.attempts[key]
    assert first.outcome == "error"
    recording.attempts[key] = dataclasses.replace(first, outcome="ok", value=[], classification=None)
    report = await replay(recording)
    assert not report.matches
    assert any(m.startswith("flights/flight_search attempt 1 failure: recorded") for m in report.mismatches)
    assert sorted(report.unused) == [
        "flights/flight_search attempt 2 (error)",
        "flights/flight_search attempt 3 (ok)",
    ], "strict: recorded attempts never asked for are reported"


async def test_a_missing_recorded_attempt_is_unmatched() -> None:
    engine, turns = await record_demo()
    recording = Recording.from_events(turns[0], manifest_lookup(engine))
    del recording.attempts[("flights", "flight_search", 3)]
    report = await replay(recording)
    assert report.unmatched[0] == "flights/flight_search attempt 3"
    assert not report.matches


async def test_a_turn_recorded_without_record_mode_cannot_be_replayed() -> None:
    engine = make_engine()
    engine.register("svc", Scripted("ok"))
    result = await engine.run_turn(Turn([ToolCall("a", "svc")]))
    with pytest.raises(ReplayError, match="was not recorded for replay"):
        Recording.from_events(result.trace.events, manifest_lookup(engine))


@pytest.mark.parametrize("anyio_backend", [None])  # runs its own event loops
def test_the_same_plan_and_seed_give_the_same_trace_apart_from_wall_clock(anyio_backend: None) -> None:
    def run_once() -> list[list[dict[str, Any]]]:
        clock = trio.testing.MockClock(autojump_threshold=0)
        _, turns = anyio.run(record_demo, backend="trio", backend_options={"clock": clock})
        stable = ("at", "timestamp")
        return [[{k: v for k, v in e.to_dict().items() if k not in stable} for e in t] for t in turns]

    first, second = run_once(), run_once()
    assert sum(len(t) for t in first) > 80
    assert first == second


async def test_recorded_attempts_carry_values_classifications_and_latencies() -> None:
    engine, turns = await record_demo()
    recording = Recording.from_events(turns[0], manifest_lookup(engine))
    hotels: RecordedAttempt = recording.attempts[("hotels", "hotel_search", 1)]
    assert (hotels.outcome, hotels.latency_s) == ("timeout", pytest.approx(30.0))
    ok = recording.attempts[("flights", "flight_search", 3)]
    assert ok.outcome == "ok" and isinstance(ok.value, list) and ok.value[0]["origin"] == "SFO"
    reset = recording.attempts[("flights", "flight_search", 1)]
    assert reset.classification is not None and reset.classification.kind == "connection_reset"
    assert reset.fault_type == "connection_reset"


def test_decision_facts_ignore_wall_clock_and_absolute_time() -> None:
    assert decisions([]) == {}


def shifted(events: list[Event], after_t: float, by_s: float) -> list[Event]:
    """The events, with everything after ``after_t`` happening ``by_s`` later (a late wake-up)."""
    return [dataclasses.replace(e, t=e.t + by_s) if e.t > after_t else e for e in events]  # type: ignore[type-var]


async def test_times_within_the_tolerance_match_and_beyond_it_do_not() -> None:
    engine, turns = await record_demo()
    lookup = manifest_lookup(engine)
    events = turns[0]  # plan-trip: flights fails twice, then succeeds
    first_failure = next(e.t for e in events if e.event_type == "ToolError")
    late = Recording.from_events(shifted(events, first_failure, 0.003), lookup)
    assert (await replay(late)).matches, "a 3 ms late wake-up is scheduling, not a divergence"
    later = Recording.from_events(shifted(events, first_failure, 0.2), lookup)
    report = await replay(later, tolerance_s=0.05)
    assert not report.matches
    assert any("attempt 2 start: recorded probe=False @" in m for m in report.mismatches)


@pytest.mark.parametrize("anyio_backend", [None])  # records on the real clock: its own event loop
def test_a_turn_recorded_on_a_real_clock_replays_as_matching(anyio_backend: None) -> None:
    """Real sleeps make every recorded time a little late; the replay still matches."""
    from engine import RetryPolicy, ToolManifest
    from engine.strategies.breaker.machine import BreakerConfig

    failures = {"flights": 2}

    async def flights(route: str) -> str:
        await anyio.sleep(0.003)
        if failures["flights"]:
            failures["flights"] -= 1
            raise ConnectionResetError("dropped")
        return f"flights {route}"

    async def hotels(city: str) -> str:
        await anyio.sleep(1)  # past its 40 ms timeout: timed out, twice
        return city

    async def backup(city: str) -> str:
        await anyio.sleep(0.002)
        return f"backup {city}"

    engine = Engine(
        [
            ToolManifest(id="flights", retry_policy=RetryPolicy(initial_delay_ms=10, jitter_percent=20)),
            ToolManifest(
                id="hotels", timeout_ms=40, alternatives=("backup",),
                retry_policy=RetryPolicy(max_attempts=2, initial_delay_ms=5),
                circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=60_000),
            ),
        ],
        record=True,
    )  # fmt: skip
    for name, fn in (("flights", flights), ("hotels", hotels), ("backup", backup)):
        engine.register(name, fn)
    turn = Turn(
        [ToolCall("f", "flights", {"route": "SFO-JFK"}), ToolCall("h", "hotels", {"city": "NYC"})],
        deadline_s=10,
    )

    async def record() -> list[Event]:
        async with engine:
            result = await engine.run_turn(turn)
        return result.trace.events

    events = anyio.run(record, backend="asyncio")
    assert [e.event_type for e in events].count("ToolError") == 4
    assert any(e.event_type == "AlternativeUsed" for e in events)
    report = replay_on_virtual_time(Recording.from_events(events, manifest_lookup(engine)))
    assert report.matches, (report.mismatches, report.unmatched, report.unused)
    assert report.decisions >= 10


async def test_an_interrupted_turn_is_refused_with_its_reason() -> None:
    engine = make_engine(record=True)
    engine.register("svc", Scripted(after(100, "late")))
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)
    with anyio.move_on_after(1):
        await engine.run_turn(Turn([ToolCall("a", "svc")]))
    with pytest.raises(ReplayError, match="was interrupted"):
        Recording.from_events(events, manifest_lookup(engine))
