"""The circuit breaker: the pipeline's admission of every attempt (:mod:`.machine`).

Manifest section ``circuit_breaker`` (:class:`~.machine.BreakerConfig`); its events are the
``Breaker*`` ones in :mod:`engine.events`. The pipeline's backbone runs it inline (see
:mod:`engine.pipeline`).
"""
