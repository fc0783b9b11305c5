"""The fleet as a console shows it: per tool, how many processes see it in each state, who holds
its probe lease, its calls and errors summed; per process, who it is, when it last beat and its
breakers. And the fleet's live events, tailed from its stream.

:func:`fold_fleet` is pure (the records in, the view out: tested without Redis);
:func:`read_fleet` and :func:`tail_events` are its I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.fleet.client import FleetClient
from engine.fleet.config import FleetConfig, as_config
from engine.fleet.keys import FleetKeys
from engine.fleet.member import BULKHEAD_KEYS, SHARED_KEYS
from engine.liveness import judge

MemberStatus = Literal["live", "stale", "gone"]


@dataclass(frozen=True, slots=True)
class MemberView:
    """One process: ``stale`` once it missed beats for ``stale_s``, ``gone`` after ``gone_s`` (or
    when its record has expired)."""

    id: str
    status: MemberStatus
    host: str = ""
    pid: int = 0
    version: str = ""
    started: float | None = None
    last_beat: float | None = None
    """Redis server time of its last heartbeat, in seconds."""
    age_s: float | None = None
    """Seconds since that beat, by the server's clock."""
    breakers: dict[str, str] = field(default_factory=dict)
    """Tool → its breaker state in this process."""
    redis_available: bool = True
    events_dropped: int = 0
    strategies: dict[str, dict[str, int]] = field(default_factory=dict)
    """Tool → its bulkhead's and own retry budget's figures in this process
    (:func:`~engine.fleet.member.strategy_summary`); empty from an older member."""
    shared_budget: dict[str, int] | None = None
    """The engine-wide retry budget's figures in this process; None without one (or an older member)."""
    rate_limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Tool → its rate limit in this process (:meth:`~engine.fleet.rate_limits.SharedRateLimits.summary`):
    its cooldown's end (server ms, 0: none) and who started it, a fleet-wide rate's lease or fallback."""


@dataclass(frozen=True, slots=True)
class FleetCooldown:
    """A tool's fleet-wide cooldown as its record in Redis holds it (each process checks the
    record's MAC before honouring it; a reader without the key cannot)."""

    until: float
    """When it ends: the Redis server's wall-clock time, in seconds."""
    started_by: str
    """The member whose call's rate-limit error started it."""
    host: str
    remaining_s: float
    """Seconds left, by the server's clock."""


@dataclass(frozen=True, slots=True)
class FleetBulkhead:
    """A tool's bulkheads summed over the processes that report one: each process has its own,
    so ``max_concurrent`` is the sum of their limits, not one limit the fleet shares."""

    in_flight: int
    max_concurrent: int
    queued: int
    max_queued: int
    rejected: int
    """Attempts refused (full, or the wait ran out) since each process started."""
    processes: int


@dataclass(frozen=True, slots=True)
class FleetBudget:
    """Retry budgets summed over the processes that report one (each process has its own window)."""

    refused: int
    """Retries refused since each process started."""
    processes: int
    calls: int = 0
    """The engine-wide budget's windows: calls, retries spent and allowed (a tool's own: 0)."""
    retries: int = 0
    allowed: int = 0


@dataclass(frozen=True, slots=True)
class ToolView:
    """One tool across the processes that are not gone."""

    tool_id: str
    states: dict[str, int]
    """Breaker state → how many processes see it so."""
    lease_holder: str | None
    """The member holding the half-open probe lease, if any."""
    calls: int = 0
    errors: int = 0
    """Failed attempts, summed."""
    failures: int = 0
    """Calls that ended failed, summed."""
    rejections: int = 0
    bulkhead: FleetBulkhead | None = None
    """None when no process reports a bulkhead for the tool (none has one, or all are older)."""
    budget: FleetBudget | None = None
    """The tool's own retry budgets; None when no process reports one."""
    cooldown: FleetCooldown | None = None
    """Its fleet-wide rate-limit cooldown, while one stands."""

    @property
    def processes(self) -> int:
        return sum(self.states.values())


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet at one instant (``now``: the Redis server's time, in seconds)."""

    namespace: str
    now: float
    members: tuple[MemberView, ...]
    tools: dict[str, ToolView]
    shared_budget: FleetBudget | None = None
    """The engine-wide retry budgets; None when no process reports one."""

    def member(self, member_id: str) -> MemberView:
        return next(m for m in self.members if m.id == member_id)


def fold_fleet(
    namespace: str,
    now_ms: float,
    beats: dict[str, float],
    records: dict[str, dict[str, str]],
    leases: dict[str, str | None],
    *,
    stale_s: float,
    gone_s: float,
    cooldowns: dict[str, dict[str, str]] | None = None,
) -> FleetView:
    """The view from what Redis holds: ``beats`` (member → last beat, ms, from the index),
    ``records`` (member → its hash; missing or empty: expired), ``leases`` (tool → holder) and
    ``cooldowns`` (tool → its cooldown record's hash)."""
    members = []
    tools: dict[str, dict[str, Any]] = {}
    engine_wide: dict[str, int] = {}
    for member_id in sorted(beats, key=lambda m: (-beats[m], m)):
        record = records.get(member_id) or {}
        beat_ms = float(record.get("beat") or beats[member_id])
        age_s = max(now_ms - beat_ms, 0.0) / 1000.0
        # An expired record is a process gone; otherwise its heartbeat's age decides (engine.liveness).
        judged = judge(age_s, stale_after_s=stale_s, gone_after_s=gone_s) if record else "gone"
        status: MemberStatus = "live" if judged == "live" else "stale" if judged == "stale" else "gone"
        breakers = _breakers(record.get("breakers"))
        strategies = {
            tool: {k: _int(v) for k, v in data.items()}
            for tool, data in _breakers(record.get("strategies")).items()
        }
        shared = _json(record.get("shared_budget"))
        shared_budget = {k: _int(v) for k, v in shared.items()} if isinstance(shared, dict) else None
        members.append(
            MemberView(
                id=member_id, status=status, host=record.get("host", ""), pid=_int(record.get("pid")),
                version=record.get("version", ""), started=_float(record.get("started")),
                last_beat=beat_ms / 1000.0, age_s=age_s,
                breakers={tool: str(data.get("state", "")) for tool, data in breakers.items()},
                redis_available=record.get("redis_available", "1") == "1",
                events_dropped=_int(record.get("events_dropped")),
                strategies=strategies, shared_budget=shared_budget,
                rate_limits=_breakers(record.get("rate_limits")),
            )
        )  # fmt: skip
        if status == "gone":
            continue
        for tool, data in breakers.items():
            sums = tools.setdefault(tool, _no_sums())
            state = str(data.get("state", "UNKNOWN"))
            sums["states"][state] = sums["states"].get(state, 0) + 1
            for name in ("calls", "errors", "failures", "rejections"):
                sums[name] += _int(data.get(name))
        for tool, figures in strategies.items():
            sums = tools.setdefault(tool, _no_sums())
            if "max_concurrent" in figures:
                _add(sums["bulkhead"], figures, BULKHEAD_KEYS)
            if "budget_refused" in figures:
                _add(sums["budget"], {"refused": figures["budget_refused"]}, ("refused",))
        if shared_budget is not None:
            _add(engine_wide, shared_budget, SHARED_KEYS)
    for tool in leases:
        tools.setdefault(tool, _no_sums())
    views = {
        tool: ToolView(tool, dict(sorted(sums["states"].items())), leases.get(tool) or None,
                       sums["calls"], sums["errors"], sums["failures"], sums["rejections"],
                       FleetBulkhead(**sums["bulkhead"]) if sums["bulkhead"] else None,
                       FleetBudget(**sums["budget"]) if sums["budget"] else None,
                       _cooldown((cooldowns or {}).get(tool), now_ms))
        for tool, sums in sorted(tools.items())
    }  # fmt: skip
    shared_view = FleetBudget(**engine_wide) if engine_wide else None
    return FleetView(namespace, now_ms / 1000.0, tuple(members), views, shared_view)


def _cooldown(record: dict[str, str] | None, now_ms: float) -> FleetCooldown | None:
    """A cooldown record as the view shows it; None when there is none, it is over or unreadable."""
    if not record:
        return None
    try:
        until_ms = int(record["until_ms"])
        if until_ms <= now_ms:
            return None
        return FleetCooldown(
            until_ms / 1000.0, record["member"], record.get("host", ""), (until_ms - now_ms) / 1000
        )
    except (KeyError, ValueError):  # a record nobody of ours wrote: no opinion
        return None


def _no_sums() -> dict[str, Any]:
    return {
        "states": {},
        "calls": 0,
        "errors": 0,
        "failures": 0,
        "rejections": 0,
        "bulkhead": {},
        "budget": {},
    }


def _add(sums: dict[str, int], figures: dict[str, int], names: tuple[str, ...]) -> None:
    """One more process's figures into ``sums`` (empty until the first: absent is not zero)."""
    for name in names:
        sums[name] = sums.get(name, 0) + figures.get(name, 0)
    sums["processes"] = sums.get("processes", 0) + 1


def _json(raw: str | None) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:  # a record nobody of ours wrote: no opinion
        return None


def _breakers(raw: str | None) -> dict[str, dict[str, Any]]:
    data = _json(raw)
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _server_ms(reply: Any) -> float:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) / 1000


async def read_fleet(target: FleetConfig | str | FleetClient) -> FleetView:
    """Read the fleet's processes and tools now (three round trips)."""
    client = target if isinstance(target, FleetClient) else FleetClient(as_config(target))
    try:
        config = client.config
        keys = FleetKeys(config.namespace)
        time_reply, index = await client.execute(("TIME",), ("ZRANGE", keys.members, 0, -1, "WITHSCORES"))
        beats = {str(member): float(score) for member, score in _pairs(index)}
        ids = list(beats)
        hashes = await client.execute(*(("HGETALL", keys.member(m)) for m in ids)) if ids else []
        records = {m: dict(h or {}) for m, h in zip(ids, hashes, strict=True)}
        tools = sorted({t for r in records.values() for t in _breakers(r.get("breakers"))})
        commands = [("GET", keys.lease(t)) for t in tools] + [("HGETALL", keys.cooldown(t)) for t in tools]
        replies = await client.execute(*commands) if tools else []
        leases = {t: (str(h) if h else None) for t, h in zip(tools, replies, strict=False)}
        cooldowns = {t: dict(c or {}) for t, c in zip(tools, replies[len(tools) :], strict=True)}
        return fold_fleet(
            config.namespace, _server_ms(time_reply), beats, records, leases,
            stale_s=config.stale_s, gone_s=config.gone_s, cooldowns=cooldowns,
        )  # fmt: skip
    finally:
        if client is not target:
            await client.aclose()


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """``ZRANGE … WITHSCORES`` as pairs, whichever shape redis-py gave it."""
    items = list(reply or [])
    if items and not isinstance(items[0], list | tuple):
        return list(zip(items[::2], items[1::2], strict=True))
    return [(item[0], item[1]) for item in items]


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """One entry of the fleet's event stream: a batch of one process's events.

    ``events`` are whole, as data (``Event.to_dict()``; :func:`engine.events.event_from_dict`
    rebuilds them); the success path's events and rejections come as ``counts`` instead
    (event type → tool → how many), since encoding each would cost more than the call.
    """

    member_id: str
    entry_id: str
    events: list[dict[str, Any]]
    counts: dict[str, dict[str, int]]


async def tail_events(
    target: FleetConfig | str | FleetClient, after: str = "0-0", *, count: int = 100
) -> tuple[list[StreamBatch], str]:
    """The stream's batches after entry ``after`` (at most ``count``) and the id to pass next time:
    a console tails the fleet by calling it again with that id."""
    client = target if isinstance(target, FleetClient) else FleetClient(as_config(target))
    try:
        keys = FleetKeys(client.config.namespace)
        (entries,) = await client.execute(("XRANGE", keys.events, f"({after}", "+", "COUNT", count))
        batches = []
        last = after
        for entry_id, flat in entries or []:
            last = str(entry_id)
            fields = dict(flat) if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
            try:
                events = json.loads(fields.get("events", "[]"))
                counts = json.loads(fields.get("counts", "{}"))
            except ValueError:  # an entry nobody of ours wrote: no opinion
                continue
            batches.append(
                StreamBatch(
                    str(fields.get("member", "")), last,
                    [e for e in events if isinstance(e, dict)] if isinstance(events, list) else [],
                    counts if isinstance(counts, dict) else {},
                )
            )  # fmt: skip
        return batches, last
    finally:
        if client is not target:
            await client.aclose()


__all__ = [
    "FleetBudget",
    "FleetBulkhead",
    "FleetCooldown",
    "FleetView",
    "MemberStatus",
    "MemberView",
    "StreamBatch",
    "ToolView",
    "fold_fleet",
    "read_fleet",
    "tail_events",
]
