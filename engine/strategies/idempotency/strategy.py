"""Internal: idempotency keys as a strategy of a tool's pipeline. Import it from
:mod:`engine.strategies.idempotency`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from engine.side_effect import SideEffect
from engine.strategies.base import CallView, PolicyView, Strategy
from engine.strategies.idempotency.events import IdempotencyKeyAssigned
from engine.strategies.idempotency.keys import enter_key, key_call, leave_key
from engine.strategies.idempotency.options import IdempotencyOptions

if TYPE_CHECKING:
    import random


class _Given(Protocol):
    @property
    def idempotency_key(self) -> str | None: ...


class _Rng(Protocol):
    @property
    def rng(self) -> random.Random: ...


class KeyedCall(CallView, Protocol):
    """What this strategy uses of the pipeline's call beyond a ``CallView``: it changes what the
    call sends. (:class:`engine.pipeline.call.Call` by name would close an import cycle: the
    registry is imported by the manifest's policy, which the call's modules import.)"""

    idempotency_key: str | None
    sent_args: dict[str, Any] | None

    @property
    def args(self) -> dict[str, Any]: ...

    @property
    def ctx(self) -> _Given | None: ...

    @property
    def runtime(self) -> _Rng: ...


class IdempotencyStrategy(Strategy[IdempotencyOptions]):
    """Gives each call of a side-effecting tool one key, passes it to every attempt (as an argument
    and through :func:`engine.idempotency_key`) and announces it; :mod:`engine.decide` then lets an
    ambiguous failure be re-sent. Stateless: a reload changes only how the key is passed."""

    section = "idempotency"
    options_type = IdempotencyOptions

    @classmethod
    def refuse_policy(cls, options: Any, policy: PolicyView) -> str | None:
        if policy.side_effect is not SideEffect.SIDE_EFFECTING:
            return f"only for side_effecting tools (side_effect is {policy.side_effect.value})"
        return None

    def call_started(self, call: CallView) -> None:
        keyed_call = cast(KeyedCall, call)  # the pipeline's Call
        ctx = keyed_call.ctx
        argument = self.options.argument
        keyed = key_call(
            keyed_call.args,
            argument,
            ctx.idempotency_key if ctx is not None else None,
            call.turn_id,
            call.call_id,
            keyed_call.runtime.rng,
        )
        keyed_call.idempotency_key = keyed.key
        if keyed.args is not keyed_call.args:
            keyed_call.sent_args = keyed.args
        if call.observed:
            call.announce(
                IdempotencyKeyAssigned(
                    at=call.wall_clock(), t=call.start, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, key=keyed.key, source=keyed.source, argument=argument,
                )
            )  # fmt: skip

    def admit_now(self, call: CallView) -> bool:
        key = cast(KeyedCall, call).idempotency_key
        if key is not None:
            enter_key(key)
        return True

    def attempt_ended(self, call: CallView) -> None:
        if cast(KeyedCall, call).idempotency_key is not None:
            leave_key()
