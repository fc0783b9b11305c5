"""The Prometheus exporter against the real prometheus-client: what a scrape shows after each thing
the engine does, parsed back with prometheus-client's own parser.

Success after retries, permanent failure, a timeout, the breaker opening, rejecting and closing,
a turn with a cascade, an unknown tool; labels stay low-cardinality (no call or turn id ever);
closing detaches; the endpoint serves; the README example runs as written. Every engine test
runs on both backends (virtual time) and in both engine modes.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine import BreakerConfig, Engine, RetryPolicy, ToolError, ToolManifest
from engine.events import FleetRestored, FleetUnavailable
from engine.exporters.prometheus import UNKNOWN_TOOL_LABEL, PrometheusMetrics, start_metrics_server
from engine.kinds import ErrorKind
from engine.turn import ToolCall, Turn
from tests.engine.conftest import WALL, Scripted, hang, make_engine, new_engine, recorded
from tests.readme_examples import readme_example

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
LABELS = {"tool", "outcome", "kind", "class", "state", "le"}
"""Every label a tripwire metric may carry (``le``: the histogram's bucket bound)."""
STATES = {"CLOSED", "OPEN", "HALF_OPEN", "FORCED_OPEN", "DISABLED"}
NO_RETRY = RetryPolicy(max_attempts=1)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Every tripwire sample of the registry's exposition, read back by prometheus-client's parser."""
    samples: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.startswith("tripwire_"):
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def metric(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; KeyError when the series is not exposed at all."""
    return samples[(name, frozenset(labels.items()))]


def errors(samples: Samples, tool: str, kind: str, error_class: str) -> float:
    return metric(samples, "tripwire_errors_total", tool=tool, kind=kind, **{"class": error_class})


def states(samples: Samples, tool: str) -> dict[str, float]:
    return {state: metric(samples, "tripwire_breaker_state", tool=tool, state=state) for state in STATES}


def attached(engine: Engine) -> tuple[PrometheusMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return PrometheusMetrics(engine, registry), registry


async def test_a_call_that_succeeds_after_retries_counts_its_attempts_errors_and_durations() -> None:
    engine = await new_engine(ToolManifest(id="search", retry_policy=RetryPolicy(max_total_time_ms=60_000)))
    engine.register(
        "search", Scripted(ConnectionResetError("reset"), ConnectionResetError("reset"), "ok", duration=0.2)
    )
    _, registry = attached(engine)

    assert await engine.call("search", q="x") == "ok"

    samples = scrape(registry)
    assert metric(samples, "tripwire_calls_total", tool="search", outcome="ok") == 1
    assert metric(samples, "tripwire_attempts_total", tool="search") == 3
    assert metric(samples, "tripwire_retries_total", tool="search") == 2
    assert errors(samples, "search", "connection_reset", "transient") == 2
    # Every attempt ran 0.2 s (virtual): each is in the histogram, under its own duration.
    assert metric(samples, "tripwire_attempt_duration_seconds_count", tool="search") == 3
    assert metric(samples, "tripwire_attempt_duration_seconds_sum", tool="search") == pytest.approx(
        0.6, abs=0.01
    )
    assert metric(samples, "tripwire_attempt_duration_seconds_bucket", tool="search", le="0.1") == 0
    assert metric(samples, "tripwire_attempt_duration_seconds_bucket", tool="search", le="0.25") == 3
    assert metric(samples, "tripwire_attempt_duration_seconds_bucket", tool="search", le="+Inf") == 3
    assert states(samples, "search") == {**dict.fromkeys(STATES, 0.0), "CLOSED": 1.0}
    assert ("tripwire_calls_total", frozenset({("tool", "search"), ("outcome", "failed")})) not in samples


async def test_a_permanent_failure_is_one_failed_call_and_one_error_of_its_kind_and_class() -> None:
    engine = await new_engine(ToolManifest(id="book"))
    engine.register("book", Scripted(ToolError(ErrorKind.INVALID_PARAMETERS, "no such date")))
    _, registry = attached(engine)

    result = await engine.try_call("book", date="2025-02-30")

    assert result.error is not None
    samples = scrape(registry)
    assert metric(samples, "tripwire_calls_total", tool="book", outcome="failed") == 1
    assert errors(samples, "book", "invalid_parameters", "permanent") == 1
    assert metric(samples, "tripwire_attempts_total", tool="book") == 1
    assert ("tripwire_retries_total", frozenset({("tool", "book")})) not in samples, "not retried"


async def test_a_timeout_is_counted_as_a_timeout_and_an_error_and_timed() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=1000, retry_policy=NO_RETRY))
    engine.register("slow", Scripted(hang))
    _, registry = attached(engine)

    result = await engine.try_call("slow")

    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    samples = scrape(registry)
    assert metric(samples, "tripwire_timeouts_total", tool="slow") == 1
    assert errors(samples, "slow", "timeout", "transient") == 1
    assert metric(samples, "tripwire_calls_total", tool="slow", outcome="failed") == 1
    assert metric(samples, "tripwire_attempt_duration_seconds_sum", tool="slow") == pytest.approx(
        1.0, abs=0.05
    )
    assert metric(samples, "tripwire_attempt_duration_seconds_bucket", tool="slow", le="0.5") == 0
    assert metric(samples, "tripwire_attempt_duration_seconds_bucket", tool="slow", le="2.5") == 1


async def test_the_breaker_opening_rejecting_and_closing_shows_in_counters_and_state_gauges() -> None:
    manifest = ToolManifest(
        id="api", retry_policy=NO_RETRY, circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=30_000)
    )
    engine = await new_engine(manifest)
    engine.register("api", Scripted(ConnectionError("down"), ConnectionError("down"), "back"))
    _, registry = attached(engine)

    for _ in range(2):
        await engine.try_call("api")
    rejected = await engine.try_call("api")

    assert rejected.error is not None and rejected.error.kind is ErrorKind.CIRCUIT_OPEN
    samples = scrape(registry)
    assert metric(samples, "tripwire_breaker_opens_total", tool="api") == 1
    assert states(samples, "api") == {**dict.fromkeys(STATES, 0.0), "OPEN": 1.0}
    assert metric(samples, "tripwire_rejections_total", tool="api", kind="circuit_open") == 1
    assert metric(samples, "tripwire_calls_total", tool="api", outcome="rejected") == 1
    assert metric(samples, "tripwire_calls_total", tool="api", outcome="failed") == 2
    assert metric(samples, "tripwire_attempts_total", tool="api") == 2, "a rejection makes no attempt"

    await anyio.sleep(31)  # past the open period: the next call is the probe, and it succeeds
    assert await engine.call("api") == "back"

    samples = scrape(registry)
    assert states(samples, "api") == {**dict.fromkeys(STATES, 0.0), "CLOSED": 1.0}, "read when scraped"
    assert metric(samples, "tripwire_breaker_opens_total", tool="api") == 1
    assert metric(samples, "tripwire_calls_total", tool="api", outcome="ok") == 1


async def test_the_fleet_gauge_says_whether_redis_answers_once_a_fleet_event_was_seen() -> None:
    engine = await new_engine()
    _, registry = attached(engine)
    gauge = ("tripwire_fleet_available", frozenset[tuple[str, str]]())
    assert gauge not in scrape(registry), "no fleet, or one whose Redis always answered: no gauge"

    # What a Fleet publishes when its Redis stops answering, and when it answers again.
    where = "redis.internal:6379/0"
    down = FleetUnavailable(at=WALL, t=0.0, namespace="prod", server=where, error="refused", policy="local")
    engine.runtime.publish(down)
    assert scrape(registry)[gauge] == 0
    engine.runtime.publish(FleetRestored(at=WALL, t=1.0, namespace="prod", server=where, down_s=1.0))
    assert scrape(registry)[gauge] == 1


async def test_a_turn_counts_its_outcome_and_its_calls_cascades_without_any_call_or_turn_id() -> None:
    engine = await new_engine(ToolManifest(id="fetch", retry_policy=NO_RETRY))
    engine.register("fetch", Scripted(PermissionError("forbidden")))
    engine.register("parse", Scripted("parsed"))
    engine.register("note", Scripted("noted"))
    engine.register("ping", Scripted("pong"))
    events = recorded(engine)
    _, registry = attached(engine)
    degraded = Turn(
        [
            ToolCall("fetch-7f3a", "fetch"),
            ToolCall("parse-91bc", "parse", depends_on=["fetch-7f3a"]),
            ToolCall("note-55e0", "note", depends_on=["fetch-7f3a"], optional=True),
            ToolCall("ping-0d1e", "ping"),
        ],
        id="turn-8d2c",
    )

    first = await engine.run_turn(degraded)
    second = await engine.run_turn(Turn([ToolCall("ping-4b6a", "ping")], id="turn-c3f0"))

    samples = scrape(registry)
    assert metric(samples, "tripwire_turns_total", outcome=first.outcome) == 1
    assert metric(samples, "tripwire_turns_total", outcome="ok") == 1 and second.outcome == "ok"
    assert first.outcome == "degraded"
    assert metric(samples, "tripwire_calls_total", tool="fetch", outcome="failed") == 1
    assert metric(samples, "tripwire_calls_total", tool="parse", outcome="escalated") == 1
    assert metric(samples, "tripwire_calls_total", tool="note", outcome="skipped") == 1
    assert metric(samples, "tripwire_calls_total", tool="ping", outcome="ok") == 2
    assert errors(samples, "fetch", "auth_error", "permanent") == 1
    # Low cardinality: only the known label names, and no id of a call or a turn as a value.
    ids = {e.call_id for e in events if hasattr(e, "call_id")} | {
        e.turn_id for e in events if hasattr(e, "turn_id")
    }
    assert {"fetch-7f3a", "turn-8d2c", "ping-4b6a", "turn-c3f0"} <= ids
    names = {name for _, labels in samples for name, _ in labels}
    values = {value for _, labels in samples for _, value in labels}
    assert names <= LABELS
    assert not values & ids
    exposition = generate_latest(registry).decode()
    assert not re.search(r"7f3a|8d2c|4b6a|c3f0", exposition)


async def test_an_unknown_tool_is_labelled_unknown_not_by_the_name_the_model_invented() -> None:
    engine = await new_engine()
    _, registry = attached(engine)

    result = await engine.try_call("summon_dragon_9000")

    assert result.error is not None and result.error.kind is ErrorKind.UNKNOWN_TOOL
    samples = scrape(registry)
    assert metric(samples, "tripwire_calls_total", tool=UNKNOWN_TOOL_LABEL, outcome="failed") == 1
    assert errors(samples, UNKNOWN_TOOL_LABEL, "unknown_tool", "permanent") == 1
    assert "summon_dragon" not in generate_latest(registry).decode()


async def test_closing_detaches_and_unregisters_and_a_registry_holds_one_engine() -> None:
    engine = await new_engine()
    engine.register("ping", Scripted("pong"))
    metrics, registry = attached(engine)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusMetrics(engine, registry)
    await engine.call("ping")
    assert metric(scrape(registry), "tripwire_calls_total", tool="ping", outcome="ok") == 1

    metrics.close()
    metrics.close()  # idempotent
    assert scrape(registry) == {}
    await engine.call("ping")

    with PrometheusMetrics(engine, registry):  # the name is free again; counts start when attached
        assert (
            scrape(registry).get(("tripwire_calls_total", frozenset({("tool", "ping"), ("outcome", "ok")})))
            is None
        )
        await engine.call("ping")
        assert metric(scrape(registry), "tripwire_calls_total", tool="ping", outcome="ok") == 1
    assert scrape(registry) == {}


async def test_by_default_the_metrics_go_on_prometheus_clients_global_registry() -> None:
    engine = await new_engine()
    engine.register("ping", Scripted("pong"))
    with PrometheusMetrics(engine) as metrics:
        assert metrics.registry is REGISTRY
        await engine.call("ping")
        assert metric(scrape(REGISTRY), "tripwire_calls_total", tool="ping", outcome="ok") == 1
    assert scrape(REGISTRY) == {}


def test_the_endpoint_serves_the_metrics_over_http_until_closed() -> None:
    engine = make_engine()
    engine.register("ping", Scripted("pong"))
    with PrometheusMetrics(engine, CollectorRegistry()) as metrics:
        server = start_metrics_server(metrics, port=0)
        with server:
            assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/metrics"
            with urllib.request.urlopen(server.url, timeout=5) as response:
                page = response.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(page)}
        on = [s.labels for s in families["tripwire_breaker_state"].samples if s.value == 1]
        assert on == [{"tool": "ping", "state": "CLOSED"}]
        with pytest.raises(urllib.error.URLError):  # closed: nothing listens there any more
            urllib.request.urlopen(server.url, timeout=5)


EXAMPLE = readme_example("### Prometheus")
"""README's example (section "Prometheus"), exactly: this test runs it."""


def test_the_readme_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(EXAMPLE, "README.md", "exec"), namespace)
    assert capsys.readouterr().out == '[\'tripwire_calls_total{outcome="ok",tool="weather"} 1.0\']\n'
