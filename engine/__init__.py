"""tripwire engine: run an agent's tool calls safely.

Typed error kinds, one classifier, retry with backoff and jitter, a circuit breaker per
tool, timeouts, hot-reloaded manifests and a structured event stream. Never imports
Textual or Rich.

The public surface is the names of ``__all__`` below and these subpackages, each with its own
``__all__``: :mod:`engine.events` (every event type), :mod:`engine.store` (the trace store and
its recorder), :mod:`engine.llm` (LLM tool calls), :mod:`engine.faults` (fault plans),
:mod:`engine.replay` (replaying recorded turns), :mod:`engine.demo` (the bundled demo
tools), :mod:`engine.fleet` (breakers, operator commands and live events shared through Redis,
extra ``[fleet]``), and the optional integrations, each needing its extra: :mod:`engine.adapters`
(:mod:`engine.adapters.mcp`, :mod:`engine.adapters.openai_agents`,
:mod:`engine.adapters.pydantic_ai`, :mod:`engine.adapters.langgraph`) and :mod:`engine.exporters`
(:mod:`engine.exporters.otel`, :mod:`engine.exporters.prometheus`). Every other module is
internal — its docstring says so — and may change or move.

Importing ``engine`` loads nothing else: each public name's module is imported the first time the
name is used (``from engine import Engine`` loads what an engine needs, pydantic among it). The
command line and programs that need a part of the engine start without paying for the rest.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from engine.bus import EventBus
    from engine.call import CallContext, CallResult
    from engine.classify import (
        Classification,
        ClassificationOverride,
        Rule,
        classify,
    )
    from engine.config import ConfigError, ConfigIssue
    from engine.engine import Engine
    from engine.errors import (
        ToolError,
        TraceStoreError,
        TripwireError,
        TurnNotPersisted,
    )
    from engine.events import Event
    from engine.handler import (
        Decision,
        DefaultErrorHandler,
        ErrorHandler,
        FailureContext,
        HandlerDecision,
    )
    from engine.kinds import ErrorClass, ErrorKind, KindInfo
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
    from engine.strategies.base import CallView, Refusal, Strategy, StrategyOptions
    from engine.strategies.breaker.machine import (
        AttemptOutcome,
        BreakerConfig,
        BreakerState,
        CircuitBreaker,
    )
    from engine.strategies.budget.options import RetryBudgetOptions
    from engine.strategies.bulkhead.options import BulkheadOptions
    from engine.strategies.hedging.options import HedgingOptions
    from engine.strategies.idempotency.keys import idempotency_key
    from engine.strategies.idempotency.options import IdempotencyOptions
    from engine.strategies.rate_limit.options import RateLimitOptions
    from engine.strategies.registry import install_strategy
    from engine.strategies.retry.policy import RetryPlan, RetryPolicy, plan_retry
    from engine.strategies.timeout.supervisor import report_progress
    from engine.trace import TurnTrace
    from engine.turn import ToolCall, Turn, TurnError

__tripwire__ = True
"""Marks this ``engine`` as tripwire's (see ``tripwire doctor``)."""

# Declared here, documented here; their values come from their modules on first use like the rest.
MISSING: Any
"""Marks an absent value where ``None`` is a legitimate one (defaults, partial results)."""

EVENT_TYPES: dict[str, type[Event]]
"""Every concrete event class by its ``event_type``: how a stored event finds its class again."""

KIND_INFO: dict[ErrorKind, KindInfo]
"""What each error kind means (a :class:`KindInfo` per :class:`ErrorKind`): the catalogue of kinds."""

_HOMES: Final[dict[str, tuple[str, ...]]] = {
    "engine.strategies.breaker.machine": (
        "AttemptOutcome",
        "BreakerConfig",
        "BreakerState",
        "CircuitBreaker",
    ),
    "engine.bus": ("EventBus",),
    "engine.call": ("CallContext", "CallResult"),
    "engine.classify": ("Classification", "ClassificationOverride", "Rule", "classify"),
    "engine.config": ("ConfigError", "ConfigIssue"),
    "engine.engine": ("Engine",),
    "engine.errors": ("ToolError", "TraceStoreError", "TripwireError", "TurnNotPersisted"),
    "engine.events": ("EVENT_TYPES", "Event"),
    "engine.handler": (
        "MISSING",
        "Decision",
        "DefaultErrorHandler",
        "ErrorHandler",
        "FailureContext",
        "HandlerDecision",
    ),
    "engine.kinds": ("KIND_INFO", "ErrorClass", "ErrorKind", "KindInfo"),
    "engine.llm": (
        "LLMToolCall",
        "ToolBatch",
        "ToolCallExecutor",
        "ToolErrorRegistry",
        "ToolExecutionError",
        "ToolResultItem",
        "format_tool_error_for_llm",
        "parse_anthropic_tool_uses",
        "parse_openai_tool_calls",
    ),
    "engine.manifest": (
        "ManifestError",
        "ManifestRegistry",
        "SideEffect",
        "ToolManifest",
        "ToolPolicy",
        "load_manifest",
    ),
    "engine.metrics": ("Counts", "ToolStats"),
    "engine.outcomes": ("CallOutcome", "CallStatus", "TurnResult"),
    "engine.redaction": ("RedactionPolicy",),
    "engine.strategies.base": ("CallView", "Refusal", "Strategy", "StrategyOptions"),
    "engine.strategies.budget.options": ("RetryBudgetOptions",),
    "engine.strategies.bulkhead.options": ("BulkheadOptions",),
    "engine.strategies.rate_limit.options": ("RateLimitOptions",),
    "engine.strategies.idempotency.keys": ("idempotency_key",),
    "engine.strategies.idempotency.options": ("IdempotencyOptions",),
    "engine.strategies.hedging.options": ("HedgingOptions",),
    "engine.strategies.registry": ("install_strategy",),
    "engine.strategies.retry.policy": ("RetryPlan", "RetryPolicy", "plan_retry"),
    "engine.strategies.timeout.supervisor": ("report_progress",),
    "engine.trace": ("TurnTrace",),
    "engine.turn": ("ToolCall", "Turn", "TurnError"),
}
"""Each public name by the module that defines it: imported on first use (start-up: ``import engine``
took 280 ms when it imported them all; the command line needs a few light modules of the engine)."""

_HOME_OF: Final = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """A public name, imported on first use; or a submodule, as an eager ``import engine`` gave it."""
    module = _HOME_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """``engine`` itself. The import system sets each submodule as an attribute of its package when
    it loads: ``engine.classify`` would then be the subpackage, not the function, depending on what
    was imported first. The function stays (as when this package imported it eagerly)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in _HOME_OF:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "EVENT_TYPES",
    "KIND_INFO",
    "MISSING",
    "AttemptOutcome",
    "BreakerConfig",
    "BreakerState",
    "BulkheadOptions",
    "CallContext",
    "CallOutcome",
    "CallResult",
    "CallStatus",
    "CallView",
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
    "HedgingOptions",
    "IdempotencyOptions",
    "KindInfo",
    "LLMToolCall",
    "ManifestError",
    "ManifestRegistry",
    "RateLimitOptions",
    "RedactionPolicy",
    "Refusal",
    "RetryBudgetOptions",
    "RetryPlan",
    "RetryPolicy",
    "Rule",
    "SideEffect",
    "Strategy",
    "StrategyOptions",
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
    "idempotency_key",
    "install_strategy",
    "load_manifest",
    "parse_anthropic_tool_uses",
    "parse_openai_tool_calls",
    "plan_retry",
    "report_progress",
]
