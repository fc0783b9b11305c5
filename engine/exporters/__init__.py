"""Exporters that turn the engine's events into telemetry: OpenTelemetry spans and metrics
(``engine.exporters.otel``, extra ``[otel]``) and Prometheus metrics
(``engine.exporters.prometheus``, extra ``[prometheus]``).

Each is a module of its own, imported by name; importing ``engine`` or this package imports neither.
"""

__all__: list[str] = []
