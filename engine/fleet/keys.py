"""The fleet's Redis keys: all under ``tripwire:{namespace}:``, one family per concept.

A tool id may hold ``:``, so it always ends a key, after a family name of its own: no tool's
key can be mistaken for another family's (``lease:a:b`` is tool ``a:b``'s lease, never tool
``a``'s). The braces make the namespace a Redis Cluster hash tag: a fleet's keys share a slot.

=======================  ==========  ======================================================
key                      type        holds
=======================  ==========  ======================================================
``members``              sorted set  member id → its last heartbeat (server ms)
``member:<id>``          hash        host, pid, version, started, beat, breakers (TTL gone_s)
``commands``             stream      signed operator commands (capped)
``acks:<command id>``    hash        member id → its acknowledgement (TTL one hour)
``events``               stream      batches of events, one entry per flush (capped)
``tool:<tool>``          hash        open_epoch, open_count, probe_epoch, probe_outcome, probe_by,
                                     command_generation (of the last command on the tool)
``opens:<tool>``         sorted set  member id → when it opened the tool (server ms; TTL window)
``quorum:<tool>``        string      set while a fleet-wide open stands (TTL window)
``lease:<tool>``         string      the member holding the half-open probe lease (TTL lease_ms)
``fleet_open:<tool>``    string      set while the fleet-wide open period lasts (TTL: that period)
``fleet_opens``          sorted set  tool → when its fleet-wide open period ends (server ms)
``override:<tool>``      hash        the fleet's last operator command on the tool, signed (no TTL)
``standing``             set         the tools with an ``override:<tool>``
``cooldown:<tool>``      hash        a rate-limit cooldown, signed: until_ms (server ms), member, host,
                                     pid, call, mac… (expires at until_ms: ``PEXPIREAT``)
``rate:<tool>``          hash        a ``scope: fleet`` rate's bucket: tokens, stamp (server ms);
                                     expires once it would be full again (a vanished key reads full)
=======================  ==========  ======================================================
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FleetKeys:
    """The keys of one namespace."""

    namespace: str

    @property
    def prefix(self) -> str:
        return f"tripwire:{{{self.namespace}}}:"

    @property
    def members(self) -> str:
        return self.prefix + "members"

    def member(self, member_id: str) -> str:
        return self.prefix + "member:" + member_id

    @property
    def commands(self) -> str:
        return self.prefix + "commands"

    def acks(self, command_id: int) -> str:
        return f"{self.prefix}acks:{command_id}"

    @property
    def events(self) -> str:
        return self.prefix + "events"

    def tool(self, tool_id: str) -> str:
        return self.prefix + "tool:" + tool_id

    def opens(self, tool_id: str) -> str:
        return self.prefix + "opens:" + tool_id

    def quorum(self, tool_id: str) -> str:
        return self.prefix + "quorum:" + tool_id

    def lease(self, tool_id: str) -> str:
        return self.prefix + "lease:" + tool_id

    def fleet_open(self, tool_id: str) -> str:
        return self.prefix + "fleet_open:" + tool_id

    def override(self, tool_id: str) -> str:
        return self.prefix + "override:" + tool_id

    @property
    def fleet_opens(self) -> str:
        return self.prefix + "fleet_opens"

    @property
    def standing(self) -> str:
        return self.prefix + "standing"

    def cooldown(self, tool_id: str) -> str:
        return self.prefix + "cooldown:" + tool_id

    def rate(self, tool_id: str) -> str:
        return self.prefix + "rate:" + tool_id


__all__ = ["FleetKeys"]
