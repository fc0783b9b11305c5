"""A tool's pipeline, compiled from its manifest at ``register`` and on every reload.

:func:`compile_pipeline` builds one :class:`~engine.strategies.base.Strategy` per section the
manifest sets (and the engine-wide shared ones), in :data:`~engine.strategies.registry.ORDER`,
each handed the live state of the one it replaces. The result is immutable: a reload swaps the
whole pipeline between calls, and a call keeps the pipeline it started with.

Internal: the engine's machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.strategies import registry
from engine.strategies.base import SHARED, Strategy, overrides
from engine.strategies.hedging.strategy import HedgingStrategy

if TYPE_CHECKING:
    from engine.policy import ToolPolicy


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A tool's compiled strategies, and per hook the ones that have it."""

    strategies: tuple[Strategy[Any], ...] = ()
    call_started: tuple[Strategy[Any], ...] = ()
    admit: tuple[Strategy[Any], ...] = ()
    """Those that admit attempts or see them end (``admit_now``/``admit``/``attempt_ended``)."""
    ended: tuple[Strategy[Any], ...] = ()
    """``admit`` reversed: attempts end in the reverse order they were admitted."""
    retry_refusal: tuple[Strategy[Any], ...] = ()
    attempt_failed: tuple[Strategy[Any], ...] = ()
    general: bool = False
    """Anything beyond the backbone: the call takes the general path (a field: read on every call)."""
    hedging: HedgingStrategy | None = None
    """A read-only tool's hedging: its calls' attempts race (:mod:`engine.pipeline.hedged`)."""

    def own(self, section: str) -> Strategy[Any] | None:
        """The tool's own strategy of ``section`` (not an engine-wide shared one)."""
        return next((s for s in self.strategies if s.section == section and s.tool_id != SHARED), None)


ADMITTING_HOOKS = ("admit_now", "admit", "attempt_ended")

BACKBONE = Pipeline()
"""Breaker, timeout, retry, classify, decide and nothing else: the fused path."""


def compile_pipeline(
    tool_id: str,
    policy: ToolPolicy,
    *,
    shared: Mapping[str, Strategy[Any]],
    previous: Pipeline | None = None,
) -> Pipeline:
    """``tool_id``'s pipeline under ``policy``, taking over ``previous``'s live state."""
    compiled: list[Strategy[Any]] = []
    for strategy_type in registry.ORDER:
        section = strategy_type.section
        options = policy.strategies.get(section)
        if options is None and section in registry.EVERY_TOOL:
            options = strategy_type.options_type()
        if options is not None:
            old = previous.own(section) if previous is not None else None
            compiled.append(_taking_over(strategy_type(tool_id, options), old))
        if section in shared:
            compiled.append(shared[section])
    if not compiled:
        return BACKBONE
    admitting = tuple(s for s in compiled if any(overrides(s, h) for h in ADMITTING_HOOKS))
    return Pipeline(
        strategies=tuple(compiled),
        call_started=tuple(s for s in compiled if overrides(s, "call_started")),
        admit=admitting,
        ended=admitting[::-1],
        retry_refusal=tuple(s for s in compiled if overrides(s, "retry_refusal")),
        attempt_failed=tuple(s for s in compiled if overrides(s, "attempt_failed")),
        general=True,
        hedging=next((s for s in compiled if isinstance(s, HedgingStrategy)), None),
    )


def compile_shared(
    options: Mapping[str, Any], previous: Mapping[str, Strategy[Any]]
) -> dict[str, Strategy[Any]]:
    """The engine-wide strategies ``defaults.yaml`` sets at its top level, keeping their state."""
    shared: dict[str, Strategy[Any]] = {}
    for section, strategy_type in registry.shared_sections().items():
        section_options = options.get(section)
        if section_options is None:
            continue
        shared[section] = _taking_over(strategy_type(SHARED, section_options), previous.get(section))
    return shared


def _taking_over(strategy: Strategy[Any], old: Strategy[Any] | None) -> Strategy[Any]:
    """``strategy``, handed the live state of ``old`` (the one of its section it replaces)."""
    if old is not None and type(old) is type(strategy):
        strategy.handover(old)
    return strategy
