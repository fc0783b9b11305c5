"""What an exception carries: its attributes read without running deprecated properties, and the
JSON body of the response it holds, read only when already in memory.

The classifier reads errors from any library by attribute, never by import; this module is where
those reads happen, so that classifying never warns, never blocks and never consumes a stream.

Internal: the classifier's machinery, no public names.
"""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Callable, Mapping
from typing import Any


def safe_attr(obj: object, name: str) -> Any:
    """``obj.name``, or None when unset, when it raises, or when it is a property that warns.

    A warning getter is a deprecated alias (aiohttp's ``ClientResponseError.code``, websockets'
    ``ConnectionClosed.code``): it is never run, so classifying stays silent; the attribute it
    stands for (``status``) is read instead.
    """
    try:
        if name in _warning_properties(type(obj)):
            return None
        return getattr(obj, name, None)
    except Exception:  # some properties raise when unset (httpx's .request)
        return None


_WARNING_PROPERTIES: dict[type, frozenset[str]] = {}
"""Per class, the names of its properties whose getters warn; cleared when it grows large, as
classes made on the fly (``type(...)``) would otherwise pile up."""
_WARNING_CALLS = frozenset({"warn", "warn_explicit", "DeprecationWarning", "PendingDeprecationWarning"})


def _warning_properties(cls: type) -> frozenset[str]:
    names = _WARNING_PROPERTIES.get(cls)
    if names is None:
        seen: set[str] = set()
        warning: set[str] = set()
        for klass in cls.__mro__:  # the first definition along the MRO is the one that applies
            for name, value in vars(klass).items():
                if name not in seen and isinstance(value, property) and _warns(value.fget):
                    warning.add(name)
                seen.add(name)
        names = frozenset(warning)
        if len(_WARNING_PROPERTIES) >= 1024:
            _WARNING_PROPERTIES.clear()
        _WARNING_PROPERTIES[cls] = names
    return names


def _warns(getter: Callable[[Any], Any] | None) -> bool:
    """Does this property getter issue a warning (``warnings.warn``, PEP 702 ``@deprecated``)?"""
    if getter is None:
        return False
    if getattr(getter, "__deprecated__", None) is not None:
        return True
    try:
        code = getattr(inspect.unwrap(getter), "__code__", None)
    except ValueError:  # a __wrapped__ cycle
        return False
    return isinstance(code, types.CodeType) and not _WARNING_CALLS.isdisjoint(code.co_names)


MAX_RESPONSE_BODY_BYTES = 64 * 1024
"""A response body larger than this is not parsed: the status decides."""


def error_body(exc: BaseException, response: object) -> tuple[Mapping[str, Any] | None, bool]:
    """The error body as a JSON object, and whether it was read from ``response``.

    An SDK error's own ``body`` comes first (openai and anthropic parse it); otherwise the JSON of
    the response an HTTP client's error carries, when that body is already in memory.
    """
    body = _json_object(safe_attr(exc, "body"))
    if body is not None or response is None:
        return body, False
    body = _json_object(_loaded_body(response))
    return body, body is not None


def _loaded_body(response: object) -> object:
    """The body ``response`` already holds in memory, else None: never a network or stream read.

    httpx keeps a read body in ``_content`` (unset until read: ``.content`` would raise
    ResponseNotRead); requests in ``_content`` (False until consumed: ``.content`` would read the
    stream); aiohttp's ClientResponse in ``_body``; websockets' Response in ``body``. Only stored
    data is read, never a property, so no library code runs.
    """
    for name in ("_content", "_body", "body", "content"):
        value = _stored_attr(response, name)
        if value is not None and value is not False:
            return value
    return None


def _stored_attr(obj: object, name: str) -> Any:
    """``obj.name`` if it is plain stored data (instance dict, slot or class constant), else None:
    a property or other computed attribute is never run."""
    try:
        declared = getattr(type(obj), name, None)
        if isinstance(declared, types.MemberDescriptorType):  # a slot: a plain read
            return getattr(obj, name, None)
        if declared is not None and hasattr(type(declared), "__get__"):
            return None
        state = getattr(obj, "__dict__", None)
        return state.get(name, declared) if isinstance(state, dict) else declared
    except Exception:
        return None


def _json_object(value: object) -> Mapping[str, Any] | None:
    """``value`` as a JSON object: a mapping as is, a small JSON text parsed; else None."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, memoryview):
        value = value.tobytes() if value.nbytes <= MAX_RESPONSE_BODY_BYTES else None
    if not isinstance(value, str | bytes | bytearray) or len(value) > MAX_RESPONSE_BODY_BYTES:
        return None
    if value.lstrip()[:1] not in ("{", b"{"):  # not an object (HTML error pages, plain text)
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):  # malformed, not UTF-8/16/32, or nested too deep
        return None
    return parsed if isinstance(parsed, dict) else None
