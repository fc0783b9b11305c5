"""Internal: a call's idempotency key — where it comes from, and how the running tool finds it.
Import the public names from :mod:`engine` (:func:`idempotency_key`) or
:mod:`engine.strategies.idempotency`.

The key belongs to the logical call, never to an attempt: worked out once as the call begins, the
same for each retry, hedge and alternative, and a replay of a recorded turn derives it again.
"""

from __future__ import annotations

import random
import uuid
from contextvars import ContextVar
from typing import Any, NamedTuple

CALLER_KEYWORD = "idempotency_key"
"""For a ``key: context`` tool, the keyword a caller of ``engine.call``/``try_call`` gives its own key
with: taken out of the arguments, never passed to the tool. (For a ``key: <argument>`` tool the
caller simply passes that argument.)"""


class _Current(NamedTuple):
    key: str
    outer: _Current | None
    """The key current before this attempt's (a keyed tool calling another one): restored after."""


_CURRENT: ContextVar[_Current | None] = ContextVar("tripwire_idempotency_key", default=None)
"""The key of the attempt running in this context; set only around attempts of keyed tools."""


def idempotency_key() -> str | None:
    """The idempotency key of the call whose attempt is running, or None (outside an attempt, or
    a tool whose manifest has no ``idempotency`` section).

    Call it from the tool (its task, or the worker thread a plain tool runs in): the same key on
    every attempt of the call, so the service it calls can recognise a re-sent request.
    """
    current = _CURRENT.get()
    return current.key if current is not None else None


def enter_key(key: str) -> None:
    """An attempt of a call keyed ``key`` starts in this context."""
    _CURRENT.set(_Current(key, _CURRENT.get()))


def leave_key() -> None:
    """The attempt of the current key is over: the key current before it is again. A stack in the
    variable rather than a token: a token may be reset only in the context it was made in."""
    current = _CURRENT.get()
    if current is not None:
        _CURRENT.set(current.outer)


class Keyed(NamedTuple):
    """A call's key, where it came from, and the arguments the tool is sent (a copy when changed)."""

    key: str
    source: str
    args: dict[str, Any]


def key_call(
    args: dict[str, Any],
    argument: str | None,
    given: str | None,
    turn_id: str | None,
    call_id: str,
    rng: random.Random,
) -> Keyed:
    """The key of one call, in order of precedence: ``given`` (the call's context), the keyed
    ``argument``'s value when the caller passed one (``key: context``: the :data:`CALLER_KEYWORD`),
    the turn id and call id, else a fresh UUID drawn from ``rng`` (a seeded engine draws the same).
    The caller's ``args`` are never changed: the tool is sent a copy with the key in it."""
    name = CALLER_KEYWORD if argument is None else argument
    passed = args.get(name)
    if given:
        key, source = given, "given"
    elif passed is not None and passed != "":
        key, source = str(passed), "argument"
    elif turn_id is not None:
        key, source = f"{turn_id}:{call_id}", "turn"
    else:
        key, source = str(uuid.UUID(int=rng.getrandbits(128), version=4)), "generated"
    if argument is None:
        if name in args:
            args = {k: v for k, v in args.items() if k != name}
    elif source != "argument" and passed != key:  # a caller's own value is passed as it was
        args = {**args, argument: key}
    return Keyed(key, source, args)
