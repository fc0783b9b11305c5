"""Retention: old turns leave the store by age and by size, in small steps, in the background."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine, ToolManifest
from engine.events import BreakerTripped, Event
from engine.store import RetentionPolicy, TraceRecorder, TraceStore
from engine.store.retention import RetentionSchedule, StepResult, parse_duration, parse_size
from engine.strategies.breaker.machine import BreakerState
from engine.turn import ToolCall, Turn
from tests.engine.conftest import WALL, Scripted
from tests.engine.test_store import turn_events

DAY = 86400.0


def outside(at: float) -> Event:
    """An event outside turns (an operator's action)."""
    return BreakerTripped(
        at=at, t=0.0, tool_id="hotel_search", from_state=BreakerState.CLOSED,
        to_state=BreakerState.FORCED_OPEN, consecutive_failures=0, actor="alice", reason="",
    )  # fmt: skip


def aged_store(store: TraceStore, days: int) -> list[str]:
    """One turn a day for ``days`` days before WALL, oldest first, and an event outside turns a day."""
    ids = [f"d{d}" for d in range(days, 0, -1)]
    for d, turn_id in zip(range(days, 0, -1), ids, strict=True):
        store.write([*turn_events(turn_id, WALL - d * DAY), outside(WALL - d * DAY)])
    return ids


def test_a_step_removes_the_oldest_turns_too_old_a_batch_at_a_time(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        ids = aged_store(store, 20)
        policy = RetentionPolicy(max_age_s=7 * DAY + 1, max_bytes=None)
        steps = []
        while True:
            step = store.prune_step(policy, limit=5, now=WALL)
            steps.append(step)
            if not step.more:
                break
        assert [s.turns for s in steps] == [5, 5, 3, 0][: len(steps)] and sum(s.turns for s in steps) == 13
        assert [r.turn_id for r in store.list_turns(limit=100).rows] == ids[13:][::-1]
        assert sum(s.outside for s in steps) == 13, "events outside turns go by age too"
        assert all(e.at >= WALL - 7 * DAY - 1 for e in store.events())
        assert store.prune_step(policy, limit=5, now=WALL) == StepResult(0, 0, False)


def test_over_the_size_limit_the_oldest_turns_go_until_the_data_fits(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        ids = aged_store(store, 200)
        full = store.used_bytes()
        policy = RetentionPolicy(max_age_s=None, max_bytes=full // 2)
        for _ in range(100):
            if not store.prune_step(policy, limit=20, now=WALL).more:
                break
        assert store.used_bytes() <= full // 2
        kept = [r.turn_id for r in store.list_turns(limit=1000).rows][::-1]
        assert 0 < len(kept) < 200 and kept == ids[-len(kept) :], "the newest are kept, the oldest went"
        assert len(kept) >= 40, "it stops once the data fits"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_recorder_applies_retention_in_small_steps_between_its_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine([ToolManifest(id="hotel_search")], rng=random.Random(1))
    engine.register("hotel_search", Scripted({"hotel": "Ritz"}))
    with TraceStore(tmp_path / "t.db") as store:
        aged_store(store, 60)  # a year and more before now: older than the policy's 30 days
        steps: list[float] = []
        real_step = store.prune_step

        def timed(*args: Any, **kwargs: Any) -> StepResult:
            started = time.perf_counter()
            try:
                return real_step(*args, **kwargs)
            finally:
                steps.append(time.perf_counter() - started)

        monkeypatch.setattr(store, "prune_step", timed)
        policy = RetentionPolicy(max_age_s=30 * DAY, first_batch=4)
        recorder = TraceRecorder(store, durability="batch", batch_ms=5, retention=policy).attach(engine)
        await engine.run_turn(Turn([ToolCall("h", "hotel_search")], id="now"))
        deadline = time.monotonic() + 20  # the writer thread works in real time: wait for it, bounded
        while store.list_turns(until=WALL).rows and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        await engine.run_turn(Turn([ToolCall("h", "hotel_search")], id="later"))
        recorder.close()
        remaining = {r.turn_id for r in store.list_turns(limit=100).rows}
        assert remaining == {"now", "later"}, "the old turns went, the new stayed"
        assert len(steps) >= 4, "several steps (4, then 8, 16, 32 turns as each is quick), not one"
        assert max(steps) < 2.0, "each step is one short transaction"
        assert recorder.retention is not None and recorder.retention.removed == 60


class _Steps:
    path = Path("fake")

    def __init__(self, clock: list[float], takes: list[float]) -> None:
        self.clock, self.takes, self.limits = clock, takes, []

    def prune_step(self, policy: RetentionPolicy, *, limit: int) -> StepResult:
        self.limits.append(limit)
        self.clock[0] += self.takes.pop(0)
        return StepResult(limit, 0, bool(self.takes))


def test_each_step_is_sized_to_take_about_step_s() -> None:
    now = [0.0]
    schedule = RetentionSchedule(RetentionPolicy(step_s=0.05, first_batch=100), clock=lambda: now[0])
    store = _Steps(now, [0.2, 0.2, 0.001, 0.001, 0.03])
    assert schedule.due()
    while schedule.step(store):  # type: ignore[arg-type]
        assert schedule.due(), "more to do: the next step is due at once"
    assert store.limits == [100, 50, 25, 50, 100], "halved when too slow, doubled when quick"
    assert not schedule.due(), "done: the next look is interval_s away"
    now[0] += 60
    assert schedule.due()


def test_policies_parse_from_the_command_line() -> None:
    assert RetentionPolicy.parse() == RetentionPolicy(max_age_s=7 * DAY, max_bytes=1 << 30)
    assert RetentionPolicy.parse("12h", "500MB") == RetentionPolicy(
        max_age_s=12 * 3600, max_bytes=500_000_000
    )
    assert RetentionPolicy.parse("off", "2GiB") == RetentionPolicy(max_age_s=None, max_bytes=2 << 30)
    assert parse_duration("30m") == 1800 and parse_duration("none") is None
    assert parse_size("1.5k") == 1500 and parse_size("64 MiB") == 64 << 20 and parse_size("off") is None
    with pytest.raises(ValueError, match="retention age 'soon'"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="retention size '1 parsec'"):
        parse_size("1 parsec")
    with pytest.raises(ValueError, match="max age must be positive"):
        RetentionPolicy(max_age_s=-1)
