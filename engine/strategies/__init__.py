"""The strategies that protect a tool's calls, one package each, in the pipeline's order.

Every attempt of a call goes through them in this order (:mod:`engine.pipeline` runs it):

1. ``circuit_breaker`` (:mod:`.breaker`) admits the attempt or rejects it at once;
2. ``bulkhead`` (:mod:`.bulkhead`) lets at most ``max_concurrent`` attempts of the tool run,
   queueing a bounded few (FIFO), their waits cut by their turn's deadline;
3. ``timeout_ms`` / ``idle_timeout_ms`` (:mod:`.timeout`) cut the attempt off;
4. the error is classified and the retry policy (:mod:`.retry`) and the error handler decide;
5. ``retry_budget`` (:mod:`.budget`) may refuse a decided retry once retries outgrow the calls;
6. ``hedging`` (:mod:`.hedging`, read-only tools) starts one more attempt beside a slow one, each
   hedge put to 5, 1 and 2 first; the first success wins (:mod:`engine.pipeline.hedged` runs the race).

Breaker, timeout and retry are the backbone every tool has (the fused path runs them inline);
the others are :class:`~engine.strategies.base.Strategy` subclasses compiled into a tool's
pipeline when its manifest has their section (:mod:`engine.strategies.registry`).

Internal: the engine's machinery; manifests configure it, :mod:`engine` has the public names.
"""
