"""A tool's strategies in the view model (issue 23): a bulkhead's occupancy, queue and refusals and a
retry budget's window and refusals, folded from events alone, and agreeing with ``engine.stats()``."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from console.host import seeds_of
from console.model import ConsoleModel, ManifestView, StrategyFigures, ToolSeed
from engine import Engine
from engine.events import Event, RecordingStarted, SharedStrategiesChanged, event_from_dict
from engine.kinds import ErrorKind
from engine.store.starting import starting_events
from engine.turn import ToolCall, Turn
from tests.console import factory as f
from tests.console.strategies_feed import scene, strategies_engine, traffic

FULL = ErrorKind.BULKHEAD_FULL
BULKHEAD = {"max_concurrent": 2, "max_queued": 1, "queue_timeout_ms": 1000.0}
BUDGET = {"budget_percent": 0.0, "min_retries_per_s": 0.1, "window_s": 10.0}


def seed(tool: str = "search", **sections: Any) -> ToolSeed:
    content = {"id": tool, "circuit_breaker": {"failure_threshold": 5}, **sections}
    return ToolSeed(tool, manifest=ManifestView("d1", 1, f"manifests/{tool}.yaml", f.WALL, content))


def fold(*events: Event, seeds: tuple[ToolSeed, ...] = ()) -> ConsoleModel:
    model = ConsoleModel(seeds)
    model.apply(list(events))
    return model


def figures(model: ConsoleModel, tool: str, now: float) -> StrategyFigures:
    shown = model.tools[tool].row(now).strategies
    assert shown is not None
    return shown


# --- the bulkhead -----------------------------------------------------------------------------


def test_occupancy_is_the_running_attempts_against_the_manifests_limit_and_the_queue() -> None:
    model = fold(
        f.started("search", "c1", 1.0), f.started("search", "c2", 1.0), f.queued("search", "c3", 1.1),
        seeds=(seed(bulkhead=BULKHEAD),),
    )  # fmt: skip
    bulkhead = figures(model, "search", 1.2).bulkhead
    assert bulkhead is not None
    assert (bulkhead.in_flight, bulkhead.max_concurrent, bulkhead.queued, bulkhead.max_queued) == (2, 2, 1, 1)
    assert bulkhead.wait_p95_ms == 0.0, "no wait has ended yet"
    model.apply([f.succeeded("search", "c1", 1.5), f.started("search", "c3", 1.5)])
    bulkhead = figures(model, "search", 1.6).bulkhead
    assert bulkhead is not None
    assert (bulkhead.in_flight, bulkhead.queued) == (2, 0), "the queued attempt took the freed slot"
    assert bulkhead.wait_p95_ms == pytest.approx(400.0), "its wait, as the engine records it"
    assert figures(model, "search", 1.6 + 61).bulkhead.wait_p95_ms == 0.0, "a minute on, forgotten"  # type: ignore[union-attr]


def test_refusals_when_full_and_when_the_wait_ran_out_are_counted_apart_from_the_breakers() -> None:
    model = fold(
        f.started("search", "c1", 1.0), f.started("search", "c2", 1.0),
        f.queued("search", "c3", 1.1), f.bulkhead_full("search", "c3", 2.1, waited_ms=1000.0),
        f.rejected("search", "c3", 2.1, reason="bulkhead queue wait ran out", kind=FULL),
        f.queued("search", "c4", 2.2), f.bulkhead_full("search", "c5", 2.3),
        f.rejected("search", "c5", 2.3, reason="bulkhead full: 2 in flight, 1 queued", kind=FULL),
        f.rejected("search", "c6", 2.4),  # the breaker's
        seeds=(seed(bulkhead=BULKHEAD),),
    )  # fmt: skip
    shown = figures(model, "search", 2.5)
    assert shown.bulkhead is not None
    assert (shown.bulkhead.rejected_full, shown.bulkhead.rejected_timeout) == (1, 1)
    assert shown.bulkhead.queued == 1 and shown.bulkhead.wait_p95_ms == pytest.approx(1000.0)
    assert shown.bulkhead_refused == 2, "the bulkhead's refusals in the board's window"
    assert model.tools["search"].row(2.5).window.rejections == 3, "REJ: every call refused unattempted"
    assert shown.last_refusal is not None
    assert (shown.last_refusal.call_id, shown.last_refusal.by, shown.last_refusal.retry) == (
        "c5",
        "bulkhead",
        False,
    )
    assert figures(model, "search", 2.5 + 60).bulkhead_refused == 0, "the window moved on"


def test_a_retry_the_bulkhead_refused_says_so_in_the_timeline_and_the_last_refusal() -> None:
    model = fold(
        f.started("search", "c1", 1.0), f.failed_attempt("search", "c1", 1.1, decision="retry"),
        f.bulkhead_full("search", "c1", 1.2, attempt=2), f.call_failed("search", "c1", 1.2),
        seeds=(seed(bulkhead=BULKHEAD),),
    )  # fmt: skip
    refusal = figures(model, "search", 1.3).last_refusal
    assert refusal is not None and refusal.retry and refusal.attempt == 2
    [call] = model.tools["search"].timelines()
    assert call.refusal == "retry refused: bulkhead full: 2 in flight, 1 queued"
    assert [a.made for a in call.attempts] == [True, False], "the refused retry was never made"
    assert model.tools["search"].row(1.3).window.rejections == 0, "a failed call, not a rejected one"


def test_a_turn_cut_off_while_queued_leaves_the_queue() -> None:
    model = fold(
        f.started("search", "a", 1.0, turn="t1"), f.started("search", "b", 1.0, turn="t1"),
        f.queued("search", "c", 1.1, turn="t1"), f.queued("search", "d", 1.2, turn="t2"),
        f.deadline_exceeded("t1", 1.5, ("a", "b", "c")),
        seeds=(seed(bulkhead=BULKHEAD),),
    )  # fmt: skip
    bulkhead = figures(model, "search", 1.6).bulkhead
    assert bulkhead is not None
    assert (bulkhead.in_flight, bulkhead.queued) == (0, 1), "every cut call left; t2's still waits"
    cut = next(c for c in model.tools["search"].timelines() if c.call_id == "c")
    assert (cut.outcome, [a.outcome for a in cut.attempts]) == ("cut", ["dropped"])


def test_a_queued_attempt_whose_end_was_lost_expires() -> None:
    model = fold(f.queued("search", "c3", 1.0), seeds=(seed(bulkhead=BULKHEAD),))
    assert not model.expire(3.0).tools, "its wait (1 s) and the grace have not passed"
    assert model.expire(10.0).tools == {"search"}
    assert figures(model, "search", 10.0).bulkhead.queued == 0  # type: ignore[union-attr]


# --- the retry budget -------------------------------------------------------------------------


def test_a_budgets_window_counts_calls_and_retries_as_the_engine_does() -> None:
    """Calls when they start (first attempt, a queue, or a breaker's rejection), retries when a
    failed attempt is retried, refusals from ``RetryBudgetSpent``."""
    model = fold(
        f.started("pricing", "c1", 1.0), f.failed_attempt("pricing", "c1", 1.1, decision="retry"),
        f.started("pricing", "c1", 1.2, attempt=2), f.failed_attempt("pricing", "c1", 1.3, attempt=2),
        f.budget_spent("pricing", "c1", 1.3, attempt=2, retries=1, calls=2),
        f.call_failed("pricing", "c1", 1.3),
        f.rejected("pricing", "c2", 1.4),
        seeds=(seed("pricing", retry_budget=BUDGET),),
    )  # fmt: skip
    shown = figures(model, "pricing", 1.5)
    assert shown.retry_budget is not None
    assert asdict(shown.retry_budget) == {
        "calls": 2,
        "retries": 1,
        "allowed": 1,
        "refused": 1,
        "window_s": 10.0,
    }
    assert shown.budget_refused == 1 and shown.budgeted
    assert shown.bulkhead is None
    assert figures(model, "pricing", 12.0).retry_budget.calls == 0, "out of its 10 s window"  # type: ignore[union-attr]


def test_the_engine_wide_budget_shows_through_its_refusals() -> None:
    model = fold(
        f.started("quotes", "c1", 1.0), f.failed_attempt("quotes", "c1", 1.1, decision="escalate"),
        f.budget_spent("quotes", "c1", 1.1, shared=True, retries=2, calls=7),
        seeds=(seed("quotes"),),
    )  # fmt: skip
    shown = figures(model, "quotes", 3.0)
    assert shown.retry_budget is None and shown.shared_budget is not None
    assert (shown.shared_budget.refused, shown.shared_budget.retries, shown.shared_budget.calls) == (1, 2, 7)
    assert shown.last_refusal is not None and shown.last_refusal.by == "engine-wide retry budget"


def test_a_reload_keeps_the_budgets_window_and_removing_the_section_drops_it() -> None:
    model = fold(f.started("pricing", "c1", 1.0), seeds=(seed("pricing", retry_budget=BUDGET),))
    wider = {**BUDGET, "budget_percent": 50.0}
    model.apply(
        [f.manifest_loaded("pricing", 2.0, version=2, digest="d2", previous="d1", retry_budget=wider)]
    )
    assert figures(model, "pricing", 2.0).retry_budget.calls == 1  # type: ignore[union-attr]
    model.apply([f.manifest_loaded("pricing", 3.0, version=3, digest="d3", previous="d2")])
    assert model.tools["pricing"].row(3.0).strategies is None, "back to the board it always had"


def test_a_restarted_engine_starts_its_strategies_afresh() -> None:
    model = fold(
        f.queued("search", "c3", 1.0), f.bulkhead_full("search", "c4", 1.1),
        f.recording_started(2.0, ("search",)),
        seeds=(seed(bulkhead=BULKHEAD),),
    )  # fmt: skip
    bulkhead = figures(model, "search", 2.1).bulkhead
    assert bulkhead is not None
    assert (bulkhead.queued, bulkhead.rejected_full, bulkhead.max_concurrent) == (0, 0, 2)


def test_a_tool_without_strategies_has_no_figures_for_them() -> None:
    model = fold(f.started("weather", "c1", 1.0), f.succeeded("weather", "c1", 1.1), seeds=(seed("weather"),))
    assert model.tools["weather"].row(2.0).strategies is None


# --- the same figures as the engine's ---------------------------------------------------------

CHECKS = (0.05, 0.15, 0.45, 1.05, 1.55, 1.65, 2.05, 2.7, 5.2, 6.6, 7.7, 8.2, 10.2, 10.6, 10.9, 11.5, 12.07,
          12.09, 12.2, 12.45, 13.1)  # fmt: skip
"""Moments to compare at: between events, never at the instant of one."""
BOOKING = (
    "tool:\n  id: booking\n  side_effect: read_only\n"
    "  retry_policy: {initial_delay_ms: 100, max_delay_ms: 100, jitter_percent: 0}\n"
    "  bulkhead: {max_concurrent: 1, max_queued: 1, queue_timeout_ms: 300}\n"
    "  retry_budget: {budget_percent: 100, min_retries_per_s: 0, window_s: 10}\n"
)
"""A tool with both: its calls counted by its budget as they start, queued or not."""


def agrees(model: ConsoleModel, engine: Engine, now: float) -> list[str]:
    """Where the model's figures differ from ``engine.stats()``."""
    problems = []
    for tool_id, stats in engine.stats().items():
        shown = model.tools[tool_id].row(now).strategies
        facts = stats.strategies
        if "bulkhead" in facts:
            got = asdict(shown.bulkhead) if shown is not None and shown.bulkhead is not None else None
            want = dict(facts["bulkhead"])
            if got is not None:  # float waits: the same moments, summed in other orders
                assert got.pop("wait_p95_ms") == pytest.approx(want.pop("wait_p95_ms"))
            if got != want:
                problems.append(f"{tool_id} at {now}: bulkhead {got} != {want}")
        if "retry_budget" in facts:
            got = asdict(shown.retry_budget) if shown is not None and shown.retry_budget is not None else None
            want = {k: v for k, v in facts["retry_budget"].items() if k != "shared"}
            if got != want:
                problems.append(f"{tool_id} at {now}: retry budget {got} != {want}")
    return problems


@pytest.mark.anyio
async def test_the_folded_figures_are_the_engines_at_every_moment(tmp_path: Path) -> None:
    """The console's engine (or one it is attached to) runs a bulkhead and budgets; the model, fed
    only its events, shows at every moment what ``engine.stats()`` says: calls queued then admitted,
    waits run out, a full queue, a retry refused by the bulkhead, a turn cut while queued."""
    (tmp_path / "booking.yaml").write_text(BOOKING)
    engine = strategies_engine(tmp_path)
    booked: list[float] = []

    async def booking() -> str:
        booked.append(anyio.current_time())
        if len(booked) == 1:
            raise ConnectionResetError("reset")  # retried in 100 ms: the slot is taken by then
        await anyio.sleep(1.0)
        return "booked"

    engine.register("booking", booking)
    pending: list[Event] = []
    engine.subscribe(pending.append, direct=True)
    model = ConsoleModel(seeds_of(engine))
    start = anyio.current_time()
    problems: list[str] = []

    async def at(t: float) -> None:
        await anyio.sleep(max(0.0, start + t - anyio.current_time()))

    async def call(tool_id: str, t: float) -> None:
        await at(t)
        await engine.try_call(tool_id)

    async def cut_while_queued() -> None:
        await at(10.5)
        await engine.run_turn(Turn([ToolCall("late", "search", optional=True)], deadline_s=0.3))

    async def check() -> None:
        for t in CHECKS:
            await at(t)
            model.apply(pending[:])
            pending.clear()
            problems.extend(agrees(model, engine, anyio.current_time()))

    async with engine, anyio.create_task_group() as tg:
        tg.start_soon(check)
        tg.start_soon(traffic, engine, at)
        for tool_id, t in [
            ("search", 5.0), ("search", 6.5), ("search", 7.5),  # queued at 7.5, admitted at 8.0
            # the first fails (the engine-wide budget has retries again), its retry (at 12.1) finds
            # the slot taken and the queue full
            ("booking", 12.0), ("booking", 12.05), ("booking", 12.08),
            ("search", 10.0),  # with the one admitted at 8.0, every slot taken: the turn's call waits
        ]:  # fmt: skip
            tg.start_soon(call, tool_id, t)
        tg.start_soon(cut_while_queued)
    assert not problems, "\n".join(problems)
    seen = {e.event_type for e in model.events}
    assert {"BulkheadQueued", "BulkheadRejected", "RetryBudgetSpent", "TurnDeadlineExceeded"} <= seen
    [cut] = [e for e in model.events if e.event_type == "TurnDeadlineExceeded"]
    assert any(e.event_type == "BulkheadQueued" and e.turn_id == cut.turn_id for e in model.events)  # type: ignore[attr-defined]
    shown = model.tools["search"].row(anyio.current_time()).strategies
    assert shown is not None and shown.bulkhead is not None
    assert shown.bulkhead.rejected_timeout >= 2 and shown.bulkhead.wait_p95_ms > 0
    both = model.tools["booking"].row(anyio.current_time()).strategies
    assert both is not None and both.last_refusal is not None
    assert both.retry_budget is not None and both.retry_budget.calls == 3
    assert any(e.event_type == "BulkheadRejected" and e.attempt == 2 for e in model.events)  # type: ignore[attr-defined]


# --- the engine-wide retry budget ------------------------------------------------------------

SHARED_BUDGET = {"retry_budget": {"budget_percent": 0.0, "min_retries_per_s": 0.2, "window_s": 10.0}}


def test_the_engine_wide_window_is_fed_every_tools_calls_as_the_engine_feeds_it() -> None:
    played = scene()
    model = ConsoleModel(played.seeds, played.shared)
    model.apply(list(played.events))
    engine = dict(played.stats["quotes"].strategies["shared.retry_budget"])
    assert engine.pop("shared") is True and engine["calls"] == 15  # every tool's calls, throttled ones too
    for tool_id in ("quotes", "weather", "search"):
        figures = model.tools[tool_id].strategies.figures(played.now, 0).engine_budget
        assert figures is not None and asdict(figures.window) == engine, tool_id
        assert figures.options.min_retries_per_s == 0.2
    assert ConsoleModel(played.seeds).engine_budget.figures(played.now) is None  # not known: none shown


def test_shared_strategies_changed_and_recording_started_set_the_engine_wide_budget() -> None:
    model = ConsoleModel([ToolSeed("a")])
    changed = SharedStrategiesChanged(
        at=f.WALL + 2, t=2.0, path="defaults.yaml", strategies=SHARED_BUDGET, previous={}
    )
    changes = model.apply([changed])
    assert "a" in changes.tools
    model.apply([f.budget_spent("a", "c2", 3.0, shared=True)])
    figures = model.engine_budget.figures(3.0)
    assert figures is not None and figures.window.refused == 1 and figures.window.allowed == 2
    wider = {"retry_budget": {**SHARED_BUDGET["retry_budget"], "min_retries_per_s": 0.5}}
    model.apply([SharedStrategiesChanged(at=f.WALL + 4, t=4.0, path="defaults.yaml", strategies=wider,
                                         previous=SHARED_BUDGET)])  # fmt: skip
    figures = model.engine_budget.figures(4.0)
    assert figures is not None and figures.window.refused == 1, "a reload keeps the window"
    assert figures.window.allowed == 5
    restarted = replace(f.recording_started(5.0, ("a",)), shared_strategies=SHARED_BUDGET)
    model.apply([restarted])
    figures = model.engine_budget.figures(5.0)
    assert figures is not None and figures.window.refused == 0, "a new engine: a new window"
    model.apply([SharedStrategiesChanged(at=f.WALL + 6, t=6.0, path="defaults.yaml", strategies={},
                                         previous=SHARED_BUDGET)])  # fmt: skip
    assert model.engine_budget.figures(6.0) is None
    model.apply([f.recording_started(7.0, ("a",))])  # an older store's: none said, none shown
    assert model.engine_budget.figures(7.0) is None


def test_a_recording_engine_says_at_its_start_which_engine_wide_strategies_are_in_force(
    tmp_path: Path,
) -> None:
    (started, *_) = starting_events(strategies_engine(tmp_path), keeps_overrides=False)
    assert isinstance(started, RecordingStarted)
    assert started.shared_strategies == SHARED_BUDGET
    decoded = event_from_dict({k: v for k, v in started.to_dict().items() if k != "shared_strategies"})
    assert isinstance(decoded, RecordingStarted) and decoded.shared_strategies == {}  # an older store's
