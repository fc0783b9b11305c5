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
    from engine.metrics import ToolStats

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


def breaker_summary(engine: Engine, stats: dict[str, ToolStats] | None = None) -> dict[str, dict[str, Any]]:
    """Per tool: its breaker state and lifetime counts (what the fleet's readers sum)."""
    stats = engine.stats() if stats is None else stats
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


def strategy_summary(
    engine: Engine, stats: dict[str, ToolStats] | None = None
) -> tuple[dict[str, dict[str, int]], dict[str, int] | None]:
    """Per tool with a bulkhead or a retry budget of its own: a few counts (:data:`BULKHEAD_KEYS`,
    :data:`BUDGET_KEYS`); and the engine-wide retry budget's (:data:`SHARED_KEYS`), None without
    one. Flat integers only, tools with neither left out: a record stays small whatever the fleet."""
    stats = engine.stats() if stats is None else stats
    tools: dict[str, dict[str, int]] = {}
    shared: dict[str, int] | None = None
    for tool_id, tool_stats in stats.items():
        facts = tool_stats.strategies
        figures: dict[str, int] = {}
        bulkhead = facts.get("bulkhead")
        if bulkhead:
            figures.update(
                in_flight=int(bulkhead["in_flight"]), max_concurrent=int(bulkhead["max_concurrent"]),
                queued=int(bulkhead["queued"]), max_queued=int(bulkhead["max_queued"]),
                rejected=int(bulkhead["rejected_full"]) + int(bulkhead["rejected_timeout"]),
            )  # fmt: skip
        budget = facts.get("retry_budget")
        if budget:
            figures["budget_refused"] = int(budget["refused"])
        if figures:
            tools[tool_id] = figures
        engine_wide = facts.get("shared.retry_budget")
        if engine_wide and shared is None:  # the same window in every tool's facts
            shared = {key: int(engine_wide[key]) for key in SHARED_KEYS}
    return tools, shared


BULKHEAD_KEYS = ("in_flight", "max_concurrent", "queued", "max_queued", "rejected")
"""A tool's bulkhead in a member's record: its figures now; ``rejected``, full or timed out, since
the process started."""
BUDGET_KEYS = ("budget_refused",)
"""A tool's own retry budget in a member's record: retries it refused since the process started."""
SHARED_KEYS = ("calls", "retries", "allowed", "refused")
"""The engine-wide retry budget in a member's record: its window now, and its refusals."""


def heartbeat(
    keys: FleetKeys,
    config: FleetConfig,
    member: MemberIdentity,
    breakers: dict[str, dict[str, Any]],
    *,
    redis_available: bool,
    events_dropped: int,
    strategies: dict[str, dict[str, int]] | None = None,
    shared_budget: dict[str, int] | None = None,
    rate_limits: dict[str, dict[str, Any]] | None = None,
) -> Command:
    """The one script call that says ``member`` is alive, with its breakers and its strategies'
    figures (:func:`strategy_summary`; a record without them is an older member's), and its rate
    limits (:meth:`~engine.fleet.rate_limits.SharedRateLimits.summary`: each tool's cooldown end
    and who started it, a fleet-wide rate's lease or fallback)."""
    compact = (",", ":")
    fields = {
        "id": member.id, "host": member.host, "pid": member.pid, "version": member.version,
        "started": repr(member.started), "breakers": json.dumps(breakers, separators=compact),
        "redis_available": int(redis_available), "events_dropped": events_dropped,
        "strategies": json.dumps(strategies or {}, separators=compact),
        "shared_budget": json.dumps(shared_budget, separators=compact),
        "rate_limits": json.dumps(rate_limits or {}, separators=compact),
    }  # fmt: skip
    flat = [str(item) for pair in fields.items() for item in pair]
    ttl_ms = int(config.gone_s * 1000)
    return (
        "EVAL", HEARTBEAT, 2, keys.members, keys.member(member.id),
        member.id, ttl_ms, ttl_ms * FORGET_AFTER, *flat,
    )  # fmt: skip


__all__ = [
    "BUDGET_KEYS",
    "BULKHEAD_KEYS",
    "SHARED_KEYS",
    "MemberIdentity",
    "breaker_summary",
    "heartbeat",
    "strategy_summary",
    "this_process",
    "tripwire_version",
]
