"""tripwire engine: run an agent's tool calls safely.

Typed error kinds, one classifier, retry with backoff and jitter, a circuit breaker per
tool, timeouts, hot-reloaded manifests and a structured event stream. Never imports
Textual or Rich.
"""

from engine.breaker import AttemptOutcome, BreakerConfig, BreakerState, CircuitBreaker
from engine.bus import EventBus
from engine.classify import Classification, ClassificationOverride, Rule, classify
from engine.config import ConfigError, ConfigIssue
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
    "Turn",
    "TurnError",
    "TurnResult",
    "TurnTrace",
    "classify",
    "format_tool_error_for_llm",
    "load_manifest",
    "parse_anthropic_tool_uses",
    "parse_openai_tool_calls",
    "plan_retry",
]
