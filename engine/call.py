"""A guarded call's data: what it knows (:class:`CallContext`), what it came to
(:class:`CallResult`), and the records the engine keeps per tool and, once it fails, per call.

Plain data and two helpers on a tool's error: no engine behaviour lives here, so the modules
built on the call (turns, streams) and the engine itself all import it from below.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import ToolError, jsonable
from engine.handler import MISSING, Decision

if TYPE_CHECKING:
    import inspect

    from engine.events import Event
    from engine.manifest import ToolManifest
    from engine.metrics import ToolMetrics
    from engine.pipeline.compiled import Pipeline
    from engine.redaction import RedactionPolicy
    from engine.strategies.breaker.machine import CircuitBreaker

ToolFn = Callable[..., Any]


@dataclass(slots=True)
class CallResult:
    """The outcome of a guarded call.

    ``value`` on success; ``error`` (a :class:`ToolError`) when the call failed. A partial
    success has both: the partial value and the error that cut it short.
    """

    tool_id: str
    value: Any = None
    error: ToolError | None = None
    attempts: int = 0
    served_by: str | None = None
    """The alternative tool that produced the result, when the handler routed the call."""
    decision: Decision | None = None
    """The handler's final decision when the call did not simply succeed."""
    reason: str = ""
    """Why that decision was taken."""

    @property
    def ok(self) -> bool:
        return self.error is None or self.decision is Decision.PARTIAL_SUCCESS

    @property
    def partial(self) -> bool:
        return self.decision is Decision.PARTIAL_SUCCESS

    def unwrap(self) -> Any:
        if self.error is not None and not self.partial:
            raise self.error
        return self.value


@dataclass(slots=True)
class CallContext:
    """What a turn knows about one of its calls; standalone calls run without one."""

    call_id: str
    turn_id: str | None = None
    deadline: float | None = None
    """Engine time at which the turn ends."""
    optional: bool = False
    dependants: tuple[str, ...] = ()
    trace: list[Event] | None = None
    """Where this call's events are recorded, besides the bus."""
    seed: str | None = None
    """With the call id, seeds this call's jitter: retries never depend on scheduling order."""
    call_ordinal: int = 0
    """The tool's call number, assigned at launch (fault plans key on it)."""
    tried: tuple[str, ...] = ()
    """Tools already tried for this call (alternatives never loop)."""
    idempotency_key: str | None = None
    """The call's idempotency key, given by its caller (a turn's ``ToolCall``, the LLM executor, an
    adapter, or the call an alternative stands in for); None: a keyed tool's call derives one
    (:mod:`engine.strategies.idempotency`). Tools without an ``idempotency`` section ignore it."""
    _rng: random.Random | None = field(default=None, repr=False)

    def rng(self, fallback: random.Random) -> random.Random:
        if self.seed is None:
            return fallback
        if self._rng is None:
            self._rng = random.Random(f"{self.seed}:{self.call_id}")
        return self._rng


@dataclass(slots=True)
class RegisteredTool:
    """A registered tool as the engine keeps it: the function, its breaker, metrics and manifest."""

    name: str
    fn: ToolFn
    is_async: bool
    """A coroutine function: awaited directly (the hot path)."""
    is_stream: bool
    breaker: CircuitBreaker
    metrics: ToolMetrics
    manifest: ToolManifest
    """The manifest in force; replaced (never mutated) on reload."""
    pipeline: Pipeline
    """The tool's strategies compiled from its manifest; swapped whole on reload."""
    calls: int = 0
    """Calls launched so far (the call ordinal of the next one, minus one)."""
    signature: inspect.Signature | None = None


def error_message(error: BaseException) -> str:
    """An error's text as a :class:`ToolError` carries it: never empty."""
    if isinstance(error, ToolError):
        return error.message
    text = str(error)
    return text if text else type(error).__name__


def partial_result_of(error: BaseException) -> Any:
    """What a failed tool returned before it failed, if it says (``partial_result``/``completion``)."""
    for attr in ("partial_result", "completion"):
        value = getattr(error, attr, MISSING)
        if value is not MISSING and value is not None:
            return value
    return MISSING


def recorded_value(
    policy: RedactionPolicy,
    manifest: ToolManifest,
    args: dict[str, Any],
    value: Any,
    secret: str | None = None,
) -> Any:
    """A result as ``CallSucceeded.value`` records it (recording mode): JSON-safe and redacted under
    ``policy`` and the manifest's ``secret_fields`` (arguments' secret values included, wherever
    they show, and ``secret``: a secret idempotency key the tool read from its context)."""
    if not policy.enabled:
        return jsonable(value)
    if manifest.secret_fields:
        policy = policy.with_fields(manifest.secret_fields)
    secrets = policy.secrets_in(args)
    if secret is not None:
        secrets = (secret, *secrets)
    return policy.value(jsonable(value), secrets)
