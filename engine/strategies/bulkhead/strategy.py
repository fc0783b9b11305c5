"""Internal: the bulkhead as a strategy of a tool's pipeline. Import it from
:mod:`engine.strategies.bulkhead`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from engine.kinds import ErrorKind
from engine.strategies.base import CallView, Refusal, Strategy
from engine.strategies.bulkhead.events import BulkheadQueued, BulkheadRejected
from engine.strategies.bulkhead.limiter import Bulkhead
from engine.strategies.bulkhead.options import BulkheadOptions


class BulkheadStrategy(Strategy[BulkheadOptions]):
    """At most ``max_concurrent`` attempts of the tool in flight; ``max_queued`` more may wait
    for a slot, first come first served, up to ``queue_timeout_ms`` — a wait the turn's deadline
    cuts short ends with the turn (timed out). Any other attempt is refused unsent as
    ``bulkhead_full``."""

    section = "bulkhead"
    options_type = BulkheadOptions

    def __init__(self, tool_id: str, options: BulkheadOptions) -> None:
        super().__init__(tool_id, options)
        self.state = Bulkhead(options)
        """The occupants and the queue: handed from strategy to strategy across reloads."""

    def handover(self, previous: Strategy[BulkheadOptions]) -> None:
        if isinstance(previous, BulkheadStrategy):
            previous.state.reconfigure(self.options)
            self.state = previous.state

    def admit_now(self, call: CallView) -> bool:
        return self.state.try_enter()

    async def admit(self, call: CallView) -> Refusal | None:
        bulkhead = self.state
        if bulkhead.try_enter():
            return None
        # The turn's deadline cuts the wait by cancelling it (the call is then the turn's, timed
        # out): no refusal races it at that instant. With no time left there is no wait at all.
        wait_s = self.options.queue_timeout_ms / 1000.0
        now = call.now
        deadline = call.deadline
        if bulkhead.queue_full or wait_s <= 0 or (deadline is not None and deadline <= now):
            return self._refused(call, bulkhead.refuse_full(), 0.0)
        if call.observed:
            call.announce(
                BulkheadQueued(
                    at=call.wall_clock(), t=now, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, attempt=call.attempt, in_flight=bulkhead.in_flight,
                    queued=bulkhead.queued + 1,
                )
            )  # fmt: skip
        reason = await bulkhead.enter(wait_s, call.clock)
        if reason is None:
            return None
        return self._refused(call, reason, (call.now - now) * 1000.0)

    def attempt_ended(self, call: CallView) -> None:
        self.state.leave()

    def facts(self, now: float) -> Mapping[str, Any]:
        return asdict(self.state.snapshot(now))

    def _refused(self, call: CallView, reason: str, waited_ms: float) -> Refusal:
        if call.observed:
            bulkhead = self.state
            call.announce(
                BulkheadRejected(
                    at=call.wall_clock(), t=call.now, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, attempt=call.attempt, reason=reason,
                    in_flight=bulkhead.in_flight, queued=bulkhead.queued, waited_ms=waited_ms,
                )
            )  # fmt: skip
        return Refusal(ErrorKind.BULKHEAD_FULL, reason, self.section)
