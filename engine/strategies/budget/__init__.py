"""A retry budget: retries may be at most a share of the calls, so a failing dependency is not
hit by a storm of retries (Envoy's ``retry_budget``, gRPC's retry throttling, Finagle's
``RetryBudget``).

The rule: in the last ``window_s`` seconds, retries may be at most

    max(budget_percent / 100 × calls in the window, min_retries_per_s × window_s)

(rounded down). Every call counts when it starts; a retry counts when the budget consents to it.
A retry over the budget is refused: the call ends on its last attempt with the reason
``retry budget spent: 30 retries over 150 calls in 10 s``, and :class:`RetryBudgetSpent` is
announced. The floor lets a quiet tool still retry (30 retries in 10 s by default); the
percentage caps a busy one, so with the defaults a storm makes at most about 1.2 attempts per call.

The manifest section, per tool, or once at the top level of ``defaults.yaml`` for one budget every
tool shares::

    retry_budget: {budget_percent: 20, min_retries_per_s: 3, window_s: 10}

The window slides in tenths of ``window_s`` (:data:`BUCKETS`); a hot reload keeps its counts.
"""

from engine.strategies.budget.events import RetryBudgetSpent
from engine.strategies.budget.options import RetryBudgetOptions
from engine.strategies.budget.strategy import SHARED_TOOL_ID, RetryBudgetStrategy
from engine.strategies.budget.window import BUCKETS, RetryBudgetFacts, RetryBudgetWindow

__all__ = [
    "BUCKETS",
    "SHARED_TOOL_ID",
    "RetryBudgetFacts",
    "RetryBudgetOptions",
    "RetryBudgetSpent",
    "RetryBudgetStrategy",
    "RetryBudgetWindow",
]
