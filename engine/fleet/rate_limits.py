"""The fleet's side of the tools' rate limits: a cooldown every process honours, and a ``scope:
fleet`` rate that is one budget for the whole fleet. Only tools with a ``rate_limit`` section take
part; with none, the fleet sends nothing more.

Each sync round trip (the fleet's one, :class:`~engine.fleet.fleet.Fleet`) carries, for them:

* **cooldowns started here** — a limiter whose cooldown this process set (a 429, a ``Retry-After``)
  is published as a signed record (:mod:`engine.fleet.cooldown_record`) whose key expires at the
  cooldown's end (server time, ``PEXPIREAT``); a later end replaces it, an earlier one never does;
* **cooldowns started elsewhere** — every tool's record is read (:data:`RATE_SYNC`) and, when its
  MAC matches, applied with ``RateLimiter.extend_cooldown`` as what is left of it by the server's
  clock (``CooldownStarted`` with ``started_by``: the member that started it). A record without a
  valid MAC is ignored, logged once; the next publish here replaces it;
* **resets** — ``engine.reset`` here (or a fleet reset command, which every process carries out)
  deletes the record; a process that held it finds it gone before its end and ends its own
  (``CooldownEnded``, ``how="reset"``, actor ``fleet``);
* **fleet-wide rates** — a lease of tokens from the fleet's bucket (:mod:`engine.fleet.leased_bucket`),
  spent locally; while Redis is away, the process's share of the rate (``FleetRateFellBack``, then
  ``FleetRateRecovered``).

A process joining, or back after Redis was away, publishes again the record it holds (a Redis
restarted empty has lost it): what stands is never ended by a Redis that forgot it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anyio import current_time

from engine.errors import one_line
from engine.events import CooldownEnded, CooldownStarted, Event, FleetRateFellBack, FleetRateRecovered
from engine.fleet.client import Command
from engine.fleet.config import FleetConfig
from engine.fleet.cooldown_record import CooldownRecord, read_record
from engine.fleet.keys import FleetKeys
from engine.fleet.leased_bucket import LeasedBucket
from engine.fleet.member import MemberIdentity
from engine.fleet.rate_scripts import PUBLISH_COOLDOWN, RATE_SYNC
from engine.strategies.rate_limit import Cooldown, RateLimitStrategy, TokenBucket

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.fleet")

Handler = Callable[[Any], None]
_NO_KEY = (
    "fleet: rate-limit cooldowns are not shared: this process has no fleet key to sign them with"
    " (key_file= or $TRIPWIRE_FLEET_KEY_FILE)"
)


@dataclass(slots=True)
class _Shared:
    """What this process knows of one tool's shared cooldown."""

    published: Cooldown | None = None
    """The cooldown of its own limiter it published last."""
    learned: Cooldown | None = None
    """The cooldown it applied from the fleet last."""
    held: CooldownRecord | None = None
    """The record that stands fleet-wide as last read or published."""
    force: bool = False
    """The record read last was forged: the next publish replaces it."""


class SharedRateLimits:
    """``engine``'s rate limits shared with the fleet; ``key`` signs the cooldowns (None: not
    shared, said once), ``actor`` names the fleet in what it ends."""

    def __init__(
        self,
        engine: Engine,
        keys: FleetKeys,
        member: MemberIdentity,
        key: bytes | None,
        config: FleetConfig,
        actor: str,
    ) -> None:
        self.engine = engine
        self.keys = keys
        self.member = member
        self.key = key
        self.config = config
        self.actor = actor
        self.available = True
        self.members = 1
        """Live members at the last round trip."""
        self._tools: dict[str, _Shared] = {}
        self._offset_ms: float | None = None
        """Server ms minus engine ms at the last round trip: a cooldown's end, converted both ways."""
        self._pending: list[Command] = []
        """Deletions of reset cooldowns not sent yet."""
        self._rejoin = True
        self._fallback_since: float | None = None
        self._forged: set[tuple[str, str]] = set()
        self._warned = False

    @property
    def period_s(self) -> float:
        return max(self.config.sync_ms, 1.0) / 1000.0

    def strategies(self) -> dict[str, RateLimitStrategy]:
        """The registered tools with a rate limit of their own."""
        found = {}
        for tool_id in list(self.engine.tool_ids):
            strategy = self.engine.runtime.tool(tool_id).pipeline.own("rate_limit")
            if isinstance(strategy, RateLimitStrategy):
                found[tool_id] = strategy
        return found

    # --- what happened here ----------------------------------------------------------------------

    def after_local(self, events: list[Event]) -> None:
        """A reset here ends the tool's cooldown fleet-wide: its record is deleted. Any other end
        (one that ran out, the fleet's own reset of a tool it forced open) forgets the record read,
        so that one still standing is applied again."""
        for event in events:
            if type(event) is not CooldownEnded:
                continue
            shared = self._tools.setdefault(event.tool_id, _Shared())
            shared.held = None
            if event.how == "reset" and event.actor != self.actor:
                self._pending.append(("DEL", self.keys.cooldown(event.tool_id)))
                shared.published = shared.learned = None

    def plan(self) -> list[tuple[Command, Handler | None]]:
        """This round trip's commands: deletions, publications, then the one read and lease."""
        strategies = self.strategies()
        now = current_time()
        self._attach(strategies, now)
        plan: list[tuple[Command, Handler | None]] = []
        if self._pending:
            sent = len(self._pending)
            plan += [(c, None) for c in self._pending[:-1]]
            plan.append((self._pending[-1], lambda _: self._pending.__delitem__(slice(0, sent))))
        cooling: list[str] = []
        if self.key is not None:
            cooling = list(strategies)
            for tool, strategy in strategies.items():
                plan += self._publish(tool, strategy.state.cooldown, now)
        elif strategies and not self._warned:
            self._warned = True
            log.warning("%s", _NO_KEY)
        leasing: list[tuple[str, LeasedBucket, RateLimitStrategy, int]] = []
        for tool, strategy in strategies.items():
            bucket = strategy.state.bucket
            if isinstance(bucket, LeasedBucket):
                # every round trip, even for none: it also counts the live members (the share)
                leasing.append((tool, bucket, strategy, bucket.wanted(strategy.state.waiting)))
        if not cooling and not leasing:
            return plan
        keys = self.keys
        # Joining, or back: a record Redis lacks may be one it lost (restarted empty), not a reset.
        baseline = self._rejoin or not self.available
        rate_args = [a for _, b, _, want in leasing for a in (repr(b.rate), b.capacity, want)]
        command = (
            "EVAL", RATE_SYNC, 1 + len(cooling) + len(leasing), keys.members,
            *(keys.cooldown(t) for t in cooling), *(keys.rate(t) for t, _, _, _ in leasing),
            len(cooling), len(leasing), int(self.config.stale_s * 1000), *rate_args,
        )  # fmt: skip
        plan.append((command, lambda reply: self._apply(reply, cooling, leasing, baseline)))
        return plan

    def _publish(self, tool: str, cooldown: Cooldown, now: float) -> list[tuple[Command, Handler | None]]:
        assert self.key is not None
        shared = self._tools.setdefault(tool, _Shared())
        offset = self._offset_ms
        if offset is None:
            return []  # the server's clock is not known yet: next round trip
        record = None
        if (
            cooldown.active
            and cooldown.until > now
            and cooldown is not shared.learned
            and cooldown is not shared.published
        ):
            until_ms = round(cooldown.until * 1000 + offset)
            started = cooldown.started_at if math.isfinite(cooldown.started_at) else now
            record = CooldownRecord(
                tool=tool, until_ms=until_ms, member=self.member.id, host=self.member.host,
                pid=self.member.pid, call=cooldown.started_by or "",
                started_ms=round(started * 1000 + offset), retry_after_s=cooldown.retry_after_s,
            )  # fmt: skip
            shared.published, shared.held = cooldown, record
        elif self._rejoin and shared.held is not None and shared.held.until_ms > now * 1000 + offset:
            record = shared.held  # as it was signed: Redis may have lost it
        if record is None:
            return []
        force, shared.force = shared.force, False
        command = (
            "EVAL", PUBLISH_COOLDOWN, 1, self.keys.cooldown(tool), record.until_ms, int(force),
            *record.fields(self.key),
        )  # fmt: skip
        return [(command, None)]

    # --- what the fleet holds ---------------------------------------------------------------------

    def _apply(
        self,
        reply: Any,
        cooling: list[str],
        leasing: list[tuple[str, LeasedBucket, RateLimitStrategy, int]],
        baseline: bool,
    ) -> None:
        now_raw, live, cooldowns, grants = reply
        now_ms = int(now_raw)
        now = current_time()
        self._offset_ms = now_ms - now * 1000.0
        self.members = max(int(live), 1)
        self._rejoin = False
        registered = self.strategies()
        for tool, raw in zip(cooling, cooldowns, strict=True):
            strategy = registered.get(tool)
            if strategy is not None:  # else unregistered during the round trip
                self._apply_cooldown(tool, strategy, raw, now_ms, now, baseline)
        for (_, bucket, strategy, _), granted in zip(leasing, grants, strict=True):
            if strategy.state.bucket is bucket:
                bucket.lease_granted(int(granted), self.members, now)
                strategy.state.refilled(now)
        for strategy in registered.values():
            held = strategy.state.bucket
            if isinstance(held, LeasedBucket):
                held.members = self.members

    def _apply_cooldown(
        self, tool: str, strategy: RateLimitStrategy, raw: Any, now_ms: int, now: float, baseline: bool
    ) -> None:
        assert self.key is not None
        shared = self._tools.setdefault(tool, _Shared())
        found = read_record(tool, raw or [], self.key)
        if isinstance(found, str):
            shared.force = True
            mac = str(dict(zip(raw[::2], raw[1::2], strict=False)).get("mac", "")) if raw else ""
            if (tool, mac) not in self._forged:
                self._forged.add((tool, mac))
                log.warning("fleet: the cooldown record of %s ignored: %s", one_line(tool), found)
            return
        limiter = strategy.state
        if found is None:
            held = shared.held
            if held is None or held.until_ms <= now_ms:
                shared.held = None
                return  # none stood, or it ran out
            if baseline:
                self._rejoin = True  # Redis lost it: published again on the next round trip
                return
            shared.held = None
            # Deleted before its end: an operator reset the tool somewhere.
            current = limiter.cooldown
            if current is shared.learned or current is shared.published:
                ended = limiter.end_cooldown(now)
                if ended is not None:
                    self.engine.runtime.publish(
                        CooldownEnded(
                            at=self.engine.wall_clock(), t=now, tool_id=tool, started_by=ended.started_by,
                            until=ended.until, how="reset", actor=self.actor,
                        )
                    )  # fmt: skip
            return
        if shared.held is not None and shared.held.identity == found.identity:
            return  # known already
        shared.held = found
        if found.until_ms <= now_ms or (
            found.member == self.member.id and limiter.cooldown is shared.published
        ):
            return  # over, or ours and in force here
        until = now + (found.until_ms - now_ms) / 1000.0
        extended = limiter.cooldown.active and limiter.cooldown.until > now
        started_at = now - max(0, now_ms - found.started_ms) / 1000.0
        cooldown = Cooldown(until, found.member, started_at, found.retry_after_s)
        if limiter.extend_cooldown(cooldown, now):
            shared.learned = cooldown
            self.engine.runtime.publish(
                CooldownStarted(
                    at=self.engine.wall_clock(), t=now, tool_id=tool, call_id=found.call, attempt=0,
                    until=until, cooldown_s=round(until - now, 3), retry_after_s=found.retry_after_s,
                    extended=extended, started_by=found.member,
                )
            )  # fmt: skip

    # --- buckets ----------------------------------------------------------------------------------

    def _attach(self, strategies: dict[str, RateLimitStrategy], now: float) -> None:
        """A ``scope: fleet`` rate spends leases; a rate that is no longer one gets its own bucket back."""
        for tool, strategy in strategies.items():
            options, limiter = strategy.options, strategy.state
            bucket = limiter.bucket
            if bucket is None or options.rate_per_s is None:
                continue
            if options.scope == "fleet" and not isinstance(bucket, LeasedBucket):
                leased = LeasedBucket(options.rate_per_s, options.bucket_size, self.period_s, now)
                leased.members = self.members
                limiter.bucket = leased
                if not self.available:
                    self._fall_back(tool, leased, now)
            elif options.scope != "fleet" and isinstance(bucket, LeasedBucket):
                limiter.bucket = _own_bucket(bucket, now)

    def detach(self) -> None:
        """The process leaves the fleet: each rate is its own again."""
        now = current_time()
        for strategy in self.strategies().values():
            bucket = strategy.state.bucket
            if isinstance(bucket, LeasedBucket):
                strategy.state.bucket = _own_bucket(bucket, now)

    def _fall_back(self, tool: str, bucket: LeasedBucket, now: float) -> None:
        bucket.fall_back(now)
        self.engine.runtime.publish(
            FleetRateFellBack(
                at=self.engine.wall_clock(), t=now, tool_id=tool, rate_per_s=bucket.rate,
                share_per_s=round(bucket.share, 6), members=bucket.members,
            )
        )  # fmt: skip

    def unavailable(self) -> None:
        """Redis is away: every fleet-wide rate runs on this process's share."""
        self.available = False
        now = current_time()
        self._fallback_since = now
        for tool, strategy in self.strategies().items():
            bucket = strategy.state.bucket
            if isinstance(bucket, LeasedBucket) and not bucket.fallback:
                self._fall_back(tool, bucket, now)

    def restored(self) -> None:
        """Redis answers again: leases again, and what this process holds is published again."""
        self.available = True
        self._rejoin = True
        now = current_time()
        since, self._fallback_since = self._fallback_since, None
        for tool, strategy in self.strategies().items():
            bucket = strategy.state.bucket
            if isinstance(bucket, LeasedBucket) and bucket.fallback:
                bucket.recover(now)
                self.engine.runtime.publish(
                    FleetRateRecovered(
                        at=self.engine.wall_clock(), t=now, tool_id=tool, rate_per_s=bucket.rate,
                        fallback_s=round(now - (since if since is not None else now), 3),
                    )
                )  # fmt: skip

    # --- what the members publish -----------------------------------------------------------------

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per tool with a rate limit: its cooldown's end (server ms; 0: none) and who started it
        (a member id), its scope, tokens and, for a fleet-wide rate, its lease or fallback."""
        now = current_time()
        offset = self._offset_ms
        out: dict[str, dict[str, Any]] = {}
        for tool, strategy in self.strategies().items():
            limiter = strategy.state
            cooldown = limiter.cooldown
            cooling = cooldown.active and cooldown.until > now
            until_ms = round(cooldown.until * 1000 + offset) if cooling and offset is not None else 0
            shared = self._tools.get(tool)
            learned = shared is not None and cooldown is shared.learned
            bucket = limiter.bucket
            figures: dict[str, Any] = {
                "scope": strategy.options.scope,
                "cooldown_until_ms": until_ms if cooling else 0,
                "cooldown_by": (cooldown.started_by if learned else self.member.id) if cooling else "",
                "tokens": round(bucket.level(now), 3) if bucket is not None else None,
            }
            if isinstance(bucket, LeasedBucket):
                figures.update(
                    mode="fallback" if bucket.fallback else "lease", last_lease=bucket.last_lease,
                    share_per_s=round(bucket.share, 6), members=bucket.members,
                )  # fmt: skip
            out[tool] = figures
        return out


def _own_bucket(leased: LeasedBucket, now: float) -> TokenBucket:
    """A process bucket of the same rate, holding the tokens left (at most its burst)."""
    own = TokenBucket(leased.rate, leased.burst)
    own.tokens = min(leased.level(now), float(leased.burst))
    own.stamp = now
    return own


__all__ = ["SharedRateLimits"]
