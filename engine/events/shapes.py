"""Internal: events as data — README's vocabulary table, each field's shape as codecs need it,
and an event rebuilt from :meth:`~engine.events.Event.to_dict` output. Import them from
:mod:`engine.events`."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from engine.event import EVENT_TYPES, Event


def vocabulary_markdown() -> str:
    """README's table of event types, generated from :data:`EVENT_TYPES`: the engine's own in the
    order they register, then each strategy's by its package (whatever order they were imported in)."""
    rows = ["| event_type | class | meaning |", "| --- | --- | --- |"]
    ranked = enumerate(EVENT_TYPES.items())

    def rank(entry: tuple[int, tuple[str, type[Event]]]) -> tuple[bool, str, int]:
        index, (_, cls) = entry
        own = cls.__module__.startswith("engine.events.")
        return (not own, "" if own else cls.__module__, index)

    for _, (name, cls) in sorted(ranked, key=rank):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        rows.append(f"| `{name}` | `{cls.__name__}` | {doc} |")
    return "\n".join(rows)


@dataclass(frozen=True, slots=True)
class FieldShape:
    """What one event field holds, as codecs (JSON, the trace store) need to know it."""

    name: str
    only: Any
    """The one type besides None the field may hold (``float | None`` → float), else None."""
    convert: type | None
    """The Enum subclass or ``tuple`` that rebuilds the value from JSON; None when JSON holds it as is."""
    nullable: bool


_SHAPES: dict[type[Event], tuple[FieldShape, ...]] = {}


def field_shapes(cls: type[Event]) -> tuple[FieldShape, ...]:
    """The shape of every field of ``cls``, worked out once per class."""
    shapes = _SHAPES.get(cls)
    if shapes is None:
        hints = typing.get_type_hints(cls)
        shapes = _SHAPES[cls] = tuple(_field_shape(f.name, hints[f.name]) for f in fields(cls))
    return shapes


def _field_shape(name: str, hint: Any) -> FieldShape:
    # A union is unpacked into its options; any other generic (tuple[str, ...]) is one option.
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    solid = [o for o in options if o is not type(None)]
    convert: type | None = None
    for option in solid:
        origin = typing.get_origin(option) or option
        if isinstance(origin, type) and (issubclass(origin, Enum) or origin is tuple):
            convert = origin
            break
    return FieldShape(name, solid[0] if len(solid) == 1 else None, convert, len(solid) < len(options))


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output (stored traces, replays)."""
    cls = EVENT_TYPES[data["event_type"]]
    kwargs = {}
    for shape in field_shapes(cls):
        if shape.name in data:
            value = data[shape.name]
            convert = shape.convert
            kwargs[shape.name] = convert(value) if convert is not None and value is not None else value
    return cls(**kwargs)
