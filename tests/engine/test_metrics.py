"""Per-tool metrics: counters, percentiles, the rolling window and the sparkline, without clocks."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.metrics import (
    LATENCY_CEILING_S,
    LATENCY_FLOOR_S,
    LATENCY_PRECISION,
    Counts,
    MetricsRegistry,
    ToolMetrics,
    ToolStats,
    bucket_value_s,
    latency_bucket,
    percentiles_ms,
)

TOL = LATENCY_PRECISION + 1e-9  # the documented precision, plus float noise at bucket edges


def nearest_rank(values: list[float], p: int) -> float:
    """The exact nearest-rank percentile: the ceil(p% · n)-th smallest value."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


def within_precision(reported_ms: float | None, exact_s: float) -> bool:
    assert reported_ms is not None
    if exact_s < LATENCY_FLOOR_S:
        return reported_ms == 0.0
    return abs(reported_ms / (exact_s * 1000.0) - 1.0) <= TOL


# --- counters -----------------------------------------------------------------------------


def test_a_new_tool_reports_zeros_and_no_percentiles() -> None:
    stats = ToolMetrics("flight_search").snapshot(5.0)
    assert stats.tool_id == "flight_search"
    assert stats.life == Counts()
    assert stats.window == Counts()
    assert (stats.life.p50_ms, stats.life.p95_ms, stats.life.p99_ms) == (None, None, None)
    assert stats.rate_per_s == 0.0
    assert stats.sparkline == (0,) * 120
    assert stats.window_s == 10


def test_every_hook_moves_its_counter() -> None:
    m = ToolMetrics("t")
    for _ in range(7):
        m.on_call(1.0)
    m.on_rejected(1.0)
    m.on_retry(1.1)
    m.on_retry(1.2)
    m.on_retry(1.3)
    m.on_attempt_failed(1.4, 0.010, transient=True, timed_out=False)
    m.on_attempt_failed(1.4, 0.500, transient=True, timed_out=True)
    m.on_attempt_failed(1.4, 0.020, transient=False, timed_out=False)
    m.on_success(1.5, 0.030, retried=True)
    m.on_success(1.5, 0.040, retried=False)
    m.on_failure(1.6)
    m.on_failure(1.6)
    m.on_skipped(1.7)
    m.on_breaker_opened(1.8)
    expected = {
        "calls": 8,  # a rejected call is a call
        "successes": 2,
        "failures": 2,
        "rejections": 1,
        "skipped": 1,
        "error_count": 3,
        "transient_error_count": 2,
        "permanent_error_count": 1,
        "timeout_count": 1,
        "retry_count": 3,
        "retry_successes": 1,
        "circuit_breaker_opens": 1,
    }
    stats = m.snapshot(1.9)
    for counts in (stats.life, stats.window):
        assert {name: getattr(counts, name) for name in expected} == expected
    assert stats.rate_per_s == pytest.approx(0.8)


def test_counters_accumulate_over_many_seconds_in_the_lifetime() -> None:
    m = ToolMetrics("t", window_s=5, history_s=10)
    for second in range(1000):
        m.on_call(second + 0.5)
        m.on_success(second + 0.5, 0.001, retried=False)
        if second % 10 == 5:
            m.on_breaker_opened(second + 0.9)
    stats = m.snapshot(999.9)
    assert (stats.life.calls, stats.life.successes, stats.life.circuit_breaker_opens) == (1000, 1000, 100)
    assert (stats.window.calls, stats.window.successes, stats.window.circuit_breaker_opens) == (5, 5, 1)


# --- derived rates ------------------------------------------------------------------------


def test_retry_success_rate_is_none_without_retries() -> None:
    assert Counts().retry_success_rate is None
    assert Counts(calls=3, successes=3).retry_success_rate is None


def test_retry_success_rate_is_the_fraction_of_retries_that_succeeded() -> None:
    m = ToolMetrics("t")
    # call 1: fails, retry succeeds; call 2: fails, retry fails, retry succeeds
    m.on_call(0.0)
    m.on_attempt_failed(0.0, 0.01, transient=True, timed_out=False)
    m.on_retry(0.1)
    m.on_success(0.1, 0.01, retried=True)
    m.on_call(0.2)
    m.on_attempt_failed(0.2, 0.01, transient=True, timed_out=False)
    m.on_retry(0.3)
    m.on_attempt_failed(0.3, 0.01, transient=True, timed_out=False)
    m.on_retry(0.4)
    m.on_success(0.4, 0.01, retried=True)
    life = m.snapshot(0.5).life
    assert (life.retry_count, life.retry_successes) == (3, 2)
    assert life.retry_success_rate == pytest.approx(2 / 3)
    assert life.error_count == 3


def test_error_percent_counts_failures_and_rejections_among_finished_calls() -> None:
    assert Counts().error_percent is None
    assert Counts(calls=4, skipped=2).error_percent is None, "calls in flight and skips finish nothing"
    assert Counts(successes=6, failures=3, rejections=1).error_percent == pytest.approx(40.0)
    assert Counts(successes=5).error_percent == 0.0
    assert Counts(rejections=2).error_percent == 100.0


# --- latency percentiles ------------------------------------------------------------------


def test_percentiles_of_a_known_distribution() -> None:
    m = ToolMetrics("t")
    latencies = [ms / 1000 for ms in range(1, 101)]  # 1 ms .. 100 ms
    for i, latency in enumerate(latencies):
        if i % 2:
            m.on_success(3.0, latency, retried=False)
        else:  # failed attempts are latency samples too
            m.on_attempt_failed(3.0, latency, transient=True, timed_out=False)
    life = m.snapshot(3.0).life
    assert life.p50_ms == pytest.approx(50.0, rel=TOL)
    assert life.p95_ms == pytest.approx(95.0, rel=TOL)
    assert life.p99_ms == pytest.approx(99.0, rel=TOL)
    assert life.p50_ms is not None and life.p95_ms is not None and life.p99_ms is not None
    assert life.p50_ms <= life.p95_ms <= life.p99_ms


def test_a_single_sample_is_every_percentile() -> None:
    m = ToolMetrics("t")
    m.on_success(0.0, 0.25, retried=False)
    life = m.snapshot(0.0).life
    assert life.p50_ms == life.p95_ms == life.p99_ms == pytest.approx(250.0, rel=TOL)


def test_instant_attempts_on_a_virtual_clock_report_zero() -> None:
    m = ToolMetrics("t")
    m.on_success(0.0, 0.0, retried=False)
    m.on_attempt_failed(0.0, 0.0, transient=True, timed_out=False)
    assert m.snapshot(0.0).life.p99_ms == 0.0


def test_latencies_beyond_the_ceiling_report_the_top_bucket() -> None:
    m = ToolMetrics("t")
    m.on_success(0.0, math.inf, retried=False)
    m.on_success(0.0, LATENCY_CEILING_S * 10, retried=False)
    p99 = m.snapshot(0.0).life.p99_ms
    assert p99 == pytest.approx(LATENCY_CEILING_S * 1000, rel=0.06)


@given(
    st.lists(
        st.floats(min_value=LATENCY_FLOOR_S, max_value=LATENCY_CEILING_S * 0.999) | st.just(0.0),
        min_size=1,
        max_size=300,
    )
)
def test_reported_percentiles_are_within_the_precision_of_the_exact_order_statistics(
    latencies: list[float],
) -> None:
    m = ToolMetrics("t")
    for latency in latencies:
        m.on_success(42.5, latency, retried=False)
    life = m.snapshot(42.5).life
    for p, reported in ((50, life.p50_ms), (95, life.p95_ms), (99, life.p99_ms)):
        assert within_precision(reported, nearest_rank(latencies, p)), (p, reported)


@given(st.floats(min_value=LATENCY_FLOOR_S, max_value=LATENCY_CEILING_S * 0.999))
def test_a_buckets_value_is_within_the_precision_of_its_members(latency: float) -> None:
    assert abs(bucket_value_s(latency_bucket(latency)) / latency - 1.0) <= TOL


@given(st.floats(min_value=0, max_value=LATENCY_CEILING_S * 2), st.floats(min_value=0, max_value=2e6))
def test_bucketing_is_monotonic(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert latency_bucket(low) <= latency_bucket(high)


def test_the_floor_and_the_precision_are_as_documented() -> None:
    assert latency_bucket(LATENCY_FLOOR_S) == 0
    assert latency_bucket(LATENCY_FLOOR_S * 0.999) == -1
    assert latency_bucket(-1.0) == -1
    assert latency_bucket(math.nan) == -1
    assert round(LATENCY_PRECISION, 4) == 0.0247


def test_percentiles_ms_answers_in_the_order_asked() -> None:
    histogram = Counter(latency_bucket(ms / 1000) for ms in range(1, 101))
    p99, p50 = percentiles_ms(dict(histogram), (99, 50))
    assert p99 == pytest.approx(99.0, rel=TOL)
    assert p50 == pytest.approx(50.0, rel=TOL)
    assert percentiles_ms({}, (50, 99)) == (None, None)


def test_window_percentiles_only_see_the_window() -> None:
    m = ToolMetrics("t", window_s=10)
    for _ in range(100):
        m.on_success(0.5, 2.0, retried=False)  # slow, long ago
    for _ in range(10):
        m.on_success(60.5, 0.005, retried=False)
    stats = m.snapshot(61.0)
    assert stats.window.p99_ms == pytest.approx(5.0, rel=TOL)
    assert stats.life.p50_ms == pytest.approx(2000.0, rel=TOL)


# --- the rolling window -------------------------------------------------------------------


def test_a_second_leaves_the_window_exactly_at_the_boundary() -> None:
    m = ToolMetrics("t", window_s=10)
    m.on_call(100.3)
    m.on_success(100.3, 0.01, retried=False)
    assert m.snapshot(100.3).window.calls == 1
    assert m.snapshot(109.999).window.calls == 1, "seconds 100..109: still in"
    late = m.snapshot(110.0)
    assert late.window.calls == 0, "seconds 101..110: gone"
    assert late.window.p50_ms is None
    assert late.life.calls == 1


def test_the_window_counts_whole_seconds_including_the_current_one() -> None:
    m = ToolMetrics("t", window_s=3)
    for t in (10.0, 10.9, 11.5, 12.0, 12.99, 13.0):
        m.on_call(t)
    assert m.snapshot(12.99).window.calls == 5  # seconds 10, 11, 12
    assert m.snapshot(13.0).window.calls == 4  # seconds 11, 12, 13
    assert m.snapshot(13.0).rate_per_s == pytest.approx(4 / 3)


def test_a_clock_that_stands_still_keeps_counting() -> None:
    m = ToolMetrics("t")
    for _ in range(5):
        m.on_call(7.0)
    stats = m.snapshot(7.0)
    assert stats.window.calls == stats.life.calls == stats.sparkline[-1] == 5


def test_a_clock_that_steps_back_counts_into_the_current_second() -> None:
    m = ToolMetrics("t", window_s=2)
    m.on_call(50.5)
    m.on_call(48.0)  # against the contract: tolerated, not lost
    stats = m.snapshot(50.9)
    assert (stats.life.calls, stats.window.calls, stats.sparkline[-1]) == (2, 2, 2)


@pytest.mark.parametrize("jump", [1, 119, 120, 121, 240, 3600, 7 * 86400 + 0.25, 1e9])
def test_big_time_jumps_leave_no_stale_seconds(jump: float) -> None:
    m = ToolMetrics("t", window_s=10, history_s=120)  # a ring of 120 slots
    start = 1000.0
    for i in range(30):
        m.on_call(start + i)
        m.on_success(start + i, 0.5, retried=False)
    now = start + 29 + jump
    m.on_call(now)
    m.on_success(now, 0.001, retried=False)
    stats = m.snapshot(now)
    expected_window = 1 + sum(1 for i in range(30) if math.floor(start + i) > math.floor(now) - 10)
    expected_spark = 1 + sum(1 for i in range(30) if math.floor(start + i) > math.floor(now) - 120)
    assert stats.window.calls == expected_window
    assert sum(stats.sparkline) == expected_spark
    assert stats.life.calls == 31
    if jump >= 10:
        assert stats.window.p99_ms == pytest.approx(1.0, rel=TOL)


def test_a_snapshot_long_after_the_last_hook_sees_an_empty_window() -> None:
    m = ToolMetrics("t")
    m.on_call(5.0)
    stats = m.snapshot(5.0 + 120 * 1000)  # the ring index lines up with the old slot
    assert (stats.window.calls, sum(stats.sparkline), stats.life.calls) == (0, 0, 1)


# --- the sparkline ------------------------------------------------------------------------


def test_sparkline_is_calls_per_second_oldest_first() -> None:
    m = ToolMetrics("t", window_s=2, history_s=5)
    for t, n in ((20.1, 1), (21.5, 4), (23.0, 2), (24.7, 3)):
        for _ in range(n):
            m.on_call(t)
    assert m.snapshot(24.9).sparkline == (1, 4, 0, 2, 3)  # seconds 20..24
    assert m.snapshot(25.0).sparkline == (4, 0, 2, 3, 0)  # 21..25
    assert m.snapshot(27.2).sparkline == (2, 3, 0, 0, 0)  # 23..27
    assert m.snapshot(29.0).sparkline == (0, 0, 0, 0, 0)


def test_sparkline_counts_calls_only() -> None:
    m = ToolMetrics("t", history_s=3)
    m.on_retry(1.0)
    m.on_skipped(1.0)
    m.on_failure(1.0)
    assert m.snapshot(1.0).sparkline == (0, 0, 0)
    m.on_rejected(1.0)  # a call, refused before any attempt
    assert m.snapshot(1.0).sparkline == (0, 0, 1)


def test_a_stream_cut_after_it_opened_is_an_error_without_a_latency() -> None:
    m = ToolMetrics("t")
    m.on_attempt_failed(1.0, None, transient=True, timed_out=True)
    life = m.snapshot(1.0).life
    assert (life.error_count, life.transient_error_count, life.timeout_count) == (1, 1, 1)
    assert life.p50_ms is None


def test_window_longer_than_history() -> None:
    m = ToolMetrics("t", window_s=30, history_s=5)
    for second in range(30):
        m.on_call(second + 0.5)
    stats = m.snapshot(29.5)
    assert stats.window.calls == 30
    assert stats.sparkline == (1, 1, 1, 1, 1)


EVENTS = ("call", "rejected", "retry", "failed", "success", "failure", "skipped", "opened")


@given(
    steps=st.lists(
        st.tuples(st.floats(min_value=0, max_value=12), st.sampled_from(EVENTS), st.booleans()),
        max_size=80,
    ),
    start=st.floats(min_value=-50, max_value=1e6),
    window_s=st.integers(min_value=1, max_value=6),
    history_s=st.integers(min_value=1, max_value=8),
    look_ahead=st.floats(min_value=0, max_value=20),
)
def test_window_life_and_sparkline_match_a_brute_force_model(
    steps: list[tuple[float, str, bool]], start: float, window_s: int, history_s: int, look_ahead: float
) -> None:
    m = ToolMetrics("t", window_s=window_s, history_s=history_s)
    hooks = {
        "call": lambda t, f: m.on_call(t),
        "rejected": lambda t, f: m.on_rejected(t),
        "retry": lambda t, f: m.on_retry(t),
        "failed": lambda t, f: m.on_attempt_failed(t, 0.01, transient=f, timed_out=not f),
        "success": lambda t, f: m.on_success(t, 0.02, retried=f),
        "failure": lambda t, f: m.on_failure(t),
        "skipped": lambda t, f: m.on_skipped(t),
        "opened": lambda t, f: m.on_breaker_opened(t),
    }
    t = start
    log: list[tuple[int, str, bool]] = []
    for gap, event, flag in steps:
        t += gap  # nondecreasing, with gaps from 0 to several ring laps
        hooks[event](t, flag)
        log.append((math.floor(t), event, flag))
    now = t + look_ahead
    sec = math.floor(now)
    stats = m.snapshot(now)

    def model(entries: list[tuple[int, str, bool]]) -> dict[str, int]:
        count = Counter(e for _, e, _ in entries)
        return {
            "calls": count["call"] + count["rejected"],
            "rejections": count["rejected"],
            "retry_count": count["retry"],
            "error_count": count["failed"],
            "transient_error_count": sum(1 for _, e, f in entries if e == "failed" and f),
            "timeout_count": sum(1 for _, e, f in entries if e == "failed" and not f),
            "successes": count["success"],
            "retry_successes": sum(1 for _, e, f in entries if e == "success" and f),
            "failures": count["failure"],
            "skipped": count["skipped"],
            "circuit_breaker_opens": count["opened"],
        }

    def observed(counts: Counts) -> dict[str, int]:
        return {name: getattr(counts, name) for name in model([])}

    in_window = [entry for entry in log if sec - window_s < entry[0] <= sec]
    assert observed(stats.life) == model(log)
    assert observed(stats.window) == model(in_window)
    per_second = Counter(s for s, e, _ in log if e in ("call", "rejected"))
    assert stats.sparkline == tuple(per_second[s] for s in range(sec - history_s + 1, sec + 1))
    samples = sum(1 for _, e, _ in in_window if e in ("failed", "success"))
    assert (stats.window.p50_ms is None) == (samples == 0)


# --- the registry and serialisation -------------------------------------------------------


def test_registry_creates_each_tool_once_and_snapshots_every_tool() -> None:
    registry = MetricsRegistry(window_s=5, history_s=30)
    flights = registry.tool("flight_search")
    assert registry.tool("flight_search") is flights
    assert "flight_search" in registry
    assert "hotel_search" not in registry
    flights.on_call(1.0)
    registry.tool("hotel_search").on_rejected(2.0)
    registry.tool("weather")
    snapshot = registry.snapshot(2.5)
    assert list(snapshot) == ["flight_search", "hotel_search", "weather"]
    assert all(isinstance(stats, ToolStats) for stats in snapshot.values())
    assert snapshot["flight_search"].life.calls == 1
    assert snapshot["hotel_search"].window.rejections == 1
    assert snapshot["weather"].window_s == 5
    assert len(snapshot["weather"].sparkline) == 30


def test_empty_registry_snapshot() -> None:
    assert MetricsRegistry().snapshot(0.0) == {}


@pytest.mark.parametrize(("window_s", "history_s"), [(0, 10), (10, 0), (-1, 5)])
def test_window_and_history_must_be_positive(window_s: int, history_s: int) -> None:
    with pytest.raises(ValueError, match="at least 1 second"):
        ToolMetrics("t", window_s=window_s, history_s=history_s)
    with pytest.raises(ValueError, match="at least 1 second"):
        MetricsRegistry(window_s=window_s, history_s=history_s)


def test_to_dict_is_json_safe_and_includes_the_derived_rates() -> None:
    m = ToolMetrics("t", history_s=4)
    m.on_call(1.0)
    m.on_attempt_failed(1.0, 0.2, transient=True, timed_out=True)
    m.on_retry(1.3)
    m.on_success(1.5, 0.05, retried=True)
    stats = m.snapshot(2.0)
    data = json.loads(json.dumps(stats.to_dict()))
    assert data["tool_id"] == "t"
    assert data["sparkline"] == [0, 0, 1, 0]
    assert data["life"]["retry_success_rate"] == 1.0
    assert data["life"]["error_percent"] == 0.0
    assert data["life"]["p99_ms"] == pytest.approx(200.0, rel=TOL)
    empty = json.loads(json.dumps(Counts().to_dict()))
    assert empty["retry_success_rate"] is None
    assert empty["error_percent"] is None
    assert empty["p50_ms"] is None
    assert set(empty) == {*Counts.__dataclass_fields__, "retry_success_rate", "error_percent"}


def test_stats_are_frozen() -> None:
    stats = ToolMetrics("t").snapshot(0.0)
    with pytest.raises(AttributeError):
        stats.life.calls = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        stats.rate_per_s = 1.0  # type: ignore[misc]


def test_partial_success_counts_as_a_success_without_a_second_latency_sample() -> None:
    m = ToolMetrics("t")
    m.on_call(0.0)
    m.on_attempt_failed(0.0, 0.05, transient=True, timed_out=False)
    m.on_partial_success(0.0)
    life = m.snapshot(0.5).life
    assert (life.successes, life.failures, life.error_count) == (1, 0, 1)
    assert life.p50_ms == pytest.approx(50, rel=0.03), "only the failed attempt's latency is a sample"
