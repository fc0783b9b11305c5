"""What calling a tool does to the world (a manifest's ``side_effect``): whether a failed call may
be sent again, and which strategies suit the tool (hedging re-sends, so only a read-only tool).

Its own module so strategies can read it without importing the manifest models that list them.

Internal: import it from :mod:`engine`.
"""

from __future__ import annotations

from enum import StrEnum


class SideEffect(StrEnum):
    """What calling the tool does to the world: decides whether a failed call may be sent again."""

    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    SIDE_EFFECTING = "side_effecting"


__all__ = ["SideEffect"]
