"""Metrics have one source of truth: the events. ``engine.stats()`` — counted by the engine as
each fact happens, without building events nobody observes — equals the fold of the events the
same calls published (engine.metrics.counted), figure by figure, over generated workloads of
every kind of call (tests/engine/workload.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from engine.events import CallSucceeded
from engine.metrics import MetricsRegistry, ToolStats
from engine.metrics.counted import COUNTED, count_event
from tests.engine.workload import mixed_engine, workload

pytestmark = pytest.mark.anyio


def _figures(stats: ToolStats) -> dict[str, Any]:
    data = stats.to_dict()
    data.pop("strategies", None)  # the strategies' own state, not counted from events
    return data


@pytest.mark.parametrize("seed", range(6))
async def test_engine_stats_equal_the_fold_of_its_events(seed: int) -> None:
    engine, rng, events = await mixed_engine(seed)
    await workload(engine, rng)

    folded = MetricsRegistry()
    for event in events:
        count_event(folded.tool, event)
    now = anyio.current_time()
    engine_stats = {tool_id: _figures(stats) for tool_id, stats in engine.stats(now).items()}
    fold_stats = {tool_id: _figures(stats) for tool_id, stats in folded.snapshot(now).items()}
    assert fold_stats == {
        tool_id: figures for tool_id, figures in engine_stats.items() if tool_id in fold_stats
    }
    idle = set(engine_stats) - set(fold_stats)  # registered, never counted: all zero
    assert all(engine_stats[tool_id]["life"]["calls"] == 0 for tool_id in idle)
    # The workload reached every kind of counted event (so the comparison covered each).
    seen = {type(event) for event in events}
    assert {cls.__name__ for cls in COUNTED if cls in seen} >= {
        "AttemptStarted", "AttemptFailed", "StreamEnded", "CallSucceeded", "CallFailed", "CallRejected",
        "CallSkipped", "CallEscalated", "BreakerOpened",
    }  # fmt: skip
    assert any(type(e) is CallSucceeded and e.partial for e in events)
    # Hedged reads: hedges won and lost, losers cancelled, all counted alike by both readers.
    assert {"HedgeStarted", "AttemptAbandoned", "HedgeRaceWon"} <= {e.event_type for e in events}
    assert engine_stats["mirror"]["life"]["retry_count"] >= 1
    life = engine_stats["guarded"]["life"]
    assert life["rejections"] and life["timeout_count"] and life["retry_count"]
    assert engine_stats["(unknown)"]["life"]["failures"]
