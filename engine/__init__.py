"""tripwire engine: run an agent's tool calls safely.

Typed error kinds, one classifier, retry with backoff and jitter, a circuit breaker per
tool, timeouts, hot-reloaded manifests and a structured event stream. Never imports
Textual or Rich.

The public surface is the names of ``__all__`` below and these subpackages, each with its own
``__all__``: :mod:`engine.events` (every event type), :mod:`engine.store` (the trace store and
its recorder), :mod:`engine.llm` (LLM tool calls), :mod:`engine.faults` (fault plans),
:mod:`engine.replay` (replaying recorded turns) and :mod:`engine.demo` (the bundled demo
tools). Every other module is internal — its docstring says so — and may change or move.
"""

from engine.breaker import AttemptOutcome, BreakerConfig, BreakerState, CircuitBreaker
from engine.bus import EventBus
from engine.call import CallContext, CallResult
from engine.classify import Classification, ClassificationOverride, Rule, classify
from engine.config import ConfigError, ConfigIssue
from engine.engine import Engine
from engine.errors import ToolError, TraceStoreError, TripwireError, TurnNotPersisted
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
from engine.llm import (
    LLMToolCall,
    ToolBatch,
    ToolCallExecutor,
    ToolErrorRegistry,
    ToolExecutionError,
    ToolResultItem,
    format_tool_error_for_llm,
    parse_anthropic_tool_uses,
    parse_openai_tool_calls,
)
from engine.manifest import (
    ManifestError,
    ManifestRegistry,
    SideEffect,
    ToolManifest,
    ToolPolicy,
    load_manifest,
)
from engine.metrics import Counts, ToolStats
from engine.outcomes import CallOutcome, CallStatus, TurnResult
from engine.redaction import RedactionPolicy
from engine.retry import RetryPlan, RetryPolicy, plan_retry
from engine.trace import TurnTrace
from engine.turn import ToolCall, Turn, TurnError

__tripwire__ = True
"""Marks this ``engine`` as tripwire's (see ``tripwire doctor``)."""

__all__ = [
    "EVENT_TYPES",
    "KIND_INFO",
    "MISSING",
    "AttemptOutcome",
    "BreakerConfig",
    "BreakerState",
    "CallContext",
    "CallOutcome",
    "CallResult",
    "CallStatus",
    "CircuitBreaker",
    "Classification",
    "ClassificationOverride",
    "ConfigError",
    "ConfigIssue",
    "Counts",
    "Decision",
    "DefaultErrorHandler",
    "Engine",
    "ErrorClass",
    "ErrorHandler",
    "ErrorKind",
    "Event",
    "EventBus",
    "FailureContext",
    "HandlerDecision",
    "KindInfo",
    "LLMToolCall",
    "ManifestError",
    "ManifestRegistry",
    "RedactionPolicy",
    "RetryPlan",
    "RetryPolicy",
    "Rule",
    "SideEffect",
    "ToolBatch",
    "ToolCall",
    "ToolCallExecutor",
    "ToolError",
    "ToolErrorRegistry",
    "ToolExecutionError",
    "ToolManifest",
    "ToolPolicy",
    "ToolResultItem",
    "ToolStats",
    "TraceStoreError",
    "TripwireError",
    "Turn",
    "TurnError",
    "TurnNotPersisted",
    "TurnResult",
    "TurnTrace",
    "classify",
    "format_tool_error_for_llm",
    "load_manifest",
    "parse_anthropic_tool_uses",
    "parse_openai_tool_calls",
    "plan_retry",
]
