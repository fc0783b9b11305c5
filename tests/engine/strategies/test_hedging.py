"""The ``hedging`` section and strategy (issue 24 §2): the schema (a delay in ms or ``"p95"``,
``max_hedges``), one-line errors at the field's line, refused on any tool that is not read-only,
the live p95 read once per engine second, facts, a reload's hand-over, and the events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from engine import ManifestError, ToolManifest
from engine.events import event_from_dict
from engine.manifest import ManifestRegistry, load_manifest
from engine.metrics import ToolMetrics
from engine.strategies.base import overrides
from engine.strategies.hedging import (
    AttemptAbandoned,
    HedgeRaceWon,
    HedgeRefused,
    HedgeStarted,
    HedgingOptions,
    HedgingStrategy,
)


def test_options_take_milliseconds_or_p95_and_default_to_one_hedge() -> None:
    assert HedgingOptions(hedge_after_ms=250) == HedgingOptions(hedge_after_ms=250.0, max_hedges=1)
    assert HedgingOptions.model_validate({"hedge_after_ms": "p95", "max_hedges": 3}).hedge_after_ms == "p95"
    assert HedgingOptions(hedge_after_ms="p95").model_dump(mode="json") == {
        "hedge_after_ms": "p95",
        "max_hedges": 1,
    }


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"hedge_after_ms": 0},
        {"hedge_after_ms": -5},
        {"hedge_after_ms": True},
        {"hedge_after_ms": "p99"},
        {"hedge_after_ms": "100"},
        {"hedge_after_ms": float("nan")},
        {"hedge_after_ms": 1e12},
        {"hedge_after_ms": 100, "max_hedges": 0},
        {"hedge_after_ms": 100, "max_hedges": 11},
        {"hedge_after_ms": 100, "max_hedges": True},
        {"hedge_after_ms": 100, "colour": "red"},
    ],
)
def test_options_refuse_what_is_not_a_hedging_section(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HedgingOptions.model_validate(bad)


def test_a_bad_field_is_one_line_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  hedging:\n    hedge_after_ms: p99\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert (
        str(caught.value)
        == f"{path}:5: tool.hedging.hedge_after_ms: must be a number of milliseconds or \"p95\", not 'p99'"
    )


@pytest.mark.parametrize("side_effect", ["idempotent", "side_effecting"])
def test_a_tool_that_is_not_read_only_may_not_hedge(tmp_path: Path, side_effect: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(f"tool:\n  id: t\n  side_effect: {side_effect}\n  hedging:\n    hedge_after_ms: 100\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value) == (
        f"{path}:4: tool.hedging: hedging re-sends a call while it runs: only for read_only tools "
        f"(side_effect is {side_effect})"
    )
    with pytest.raises(ValueError, match="only for read_only tools"):
        ToolManifest.model_validate({"id": "t", "hedging": {"hedge_after_ms": 100}})  # idempotent by default
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  hedging:\n    hedge_after_ms: 100\n")
    assert load_manifest(path).strategies["hedging"] == HedgingOptions(hedge_after_ms=100)


def test_the_strategy_has_no_hook_the_pipeline_calls() -> None:
    strategy = HedgingStrategy("t", HedgingOptions(hedge_after_ms=100))
    hooks = ("call_started", "admit_now", "admit", "attempt_ended", "retry_refusal")
    assert [hook for hook in hooks if overrides(strategy, hook)] == []


def test_a_fixed_delay_is_the_options() -> None:
    strategy = HedgingStrategy("t", HedgingOptions(hedge_after_ms=250))
    assert strategy.hedge_after_s(ToolMetrics("t"), 0.0) == 0.25
    assert strategy.facts(0.0)["hedge_after_ms"] == 250.0


def test_p95_is_the_tools_live_window_p95_read_once_per_second() -> None:
    strategy = HedgingStrategy("t", HedgingOptions(hedge_after_ms="p95"))
    metrics = ToolMetrics("t", window_s=10)
    assert strategy.hedge_after_s(metrics, 0.5) is None, "no latency yet: no hedge"
    assert strategy.facts(0.5)["hedge_after_ms"] is None
    for _ in range(19):
        metrics.on_success(0.6, 0.1, retried=False)
    metrics.on_success(0.6, 1.0, retried=False)
    assert strategy.hedge_after_s(metrics, 0.9) is None, "read at most once per engine second"
    after = strategy.hedge_after_s(metrics, 1.0)
    assert after == pytest.approx(0.1, rel=0.03)
    for _ in range(20):
        metrics.on_success(1.1, 2.0, retried=False)
    assert strategy.hedge_after_s(metrics, 1.9) == after
    assert strategy.hedge_after_s(metrics, 2.0) == pytest.approx(2.0, rel=0.03)
    assert strategy.hedge_after_s(metrics, 30.0) is None, "the window moved past every latency"


def test_a_reload_hands_the_counts_over() -> None:
    old = HedgingStrategy("t", HedgingOptions(hedge_after_ms=100))
    old.state.started, old.state.won, old.state.cancelled, old.state.refused = 4, 3, 2, 1
    new = HedgingStrategy("t", HedgingOptions(hedge_after_ms=200, max_hedges=2))
    new.handover(old)
    assert new.facts(0.0) == {
        "hedges_started": 4, "hedges_won": 3, "attempts_cancelled": 2, "hedges_refused": 1,
        "hedge_after_ms": 200.0,
    }  # fmt: skip


def test_events_describe_themselves_and_survive_json() -> None:
    common: dict[str, Any] = {"at": 1.0, "t": 2.0, "tool_id": "t", "call_id": "c1", "turn_id": "x"}
    events = [
        HedgeStarted(**common, attempt=2, after_attempt=1, after_ms=100.0, in_flight=1),
        HedgeRefused(**common, attempt=2, reason="bulkhead full: 1 in flight, 0 queued"),
        AttemptAbandoned(**common, attempt=1, won_by=2, latency_ms=150.0),
        HedgeRaceWon(**common, attempt=2, hedge=True, cancelled=(1, 3), attempt_ms=50.0),
    ]
    assert [e.describe() for e in events] == [
        "t attempt 2 started as a hedge, 100 ms after attempt 1 (1 in flight)",
        "t hedge (attempt 2) not started: bulkhead full: 1 in flight, 0 queued",
        "t attempt 1 cancelled after 150 ms: attempt 2 won",
        "t attempt 2 (a hedge) won in 50 ms; cancelled: 1, 3",
    ]
    for event in events:
        assert event_from_dict(event.to_dict()) == event


def test_hedging_in_defaults_is_a_default_for_the_read_only_tools(tmp_path: Path) -> None:
    (tmp_path / "defaults.yaml").write_text("defaults:\n  hedging: {hedge_after_ms: p95}\n")
    (tmp_path / "reads.yaml").write_text("tool:\n  id: reads\n  side_effect: read_only\n")
    (tmp_path / "more.yaml").write_text(
        "tool:\n  id: more\n  side_effect: read_only\n  hedging: {max_hedges: 2}\n"
    )
    (tmp_path / "books.yaml").write_text("tool:\n  id: books\n  side_effect: side_effecting\n")
    registry = ManifestRegistry.from_directory(tmp_path, at=0.0)
    assert registry.get("reads").strategies["hedging"] == HedgingOptions(hedge_after_ms="p95")
    assert registry.get("more").strategies["hedging"] == HedgingOptions(hedge_after_ms="p95", max_hedges=2)
    assert "hedging" not in registry.get("books").strategies, "not inherited by a tool it does not suit"
    assert "hedging" not in registry.get("unlisted").strategies, "a tool without a file is idempotent"


def test_a_tool_that_sets_hedging_itself_is_still_refused_under_defaults(tmp_path: Path) -> None:
    defaults = {"hedging": {"hedge_after_ms": 100}}
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: idempotent\n  hedging:\n    max_hedges: 2\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path, defaults)
    assert str(caught.value).startswith(f"{path}:4: tool.hedging: hedging re-sends a call while it runs")
    path.write_text("tool:\n  id: t\n  side_effect: idempotent\n  timeout_ms: -1\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path, defaults)
    assert str(caught.value).startswith(f"{path}:4: tool.timeout_ms: "), "other problems still reported"
