"""Timeouts: each attempt's hard cut-off (``timeout_ms``) and idle window (``idle_timeout_ms``),
watched by one supervisor while the engine runs (:mod:`.supervisor`)."""
