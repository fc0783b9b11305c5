"""A bulkhead: at most ``max_concurrent`` attempts of one tool in flight at once.

An attempt that finds every slot taken waits in the tool's queue — first come first served, at
most ``max_queued`` waiting, each at most ``queue_timeout_ms`` and never past its turn's
deadline — and is refused unsent as ``bulkhead_full`` when the queue is full or its wait runs
out (Resilience4j's and Polly's concurrency limiter). A slow or hung tool then holds only its own
slots, not every task of the agent. In a manifest::

    bulkhead: {max_concurrent: 4, max_queued: 8, queue_timeout_ms: 500}

A hot reload keeps the occupants and the queue: a larger ``max_concurrent`` admits waiters at
once, a smaller one lets the occupants finish and admits nobody until they are below it.
"""

from engine.strategies.bulkhead.events import BulkheadQueued, BulkheadRejected
from engine.strategies.bulkhead.limiter import Bulkhead, BulkheadFacts
from engine.strategies.bulkhead.options import BulkheadOptions
from engine.strategies.bulkhead.strategy import BulkheadStrategy

__all__ = [
    "Bulkhead",
    "BulkheadFacts",
    "BulkheadOptions",
    "BulkheadQueued",
    "BulkheadRejected",
    "BulkheadStrategy",
]
