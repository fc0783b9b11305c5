"""How events become ``events`` rows and back: fast code generated per event class.

Events are stored flat: the columns the store indexes or filters on (``turn_id``, ``call_id``,
``tool_id``, ``event_type``, ``at``, ``t``) plus ``data``, a JSON object of the other fields, so
``{**columns, **data}`` rebuilds the event (:func:`decode_event`).

Since schema 5 nothing is stored twice, and every column stays plain text or JSON: ``data`` leaves
out the fields at their defaults (None, False, True, ""), an event in a turn leaves its turn id
to the turn's row, and a TurnStarted leaves its spec, breakers and manifests there too.
:data:`EVENT_COLUMNS` puts them back, so a read gives the very text and events stored before.

Each speed trick here stays because it was measured to pay; the figures are beside them
(bench/trace_store.py's workload, 9–15 paired runs with and without, medians, CPython 3.11).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from engine.events import (
    EVENT_TYPES,
    AttemptFailed,
    AttemptStarted,
    CallSucceeded,
    Event,
    TurnFinished,
    TurnStarted,
    event_from_dict,
    field_shapes,
)

COLUMNS = ("turn_id", "call_id", "tool_id")
_NOT_DATA = frozenset({"at", "t", *COLUMNS})

# What a write does besides storing the event row, by event class (up to STARTED: nothing more).
PLAIN, STARTED, FINISHED, FAILED, SUCCEEDED, ATTEMPT = range(6)
_ACTIONS: tuple[tuple[type[Event], int], ...] = (
    (TurnStarted, STARTED),
    (TurnFinished, FINISHED),
    (AttemptFailed, FAILED),
    (CallSucceeded, SUCCEEDED),
    (AttemptStarted, ATTEMPT),
)


def fallback(value: Any) -> Any:
    """What JSON cannot hold as it is: enums by value, sets as lists, anything else as its repr."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return repr(value)


# The private C encoder called directly, not ``json.JSONEncoder(...).encode`` made once: it
# records 3.6-4.6 % more events/s (15 paired runs: store.write +4.6 %, recorder +3.6 %).
_c_encoder = c_make_encoder(None, fallback, encode_basestring, None, ":", ",", False, False, True)


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept; what JSON cannot hold goes through :func:`fallback`."""
    return "".join(_c_encoder(value, 0))


_loads = json.loads
TURN_STARTED_FIELDS = ("spec", "breakers", "manifests")
"""A TurnStarted's big fields, kept in its turn's row only (schema 5): its ``data`` ends before them."""
_TURN_STARTED_DATA = (
    "(SELECT substr(events.data, 1, length(events.data) - 1) || CASE WHEN events.data = '{}' THEN '' ELSE ','"
    " END || "
    + " || ',' || ".join(f"'\"{name}\":' || coalesce({name}, 'null')" for name in TURN_STARTED_FIELDS)
    + " || '}' FROM turns WHERE turns.id = events.turn)"
)
EVENT_COLUMNS = (
    "id, event_type, coalesce(turn_id, (SELECT turn_id FROM turns WHERE turns.id = events.turn)), call_id,"
    f" tool_id, at, t, CASE WHEN event_type = 'TurnStarted' THEN coalesce({_TURN_STARTED_DATA}, data)"
    " ELSE data END"
)
"""An event row as :func:`decode_event` takes it (after the id), from ``FROM events``: the turn id
and a TurnStarted's big fields put back from the turn's row, as they were written."""
STORED_COLUMNS = "id, event_type, turn_id, call_id, tool_id, at, t, data"
"""An event row as stored: what :data:`EVENT_COLUMNS` reads without looking at its turn's row (a
reader of one turn puts them back itself, :func:`with_turn_fields`: 1–1.5 µs a row less)."""


def with_turn_fields(data: str, spec: str | None, breakers: str | None, manifests: str | None) -> str:
    """A TurnStarted's ``data`` with its turn row's big fields, as :data:`EVENT_COLUMNS` puts them."""
    texts = (spec, breakers, manifests)
    big = ",".join(
        f'"{name}":{"null" if text is None else text}'
        for name, text in zip(TURN_STARTED_FIELDS, texts, strict=True)
    )
    return data[:-1] + ("" if data == "{}" else ",") + big + "}"


def omitted_default(field_: Any) -> tuple[bool, Any]:
    """Whether a field at its default is left out of ``data`` (schema 5), and that default."""
    default = field_.default
    return (default is None or default is True or default is False or default == ""), default


def is_default(value: Any, default: Any) -> bool:
    """``value`` is the default as stored: the same object, or an empty string for ""."""
    return value is default or (default == "" and isinstance(value, str) and value == "")


@dataclass(frozen=True, slots=True)
class Codec:
    """How one event class becomes an ``events`` row, worked out once per class."""

    event_type: str
    action: int
    """What a write does besides storing the row."""
    names: tuple[str, ...]
    """The fields that go into ``data``: all but ``at``, ``t`` and the id columns."""
    row: Callable[[Any], tuple[Any, ...] | None]
    """(turn_id, call_id, tool_id, event_type, at, t, data) with compact ``data``, or None when a
    value is not of its field's declared type (then :meth:`slow_row` gives the same row)."""
    defaults: dict[str, Any]
    """The fields left out of compact ``data`` when at their default, and those defaults."""

    def values(self, event: Any, *, compact: bool = False, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """The fields that go into ``data``; ``compact``: without those at their defaults."""
        out = {name: getattr(event, name) for name in self.names if name not in skip}
        if compact:
            defaults = self.defaults
            return {n: v for n, v in out.items() if n not in defaults or not is_default(v, defaults[n])}
        return out

    def slow_row(self, event: Any, *, compact: bool = True) -> tuple[Any, ...]:
        turn_id, call_id, tool_id = (getattr(event, c, None) for c in COLUMNS)
        data = dumps(self.values(event, compact=compact))
        return turn_id, call_id, tool_id, self.event_type, event.at, event.t, data


def _codec(cls: type[Event]) -> Codec:
    names = tuple(f.name for f in fields(cls))
    data_names = tuple(n for n in names if n not in _NOT_DATA)
    action = next((action for base, action in _ACTIONS if issubclass(cls, base)), PLAIN)
    defaults = {}
    for field_ in fields(cls):
        omitted, default = omitted_default(field_)
        if field_.name in data_names and omitted:
            defaults[field_.name] = default
    return Codec(
        cls.event_type, action, data_names, _row_function(cls, names, data_names, defaults), defaults
    )


def _row_function(
    cls: type[Event], names: tuple[str, ...], data_names: tuple[str, ...], defaults: dict[str, Any]
) -> Callable[[Any], tuple[Any, ...] | None]:
    """Generate the function that turns one event of ``cls`` into its row.

    Generated because it pays: without it (:meth:`Codec.slow_row` for every event)
    ``store.write`` recorded 15 % fewer events/s and the recorder 13 % fewer. One f-string,
    keys escaped in advance; each value is checked against its field's declared type (an int,
    a finite float, a bool, a str), anything else is encoded by ``dumps``. When a check fails
    the function returns None and the caller falls back to :meth:`Codec.slow_row`, so the JSON
    is the same either way. Every field's text starts with a comma (cut from the first one), so
    a field at its default is left out by a conditional expression.
    """
    shapes = {shape.name: shape for shape in field_shapes(cls)}
    namespace: dict[str, Any] = {"_string": encode_basestring, "dumps": dumps, "_finite": math.isfinite}
    loads, checks, parts = [], [], []
    for i, name in enumerate(data_names):
        v = f"v{i}"
        loads.append(f"    {v} = e.{name}")
        shape = shapes[name]
        optional = shape.nullable
        kind = "any"
        if (o := shape.only) is not None:
            if o is bool:
                kind = "bool"
            elif o is int or o is float:
                kind = o.__name__
            elif isinstance(o, type) and issubclass(o, str):
                kind = "str"
        check, text = {
            "bool": (f"type({v}) is bool", f'("true" if {v} else "false")'),
            "int": (f"type({v}) is int", v),
            "float": (f"(type({v}) is float and _finite({v}) or type({v}) is int)", f"repr({v})"),
            "str": (f"isinstance({v}, str)", f"_string({v})"),
            "any": ("", f"dumps({v})"),
        }[kind]
        if optional and kind != "any":
            check, text = f"({v} is None or {check})", f'("null" if {v} is None else {text})'
        if check:
            checks.append(check)
        key = "," + encode_basestring(name) + ":"
        if name in defaults:  # no quote of the f-string's own kind, nor a backslash, in its fields
            namespace[f"K{i}"] = key
            test = (
                f'(isinstance({v}, str) and {v} == "")'
                if defaults[name] == ""
                else f"{v} is {defaults[name]!r}"
            )
            text = f"str({text})" if kind == "int" else text  # an int is formatted, not concatenated
            parts.append(f'{{"" if {test} else K{i} + {text}}}')
        else:
            parts.append(f"{key}{{{text}}}")
    columns = ", ".join(f"e.{c}" if c in names else "None" for c in COLUMNS)
    source = "\n".join(
        [
            "def row(e):",
            *loads,
            *([f"    if not ({' and '.join(checks)}):", "        return None"] if checks else []),
            f"    body = f'{''.join(parts)}'",
            f"    return ({columns}, {cls.event_type!r}, e.at, e.t, '{{' + body[1:] + '}}')",
        ]
    )
    exec(compile(source, f"<trace row of {cls.__name__}>", "exec"), namespace)
    row: Callable[[Any], tuple[Any, ...] | None] = namespace["row"]
    return row


CODECS: dict[type[Event], Codec] = {}


def codec_of(cls: type[Event]) -> Codec:
    codec = CODECS.get(cls)
    if codec is None:
        codec = CODECS[cls] = _codec(cls)
    return codec


def _decoder(cls: type[Event]) -> Callable[..., Event]:
    """How to rebuild ``cls`` from a row: ``(turn_id, call_id, tool_id, at, t, data dict) → event``.

    Generated because it pays: a plain function building the keyword arguments in a loop made
    ``load_turn`` 8 % slower. One call with keyword arguments, enums looked up in a dict
    (``ErrorKind(value)`` costs ~1 µs). It expects data holding every field and raises on
    anything unexpected: then :func:`~engine.events.event_from_dict` takes over.
    """
    namespace: dict[str, Any] = {"cls": cls}
    arguments = ["at=at", "t=t"]
    omitted = {f.name: default for f in fields(cls) for left_out, default in [omitted_default(f)] if left_out}
    for field_ in field_shapes(cls):
        name, convert = field_.name, field_.convert
        if name in ("at", "t"):
            continue
        if name in COLUMNS:
            arguments.append(f"{name}={name}")
            continue
        # A field left out at its default (schema 5) takes it; any other missing one raises.
        raw = f"d.get({name!r}, {omitted[name]!r})" if name in omitted else f"d[{name!r}]"
        value = raw
        if convert is not None:
            if issubclass(convert, Enum):
                namespace[f"E_{name}"] = {member.value: member for member in convert}
                value = f"E_{name}[{value}]"
            else:
                value = f"tuple({value})"
            if field_.nullable:
                value = f"(None if {raw} is None else {value})"
        arguments.append(f"{name}={value}")
    source = f"def fast(turn_id, call_id, tool_id, at, t, d):\n    return cls({', '.join(arguments)})"
    exec(compile(source, f"<trace decoder of {cls.__name__}>", "exec"), namespace)
    fast: Callable[..., Event] = namespace["fast"]
    return fast


_DECODERS: dict[str, Callable[..., Event]] = {}
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner itself (an undocumented attribute): ``json.loads`` instead made ``load_turn``
14 % slower, spending as long again in Python around it."""


def decode_event(
    event_type: str,
    turn_id: str | None,
    call_id: str | None,
    tool_id: str | None,
    at: float,
    t: float,
    data: str,
) -> Event:
    """Rebuild an event from its row: ``data`` plus the columns its class has."""
    decoder = _DECODERS.get(event_type)
    if decoder is None:
        cls = EVENT_TYPES.get(event_type)
        if cls is None:
            raise ValueError(f"unknown event type {event_type!r} (written by a newer tripwire?)")
        decoder = _DECODERS[event_type] = _decoder(cls)
    fields_ = json_value(data)  # a damaged row raises json's own error
    if type(fields_) is not dict:
        raise ValueError(f"{event_type} data is not a JSON object")
    try:
        return decoder(turn_id, call_id, tool_id, at, t, fields_)
    except (KeyError, TypeError):
        # Any data: fields missing (an older writer) take their defaults, unknown ones are dropped.
        return event_from_dict(
            {**fields_, "event_type": event_type, "turn_id": turn_id, "call_id": call_id, "tool_id": tool_id,
             "at": at, "t": t}
        )  # fmt: skip


def json_value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    return value if end == len(text) else _loads(text)
