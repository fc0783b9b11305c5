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
from engine.replay import RecordedAttempt, Recording, ReplayError, decisions, replay
from engine.scenario import load_scenario, run_scenario
from engine.turns import ToolCall, Turn
from tests.engine.conftest import Scripted, make_engine

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
