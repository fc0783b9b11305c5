"""The strategies that protect a tool's calls, one package each, in the pipeline's order.

Every attempt of a call goes through them in this order (:mod:`engine.pipeline` runs it):

1. ``circuit_breaker`` (:mod:`.breaker`) admits the attempt or rejects it at once;
2. ``rate_limit`` (:mod:`.rate_limit`) lets attempts start at most ``rate_per_s`` a second and
   none during a cooldown after a rate-limit error, each waiting its turn (FIFO) within its max
   wait and its turn's deadline;
3. ``bulkhead`` (:mod:`.bulkhead`) lets at most ``max_concurrent`` attempts of the tool run,
   queueing a bounded few (FIFO), their waits cut by their turn's deadline;
4. ``timeout_ms`` / ``idle_timeout_ms`` (:mod:`.timeout`) cut the attempt off;
5. the error is classified (a rate-limit error starts the tool's cooldown: ``attempt_failed``)
   and the retry policy (:mod:`.retry`) and the error handler decide;
6. ``retry_budget`` (:mod:`.budget`) may refuse a decided retry once retries outgrow the calls;
7. ``idempotency`` (:mod:`.idempotency`) gives each call of a side-effecting tool one key, passed to
   every attempt, which lets step 5 re-send it after an ambiguous failure;
8. ``hedging`` (:mod:`.hedging`, read-only tools) starts one more attempt beside a slow one, each
   hedge put to 6, 1, 2 and 3 first; the first success wins (:mod:`engine.pipeline.hedged` runs the race).

Breaker, timeout and retry are the backbone every tool has (the fused path runs them inline);
the others are :class:`~engine.strategies.base.Strategy` subclasses compiled into a tool's
pipeline when its manifest has their section (:mod:`engine.strategies.registry`).

Internal: the engine's machinery; manifests configure it, :mod:`engine` has the public names.
"""
