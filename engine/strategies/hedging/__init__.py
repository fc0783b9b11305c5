"""Hedging: a read-only tool's slow attempt is raced by another one, and the first success wins.

After ``hedge_after_ms`` — a fixed delay, or ``"p95"``: the tool's live p95 attempt latency over
its metrics window — with no answer yet, one more attempt starts beside the running one (at most
``max_hedges`` per call); the first to succeed wins and the attempts still running are cancelled.
A cancelled attempt is no failure and gives the breaker no evidence. Only for tools whose
``side_effect`` is ``read_only`` (a re-send of anything else could act twice). In a manifest::

    hedging: {hedge_after_ms: 250, max_hedges: 1}     # or hedge_after_ms: p95

A hedge is an attempt like a retry: the retry budget must consent (and spends a retry), the breaker
must admit it, and the admitting strategies (bulkhead, rate limit) must let it through; a hedge
any of them refuses does not start (:class:`HedgeRefused`). An attempt that fails while another
still runs is counted and announced (decision ``wait``); once every attempt has failed, the last
failure is decided as any failure is (retry, alternative…), the retry policy's ``max_attempts``
counting hedges too. A hot reload keeps the counts.
"""

from engine.strategies.hedging.events import AttemptAbandoned, HedgeRaceWon, HedgeRefused, HedgeStarted
from engine.strategies.hedging.options import HedgingOptions
from engine.strategies.hedging.strategy import HedgeSchedule, HedgingFacts, HedgingStrategy

__all__ = [
    "AttemptAbandoned",
    "HedgeRaceWon",
    "HedgeRefused",
    "HedgeSchedule",
    "HedgeStarted",
    "HedgingFacts",
    "HedgingOptions",
    "HedgingStrategy",
]
