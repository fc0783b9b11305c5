"""Internal: idempotency keys as a strategy of a tool's pipeline. Import it from
:mod:`engine.strategies.idempotency`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from engine.kinds import KIND_INFO
from engine.side_effect import SideEffect
from engine.strategies.base import CallView, PolicyView, Strategy
from engine.strategies.idempotency.events import IdempotencyKeyAssigned
from engine.strategies.idempotency.keys import enter_key, key_call, leave_key
from engine.strategies.idempotency.options import CONTEXT, IdempotencyOptions

if TYPE_CHECKING:
    import random

    from engine.classify import Classification
    from engine.redaction import RedactionPolicy


class _Given(Protocol):
    @property
    def idempotency_key(self) -> str | None: ...


class _Runtime(Protocol):
    @property
    def rng(self) -> random.Random: ...

    def redaction_for(self, tool_id: str) -> RedactionPolicy: ...


class KeyedCall(CallView, Protocol):
    """What this strategy uses of the pipeline's call beyond a ``CallView``: it changes what the
    call sends. (:class:`engine.pipeline.call.Call` by name would close an import cycle: the
    registry is imported by the manifest's policy, which the call's modules import.)"""

    idempotency_key: str | None
    key_masker: RedactionPolicy | None
    resend_pending: bool
    sent_args: dict[str, Any] | None

    @property
    def shown_key(self) -> str | None: ...

    @property
    def args(self) -> dict[str, Any]: ...

    @property
    def ctx(self) -> _Given | None: ...

    @property
    def runtime(self) -> _Runtime: ...


@dataclass(frozen=True, slots=True)
class IdempotencyFacts:
    """A keyed tool's counts, as ``engine.stats()`` and error handlers see them."""

    keyed_calls: int
    """Calls given a key."""
    resends: int
    """Attempts re-sent under a call's key after an ambiguous failure (a timeout, a reset after
    send): the re-sends the key made safe. Counted as each such attempt is let through."""
    passed_as: str
    """The argument the key is passed as, or ``context``."""


class IdempotencyCounts:
    """What a tool's keys did: kept across reloads."""

    __slots__ = ("keyed", "resends")

    def __init__(self) -> None:
        self.keyed = self.resends = 0


class IdempotencyStrategy(Strategy[IdempotencyOptions]):
    """Gives each call of a side-effecting tool one key, passes it to every attempt (as an argument
    and through :func:`engine.idempotency_key`) and announces it; :mod:`engine.decide` then lets an
    ambiguous failure be re-sent. Its state is its counts (kept across reloads): a re-send is
    marked by ``attempt_failed`` and counted as the next attempt is let through (``admit_now``)."""

    section = "idempotency"
    options_type = IdempotencyOptions

    def __init__(self, tool_id: str, options: IdempotencyOptions) -> None:
        super().__init__(tool_id, options)
        self.state = IdempotencyCounts()
        self._policy: RedactionPolicy | None = None
        self._hides = False
        """Whether ``_policy`` (the tool's redaction policy last seen) takes the key for a secret."""

    def handover(self, previous: Strategy[IdempotencyOptions]) -> None:
        if isinstance(previous, IdempotencyStrategy):
            self.state = previous.state

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
        key = keyed.key
        keyed_call.idempotency_key = key
        # A key under a secret field is masked wherever the engine writes it (events, reasons).
        policy = keyed_call.runtime.redaction_for(call.tool_id)
        if policy is not self._policy:  # the first call, or another policy: look again
            self._policy, self._hides = policy, self.options.hides_key(policy)
        if self._hides:
            keyed_call.key_masker = policy
        self.state.keyed += 1
        if keyed.args is not keyed_call.args:
            keyed_call.sent_args = keyed.args
        if call.observed:
            call.announce(
                IdempotencyKeyAssigned(
                    at=call.wall_clock(), t=call.start, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, key=keyed_call.shown_key or key, source=keyed.source,
                    argument=argument,
                )
            )  # fmt: skip

    def admit_now(self, call: CallView) -> bool:
        keyed_call = cast(KeyedCall, call)
        key = keyed_call.idempotency_key
        if key is not None:
            enter_key(key)
            if keyed_call.resend_pending:  # this attempt re-sends an ambiguous failure's request
                keyed_call.resend_pending = False
                self.state.resends += 1
        return True

    def attempt_failed(self, call: CallView, classification: Classification) -> None:
        if KIND_INFO[classification.kind].ambiguous:
            keyed_call = cast(KeyedCall, call)
            keyed_call.resend_pending = keyed_call.idempotency_key is not None

    def attempt_ended(self, call: CallView) -> None:
        if cast(KeyedCall, call).idempotency_key is not None:
            leave_key()

    def facts(self, now: float) -> Mapping[str, Any]:
        state = self.state
        return asdict(IdempotencyFacts(state.keyed, state.resends, self.options.argument or CONTEXT))
