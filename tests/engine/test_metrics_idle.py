"""Idle tools cost next to nothing: rolling windows are allocated on the first hook, and an idle
tool's stats are the zeros they always were."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from engine import Engine, ToolManifest
from engine.metrics.tally import _EMPTY, Counts, MetricsRegistry, ToolMetrics, ToolStats
from tests.engine.conftest import new_engine

HOOKS = (
    lambda m, t: m.on_call(t),
    lambda m, t: m.on_rejected(t),
    lambda m, t: m.on_retry(t),
    lambda m, t: m.on_attempt_failed(t, 0.01, transient=True, timed_out=True),
    lambda m, t: m.on_attempt_failed(t, 0.01, transient=False, timed_out=False),
    lambda m, t: m.on_success(t, 0.02, retried=True),
    lambda m, t: m.on_partial_success(t),
    lambda m, t: m.on_failure(t),
    lambda m, t: m.on_skipped(t),
    lambda m, t: m.on_breaker_opened(t),
)


def zero_stats(tool_id: str, window_s: int, history_s: int) -> ToolStats:
    """What a tool with no hook reported when every tool pre-allocated its ring."""
    return ToolStats(
        tool_id=tool_id,
        life=Counts(),
        window=Counts(),
        window_s=window_s,
        rate_per_s=0.0,
        sparkline=(0,) * history_s,
    )


async def not_called() -> int:
    raise AssertionError("an idle tool is never called")


async def answer() -> int:
    return 42


def bytes_held(build: object) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert callable(build)
        kept = build()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del kept
    return held


@pytest.mark.parametrize(("window_s", "history_s"), [(10, 120), (1, 1), (30, 5), (2, 5)])
@pytest.mark.parametrize("now", [0.0, 5.0, 1e9 + 0.5])
def test_an_idle_tool_allocates_no_window_and_reports_the_zeros_it_always_did(
    window_s: int, history_s: int, now: float
) -> None:
    m = ToolMetrics("idle", window_s=window_s, history_s=history_s)
    stats = m.snapshot(now)
    assert stats == zero_stats("idle", window_s, history_s)
    assert stats.to_dict() == zero_stats("idle", window_s, history_s).to_dict()
    assert m._ring is None, "no rolling window before the first hook"
    assert m._cur is _EMPTY and m._life is _EMPTY, "no tally of its own either"


def test_an_idle_tool_holds_a_few_hundred_bytes_not_a_ring_of_tallies() -> None:
    held = bytes_held(lambda: [ToolMetrics(f"t{i}") for i in range(1000)])
    assert held / 1000 < 300  # 25.7 kB per tool when every tool made its 122 tallies up front


@pytest.mark.parametrize("hook", HOOKS)
def test_the_first_hook_allocates_the_window_and_leaves_the_shared_stand_in_empty(hook: object) -> None:
    m = ToolMetrics("t")
    assert callable(hook)
    hook(m, 7.25)
    hook(m, 7.5)
    assert m._ring is not None and m._cur is not _EMPTY and m._life is not _EMPTY
    assert sum(slot is not _EMPTY for slot in m._ring) == 1, "one slot per second lived, made when lived"
    assert _EMPTY.counts() == Counts() and _EMPTY.latency == {}
    assert m.snapshot(7.9) != zero_stats("t", 10, 120)


def test_slots_are_made_for_seconds_lived_and_reused_on_the_next_lap() -> None:
    m = ToolMetrics("t", window_s=2, history_s=5)
    for second in (1.0, 2.5, 4.0, 4.5):
        m.on_call(second)
    assert m._ring is not None
    assert sum(slot is not _EMPTY for slot in m._ring) == 3
    m.on_call(6.0)  # second 6 lands on second 1's slot: reused, not a new tally
    assert sum(slot is not _EMPTY for slot in m._ring) == 3
    stats = m.snapshot(6.0)
    assert (stats.life.calls, stats.window.calls, stats.sparkline) == (5, 1, (1, 0, 2, 0, 1))


def test_the_registry_snapshot_mixes_idle_and_busy_tools() -> None:
    registry = MetricsRegistry(window_s=5, history_s=30)
    busy = registry.tool("busy")
    registry.tool("idle")
    busy.on_call(3.0)
    busy.on_success(3.0, 0.1, retried=False)
    stats = registry.snapshot(3.5)
    assert list(stats) == ["busy", "idle"]
    assert stats["idle"] == zero_stats("idle", 5, 30)
    assert stats["busy"].life.calls == 1


@pytest.mark.anyio
async def test_an_engine_s_idle_tools_report_zeros_beside_a_called_one() -> None:
    engine = await new_engine(ToolManifest(id="called"))
    engine.register("called", answer)
    engine.register("idle", not_called)
    engine.register("idle_too", not_called)
    assert await engine.call("called") == 42
    stats = engine.stats()
    assert stats["idle"] == zero_stats("idle", 10, 120)
    assert stats["idle_too"] == zero_stats("idle_too", 10, 120)
    assert stats["called"].life.successes == 1
    assert engine.runtime.tools["idle"].metrics._ring is None


def test_registering_a_thousand_tools_holds_under_two_kilobytes_each() -> None:
    names = [f"tool_{i:04d}" for i in range(1000)]
    engine = Engine()

    def register_all() -> Engine:
        for name in names:
            engine.register(name, not_called)
        return engine

    held = bytes_held(register_all)
    engine.close()
    assert held / len(names) < 2048  # 26.6 kB per tool before the windows were made on first use
