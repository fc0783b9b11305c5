"""Exceptions shaped like the real ones a provider SDK or HTTP client raises.

Faults raise these (class names, status codes, case-insensitive headers, bodies as the SDKs
parse them), so an injected failure travels the same classification, retry, breaker and
fallback paths as a real one. Each carries its fault type under :data:`INJECTED_ATTR`.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

__all__ = [
    "INJECTED_ATTR",
    "STREAM_ERRORS",
    "APIStatusError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "FaultResponse",
    "Headers",
    "InternalServerError",
    "LengthFinishReasonError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RemoteProtocolError",
    "UnprocessableEntityError",
    "mark_injected",
    "status_error_class",
]

INJECTED_ATTR = "injected_fault"
"""Every exception a fault raises carries its fault type under this attribute."""


def mark_injected(exc: Exception, fault_type: str) -> Exception:
    setattr(exc, INJECTED_ATTR, fault_type)
    return exc


class Headers(Mapping[str, str]):
    """Case-insensitive response headers, like ``httpx.Headers``; iterates the names as given."""

    __slots__ = ("_items", "_lower")

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items = dict(items or {})
        self._lower = {k.lower(): v for k, v in self._items.items()}

    def __getitem__(self, key: str) -> str:
        return self._lower[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._lower

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@dataclass(frozen=True, slots=True)
class FaultResponse:
    """The HTTP response an :class:`APIStatusError` carries (the parts of ``httpx.Response`` used)."""

    status_code: int
    headers: Headers
    content: bytes = b""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    @property
    def reason_phrase(self) -> str:
        try:
            return HTTPStatus(self.status_code).phrase
        except ValueError:
            return ""

    def json(self) -> Any:
        return json.loads(self.content)


class APIStatusError(Exception):
    """An HTTP error response, shaped like the provider SDKs' ``APIStatusError``.

    ``status_code``, ``headers`` (case-insensitive), ``body`` (parsed JSON when the body is
    JSON) and ``response`` (with ``status_code`` and ``headers``) are what the classifier reads.
    """

    def __init__(self, message: str, *, response: FaultResponse, body: object | None) -> None:
        super().__init__(message)
        self.message = message
        self.response = response
        self.status_code = response.status_code
        self.headers = response.headers
        self.body = body


class BadRequestError(APIStatusError):
    """400."""


class AuthenticationError(APIStatusError):
    """401."""


class PermissionDeniedError(APIStatusError):
    """403."""


class NotFoundError(APIStatusError):
    """404."""


class ConflictError(APIStatusError):
    """409."""


class UnprocessableEntityError(APIStatusError):
    """422."""


class RateLimitError(APIStatusError):
    """429."""


class InternalServerError(APIStatusError):
    """Any 5xx."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error_class(status_code: int) -> type[APIStatusError]:
    if status_code >= 500:
        return InternalServerError
    return _STATUS_ERRORS.get(status_code, APIStatusError)


class LengthFinishReasonError(Exception):
    """The model stopped at its length limit: ``completion`` has ``finish_reason: "length"``."""

    def __init__(self, *, completion: dict[str, Any]) -> None:
        self.completion = completion
        super().__init__(
            f"Could not parse response content as the length limit was reached - {completion['usage']}"
        )


class RemoteProtocolError(Exception):
    """The peer broke the protocol mid-response, shaped like ``httpx.RemoteProtocolError``."""


STREAM_ERRORS: dict[str, Callable[[int], Exception]] = {
    "ConnectionError": lambda n: ConnectionError(f"Connection lost after {n} chunks"),
    "ConnectionResetError": lambda n: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    "TimeoutError": lambda n: TimeoutError(f"Stream read timed out after {n} chunks"),
    "RemoteProtocolError": lambda n: RemoteProtocolError(
        "peer closed connection without sending complete message body (incomplete chunked read)"
    ),
}
