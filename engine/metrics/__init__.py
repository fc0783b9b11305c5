"""Per-tool metrics (spec-map metrics.per-tool): what the engine counts, and how.

:mod:`engine.metrics.tally` keeps the counters and latency histograms (:class:`ToolMetrics`);
:mod:`engine.metrics.counted` defines every figure as what each event counts — the one source of
truth that the engine's own counting, the console's and the exporters' agree with.

Internal: import its public names from :mod:`engine`.
"""

from engine.metrics.tally import (
    GROWTH,
    LATENCY_CEILING_S,
    LATENCY_FLOOR_S,
    LATENCY_PRECISION,
    UNKNOWN_TOOL_ID,
    Counts,
    MetricsRegistry,
    ToolMetrics,
    ToolStats,
    bucket_value_s,
    latency_bucket,
    percentiles_ms,
)

__all__ = [
    "GROWTH",
    "LATENCY_CEILING_S",
    "LATENCY_FLOOR_S",
    "LATENCY_PRECISION",
    "UNKNOWN_TOOL_ID",
    "Counts",
    "MetricsRegistry",
    "ToolMetrics",
    "ToolStats",
    "bucket_value_s",
    "latency_bucket",
    "percentiles_ms",
]
