"""What each event counts: the definition of every per-tool figure (:class:`~engine.metrics.Counts`).

Events are the one source of truth. The engine does not build events nobody observes (it would
cost a third of a call), so it counts each fact where it happens, calling the one hook below
with the values that fact's event carries; whoever reads the events instead — the console, on its
own engine or attached to another process's trace store — folds them through :func:`count_event`.
The two can never drift apart unnoticed: tests/engine/test_metrics_agree.py runs generated
workloads in every engine mode and finds ``engine.stats()`` equal to the fold of the events the
same calls published, figure by figure, latency histograms included.

======================  =====================================================================
event                   counts (hook)
======================  =====================================================================
``AttemptStarted``      attempt 1: a call (``on_call``); later ones: a retry (``on_retry``)
``AttemptFailed``       a failed attempt, transient or permanent, its latency; a timeout when
                        its kind is ``timeout`` (``on_attempt_failed``)
``StreamEnded``         ``truncated``: a failed attempt without a latency (``on_attempt_failed``)
``CallSucceeded``       a success and its last attempt's latency (``on_success``), or a partial
                        result kept (``on_partial_success``)
``CallFailed``          a failed call (``on_failure``); with no attempt, also the call itself
                        (``on_refused``: an unknown tool, arguments that cannot be passed)
``CallRejected``        a call, and a rejected one (``on_rejected``)
``CallSkipped`` /       a call a turn never ran (``on_skipped``)
``CallEscalated``
``BreakerTransitioned`` to ``OPEN``: a breaker open (``on_breaker_opened``)
======================  =====================================================================

Internal: the engine's and the console's machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.events import (
    EVENT_TYPES,
    AttemptFailed,
    AttemptStarted,
    BreakerTransitioned,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    Event,
    StreamEnded,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.metrics.tally import ToolMetrics
from engine.strategies.breaker.machine import BreakerState


def _attempt_started(m: ToolMetrics, e: AttemptStarted) -> None:
    if e.attempt == 1:
        m.on_call(e.t)
    else:
        m.on_retry(e.t)


def _attempt_failed(m: ToolMetrics, e: AttemptFailed) -> None:
    m.on_attempt_failed(
        e.t, e.latency_ms / 1000.0, transient=e.classification is ErrorClass.TRANSIENT,
        timed_out=e.kind is ErrorKind.TIMEOUT,
    )  # fmt: skip


def _stream_ended(m: ToolMetrics, e: StreamEnded) -> None:
    if e.outcome == "truncated" and e.classification is not None:  # traces written before it carried one
        m.on_attempt_failed(
            e.t, None, transient=e.classification is ErrorClass.TRANSIENT, timed_out=e.timed_out
        )


def _succeeded(m: ToolMetrics, e: CallSucceeded) -> None:
    if e.partial:  # the attempt's latency was counted with its failure
        m.on_partial_success(e.t)
    else:
        m.on_success(e.t, e.attempt_ms / 1000.0, retried=e.attempts > 1)


def _failed(m: ToolMetrics, e: CallFailed) -> None:
    if e.attempts:
        m.on_failure(e.t)
    else:  # refused before any attempt: no AttemptStarted counted the call
        m.on_refused(e.t)


def _rejected(m: ToolMetrics, e: CallRejected) -> None:
    m.on_rejected(e.t)


def _skipped(m: ToolMetrics, e: CallSkipped | CallEscalated) -> None:
    m.on_skipped(e.t)


def _breaker(m: ToolMetrics, e: BreakerTransitioned) -> None:
    if e.to_state is BreakerState.OPEN:
        m.on_breaker_opened(e.t)


COUNTED: dict[type[Event], Callable[[ToolMetrics, Any], None]] = {
    AttemptStarted: _attempt_started,
    AttemptFailed: _attempt_failed,
    StreamEnded: _stream_ended,
    CallSucceeded: _succeeded,
    CallFailed: _failed,
    CallRejected: _rejected,
    CallSkipped: _skipped,
    CallEscalated: _skipped,
    **{cls: _breaker for cls in EVENT_TYPES.values() if issubclass(cls, BreakerTransitioned)},
}
"""Each counted event type's fold (an exact type: a subclass is listed on its own)."""


def counted_tool(event: Event) -> str | None:
    """The tool whose metrics ``event`` counts in, or None when it counts nowhere."""
    if type(event) not in COUNTED:
        return None
    if type(event) is CallFailed:
        return event.counted_tool  # "(unknown)" for an invented name
    return event.tool_id  # type: ignore[attr-defined,no-any-return]  # every counted type is a ToolEvent


def count_event(metrics: Callable[[str], ToolMetrics], event: Event) -> str | None:
    """Count ``event`` in the metrics of its tool (``metrics(tool_id)`` finds or makes them); the tool
    counted, or None when the event counts nothing."""
    fold = COUNTED.get(type(event))
    if fold is None:
        return None
    tool_id = counted_tool(event)
    assert tool_id is not None
    fold(metrics(tool_id), event)
    return tool_id


__all__ = ["COUNTED", "count_event", "counted_tool"]
