"""tripwire engine: run an agent's tool calls safely.

Typed error kinds, one classifier, retry with backoff and jitter, a circuit breaker per
tool, timeouts, hot-reloaded manifests and a structured event stream. Never imports
Textual or Rich.
"""

from engine.breaker import AttemptOutcome, BreakerConfig, BreakerState, CircuitBreaker
from engine.bus import EventBus
from engine.classify import Classification, ClassificationOverride, Rule, classify
from engine.engine import CallContext, CallResult, Engine
from engine.errors import ToolError
from engine.events import EVENT_TYPES, Event
from engine.handler import (
    MISSING,
    Decision,
    DefaultErrorHandler,
    ErrorHandler,
    FailureContext,
    HandlerDecision,
)
from engine.kinds import KIND_INFO, ErrorClass, ErrorKind, KindInfo
from engine.manifest import (
    ManifestError,
    ManifestIssue,
    ManifestRegistry,
    SideEffect,
    ToolManifest,
    ToolPolicy,
    load_manifest,
)
from engine.metrics import Counts, ToolStats
from engine.retry import RetryPlan, RetryPolicy, plan_retry
from engine.trace import TurnTrace
from engine.turns import CallOutcome, CallStatus, ToolCall, Turn, TurnError, TurnResult

__all__ = [
    "EVENT_TYPES",
    "KIND_INFO",
    "MISSING",
    "CallContext",
    "CallOutcome",
    "CallStatus",
    "Counts",
    "DefaultErrorHandler",
    "ErrorHandler",
    "FailureContext",
    "HandlerDecision",
    "ToolCall",
    "ToolStats",
    "Turn",
    "TurnError",
    "TurnResult",
    "TurnTrace",
    "AttemptOutcome",
    "BreakerConfig",
    "BreakerState",
    "CallResult",
    "CircuitBreaker",
    "Classification",
    "ClassificationOverride",
    "Decision",
    "Engine",
    "ErrorClass",
    "ErrorKind",
    "Event",
    "EventBus",
    "KindInfo",
    "ManifestError",
    "ManifestIssue",
    "ManifestRegistry",
    "RetryPlan",
    "RetryPolicy",
    "Rule",
    "SideEffect",
    "ToolError",
    "ToolManifest",
    "ToolPolicy",
    "classify",
    "load_manifest",
    "plan_retry",
]
