"""The pipeline every call of a tool goes through: compiled per tool (:mod:`.compiled`), carried by
one :class:`~engine.pipeline.call.Call` (:mod:`.call`), run by the engine's runtime
(:mod:`.runtime`), with one path for attempts that did not simply succeed (:mod:`.failure`).

The order of the strategies is :mod:`engine.strategies`'.

Internal: the engine's machinery, no public names.
"""
