"""The Prometheus exporter's bulkhead and retry-budget metrics (issue 23), parsed back with
prometheus-client's own parser: read from the strategies when scraped (what ``engine.stats()``
reports), only for the tools that have the section, with low-cardinality labels; a rejection by a
full bulkhead is told from the breaker's by its kind. Every engine test runs on both backends
(virtual time) and, where it builds its engine with ``new_engine``, in both engine modes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from prometheus_client import CollectorRegistry

from engine import BreakerConfig, Engine, RetryPolicy, ToolManifest
from engine.exporters.prometheus import SHARED_BUDGET_LABEL
from engine.kinds import ErrorKind
from tests.engine.conftest import Scripted, make_engine, new_engine
from tests.engine.integrations.test_prometheus import LABELS, NO_RETRY, Samples, attached, metric, scrape

pytestmark = pytest.mark.anyio

Manifest: Callable[..., ToolManifest] = ToolManifest
"""``ToolManifest``, with the strategies' sections (``bulkhead=``, ``retry_budget=``) that its
validator knows and its signature does not."""

BULKHEAD_FAMILIES = (
    "tripwire_bulkhead_in_flight",
    "tripwire_bulkhead_queued",
    "tripwire_bulkhead_limit",
    "tripwire_bulkhead_queue_limit",
    "tripwire_bulkhead_wait_p95_seconds",
    "tripwire_bulkhead_rejections_total",
)
RETRIES = RetryPolicy(initial_delay_ms=0, max_delay_ms=0, jitter_percent=0, max_attempts=3)
NEVER_OPENS = BreakerConfig(failure_threshold=100)


def bulkhead(samples: Samples, tool: str) -> dict[str, float]:
    """The tool's bulkhead series, by metric name (rejections by ``reason``)."""
    return {
        "in_flight": metric(samples, "tripwire_bulkhead_in_flight", tool=tool),
        "queued": metric(samples, "tripwire_bulkhead_queued", tool=tool),
        "limit": metric(samples, "tripwire_bulkhead_limit", tool=tool),
        "queue_limit": metric(samples, "tripwire_bulkhead_queue_limit", tool=tool),
        "wait_p95_s": metric(samples, "tripwire_bulkhead_wait_p95_seconds", tool=tool),
        "full": metric(samples, "tripwire_bulkhead_rejections_total", tool=tool, reason="full"),
        "timeout": metric(samples, "tripwire_bulkhead_rejections_total", tool=tool, reason="timeout"),
    }


def series_of(samples: Samples, tool: str) -> set[str]:
    """The names of every sample labelled ``tool``."""
    return {name for name, labels in samples if ("tool", tool) in labels}


def scrape_on_a_thread(registry: CollectorRegistry) -> Samples:
    """A scrape on a thread of its own, as start_metrics_server's; the loop waits blocked meanwhile,
    so virtual time cannot leap ahead while it runs."""
    scraped: list[Samples] = []
    thread = threading.Thread(target=lambda: scraped.append(scrape(registry)))
    thread.start()
    thread.join()
    return scraped[0]


class Failing:
    """Fails every attempt with a transient error."""

    def __init__(self) -> None:
        self.attempts = 0

    async def __call__(self) -> str:
        self.attempts += 1
        raise ConnectionResetError("connection reset by peer")


async def test_a_bulkhead_shows_its_occupancy_rejections_and_waits_as_its_strategy_has_them() -> None:
    engine = await new_engine(
        Manifest(
            id="t", retry_policy=NO_RETRY,
            bulkhead={"max_concurrent": 2, "max_queued": 1, "queue_timeout_ms": 5000},
        ),
        Manifest(
            id="slow", retry_policy=NO_RETRY,
            bulkhead={"max_concurrent": 1, "max_queued": 5, "queue_timeout_ms": 200},
        ),
        ToolManifest(id="plain"),
    )  # fmt: skip
    engine.register("t", Scripted("ok", duration=1.0))
    engine.register("slow", Scripted("ok", duration=1.0))
    engine.register("plain", Scripted("pong"))
    _, registry = attached(engine)
    await engine.call("plain")

    async with anyio.create_task_group() as tg:
        for _ in range(4):  # at 0, 10, 20, 30 ms: two run, one queues, the fourth is refused at once
            tg.start_soon(engine.try_call, "t")
            await anyio.sleep(0.01)
        for _ in range(2):  # at 40 and 50 ms: one runs, one waits 200 ms and is refused
            tg.start_soon(engine.try_call, "slow")
            await anyio.sleep(0.01)
        await anyio.sleep(0.5)
        during = scrape(registry)
        stats = engine.stats()
    after = scrape(registry)

    assert bulkhead(during, "t") == {
        "in_flight": 2, "queued": 1, "limit": 2, "queue_limit": 1, "wait_p95_s": 0, "full": 1, "timeout": 0,
    }  # fmt: skip
    assert bulkhead(during, "slow") == {
        "in_flight": 1, "queued": 0, "limit": 1, "queue_limit": 5, "wait_p95_s": pytest.approx(0.2),
        "full": 0, "timeout": 1,
    }  # fmt: skip
    # The single source: the figures engine.stats() reports for the strategy, not counted apart.
    facts = stats["t"].strategies["bulkhead"]
    assert (facts["in_flight"], facts["queued"], facts["rejected_full"]) == (2, 1, 1)
    # Once the slots free up: nobody in flight, the queued call's wait (20 ms → 1 s) in the p95.
    assert bulkhead(after, "t") == {
        "in_flight": 0, "queued": 0, "limit": 2, "queue_limit": 1, "wait_p95_s": pytest.approx(0.98),
        "full": 1, "timeout": 0,
    }  # fmt: skip
    # Calls refused before any attempt, told from the breaker's by their kind.
    for tool in ("t", "slow"):
        assert metric(after, "tripwire_rejections_total", tool=tool, kind="bulkhead_full") == 1
        assert metric(after, "tripwire_calls_total", tool=tool, outcome="rejected") == 1
    assert metric(after, "tripwire_calls_total", tool="t", outcome="ok") == 3
    assert not series_of(after, "plain") & set(BULKHEAD_FAMILIES), "a tool without a bulkhead has no series"
    names = {name for _, labels in after for name, _ in labels}
    assert names <= LABELS | {"reason"}
    reasons = {value for _, labels in after for name, value in labels if name == "reason"}
    assert reasons == {"full", "timeout"}

    await anyio.sleep(61)  # the waits are more than a minute old: out of the p95, read when scraped
    later = scrape(registry)
    assert metric(later, "tripwire_bulkhead_wait_p95_seconds", tool="t") == 0
    assert metric(later, "tripwire_bulkhead_wait_p95_seconds", tool="slow") == 0


async def test_a_scrape_on_another_thread_dates_the_waits_by_the_engines_clock() -> None:
    engine = await new_engine(
        Manifest(id="t", retry_policy=NO_RETRY, bulkhead={"max_concurrent": 1, "max_queued": 1})
    )
    engine.register("t", Scripted("ok", duration=1.0))
    _, registry = attached(engine)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.call, "t")
        await anyio.sleep(0.25)
        tg.start_soon(engine.call, "t")  # waits 0.75 s (virtual) for the slot

    here = scrape(registry)
    # What start_metrics_server's thread runs: the engine's clock (virtual here) may not be
    # readable there, and the monotonic clock is not the engine's.
    there = scrape_on_a_thread(registry)

    assert metric(here, "tripwire_bulkhead_wait_p95_seconds", tool="t") == pytest.approx(0.75)
    assert metric(there, "tripwire_bulkhead_wait_p95_seconds", tool="t") == pytest.approx(0.75)


async def test_a_retry_budgets_refusals_are_counted_for_the_tool_that_has_one() -> None:
    engine = await new_engine(
        Manifest(
            id="flaky", retry_policy=RETRIES, circuit_breaker=NEVER_OPENS,
            retry_budget={"budget_percent": 0, "min_retries_per_s": 0},
        ),
        ToolManifest(id="other", retry_policy=RETRIES, circuit_breaker=NEVER_OPENS),
    )  # fmt: skip
    flaky, other = Failing(), Failing()
    engine.register("flaky", flaky)
    engine.register("other", other)
    _, registry = attached(engine)
    assert metric(scrape(registry), "tripwire_retry_budget_refusals_total", tool="flaky") == 0

    for _ in range(2):
        await engine.try_call("flaky")
        await engine.try_call("other")

    samples = scrape(registry)
    assert (flaky.attempts, other.attempts) == (2, 6), "every retry of flaky refused, other's all made"
    assert metric(samples, "tripwire_retry_budget_refusals_total", tool="flaky") == 2
    assert engine.stats()["flaky"].strategies["retry_budget"]["refused"] == 2
    assert "tripwire_retry_budget_refusals_total" not in series_of(samples, "other")
    assert not series_of(samples, "flaky") & set(BULKHEAD_FAMILIES), "no bulkhead: no bulkhead series"
    assert metric(samples, "tripwire_retries_total", tool="other") == 4


async def test_the_engine_wide_budget_is_one_series_not_one_per_tool(tmp_path: Path) -> None:
    (tmp_path / "defaults.yaml").write_text(
        "defaults: {}\nretry_budget: {budget_percent: 0, min_retries_per_s: 0.1}\n"
    )
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(
            f"tool:\n  id: {name}\n  side_effect: read_only\n"
            "  retry_policy: {initial_delay_ms: 0, max_delay_ms: 0}\n"
        )
    engine = Engine(tmp_path)
    engine.register("a", Failing())
    engine.register("b", Failing())
    _, registry = attached(engine)

    await engine.try_call("a")  # spends the one retry the window allows (0.1/s × 10 s); the next refused
    await engine.try_call("b")  # finds it spent: refused
    await engine.try_call("a")  # refused too

    samples = scrape(registry)
    assert metric(samples, "tripwire_retry_budget_refusals_total", tool=SHARED_BUDGET_LABEL) == 3
    assert engine.stats()["a"].strategies["shared.retry_budget"]["refused"] == 3
    refusals = [labels for name, labels in samples if name == "tripwire_retry_budget_refusals_total"]
    assert refusals == [frozenset({("tool", SHARED_BUDGET_LABEL)})], "counted once, not under each tool"


async def test_a_breaker_rejection_and_a_bulkhead_rejection_are_counted_apart() -> None:
    engine = await new_engine(
        Manifest(id="t", retry_policy=NO_RETRY, bulkhead={"max_concurrent": 1, "max_queued": 0})
    )
    engine.register("t", Scripted("ok", duration=1.0))
    _, registry = attached(engine)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.call, "t")
        await anyio.sleep(0.1)
        refused = await engine.try_call("t")
    engine.trip("t", actor="test", reason="maintenance")
    tripped = await engine.try_call("t")

    assert refused.error is not None and refused.error.kind is ErrorKind.BULKHEAD_FULL
    assert tripped.error is not None and tripped.error.kind is ErrorKind.CIRCUIT_OPEN
    samples = scrape(registry)
    assert metric(samples, "tripwire_rejections_total", tool="t", kind="bulkhead_full") == 1
    assert metric(samples, "tripwire_rejections_total", tool="t", kind="circuit_open") == 1
    assert metric(samples, "tripwire_calls_total", tool="t", outcome="rejected") == 2
    assert metric(samples, "tripwire_bulkhead_rejections_total", tool="t", reason="full") == 1


def test_readmes_table_lists_every_metric_family_and_no_other() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n### Prometheus\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(tripwire_\w+)` \|", section, flags=re.MULTILINE))
    metrics, _ = attached(make_engine())
    # A counter family is named without its _total, as prometheus-client keeps it.
    described = {
        family.name + ("_total" if family.type == "counter" else "") for family in metrics.describe()
    }
    assert listed == described
    metrics.close()
