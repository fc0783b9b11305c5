"""The strategies in the pipeline's order, and their manifest sections.

:data:`ORDER` is the one list: adding a strategy is its package and one line here. Code outside
the engine (a test, an extension) adds one with :func:`install_strategy` instead, without editing a file.

Internal: the engine's machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine.strategies.base import Strategy
from engine.strategies.budget.strategy import RetryBudgetStrategy
from engine.strategies.bulkhead.strategy import BulkheadStrategy
from engine.strategies.hedging.strategy import HedgingStrategy
from engine.strategies.idempotency.strategy import IdempotencyStrategy
from engine.strategies.rate_limit.strategy import RateLimitStrategy

ORDER: list[type[Strategy[Any]]] = [
    # Before the bulkhead: an attempt waiting for a token (or a cooldown's end) holds no slot.
    RateLimitStrategy,  # before each attempt, once the breaker admitted it; sees failed attempts
    BulkheadStrategy,  # before each attempt, once the breaker admitted it
    RetryBudgetStrategy,  # when a retry is decided
    IdempotencyStrategy,  # a key per call, passed to each attempt
    HedgingStrategy,  # no hook: its calls' attempts race (engine.pipeline.hedged)
]
"""The compiled strategies, in the order their hooks run (the backbone's place: engine.strategies)."""

EVERY_TOOL: set[str] = set()
"""Sections compiled into every tool's pipeline, with default options when its manifest has none."""


def sections() -> Mapping[str, type[Strategy[Any]]]:
    """Every registered strategy by its manifest section, in order."""
    return {strategy.section: strategy for strategy in ORDER}


def shared_sections() -> Mapping[str, type[Strategy[Any]]]:
    """The sections ``defaults.yaml`` may also set once at its top level, for every tool at once."""
    return {strategy.section: strategy for strategy in ORDER if strategy.shared_section}


def install_strategy(
    strategy: type[Strategy[Any]], *, before: str | None = None, every_tool: bool = False
) -> Callable[[], None]:
    """Add ``strategy`` to the pipeline (before the strategy of section ``before``, else last);
    with ``every_tool``, compiled into every tool's pipeline even where its manifest has no section.

    Manifests and pipelines compiled before keep what they had: install before building the
    engine (or reload). Returns a function that removes it again."""
    if strategy.section in sections():
        raise ValueError(f"a strategy for section {strategy.section!r} is already installed")
    position = len(ORDER)
    if before is not None:
        position = next((i for i, s in enumerate(ORDER) if s.section == before), position)
    ORDER.insert(position, strategy)
    if every_tool:
        EVERY_TOOL.add(strategy.section)

    def uninstall() -> None:
        if strategy in ORDER:
            ORDER.remove(strategy)
        EVERY_TOOL.discard(strategy.section)

    return uninstall
