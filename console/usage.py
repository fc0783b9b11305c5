"""What an operator types, read: times and spans as the command line and the traces view take
them, and :class:`UsageError` for input that cannot be read or used."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from engine.errors import TripwireError

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class UsageError(TripwireError):
    """Bad command-line input; ``str()`` is the one line to print."""


def parse_when(text: str | None, *, now: float | None = None) -> float | None:
    """``2h``/``30m``/``7d`` ago, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    if m := _RELATIVE.match(text.strip()):
        return (time.time() if now is None else now) - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"cannot read time {text!r}: use e.g. 2h, 30m, 7d or 2025-11-05T10:30:45Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_span(text: str) -> float:
    """A duration like ``7d`` or ``12h``, in seconds."""
    if m := _RELATIVE.match(text.strip()):
        return float(m.group(1)) * _UNIT_S[m.group(2)]
    raise UsageError(f"cannot read duration {text!r}: use e.g. 30m, 12h, 7d")
