"""The fleet: many processes running one deployment's agents share breaker decisions, operator
commands and live events through Redis (extra ``tripwire[fleet]``: redis-py).

Each process keeps deciding every call on its own breaker — nothing on the call path waits on
the network — and a :class:`Fleet` task applies, between calls, what the fleet shares:

* operator trip / reset / disable, fleet-wide, signed with the fleet's command key and
  acknowledged by every process (:func:`send_command`, :func:`acknowledgements`); a trip or a
  disable stands until reset, for a process that joins later, comes back, or registers the tool
  later too (the newest signed command on the tool only: each carries the tool's generation);
* the half-open probe: one process in the fleet holds the lease and probes; the others keep
  rejecting until it publishes the result, then close or re-open with it;
* an advisory fleet OPEN: a tool opens everywhere once ``quorum`` processes (default 2) opened it
  within ``window_s``, so one bad node cannot open it for the others (a process joining within
  that open period opens it for the rest of the period);
* live events: every process appends its events, in batches, to a capped Redis stream
  (:func:`tail_events`); the SQLite trace store stays per process;
* rate limits (:mod:`engine.fleet.rate_limits`): a tool's cooldown after a 429, started in one
  process, is honoured by every process (signed, expiring at its end); a ``scope: fleet`` rate is
  one budget for the fleet, leased from Redis each round trip (the fleet share while Redis is away).

Redis unreachable is a policy (``on_unavailable``): ``local`` goes on alone, loudly
(``FleetUnavailable`` / ``FleetRestored`` events), ``fail_closed`` forces the named tools open
until Redis is back. A console reads the fleet with :func:`read_fleet`.

Usage::

    async with engine, Fleet(engine, "redis://localhost:6379/0?namespace=prod"):
        await engine.call("search", query="…")
"""

from engine.fleet.client import FleetClient
from engine.fleet.commands import (
    CommandConflict,
    FleetAck,
    FleetAction,
    SentCommand,
    acknowledgements,
    load_fleet_key,
    send_command,
)
from engine.fleet.config import (
    KEY_FILE_ENV,
    PASSWORD_ENV,
    FleetConfig,
    FleetConfigError,
    Secret,
    parse_fleet_url,
)
from engine.fleet.fleet import FLEET_ACTOR, FLEET_REASON, Fleet
from engine.fleet.keys import FleetKeys
from engine.fleet.view import (
    FleetBudget,
    FleetBulkhead,
    FleetCooldown,
    FleetView,
    MemberView,
    StreamBatch,
    ToolView,
    fold_fleet,
    read_fleet,
    tail_events,
)

__all__ = [
    "FLEET_ACTOR",
    "FLEET_REASON",
    "KEY_FILE_ENV",
    "PASSWORD_ENV",
    "CommandConflict",
    "Fleet",
    "FleetAck",
    "FleetAction",
    "FleetBudget",
    "FleetBulkhead",
    "FleetClient",
    "FleetConfig",
    "FleetConfigError",
    "FleetCooldown",
    "FleetKeys",
    "FleetView",
    "MemberView",
    "Secret",
    "SentCommand",
    "StreamBatch",
    "ToolView",
    "acknowledgements",
    "fold_fleet",
    "load_fleet_key",
    "parse_fleet_url",
    "read_fleet",
    "send_command",
    "tail_events",
]
