"""One process of the fleet as the others see it: who it is and what its breakers say.

Its record (``member:<id>``, a hash) is rewritten at every heartbeat and expires ``gone_s`` after
the last one, so a process that died leaves no record behind, only its entry in the ``members``
index (pruned later): readers show it *stale* once it misses beats, then *gone*.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from engine.fleet.client import Command
from engine.fleet.config import FleetConfig
from engine.fleet.keys import FleetKeys
from engine.fleet.scripts import HEARTBEAT

if TYPE_CHECKING:
    from engine.engine import Engine

FORGET_AFTER = 10
"""A member gone this many times ``gone_s`` leaves the index too."""


@cache
def tripwire_version() -> str:
    try:
        return importlib.metadata.version("tripwire")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """A process of the fleet: ``host:pid:random`` (a pid reused after a restart is another member)."""

    id: str
    host: str
    pid: int
    version: str
    started: float
    """Wall-clock time it joined."""


def this_process(version: str | None = None) -> MemberIdentity:
    host, pid = socket.gethostname(), os.getpid()
    return MemberIdentity(
        f"{host}:{pid}:{secrets.token_hex(3)}", host, pid, version or tripwire_version(), time.time()
    )


def breaker_summary(engine: Engine) -> dict[str, dict[str, Any]]:
    """Per tool: its breaker state and lifetime counts (what the fleet's readers sum)."""
    stats = engine.stats()
    summary = {}
    for tool_id in list(engine.tool_ids):
        life = stats[tool_id].life if tool_id in stats else None
        summary[tool_id] = {
            "state": engine.breaker(tool_id).state.value,
            "calls": life.calls if life else 0,
            "errors": life.error_count if life else 0,
            "failures": life.failures if life else 0,
            "rejections": life.rejections if life else 0,
        }
    return summary


def heartbeat(
    keys: FleetKeys,
    config: FleetConfig,
    member: MemberIdentity,
    breakers: dict[str, dict[str, Any]],
    *,
    redis_available: bool,
    events_dropped: int,
) -> Command:
    """The one script call that says ``member`` is alive, with its breakers."""
    fields = {
        "id": member.id, "host": member.host, "pid": member.pid, "version": member.version,
        "started": repr(member.started), "breakers": json.dumps(breakers, separators=(",", ":")),
        "redis_available": int(redis_available), "events_dropped": events_dropped,
    }  # fmt: skip
    flat = [str(item) for pair in fields.items() for item in pair]
    ttl_ms = int(config.gone_s * 1000)
    return (
        "EVAL", HEARTBEAT, 2, keys.members, keys.member(member.id),
        member.id, ttl_ms, ttl_ms * FORGET_AFTER, *flat,
    )  # fmt: skip


__all__ = ["MemberIdentity", "breaker_summary", "heartbeat", "this_process", "tripwire_version"]
