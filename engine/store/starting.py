"""What a recorder records as it attaches to an engine, which the engine itself never announces:
the manifest versions in force and every registered tool's breaker as recording starts.

A reader in another process (an attached console, ``tripwire breaker list``) shows this engine's
versions, files and load times and its tools' states from here on, never an earlier process's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.clock import time_anywhere
from engine.events import Event, ManifestLoaded, RecordingStarted
from engine.store.writers import this_process
from engine.strategies.breaker.machine import BreakerState
from engine.strategies.sections import dump_sections

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.store")


def starting_events(engine: Engine, *, keeps_overrides: bool) -> list[Event]:
    """``RecordingStarted`` with every registered tool's breaker, then the manifest versions in
    force as ``ManifestLoaded`` events (the engine announces reloads only): a reader that starts
    from the newest ``RecordingStarted`` reads this engine's run whole."""
    return [_recording_started(engine, keeps_overrides), *_versions_in_force(engine)]


def _versions_in_force(engine: Engine) -> list[Event]:
    wall, now = engine.wall_clock(), time_anywhere(engine.runtime.clock)
    events: list[Event] = []
    for tool_id, entry in engine.manifests.entries.items():
        try:
            content = engine.manifest(tool_id).model_dump(mode="json")
        except Exception as exc:
            log.warning("trace recorder: could not snapshot manifest %s of %s: %s", entry.digest, tool_id,
                        exc)  # fmt: skip
            continue
        events.append(
            ManifestLoaded(
                at=entry.loaded_at, t=now - max(0.0, wall - entry.loaded_at), tool_id=tool_id,
                path=entry.path, version=entry.version, digest=entry.digest, manifest=content,
            )
        )  # fmt: skip
    return events


def _recording_started(engine: Engine, keeps_overrides: bool) -> RecordingStarted:
    now, me = time_anywhere(engine.runtime.clock), this_process()
    breakers = {}
    for tool_id in engine.tool_ids:
        b = engine.breaker(tool_id)
        breakers[tool_id] = {
            "state": b.state.value, "consecutive_failures": b.consecutive_failures,
            "half_open_at": b.half_open_at if b.state is BreakerState.OPEN else None,
        }  # fmt: skip
    shared = dump_sections(engine.manifests.shared, "json")
    return RecordingStarted(
        at=engine.wall_clock(), t=now, host=me.host, pid=me.pid, breakers=breakers,
        keeps_overrides=keeps_overrides, shared_strategies=shared,
    )  # fmt: skip


__all__ = ["starting_events"]
