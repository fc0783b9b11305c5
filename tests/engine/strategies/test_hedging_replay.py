"""A recorded turn with hedged calls replays its races (issue 24 §2): the hedges start when they did
(fixed or p95 — a replay has no live p95, it starts the recorded hedges and no other), the same
attempt wins, the same attempts are cancelled; a changed outcome is a mismatch."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from engine import Engine, ToolManifest
from engine.events import Event, HedgeRaceWon
from engine.replay import Recording, replay
from engine.strategies.retry.policy import RetryPolicy
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted, after, hang, make_engine

pytestmark = pytest.mark.anyio


def lookup(engine: Engine) -> Any:
    contents = {engine.manifests.digest(t): engine.manifest(t).model_dump(mode="json") for t in engine.tools}
    return contents.get


def manifest(hedge_after_ms: float | str, max_hedges: int = 1) -> ToolManifest:
    return ToolManifest(
        id="read",
        side_effect="read_only",
        retry_policy=RetryPolicy(max_attempts=3, initial_delay_ms=20, jitter_percent=0),
        hedging={"hedge_after_ms": hedge_after_ms, "max_hedges": max_hedges},
    )


async def record(engine: Engine, *calls: str) -> list[Event]:
    result = await engine.run_turn(Turn([ToolCall(name, "read", {"n": name}) for name in calls]))
    return result.trace.events


def winners(events: list[Event]) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(e.call_id, e.attempt, e.cancelled) for e in events if isinstance(e, HedgeRaceWon)]


async def test_a_replay_reproduces_which_attempt_won_each_race() -> None:
    engine = make_engine(manifest(100, max_hedges=2), record=True)
    engine.register(
        "read",
        Scripted(
            hang, after(0.05, "hedge won"),  # a: the hedge wins
            after(0.15, "first won"), hang,  # b: the first attempt wins over its hedge
            after(0.3, ConnectionResetError("x")), after(0.02, ConnectionResetError("y")),  # c: 2 fails…
            after(0.25, "late"),  # …and loses to hedge 3
            after(0.05, ConnectionResetError("z")),  # d: fails before any hedge…
            hang, hang, after(0.01, "hedge 2 won"),  # …its retry's second hedge wins
        ),
    )  # fmt: skip
    events = []
    for name in ("a", "b", "c", "d"):  # one call after the other: the script's order is theirs
        events += await record(engine, name)
    turns: dict[str | None, list[Event]] = {}
    for event in events:
        turns.setdefault(getattr(event, "turn_id", None), []).append(event)
    recorded = [w for e in turns.values() for w in winners(e)]
    assert recorded == [("a", 2, (1,)), ("b", 1, (2,)), ("c", 3, ()), ("d", 4, (2, 3))]
    for trace in turns.values():
        report = await replay(Recording.from_events(trace, lookup(engine)))
        assert report.matches, (report.mismatches, report.unmatched, report.unused)
        assert report.result is not None
        assert winners(report.result.trace.events) == winners(trace)


async def test_a_p95_hedge_replays_at_its_recorded_time_without_a_live_p95() -> None:
    engine = make_engine(manifest("p95"), record=True)
    engine.register("read", Scripted(*[after(0.04, "warm")] * 20, hang, after(0.01, "hedge")))
    for _ in range(20):
        await engine.call("read", n="warm")
    await anyio.sleep(1.0)
    trace = await record(engine, "a")
    assert winners(trace) == [("a", 2, (1,))]
    recording = Recording.from_events(trace, lookup(engine))
    assert list(recording.hedges.values()) == [pytest.approx(0.04, rel=0.03)]
    report = await replay(recording)
    assert report.matches, (report.mismatches, report.unmatched, report.unused)
    assert report.result is not None
    assert winners(report.result.trace.events) == [("a", 2, (1,))]


async def test_a_changed_outcome_changes_the_winner_and_is_a_mismatch() -> None:
    engine = make_engine(manifest(100), record=True)
    engine.register("read", Scripted(after(0.3, "first"), after(0.05, "hedge")))
    trace = await record(engine, "a")
    recording = Recording.from_events(trace, lookup(engine))
    key = ("a", "read", 1)
    assert recording.attempts[key].outcome == "cut", "the loser never ended by itself"
    recording.attempts[key] = dataclasses.replace(
        recording.attempts[key], outcome="ok", value="first", ends_at_s=0.12
    )
    report = await replay(recording)
    assert not report.matches
    assert any(m.startswith("a/read race: recorded won by 2") for m in report.mismatches), report.mismatches
