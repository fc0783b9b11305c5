"""The one object a call carries through its tool's pipeline: :class:`Call`.

The tool, the manifest in force when the call began, the call and turn ids, the turn's deadline
and trace, the attempt, the engine's clock and the outcome so far — so no step re-threads them as
parameters. The backbone's fused path builds it only once a call needs a decision (a failure, a
rejection); a tool with more strategies has it from the start, since every hook is handed it.

Internal: the engine's machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.redaction import MIN_LITERAL_CHARS

if TYPE_CHECKING:
    from engine.call import CallContext, RegisteredTool
    from engine.events import Event
    from engine.handler import ErrorHandler
    from engine.pipeline.compiled import Pipeline
    from engine.policy import ToolManifest
    from engine.protocols import CallRuntime
    from engine.redaction import RedactionPolicy


@dataclass(slots=True)
class Call:
    """One guarded call going through its tool's pipeline (a strategy sees it as a ``CallView``)."""

    runtime: CallRuntime
    tool: RegisteredTool
    manifest: ToolManifest
    """In force for the whole call, even across reloads."""
    args: dict[str, Any]
    ctx: CallContext | None
    call_id: str
    turn_id: str | None
    trace: list[Event] | None
    start: float
    handler: ErrorHandler | None
    """The call's own handler, normalized (see :func:`~engine.handler.as_handler`); None defers to
    the engine's."""
    pipeline: Pipeline
    """The tool's pipeline when the call began: a reload swaps the tool's, never this call's."""
    clock: Callable[[], float]
    """Engine time as this call reads it (the running backend's own clock)."""
    attempt: int = 0
    ran: bool = False
    """Did any failed attempt run the tool (its kind says executed)? The call's ``executed``, whatever
    its last kind or an alternative's (spec-map kinds.count-executed)."""
    secrets: tuple[str, ...] | None = None
    """The values of the call's secret arguments, looked for in its error texts; found when first needed."""
    scrubbed: tuple[str, str] = ("", "")
    """The last text scrubbed and what it became: the last attempt's error and the call's are one."""
    idempotency_key: str | None = None
    """The call's idempotency key (a keyed tool's: :mod:`engine.strategies.idempotency`): the call's,
    not an attempt's, so every retry, hedge and alternative sends the same one."""
    key_masker: RedactionPolicy | None = None
    """The policy that masks the idempotency key wherever the engine records it, when the keyed
    argument is a secret field; None: the key is shown as it is."""
    resend_pending: bool = False
    """A keyed attempt failed ambiguously: the idempotency strategy counts the next attempt let
    through as a re-send."""
    sent_args: dict[str, Any] | None = None
    """The arguments the tool is sent when a strategy made them differ from ``args`` (a copy with
    the idempotency key); None: ``args``."""
    waiting_at: int = 0
    """The index of the admitting strategy the attempt waits for: ``failure.admitted_now`` stopped
    there (those before it admitted the attempt already), ``failure.admit_attempt`` goes on from it."""
    hedges: int = 0
    """Attempts of the call started as hedges so far (:mod:`engine.pipeline.hedged` counts them)."""
    attempts_running: int = 0
    """Other attempts of the call still running while a failure is decided (a hedged call's race
    sets it; 0 while a failed attempt was the call's only one)."""

    # --- what a strategy sees (engine.strategies.base.CallView) ---------------------------

    @property
    def tool_id(self) -> str:
        return self.tool.name

    @property
    def deadline(self) -> float | None:
        return self.ctx.deadline if self.ctx is not None else None

    @property
    def now(self) -> float:
        return self.clock()

    @property
    def wall_clock(self) -> Callable[[], float]:
        return self.runtime.wall_clock

    @property
    def tool_args(self) -> dict[str, Any]:
        """What every attempt of the call sends the tool (a hedge too): ``sent_args``, else ``args``."""
        return self.sent_args if self.sent_args is not None else self.args

    @property
    def observed(self) -> bool:
        return self.trace is not None or self.runtime.bus.active

    def announce(self, event: Event) -> None:
        self.runtime.publish(event, self.trace)

    # --- the call's own text ------------------------------------------------------------

    @property
    def shown_key(self) -> str | None:
        """The idempotency key as the call's events and reasons show it: masked (``[REDACTED:…]``)
        when it is a secret, else the key itself. Masked only when shown: hashing a fresh key on
        every call would cost the success path."""
        key, masker = self.idempotency_key, self.key_masker
        return key if key is None or masker is None else masker.mask(key)

    @property
    def secret_key(self) -> str | None:
        """The idempotency key when it is a secret and long enough to be looked for in free text
        (the error texts, reasons and results the call records); else None."""
        key = self.idempotency_key
        if key is None or self.key_masker is None or len(key) < MIN_LITERAL_CHARS:
            return None
        return key

    def scrub(self, policy: RedactionPolicy, text: str) -> str:
        """This call's free text (an error, a handler's reason) as its events may hold it under
        ``policy`` (the engine's, extended by the tool manifest's ``secret_fields``)."""
        if not policy.enabled:
            return text
        if self.manifest.secret_fields:
            policy = policy.with_fields(self.manifest.secret_fields)
        if self.scrubbed[0] == text:
            return self.scrubbed[1]
        if self.secrets is None:
            self.secrets = policy.secrets_in(self.args) if self.args else ()
            key = self.secret_key
            if key is not None:  # an engine-made key is in no argument the caller passed
                self.secrets = tuple(sorted({*self.secrets, key}, key=len, reverse=True))
        clean = policy.text(text, self.secrets)
        self.scrubbed = (text, clean)
        return clean

    def scrub_reason(self, reason: str) -> str:
        """A decision's reason: the engine's own words are safe (they show a secret idempotency
        key masked); a custom handler's are scrubbed."""
        runtime = self.runtime
        return (
            reason
            if self.handler is None and runtime.handler is None
            else self.scrub(runtime.redaction, reason)
        )
