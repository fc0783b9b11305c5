"""Prometheus counts what ``engine.stats()`` counts: after a generated workload reaching every kind
of counted fact (tests/engine/workload.py), each tool's scraped series — read back with
prometheus-client's own parser — add up to the engine's figures (engine.metrics.counted is the
definition both follow)."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine.exporters.prometheus import PrometheusMetrics
from engine.metrics import UNKNOWN_TOOL_ID
from tests.engine.workload import mixed_engine, workload

pytestmark = pytest.mark.anyio


def totals(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """Each (sample name, tool, outcome) summed over its other labels."""
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = sample.labels
            if sample.name.startswith("tripwire_") and "tool" in labels:
                key = (sample.name, labels["tool"], labels.get("outcome", ""))
                out[key] = out.get(key, 0.0) + sample.value
    return out


@pytest.mark.parametrize("seed", range(3))
async def test_every_series_adds_up_to_the_engines_figures(seed: int) -> None:
    engine, rng, _ = await mixed_engine(seed)
    registry = CollectorRegistry()
    PrometheusMetrics(engine, registry)
    await workload(engine, rng)

    scraped = totals(registry)

    def get(name: str, tool: str, outcome: str = "") -> int:
        return int(scraped.get((name, tool, outcome), 0.0))

    for tool, stats in engine.stats(anyio.current_time()).items():
        life = stats.life
        calls = {outcome: get("tripwire_calls_total", tool, outcome) for outcome in
                 ("ok", "partial", "failed", "rejected", "skipped", "escalated")}  # fmt: skip
        refused = life.failures if tool == UNKNOWN_TOOL_ID else 0  # refused before any attempt
        assert (calls["ok"] + calls["partial"], calls["failed"]) == (life.successes, life.failures), tool
        assert (calls["rejected"], calls["skipped"] + calls["escalated"]) == (
            life.rejections,
            life.skipped,
        ), tool
        assert (
            get("tripwire_attempts_total", tool) == life.calls - life.rejections - refused + life.retry_count
        )
        assert get("tripwire_retries_total", tool) == life.retry_count, tool
        assert get("tripwire_rejections_total", tool) == life.rejections, tool
        assert get("tripwire_errors_total", tool) == life.error_count + refused, tool
        assert get("tripwire_timeouts_total", tool) == life.timeout_count, tool
        assert get("tripwire_breaker_opens_total", tool) == life.circuit_breaker_opens, tool
    life = engine.stats()["feed"].life
    assert life.error_count and life.timeout_count  # cut streams were among them
