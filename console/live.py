"""Build the console on a live engine: the bundled demo, a scenario, or your own workload."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from console.app import ConsoleApp
from console.host import EngineHost, driven_engine
from engine.store import OverridePolicy, RetentionPolicy, TraceRecorder, TraceStore


@dataclass(frozen=True, slots=True)
class LiveOptions:
    manifests: Path
    traces: Path | None
    """Where to record the turns; None records nothing."""
    scenario: Path | None = None
    """Played in a loop against the bundled travel tools."""
    workload: str | None = None
    """``module:function``: your own ``async def fn(engine)`` drives the engine instead."""
    read_only: bool = False
    refresh_hz: float = 10.0
    passes: int | None = None
    """How many times to play the scenario (forever by default)."""
    retention: RetentionPolicy | None = None
    """What the store keeps while the console records (the defaults: 7 days, 1 GiB)."""
    forget_overrides: bool = False
    """Drop the operators' standing trips and disables kept in the store instead of putting them back."""


def build_live_app(options: LiveOptions) -> ConsoleApp:
    """The console on an engine of its own, hot-reloading ``options.manifests``.

    Raises ``ConfigError`` (bad manifests, scenario or fault plan), ``TraceStoreError`` or
    ``WorkloadError`` before anything starts, so the command line can print one line.
    """
    engine, workload, what = driven_engine(
        options.manifests, scenario=options.scenario, workload=options.workload,
        record=options.traces is not None, passes=options.passes,
    )  # fmt: skip
    recorder = None
    if options.traces is not None:
        store = TraceStore(options.traces)
        # Batches: the engine never waits for the disk; the console reads what is committed.
        retention = options.retention if options.retention is not None else RetentionPolicy()
        overrides: OverridePolicy = (
            "forget" if options.forget_overrides else "keep"
        )  # an operator's trip stands until reset
        recorder = TraceRecorder(store, durability="batch", retention=retention, overrides=overrides)
        recorder.attach(engine)
    parts = [what, f"{options.manifests}/"]
    if options.traces is not None:
        parts.append(f"recording {options.traces}")
    host = EngineHost(
        engine, workload, description=" · ".join(p for p in parts if p), read_only=options.read_only,
        recorder=recorder,
    )  # fmt: skip
    host.start()
    return ConsoleApp(host, refresh_hz=options.refresh_hz, freeze_gc=True, traces=options.traces)
