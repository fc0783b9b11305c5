"""Every event survives its JSON form: what stored traces and replays are rebuilt from."""

from __future__ import annotations

import json
import typing
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import EVENT_TYPES, Event, event_from_dict, field_shapes

_finite = st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _finite | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    """Values a field may hold, in the JSON-compatible forms events carry."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, __import__("types").UnionType):
        return st.one_of(*(_strategy(a) for a in args))
    if hint is type(None):
        return st.none()
    if hint is float:
        return _finite
    if origin is tuple:
        return st.lists(st.text(max_size=6), max_size=3).map(tuple)
    if origin is dict or hint is Any:
        return st.dictionaries(st.text(max_size=6), _json, max_size=3)
    return st.from_type(hint)


def _events() -> st.SearchStrategy[Event]:
    strategies = []
    for cls in EVENT_TYPES.values():
        hints = typing.get_type_hints(cls)
        kwargs = {f.name: _strategy(hints[f.name]) for f in fields(cls)}
        kwargs["at"] = st.floats(0, 4e9)  # a wall-clock time: it is rendered as a date
        strategies.append(st.builds(cls, **kwargs))
    return st.one_of(*strategies)


@settings(max_examples=150, deadline=None)
@given(_events())
def test_every_event_round_trips_through_json(event: Event) -> None:
    data = json.loads(json.dumps(event.to_dict()))
    assert event_from_dict(data) == event


@pytest.mark.parametrize("cls", list(EVENT_TYPES.values()), ids=lambda c: c.__name__)
def test_field_shapes_name_what_json_cannot_carry(cls: type[Event]) -> None:
    shapes = {shape.name: shape for shape in field_shapes(cls)}
    hints = typing.get_type_hints(cls)
    for name, shape in shapes.items():
        origin = typing.get_origin(hints[name])
        if origin is tuple:
            assert shape.convert is tuple, name
        assert shape.nullable == (type(None) in typing.get_args(hints[name])), name
