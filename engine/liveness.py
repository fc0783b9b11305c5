"""Whether a process that writes where others read is heard from: live, stale, gone or stopped.

Every reader — ``tripwire breaker list``, an attached console, ``tripwire traces``, the fleet
board — decides it here, from the writer's heartbeat and its process, never from the times of
the events it wrote: a run on a virtual clock stamps its events up to minutes ahead of the wall
clock, and an engine may be idle for long.

Internal: import it where a reader needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Liveness = Literal["live", "stale", "gone", "stopped", "never"]
"""``live``: heard from within the stale bound. ``stale``: silent longer (hung, or its host is
unreachable). ``gone``: its process is known to have ended without closing, or silent past the gone
bound. ``stopped``: it closed. ``never``: no heartbeat yet."""


@dataclass(frozen=True, slots=True)
class Heard:
    """What a reader knows of a writer: its liveness and how long ago it was last heard from."""

    status: Liveness
    age_s: float | None
    """Seconds since its last heartbeat (since it closed, when stopped); None when never heard from."""
    who: str = ""
    """The writer, for people: ``host pid 123``, a fleet member's id."""

    @property
    def live(self) -> bool:
        return self.status == "live"

    def words(self) -> str:
        """One line for people: what the reader can say of the writer."""
        who = self.who or "it"
        ago = "" if self.age_s is None else f"{duration(self.age_s)} ago"
        return {
            "live": f"live: {who} beat {ago}",
            "stale": f"stale: no heartbeat from {who} for {duration(self.age_s or 0.0)}",
            "gone": f"gone: {who} ended without closing the store (its last heartbeat {ago})",
            "stopped": f"stopped: {who} closed the store {ago}",
            "never": "never heard from: no heartbeat yet",
        }[self.status]


def judge(
    age_s: float | None,
    *,
    stale_after_s: float,
    gone_after_s: float | None = None,
    alive: bool | None = None,
    closed: bool = False,
) -> Liveness:
    """The liveness of a writer last heard from ``age_s`` seconds ago (None: never).

    ``alive``: whether its process still runs, where the reader can tell (the same machine); None
    when it cannot. ``closed``: it said it stopped. A silence of ``stale_after_s`` is stale, of
    ``gone_after_s`` (when given) gone.
    """
    if closed:
        return "stopped"
    if age_s is None:
        return "never"
    if alive is False or (gone_after_s is not None and age_s >= gone_after_s):
        return "gone"
    return "stale" if age_s >= stale_after_s else "live"


def duration(seconds: float) -> str:
    """A silence for people: ``12 s``, ``10 min``, ``3 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


__all__ = ["Heard", "Liveness", "duration", "judge"]
