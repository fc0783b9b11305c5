"""Internal: idempotency keys as a strategy of a tool's pipeline. Import it from
:mod:`engine.strategies.idempotency`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.pipeline.call import Call
from engine.strategies.base import CallView, Strategy
from engine.strategies.idempotency.events import IdempotencyKeyAssigned
from engine.strategies.idempotency.keys import enter_key, key_call, leave_key
from engine.strategies.idempotency.options import IdempotencyOptions

if TYPE_CHECKING:
    from engine.policy import ToolPolicy

SIDE_EFFECTING = "side_effecting"


class IdempotencyStrategy(Strategy[IdempotencyOptions]):
    """Gives each call of a side-effecting tool one key, passes it to every attempt (as an argument
    and through :func:`engine.idempotency_key`) and announces it; :mod:`engine.decide` then lets an
    ambiguous failure be re-sent. Stateless: a reload changes only how the key is passed."""

    section = "idempotency"
    options_type = IdempotencyOptions

    @classmethod
    def refuse_policy(cls, options: Any, policy: ToolPolicy) -> str | None:
        if policy.side_effect != SIDE_EFFECTING:  # a StrEnum: engine.policy imports the registry
            return f"only for side_effecting tools (side_effect is {policy.side_effect.value})"
        return None

    def call_started(self, call: CallView) -> None:
        assert isinstance(call, Call)  # the key changes what the call sends: the pipeline's own Call
        ctx = call.ctx
        argument = self.options.argument
        keyed = key_call(
            call.args,
            argument,
            ctx.idempotency_key if ctx is not None else None,
            call.turn_id,
            call.call_id,
            call.runtime.rng,
        )
        call.idempotency_key = keyed.key
        if keyed.args is not call.args:
            call.sent_args = keyed.args
        if call.observed:
            call.announce(
                IdempotencyKeyAssigned(
                    at=call.wall_clock(), t=call.start, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, key=keyed.key, source=keyed.source, argument=argument,
                )
            )  # fmt: skip

    def admit_now(self, call: CallView) -> bool:
        key = getattr(call, "idempotency_key", None)
        if key is not None:
            enter_key(key)
        return True

    def attempt_ended(self, call: CallView) -> None:
        if getattr(call, "idempotency_key", None) is not None:
            leave_key()
