"""Internal: what every event is — :class:`Event`, :class:`ToolEvent` (one call's), the registry
of event types, and the fast way hot paths build one. The events themselves are in
:mod:`engine.events`' modules and in each strategy's package (:mod:`engine.strategies`); import
them all from :mod:`engine.events`. Outside that package, so a strategy's events need not import it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar

from engine.errors import iso_timestamp

EVENT_TYPES: dict[str, type[Event]] = {}
"""Every concrete event class by its ``event_type``: how a stored event finds its class again."""

allocate = object.__new__
"""Hot paths build events as ``Cls.__init__(allocate(Cls), ...)``: on CPython 3.11 calling the
class with keyword arguments first packs them into a dict, which costs more than the ``__init__``
itself (about 0.45 µs of 0.7 µs per event)."""


@dataclass(slots=True, kw_only=True)
class Event:
    event_type: ClassVar[str] = "Event"
    _abstract: ClassVar[bool] = True

    at: float
    t: float

    def __init_subclass__(cls, event_type: str | None = None, abstract: bool = False, **kwargs: Any) -> None:
        object.__init_subclass__(**kwargs)  # zero-arg super() breaks under dataclass(slots=True)
        # dataclass(slots=True) re-creates the class without these keywords: read them back.
        if abstract or cls.__dict__.get("_abstract"):
            cls._abstract = True
            return
        cls.event_type = event_type or cls.__dict__.get("event_type") or cls.__name__
        EVENT_TYPES[cls.event_type] = cls  # the re-created class replaces the first one

    def describe(self) -> str:
        """One line for people: logs, the console, summaries."""
        return self.event_type

    def to_dict(self) -> dict[str, Any]:
        names = _FIELD_NAMES.get(type(self)) or _field_names(type(self))
        out: dict[str, Any] = {"event_type": self.event_type, "timestamp": iso_timestamp(self.at)}
        for name in names:
            value = getattr(self, name)
            out[name] = value.value if isinstance(value, Enum) else value
        out["message"] = self.describe()
        return out


@dataclass(slots=True, kw_only=True)
class ToolEvent(Event, abstract=True):
    """Something that happened to one call of one tool."""

    tool_id: str
    call_id: str
    turn_id: str | None = None


def when(at: object) -> str:
    """A wall-clock time in a description, to the second (``2025-11-05T10:30:45Z``); any value
    another process wrote, however odd, still makes a line."""
    try:
        return iso_timestamp(at)[:19] + "Z" if isinstance(at, int | float) else "?"
    except (OverflowError, OSError, ValueError):
        return repr(at)


_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names
