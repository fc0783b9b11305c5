"""Prometheus metrics: an engine's tool calls, attempts, errors, breakers, bulkheads, retry budgets,
rate limits and turns, for scraping.

Needs the ``[prometheus]`` extra (``pip install 'tripwire[prometheus]'``: prometheus-client).
:class:`PrometheusMetrics` attaches to an engine and registers a collector on a registry (the
global ``prometheus_client.REGISTRY`` unless given one), so any process that already exposes that
registry — ``prometheus_client.start_http_server``, a web framework's ``/metrics`` — exposes
tripwire's metrics too; :func:`start_metrics_server` serves a registry on its own (what
``tripwire serve --metrics-port`` runs). The metrics, whose labels are only ``tool``, ``outcome``,
``kind``, ``class``, ``state`` and ``reason`` — never a call or turn id, so their number stays bounded:

* ``tripwire_calls_total{tool,outcome}``: calls ended — ``ok``, ``partial`` (a partial result
  kept), ``failed``, ``rejected`` (refused before any attempt by the breaker, a full bulkhead or a
  rate limit),
  ``skipped`` / ``escalated``
  (an optional / required call not run because a dependency did not succeed); a call cut off by
  its turn's deadline or stop has no outcome of its own: its turn's outcome says it;
* ``tripwire_attempts_total{tool}``, ``tripwire_retries_total{tool}`` (attempts after the first);
* ``tripwire_errors_total{tool,kind,class}``: failed attempts by error kind and class, and calls
  refused before any attempt — an unknown tool, arguments the LLM executor or an adapter could not
  pass (``CallFailed`` with no attempt: also counted ``failed`` in ``tripwire_calls_total``), and
  streams cut after they opened (``StreamEnded`` ``truncated``); one
  refused as an unknown tool or under a name no tool has is labelled ``tool="(unknown)"``: a
  model's invented names never become label values;
* ``tripwire_rejections_total{tool,kind}``: calls refused before any attempt (``CallRejected``),
  by the kind of the refusal: ``circuit_open`` (the breaker), ``bulkhead_full`` or ``throttled``
  (a rate limit);
  ``tripwire_timeouts_total{tool}`` (attempts that timed out — cut off by their timeout or idle
  window, or a timeout the tool raised — and streams cut by one: ``timeout_count`` in ``engine.stats()``);
* ``tripwire_breaker_state{tool,state}``: one gauge per state, 1 for the state each registered
  tool's breaker is in when scraped, else 0 (an OPEN breaker whose open period has run out shows
  OPEN until the engine's half-open timer or its next call moves it); ``tripwire_breaker_opens_total{tool}``
  (``BreakerOpened``: the engine opened it; an operator's trip is a state, not an open);
* ``tripwire_attempt_duration_seconds{tool}``: a histogram of each attempt's own duration (the
  ``latency_ms`` of a failed attempt, the ``attempt_ms`` of a successful one);
* for a tool with a ``bulkhead``, read when scraped: ``tripwire_bulkhead_in_flight{tool}``,
  ``tripwire_bulkhead_queued{tool}``, ``tripwire_bulkhead_limit{tool}`` (``max_concurrent``),
  ``tripwire_bulkhead_queue_limit{tool}`` (``max_queued``), ``tripwire_bulkhead_wait_p95_seconds{tool}``
  (recent queue waits: the last minute's, at most 128; 0 with none) and
  ``tripwire_bulkhead_rejections_total{tool,reason}``: attempts refused — a call's first or a retry —
  ``full`` at once, or after their queue wait ran out (``timeout``);
* for a tool with a ``retry_budget``: ``tripwire_retry_budget_refusals_total{tool}``, retries the
  budget refused; the engine-wide budget of ``defaults.yaml`` is one series, ``tool="(shared)"``;
* for a tool with a ``rate_limit``, read when scraped: ``tripwire_rate_limit_tokens{tool}`` (tokens
  in its bucket; no series for a limit with no ``rate_per_s``, only a cooldown),
  ``tripwire_rate_limit_burst{tool}``, ``tripwire_rate_limit_rate_per_second{tool}``,
  ``tripwire_rate_limit_waiting{tool}`` (attempts waiting for their turn now),
  ``tripwire_rate_limit_waits_total{tool}`` (attempts let through after waiting for a token or a
  cooldown's end), ``tripwire_rate_limit_rejections_total{tool}`` (attempts refused as
  ``throttled``: a call's first or a retry), ``tripwire_cooldowns_total{tool}`` (cooldowns started
  or extended by a rate-limit error) and ``tripwire_cooldown_remaining_seconds{tool}`` (0 when the
  tool is not cooling down); who started a cooldown is a call id, never a label: it is in the
  ``CooldownStarted`` event, ``engine.stats()`` and the console;
* ``tripwire_turns_total{outcome}``: turns ended, by ``TurnFinished.outcome``;
* ``tripwire_fleet_available``: in a process of a fleet (:mod:`engine.fleet`), 0 from a
  ``FleetUnavailable`` (its Redis unreachable: the process decides alone) until a
  ``FleetRestored``, then 1; not exposed until the first of them (a fleet whose Redis always
  answered announces neither).

Off the hot path: the engine calls a direct subscriber that only bumps plain dict counters (about
0.35 µs per event measured, two per successful call); the metric families are built when scraped,
on the scraper's thread, from copies of those counters and from each breaker's state then. The
bulkheads', retry budgets' and rate limits' figures are their strategies' own facts (what ``engine.stats()``
reports as ``strategies``), read from each strategy when scraped — not through ``engine.stats()``,
which would snapshot every tool's whole metrics on a thread not the engine's — so no event is
counted for them and a tool without the section has no series.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final
from wsgiref.simple_server import WSGIServer

from anyio import NoEventLoopError
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar

from engine.closing import ClosedOnExit
from engine.events import (
    AttemptFailed,
    AttemptStarted,
    BreakerOpened,
    BulkheadQueued,
    BulkheadRejected,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    CooldownEnded,
    CooldownStarted,
    Event,
    FleetRestored,
    FleetUnavailable,
    RateLimitRejected,
    RateLimitWaited,
    StreamEnded,
    TurnFinished,
)
from engine.kinds import ErrorKind
from engine.metrics import UNKNOWN_TOOL_ID
from engine.strategies.base import SHARED, strategy_facts
from engine.strategies.breaker.machine import BreakerState

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from engine.engine import Engine

DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of ``tripwire_attempt_duration_seconds``'s buckets; ``+Inf`` is added."""

UNKNOWN_TOOL_LABEL: Final = UNKNOWN_TOOL_ID
"""The ``tool`` label of a call refused as an unknown tool: not a valid tool id, so never a real one."""
SHARED_BUDGET_LABEL: Final = "(shared)"
"""The ``tool`` label of the engine-wide retry budget (``defaults.yaml``): not a valid tool id either."""

_STATES: Final = tuple(BreakerState)


class PrometheusMetrics(ClosedOnExit):
    """An engine's metrics for Prometheus: counts its events, registers a collector on ``registry``.

    Constructing it attaches it (a direct subscriber) and registers its collector on ``registry``
    — ``prometheus_client.REGISTRY`` by default, the one ``start_http_server`` serves. A registry
    holds one engine's metrics: a second ``PrometheusMetrics`` on it raises ``ValueError``
    (prometheus-client's ``DuplicateTimeseries``) — give each engine a registry of its own.
    Counts start when it attaches. :meth:`close` (or leaving ``with``) detaches and unregisters.
    ``buckets``: the upper bounds of the duration histogram's buckets, in seconds.
    """

    def __init__(
        self,
        engine: Engine,
        registry: CollectorRegistry | None = None,
        *,
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self.engine = engine
        self.registry = registry if registry is not None else REGISTRY
        self._counts = _Counts(tuple(sorted(buckets)))
        self.registry.register(self)  # first: a clash leaves nothing attached
        self._unsubscribe: Callable[[], None] | None = engine.subscribe(self._counts.on_event, direct=True)

    def collect(self) -> list[Metric]:
        """Every metric family, built from the counts now (the registry calls it on a scrape)."""
        return _families(self._counts, self.engine, _engine_now(self.engine, self._counts.clock_offset))

    def describe(self) -> list[Metric]:
        """The metric families without samples: the names the registry checks for clashes."""
        return _families(_Counts(self._counts.buckets), None, 0.0)

    def close(self) -> None:
        """Detach from the engine and unregister from the registry (once; later calls do nothing)."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
            self.registry.unregister(self)


class _Counts:
    """The engine's side: a direct subscriber that only bumps plain dict counters.

    Written only from the engine's event loop; a scrape, on another thread, reads copies.
    """

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.calls: dict[tuple[str, str], int] = {}
        self.attempts: dict[str, int] = {}
        self.retries: dict[str, int] = {}
        self.errors: dict[tuple[str, str, str], int] = {}
        self.rejections: dict[tuple[str, str], int] = {}
        self.timeouts: dict[str, int] = {}
        self.opens: dict[str, int] = {}
        self.turns: dict[str, int] = {}
        self.durations: dict[str, list[float]] = {}
        """Per tool: the count in each bucket (not cumulative; the last is ``+Inf``), then the sum."""
        self.fleet_available: float | None = None
        """1 or 0 after the last fleet event; None before any."""
        self.clock_offset = 0.0
        """Engine time minus ``time.monotonic()`` at the last bulkhead or rate-limit event: a scrape
        that cannot read the engine's clock (trio's, from another thread) dates the bulkheads' recent
        waits, a bucket's tokens and a cooldown's end by it."""
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            AttemptStarted: self._attempt_started, CallSucceeded: self._succeeded,
            AttemptFailed: self._attempt_failed, CallFailed: self._failed, CallRejected: self._rejected,
            StreamEnded: self._stream_ended, BreakerOpened: self._opened, TurnFinished: self._turn_finished,
            CallSkipped: self._skipped, CallEscalated: self._escalated,
            FleetUnavailable: self._fleet_unavailable, FleetRestored: self._fleet_restored,
            BulkheadQueued: self._bulkhead_event, BulkheadRejected: self._bulkhead_event,
            RateLimitWaited: self._bulkhead_event, RateLimitRejected: self._bulkhead_event,
            CooldownStarted: self._bulkhead_event, CooldownEnded: self._bulkhead_event,
        }  # fmt: skip

    def on_event(self, event: Event) -> None:
        handle = self._handlers.get(type(event))
        if handle is not None:
            handle(event)

    def _attempt_started(self, event: AttemptStarted) -> None:
        tool = event.tool_id
        attempts = self.attempts
        attempts[tool] = attempts.get(tool, 0) + 1
        if event.attempt > 1:
            retries = self.retries
            retries[tool] = retries.get(tool, 0) + 1

    def _succeeded(self, event: CallSucceeded) -> None:
        tool = event.tool_id
        if event.partial:  # kept after a failed attempt, whose duration is already counted
            key = (tool, "partial")
        else:
            key = (tool, "ok")
            self._observe(tool, event.attempt_ms / 1000.0)
        calls = self.calls
        calls[key] = calls.get(key, 0) + 1

    def _attempt_failed(self, event: AttemptFailed) -> None:
        tool = event.tool_id
        errors = self.errors
        key = (tool, event.kind.value, event.classification.value)
        errors[key] = errors.get(key, 0) + 1
        if event.kind is ErrorKind.TIMEOUT:
            self._timed_out(tool)
        self._observe(tool, event.latency_ms / 1000.0)

    def _stream_ended(self, event: StreamEnded) -> None:
        if event.outcome != "truncated" or event.kind is None or event.classification is None:
            return  # ended well, or a trace from before the event carried its classification
        tool = event.tool_id
        errors = self.errors
        key = (tool, event.kind.value, event.classification.value)
        errors[key] = errors.get(key, 0) + 1
        if event.timed_out:
            self._timed_out(tool)

    def _failed(self, event: CallFailed) -> None:
        tool = event.counted_tool
        if event.attempts == 0:  # refused before any attempt: no AttemptFailed counted its error
            errors = self.errors
            error = (tool, event.kind.value, event.classification.value)
            errors[error] = errors.get(error, 0) + 1
        self._ended(tool, "failed")

    def _rejected(self, event: CallRejected) -> None:
        tool = event.tool_id
        rejections = self.rejections
        key = (tool, event.kind.value)  # the breaker's (circuit_open) or a strategy's (bulkhead_full)
        rejections[key] = rejections.get(key, 0) + 1
        self._ended(tool, "rejected")

    def _skipped(self, event: CallSkipped) -> None:
        self._ended(event.tool_id, "skipped")

    def _escalated(self, event: CallEscalated) -> None:
        self._ended(event.tool_id, "escalated")

    def _ended(self, tool: str, outcome: str) -> None:
        calls = self.calls
        key = (tool, outcome)
        calls[key] = calls.get(key, 0) + 1

    def _timed_out(self, tool: str) -> None:
        timeouts = self.timeouts
        timeouts[tool] = timeouts.get(tool, 0) + 1

    def _opened(self, event: BreakerOpened) -> None:
        opens = self.opens
        opens[event.tool_id] = opens.get(event.tool_id, 0) + 1

    def _turn_finished(self, event: TurnFinished) -> None:
        turns = self.turns
        turns[event.outcome] = turns.get(event.outcome, 0) + 1

    def _fleet_unavailable(self, event: FleetUnavailable) -> None:
        self.fleet_available = 0.0

    def _fleet_restored(self, event: FleetRestored) -> None:
        self.fleet_available = 1.0

    def _bulkhead_event(self, event: Event) -> None:
        # Off the hot path (the attempt waits, is refused, or a cooldown starts or ends), and
        # before any wait the p95 counts.
        self.clock_offset = event.t - time.monotonic()

    def _observe(self, tool: str, seconds: float) -> None:
        counts = self.durations.get(tool)
        if counts is None:
            counts = self.durations[tool] = [0.0] * (len(self.buckets) + 2)
        counts[bisect_left(self.buckets, seconds)] += 1  # the first bound ≥ seconds: Prometheus's le
        counts[-1] += seconds


# --- the scrape's side --------------------------------------------------------------------


def _families(counts: _Counts, engine: Engine | None, now: float) -> list[Metric]:
    """Every metric family from ``counts`` now; the breakers' states and the strategies' facts
    (at engine time ``now``) from ``engine``, if given."""
    # list(dict.items()) copies under the GIL: the engine may count on while this reads.
    calls = CounterMetricFamily(
        "tripwire_calls_total", "Tool calls ended, by outcome", labels=["tool", "outcome"]
    )
    for (tool, outcome), n in list(counts.calls.items()):
        calls.add_metric([tool, outcome], n)
    errors = CounterMetricFamily(
        "tripwire_errors_total", "Failed attempts (and calls refused before any) by error kind and class",
        labels=["tool", "kind", "class"],
    )  # fmt: skip
    for (tool, kind, error_class), n in list(counts.errors.items()):
        errors.add_metric([tool, kind, error_class], n)
    turns = CounterMetricFamily("tripwire_turns_total", "Turns ended, by outcome", labels=["outcome"])
    for outcome, n in list(counts.turns.items()):
        turns.add_metric([outcome], n)
    rejections = CounterMetricFamily(
        "tripwire_rejections_total", "Calls refused before any attempt, by the kind of the refusal",
        labels=["tool", "kind"],
    )  # fmt: skip
    for (tool, kind), n in list(counts.rejections.items()):
        rejections.add_metric([tool, kind], n)
    return [
        calls,
        _per_tool("tripwire_attempts_total", "Attempts started", counts.attempts),
        _per_tool("tripwire_retries_total", "Attempts after a call's first", counts.retries),
        errors,
        rejections,
        _per_tool("tripwire_timeouts_total", "Attempts cut off by timeout or idle window", counts.timeouts),
        _breaker_states(engine),
        _per_tool("tripwire_breaker_opens_total", "Times the engine opened the breaker", counts.opens),
        _duration_histogram(counts),
        *_strategy_families(engine, now),
        turns,
        _fleet_available(counts.fleet_available),
    ]  # fmt: skip


def _per_tool(name: str, documentation: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=["tool"])
    for tool, n in list(counts.items()):
        family.add_metric([tool], n)
    return family


def _breaker_states(engine: Engine | None) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(
        "tripwire_breaker_state",
        "1 for the state each tool's breaker is in, else 0",
        labels=["tool", "state"],
    )
    if engine is None:
        return gauge
    for tool in engine.tools:
        try:
            state = engine.breaker(tool).state  # an attribute read: safe from the scrape's thread
        except LookupError:  # retired since the list was taken
            continue
        for each in _STATES:
            gauge.add_metric([tool, each.value], 1.0 if each is state else 0.0)
    return gauge


def _engine_now(engine: Engine, clock_offset: float) -> float:
    """Engine time now: the engine's clock where this thread can read it (the engine's own loop;
    an asyncio loop's clock from any thread), else the monotonic clock shifted by the offset last seen."""
    try:
        return engine.runtime.clock()
    except (NoEventLoopError, RuntimeError):  # another thread than the engine's, on trio or unstarted
        return time.monotonic() + clock_offset


def _strategies(engine: Engine, now: float) -> Iterator[tuple[str, Mapping[str, Mapping[str, Any]]]]:
    """Each tool's own strategies' facts at ``now`` (as ``engine.stats()`` has them), tools with none
    left out; then the engine-wide ones', under :data:`SHARED_BUDGET_LABEL`."""
    # Facts are read from counters and lists, never by iterating a dict the engine may grow: safe
    # from this thread under the GIL (engine.stats()'s snapshot of the metrics is not).
    runtime = engine.runtime
    for name, tool in list(runtime.tools.items()):  # copied: the engine may register meanwhile
        own = [s for s in tool.pipeline.strategies if s.tool_id != SHARED]  # a reload swaps it whole
        if own:
            yield name, strategy_facts(own, now)
    shared = strategy_facts(list(runtime.shared.values()), now)
    if shared:
        yield SHARED_BUDGET_LABEL, {k.removeprefix("shared."): v for k, v in shared.items()}


def _strategy_families(engine: Engine | None, now: float) -> list[Metric]:
    """The bulkheads' and retry budgets' families, from their strategies' facts when scraped."""
    in_flight = GaugeMetricFamily(
        "tripwire_bulkhead_in_flight", "Attempts holding a slot of the tool's bulkhead", labels=["tool"]
    )
    queued = GaugeMetricFamily(
        "tripwire_bulkhead_queued", "Attempts waiting in the bulkhead's queue", labels=["tool"]
    )
    limit = GaugeMetricFamily(
        "tripwire_bulkhead_limit", "The bulkhead's max_concurrent: attempts in flight at most",
        labels=["tool"],
    )  # fmt: skip
    queue_limit = GaugeMetricFamily(
        "tripwire_bulkhead_queue_limit", "The bulkhead's max_queued: attempts waiting at most",
        labels=["tool"],
    )  # fmt: skip
    wait_p95 = GaugeMetricFamily(
        "tripwire_bulkhead_wait_p95_seconds",
        "95th percentile of the bulkhead's recent queue waits (the last minute, at most 128; 0 with none)",
        labels=["tool"],
    )
    rejected = CounterMetricFamily(
        "tripwire_bulkhead_rejections_total",
        "Attempts the bulkhead refused: full at once, or their queue wait ran out (timeout)",
        labels=["tool", "reason"],
    )
    refusals = CounterMetricFamily(
        "tripwire_retry_budget_refusals_total", "Retries the retry budget refused", labels=["tool"]
    )
    if engine is not None:
        for tool, facts in _strategies(engine, now):
            bulkhead = facts.get("bulkhead")
            if bulkhead is not None:
                in_flight.add_metric([tool], bulkhead["in_flight"])
                queued.add_metric([tool], bulkhead["queued"])
                limit.add_metric([tool], bulkhead["max_concurrent"])
                queue_limit.add_metric([tool], bulkhead["max_queued"])
                wait_p95.add_metric([tool], bulkhead["wait_p95_ms"] / 1000.0)
                rejected.add_metric([tool, "full"], bulkhead["rejected_full"])
                rejected.add_metric([tool, "timeout"], bulkhead["rejected_timeout"])
            budget = facts.get("retry_budget")
            if budget is not None:
                refusals.add_metric([tool], budget["refused"])
    families = [in_flight, queued, limit, queue_limit, wait_p95, rejected, refusals]
    return [*families, *_rate_limit_families(engine, now)]


def _rate_limit_families(engine: Engine | None, now: float) -> list[Metric]:
    """The rate limits' families, from their strategies' facts (``engine.stats()``'s) when scraped."""
    tool = ["tool"]
    tokens = GaugeMetricFamily("tripwire_rate_limit_tokens", "Tokens in the rate limit's bucket", labels=tool)
    burst = GaugeMetricFamily(
        "tripwire_rate_limit_burst", "The rate limit's burst: its bucket's size", labels=tool
    )
    rate = GaugeMetricFamily(
        "tripwire_rate_limit_rate_per_second", "The rate limit's rate_per_s: its bucket's refill", labels=tool
    )
    waiting = GaugeMetricFamily(
        "tripwire_rate_limit_waiting", "Attempts waiting for their turn under the rate limit now", labels=tool
    )
    waits = CounterMetricFamily(
        "tripwire_rate_limit_waits_total",
        "Attempts let through after waiting for a token or a cooldown's end", labels=tool,
    )  # fmt: skip
    rejections = CounterMetricFamily(
        "tripwire_rate_limit_rejections_total",
        "Attempts the rate limit refused (throttled): their turn was past their max wait or deadline",
        labels=tool,
    )
    cooldowns = CounterMetricFamily(
        "tripwire_cooldowns_total", "Cooldowns started or extended by a rate-limit error (a 429)", labels=tool
    )
    remaining = GaugeMetricFamily(
        "tripwire_cooldown_remaining_seconds",
        "Seconds the tool still pauses for every caller after a rate-limit error (0: none)", labels=tool,
    )  # fmt: skip
    if engine is not None:
        for name, facts in _strategies(engine, now):
            limit = facts.get("rate_limit")
            if limit is None:
                continue
            if limit["tokens"] is not None:
                tokens.add_metric([name], limit["tokens"])
                burst.add_metric([name], limit["burst"])
                rate.add_metric([name], limit["rate_per_s"])
            waiting.add_metric([name], limit["waiting"])
            waits.add_metric([name], limit["waited"])
            rejections.add_metric([name], limit["rejected"])
            cooldowns.add_metric([name], limit["cooldowns"])
            remaining.add_metric([name], limit["cooldown_remaining_s"])
    return [tokens, burst, rate, waiting, waits, rejections, cooldowns, remaining]


def _fleet_available(available: float | None) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(
        "tripwire_fleet_available",
        "1 while the fleet's Redis answers, 0 while this process runs without it (after a fleet event)",
    )
    if available is not None:
        gauge.add_metric([], available)
    return gauge


def _duration_histogram(counts: _Counts) -> HistogramMetricFamily:
    histogram = HistogramMetricFamily(
        "tripwire_attempt_duration_seconds", "Each attempt's own duration", labels=["tool"]
    )
    bounds = [*(repr(float(b)) for b in counts.buckets), "+Inf"]
    for tool, per_bucket in list(counts.durations.items()):
        snapshot = list(per_bucket)
        cumulative = 0.0
        buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
        for bound, n in zip(bounds, snapshot, strict=False):  # the sum, last, is not a bucket
            cumulative += n
            buckets.append((bound, cumulative))
        histogram.add_metric([tool], buckets, snapshot[-1])
    return histogram


class MetricsServer(ClosedOnExit):
    """A running ``/metrics`` endpoint (see :func:`start_metrics_server`); :meth:`close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        host, port = server.server_address[:2]
        self.addr: str = str(host)
        self.port: int = int(port)
        """The port it listens on: the one asked for, or the one the system chose for port 0."""

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving, close the socket and wait for the server's thread (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def start_metrics_server(
    metrics: PrometheusMetrics | CollectorRegistry, port: int, addr: str = "127.0.0.1"
) -> MetricsServer:
    """Serve the registry of ``metrics`` (or a registry) at ``http://addr:port/metrics`` on a
    daemon thread, with prometheus-client's own WSGI server; port 0 picks a free port (read it
    from ``.port``). Only this host by default: ``addr="0.0.0.0"`` listens on every interface.
    Raises ``OSError`` when it cannot listen there."""
    registry: Collector = metrics.registry if isinstance(metrics, PrometheusMetrics) else metrics
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server, thread)


__all__ = [
    "DURATION_BUCKETS",
    "SHARED_BUDGET_LABEL",
    "UNKNOWN_TOOL_LABEL",
    "MetricsServer",
    "PrometheusMetrics",
    "start_metrics_server",
]
