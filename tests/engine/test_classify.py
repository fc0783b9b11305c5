"""The classifier, row by row, in its documented order (engine/classify/).

Each row is an exception factory and the expected kind, class, retryability and deciding
rule. Provider SDK errors are small local fakes named like the real classes (the classifier
matches by name and attributes, never by import); httpx, requests, anyio and trio errors
are the real ones (aiohttp's and websockets' too, where installed). A local HTTP server
supplies real-wire 429/503 responses, with and without provider JSON error bodies.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import threading
import warnings
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest
import requests
import trio
from typing_extensions import deprecated

from engine.classify import ClassificationOverride, Rule, classify
from engine.error_payload import MAX_RESPONSE_BODY_BYTES
from engine.errors import ToolError
from engine.kinds import ErrorClass, ErrorKind
from engine.manifest import ToolManifest
from engine.strategies.retry.policy import RetryPolicy
from tests.engine.conftest import Scripted, new_engine

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

K = ErrorKind
T, P = ErrorClass.TRANSIENT, ErrorClass.PERMANENT

FIXED_NOW = 1_445_412_480.0
"""Wed, 21 Oct 2015 07:28:00 GMT: the clock for HTTP-date Retry-After."""
HTTP_DATE_IN_90S = "Wed, 21 Oct 2015 07:29:30 GMT"


def fixed_now() -> float:
    return FIXED_NOW


# --- helpers -------------------------------------------------------------------------------


def raised_from(outer: BaseException, cause: BaseException) -> BaseException:
    """``outer`` as ``raise outer from cause`` leaves it."""
    try:
        raise outer from cause
    except BaseException as exc:
        return exc


def httpx_status_error(
    status: int,
    headers: dict[str, str] | None = None,
    url: str = "https://api.example.com/v1",
    content: bytes | None = None,
) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", url)
    response = httpx.Response(status, headers=headers, request=request, content=content)
    return httpx.HTTPStatusError(f"HTTP status {status} for url {url}", request=request, response=response)


def requests_http_error(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    response.url = "https://api.example.com/v1"
    return requests.HTTPError(f"{status} Error for url: {response.url}", response=response)


def os_error(code: int) -> OSError:
    return OSError(code, f"[Errno {code}] {errno.errorcode[code]}")


# --- fakes named like the real SDK classes ----------------------------------------------------


@dataclass
class FakeResponse:
    status_code: int
    headers: dict[str, str]
    body: object = None


class AdvisedError(Exception):
    """An error carrying response headers directly (``.headers``)."""

    def __init__(self, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.headers = headers


class UpstreamError(Exception):
    """An error carrying the HTTP response (``.response.headers``, ``.response.status_code``)."""

    def __init__(self, message: str, response: FakeResponse) -> None:
        super().__init__(message)
        self.response = response


class FakeAnthropic:
    """anthropic: APIStatusError keeps ``status_code`` and the raw ``body``."""

    class APIError(Exception):
        def __init__(self, message: str, *, body: object = None) -> None:
            super().__init__(message)
            self.message = message
            self.body = body

    class APIStatusError(APIError):
        def __init__(self, message: str, *, status_code: int | None, body: object = None) -> None:
            super().__init__(message, body=body)
            self.status_code = status_code

    class OverloadedError(APIStatusError):
        pass

    class AuthenticationError(APIStatusError):
        pass


class FakeOpenAI:
    """openai: APIError copies the body's ``code`` and ``type`` onto the exception."""

    class APIError(Exception):
        def __init__(self, message: str, *, body: object = None) -> None:
            super().__init__(message)
            self.message = message
            self.body = body
            inner = body if isinstance(body, dict) else {}
            self.code = inner.get("code")
            self.type = inner.get("type")

    class APIStatusError(APIError):
        def __init__(self, message: str, *, status_code: int | None, body: object = None) -> None:
            super().__init__(message, body=body)
            self.status_code = status_code

    class RateLimitError(APIStatusError):
        pass

    class APIConnectionError(APIError):
        pass

    class APITimeoutError(APIConnectionError):
        pass


class FakeGenai:
    """google-genai: APIError keeps ``code``, ``status``, ``message``, ``details``, ``response``."""

    class APIError(Exception):
        def __init__(self, code: int, response_json: dict[str, Any], response: Any = None) -> None:
            error = response_json.get("error", {})
            self.response = response
            self.details = response_json
            self.message = response_json.get("message", error.get("message"))
            self.status = response_json.get("status", error.get("status"))
            self.code = code
            super().__init__(f"{self.code} {self.status}. {self.details}")

    class ClientError(APIError):
        pass


@dataclass
class ErrorData:
    code: int
    message: str
    data: object = None


class McpError(Exception):
    """mcp v1: the JSON-RPC error rides on ``.error``."""

    def __init__(self, error: ErrorData) -> None:
        super().__init__(error.message)
        self.error = error


class MCPError(McpError):
    """mcp v2's spelling."""


class FakeAiohttp:
    """aiohttp's real hierarchy, to prove "most derived first" along the MRO."""

    class ClientError(Exception):
        pass

    class ClientConnectionError(ClientError):
        pass

    class ClientOSError(ClientConnectionError, OSError):
        pass

    class ClientConnectorError(ClientOSError):
        pass

    class ServerConnectionError(ClientConnectionError):
        pass

    class ServerDisconnectedError(ServerConnectionError):
        pass

    class ServerTimeoutError(ServerConnectionError, asyncio.TimeoutError):
        pass


class FlakyUpstreamDisconnect(FakeAiohttp.ServerDisconnectedError):
    """A project's own subclass: unknown by name, known through its base."""


def gemini_quota_body(message: str) -> dict[str, Any]:
    return {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}}


PER_DAY = (
    "Quota exceeded for quota metric 'Generate Content API requests per day' and limit "
    "'GenerateContent request limit per day per project per model'"
)

# Raw HTTP error bodies as the providers' APIs send them (the SDKs unwrap them into ``.body``).
OPENAI_QUOTA_BODY = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}
OPENAI_BILLING_BODY = {
    "error": {"message": "Billing hard limit has been reached", "type": "invalid_request_error",
              "code": "billing_hard_limit_reached"}
}  # fmt: skip
OPENAI_RATE_LIMIT_BODY = {
    "error": {"message": "Rate limit reached for requests", "type": "requests",
              "code": "rate_limit_exceeded"}
}  # fmt: skip
ANTHROPIC_OVERLOADED_BODY = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
ANTHROPIC_BILLING_BODY = {"type": "error", "error": {"type": "billing_error", "message": "Credit balance"}}


def json_bytes(body: object) -> bytes:
    return json.dumps(body).encode()


def padded(body: dict[str, Any], size: int) -> bytes:
    """``body`` as JSON, its error first, padded past ``size`` bytes."""
    return json_bytes({**body, "padding": "x" * size})


TOO_DEEP = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
"""Valid JSON under the size bound, nested past the parser's recursion limit."""


# --- the table --------------------------------------------------------------------------------

_UNSET: Any = object()


@dataclass(frozen=True)
class Row:
    id: str
    make: Callable[[], BaseException]
    kind: ErrorKind
    error_class: ErrorClass
    retryable: bool
    rule: Rule
    status_code: int | None = _UNSET
    retry_after_s: float | None = _UNSET
    reason_has: tuple[str, ...] = ()


def msg(text: str, kind: ErrorKind, error_class: ErrorClass, **extra: Any) -> Row:
    """A plain ``Exception(text)`` decided by the message rule."""
    return Row(
        f"message-{text}",
        lambda: Exception(text),
        kind,
        error_class,
        error_class is T and kind is not K.CIRCUIT_OPEN,
        Rule.MESSAGE_PATTERN,
        **extra,
    )


def status_row(status: int, kind: ErrorKind, error_class: ErrorClass, via: str = "httpx") -> Row:
    make = (lambda: httpx_status_error(status)) if via == "httpx" else lambda: requests_http_error(status)
    return Row(
        f"status-{status}-{via}",
        make,
        kind,
        error_class,
        error_class is T,
        Rule.STATUS_CODE,
        status_code=status,
    )


def cls_row(id: str, make: Callable[[], BaseException], kind: ErrorKind, **extra: Any) -> Row:
    """Decided by the exception class, with the kind's default class."""
    error_class = kind.default_class
    return Row(f"class-{id}", make, kind, error_class, error_class is T, Rule.EXCEPTION_CLASS, **extra)


# fmt: off
ROWS: list[Row] = [
    # 1. cancellation, groups and cause chains
    Row("cancel-keyboard-interrupt", KeyboardInterrupt, K.CANCELED, P, False, Rule.CANCELLATION),
    Row("cancel-asyncio-cancelled", asyncio.CancelledError,
        K.CANCELED, P, False, Rule.CANCELLATION),
    Row("cancel-system-exit", lambda: SystemExit(1), K.CANCELED, P, False, Rule.CANCELLATION),
    Row(
        "cancel-base-group-with-keyboard-interrupt",
        lambda: BaseExceptionGroup("g", [ValueError("bad"), KeyboardInterrupt()]),
        K.CANCELED, P, False, Rule.CANCELLATION,
    ),
    Row(
        "group-permanent-beats-transient",
        lambda: ExceptionGroup("g", [httpx.ReadTimeout("slow"), ValueError("bad date")]),
        K.INVALID_PARAMETERS, P, False, Rule.EXCEPTION_CLASS,
        reason_has=("ValueError", "most severe of 2 grouped errors"),
    ),
    Row(
        "group-nested-leaf-auth",
        lambda: ExceptionGroup(
            "outer", [ConnectionResetError(), ExceptionGroup("inner", [httpx_status_error(401)])]
        ),
        K.AUTH_ERROR, P, False, Rule.STATUS_CODE, status_code=401,
        reason_has=("most severe of 2",),
    ),
    Row(
        "group-all-transient-stronger-rule-wins",
        lambda: ExceptionGroup("g", [RuntimeError("something odd"), httpx_status_error(503)]),
        K.SERVICE_UNAVAILABLE, T, True, Rule.STATUS_CODE, status_code=503,
    ),
    Row(
        "cause-runtime-error-from-httpx-read-timeout",
        lambda: raised_from(RuntimeError("tool failed"), httpx.ReadTimeout("read timed out")),
        K.TIMEOUT, T, True, Rule.EXCEPTION_CLASS,
        reason_has=("ReadTimeout", "via cause of RuntimeError"),
    ),
    Row(
        "cause-explicit-tool-error-beats-its-cause",
        lambda: raised_from(
            ToolError(K.INVALID_PARAMETERS, "bad date"), httpx.ReadTimeout("read timed out")
        ),
        K.INVALID_PARAMETERS, P, False, Rule.TOOL_ERROR,
    ),
    Row(
        "cause-tool-error-deeper-in-chain",
        lambda: raised_from(RuntimeError("wrapper"), ToolError(K.NOT_FOUND, "no such flight")),
        K.NOT_FOUND, P, False, Rule.TOOL_ERROR, reason_has=("via cause of RuntimeError",),
    ),
    Row(
        "cause-exception-group-is-unwrapped",
        lambda: raised_from(
            RuntimeError("task group failed"), ExceptionGroup("g", [httpx.ReadTimeout("slow")])
        ),
        K.TIMEOUT, T, True, Rule.EXCEPTION_CLASS, reason_has=("ReadTimeout",),
    ),
    # 2. explicit ToolError kinds
    Row(
        "tool-error-rate-limit",
        lambda: ToolError(K.RATE_LIMIT, "slow down", status_code=429, retry_after_s=5.0),
        K.RATE_LIMIT, T, True, Rule.TOOL_ERROR, status_code=429, retry_after_s=5.0,
        reason_has=("explicit ToolError kind rate_limit",),
    ),
    Row("tool-error-circuit-open-not-retryable", lambda: ToolError(K.CIRCUIT_OPEN),
        K.CIRCUIT_OPEN, T, False, Rule.TOOL_ERROR),
    Row("tool-error-unknown-tool-from-string", lambda: ToolError("unknown_tool", "no tool"),
        K.UNKNOWN_TOOL, P, False, Rule.TOOL_ERROR),
    Row("tool-error-timeout", lambda: ToolError(K.TIMEOUT),
        K.TIMEOUT, T, True, Rule.TOOL_ERROR),
    Row("tool-error-internal-error", lambda: ToolError(K.INTERNAL_ERROR, "bug"),
        K.INTERNAL_ERROR, P, False, Rule.TOOL_ERROR),
    Row("tool-error-partial-result", lambda: ToolError(K.PARTIAL_RESULT),
        K.PARTIAL_RESULT, T, True, Rule.TOOL_ERROR),
    # 3. server advice
    Row(
        "advice-x-should-retry-true",
        lambda: AdvisedError("boom", {"X-Should-Retry": "true"}),
        K.EXECUTION_ERROR, T, True, Rule.SERVER_ADVICE,
        reason_has=("x-should-retry: true",),
    ),
    Row(
        "advice-x-should-retry-false-on-503-response",
        lambda: UpstreamError("upstream", FakeResponse(503, {"x-should-retry": "false"})),
        K.SERVICE_UNAVAILABLE, P, False, Rule.SERVER_ADVICE, status_code=503,
        reason_has=("x-should-retry: false",),
    ),
    Row(
        "advice-x-should-retry-true-beats-400",
        lambda: httpx_status_error(400, {"x-should-retry": "true"}),
        K.INVALID_PARAMETERS, T, True, Rule.SERVER_ADVICE, status_code=400,
    ),
    Row(
        "advice-retry-after-ms",
        lambda: AdvisedError("boom", {"retry-after-ms": "1500"}),
        K.EXECUTION_ERROR, T, True, Rule.SERVER_ADVICE, retry_after_s=1.5,
        reason_has=("1.5s",),
    ),
    Row(
        "advice-retry-after-ms-beats-retry-after",
        lambda: AdvisedError("boom", {"retry-after-ms": "250", "retry-after": "9"}),
        K.EXECUTION_ERROR, T, True, Rule.SERVER_ADVICE, retry_after_s=0.25,
    ),
    Row(
        "advice-retry-after-seconds-on-429",
        lambda: httpx_status_error(429, {"Retry-After": "7"}),
        K.RATE_LIMIT, T, True, Rule.STATUS_CODE, status_code=429, retry_after_s=7.0,
        reason_has=("retry after 7s",),
    ),
    Row(
        "advice-retry-after-http-date-on-503",
        lambda: httpx_status_error(503, {"Retry-After": HTTP_DATE_IN_90S}),
        K.SERVICE_UNAVAILABLE, T, True, Rule.STATUS_CODE, status_code=503, retry_after_s=90.0,
    ),
    Row(
        "advice-retry-after-http-date-alone",
        lambda: UpstreamError("upstream", FakeResponse(200, {"Retry-After": HTTP_DATE_IN_90S})),
        K.EXECUTION_ERROR, T, True, Rule.SERVER_ADVICE, retry_after_s=90.0,
    ),
    Row(
        "advice-retry-after-unparseable-is-ignored",
        lambda: AdvisedError("boom", {"retry-after": "soon-ish"}),
        K.EXECUTION_ERROR, T, True, Rule.DEFAULT, retry_after_s=None,
    ),
    # 4. error body type / JSON-RPC code
    Row(
        "body-anthropic-streamed-overloaded-status-200",
        lambda: FakeAnthropic.APIStatusError(
            "Overloaded",
            status_code=200,
            body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
        K.RATE_LIMIT, T, True, Rule.BODY_TYPE, status_code=200,
        reason_has=("overloaded_error",),
    ),
    Row(
        "body-anthropic-authentication-error",
        lambda: FakeAnthropic.AuthenticationError(
            "invalid x-api-key",
            status_code=401,
            body={"type": "error", "error": {"type": "authentication_error"}},
        ),
        K.AUTH_ERROR, P, False, Rule.BODY_TYPE, status_code=401,
    ),
    Row(
        "body-openai-429-insufficient-quota",
        lambda: FakeOpenAI.RateLimitError(
            "You exceeded your current quota",
            status_code=429,
            body={"code": "insufficient_quota", "type": "insufficient_quota", "param": None},
        ),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
    ),
    Row(
        "body-openai-billing-code-refines-invalid-request-type",
        lambda: FakeOpenAI.APIStatusError(
            "Billing hard limit has been reached",
            status_code=400,
            body={"type": "invalid_request_error", "code": "billing_hard_limit_reached"},
        ),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=400,
    ),
    Row(
        "body-openai-model-not-found-code-refines-invalid-request-type",
        lambda: FakeOpenAI.APIStatusError(
            "The model `gpt-9` does not exist",
            status_code=404,
            body={"type": "invalid_request_error", "code": "model_not_found"},
        ),
        K.MODEL_ERROR, P, False, Rule.BODY_TYPE, status_code=404,
    ),
    Row(
        "body-openai-429-plain-rate-limit",
        lambda: FakeOpenAI.RateLimitError(
            "Rate limit reached for requests",
            status_code=429,
            body={"code": "rate_limit_exceeded", "type": "requests"},
        ),
        K.RATE_LIMIT, T, True, Rule.BODY_TYPE, status_code=429,
    ),
    Row(
        "body-gemini-resource-exhausted-per-day-body",
        lambda: FakeAnthropic.APIStatusError(
            "429", status_code=429, body=gemini_quota_body(PER_DAY)
        ),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
        reason_has=("RESOURCE_EXHAUSTED",),
    ),
    Row(
        "body-gemini-client-error-per-day",
        lambda: FakeGenai.ClientError(
            429,
            gemini_quota_body(PER_DAY),
            httpx.Response(429, request=httpx.Request("POST", "https://generativelanguage.x")),
        ),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
    ),
    Row(
        "body-gemini-resource-exhausted-per-minute-mentions-quota",
        lambda: FakeGenai.ClientError(
            429,
            gemini_quota_body(
                "Quota exceeded for quota metric 'Generate Content API requests per minute'"
            ),
        ),
        K.RATE_LIMIT, T, True, Rule.BODY_TYPE,
    ),
    Row(
        "body-gemini-resource-exhausted-short-term",
        lambda: FakeGenai.ClientError(429, gemini_quota_body("Too many requests, slow down.")),
        K.RATE_LIMIT, T, True, Rule.BODY_TYPE,
    ),
    Row("body-mcp-invalid-params-32602",
        lambda: McpError(ErrorData(-32602, "Invalid params: 'date' is required")),
        K.INVALID_PARAMETERS, P, False, Rule.BODY_TYPE, reason_has=("-32602",)),
    Row("body-mcp-request-timeout-32001",
        lambda: McpError(ErrorData(-32001, "Request timed out")),
        K.TIMEOUT, T, True, Rule.BODY_TYPE),
    Row("body-mcp-v1-request-timeout-408",
        lambda: McpError(ErrorData(408, "Request timed out")),
        K.TIMEOUT, T, True, Rule.BODY_TYPE),
    Row("body-mcp-method-not-found-32601",
        lambda: McpError(ErrorData(-32601, "Method not found")),
        K.UNKNOWN_TOOL, P, False, Rule.BODY_TYPE),
    Row("body-mcp-v2-MCPError-invalid-params",
        lambda: MCPError(ErrorData(-32602, "Invalid params")),
        K.INVALID_PARAMETERS, P, False, Rule.BODY_TYPE),
    # 4b. the same, read from the response an HTTP client's error carries (raise_for_status)
    Row(
        "body-response-httpx-429-insufficient-quota",
        lambda: httpx_status_error(429, content=json_bytes(OPENAI_QUOTA_BODY)),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
        reason_has=("insufficient_quota", "read from the HTTP response"),
    ),
    Row(
        "body-response-httpx-429-billing-hard-limit",
        lambda: httpx_status_error(429, content=json_bytes(OPENAI_BILLING_BODY)),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
    ),
    Row(
        "body-response-httpx-429-plain-rate-limit-keeps-retry-after",
        lambda: httpx_status_error(
            429, {"Retry-After": "7"}, content=json_bytes(OPENAI_RATE_LIMIT_BODY)
        ),
        K.RATE_LIMIT, T, True, Rule.BODY_TYPE, status_code=429, retry_after_s=7.0,
    ),
    Row(
        "body-response-httpx-529-anthropic-overloaded",
        lambda: httpx_status_error(529, content=json_bytes(ANTHROPIC_OVERLOADED_BODY)),
        K.RATE_LIMIT, T, True, Rule.BODY_TYPE, status_code=529, reason_has=("overloaded_error",),
    ),
    Row(
        "body-response-httpx-400-anthropic-billing",
        lambda: httpx_status_error(400, content=json_bytes(ANTHROPIC_BILLING_BODY)),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=400,
    ),
    Row(
        "body-response-httpx-429-gemini-per-day",
        lambda: httpx_status_error(429, content=json_bytes(gemini_quota_body(PER_DAY))),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
        reason_has=("RESOURCE_EXHAUSTED", "read from the HTTP response"),
    ),
    Row(
        "body-response-httpx-jsonrpc-code",
        lambda: httpx_status_error(
            400, content=json_bytes({"jsonrpc": "2.0", "id": 1,
                                     "error": {"code": -32602, "message": "Invalid params"}})
        ),
        K.INVALID_PARAMETERS, P, False, Rule.BODY_TYPE, reason_has=("-32602",),
    ),
    Row(
        "body-response-duck-typed-bytes-body",
        lambda: UpstreamError(
            "upstream", FakeResponse(429, {}, body=json_bytes(OPENAI_QUOTA_BODY))
        ),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
    ),
    Row(
        "body-response-duck-typed-parsed-body",
        lambda: UpstreamError("upstream", FakeResponse(429, {}, body=OPENAI_QUOTA_BODY)),
        K.QUOTA_EXCEEDED, P, False, Rule.BODY_TYPE, status_code=429,
    ),
    Row(
        "body-response-over-the-bound-status-decides",
        lambda: httpx_status_error(
            429, content=padded(OPENAI_QUOTA_BODY, MAX_RESPONSE_BODY_BYTES)
        ),
        K.RATE_LIMIT, T, True, Rule.STATUS_CODE, status_code=429,
    ),
    Row(
        "body-response-not-json-status-decides",
        lambda: httpx_status_error(429, content=b"<html><body>insufficient_quota</body></html>"),
        K.RATE_LIMIT, T, True, Rule.STATUS_CODE, status_code=429,
    ),
    Row(
        "body-response-malformed-json-status-decides",
        lambda: httpx_status_error(429, content=b'{"error": {"type": "insufficient_quota"'),
        K.RATE_LIMIT, T, True, Rule.STATUS_CODE, status_code=429,
    ),
    Row(
        "body-response-nested-too-deep-status-decides",
        lambda: httpx_status_error(503, content=TOO_DEEP),
        K.SERVICE_UNAVAILABLE, T, True, Rule.STATUS_CODE, status_code=503,
    ),
    # 5. status codes (real httpx / requests errors)
    *(status_row(s, k, T) for s, k in [
        (408, K.TIMEOUT), (409, K.EXECUTION_ERROR), (425, K.EXECUTION_ERROR),
        (429, K.RATE_LIMIT), (500, K.SERVICE_UNAVAILABLE), (502, K.SERVICE_UNAVAILABLE),
        (503, K.SERVICE_UNAVAILABLE), (504, K.TIMEOUT), (529, K.RATE_LIMIT),
        (507, K.SERVICE_UNAVAILABLE),  # unlisted 5xx: transient
    ]),
    *(status_row(s, k, P) for s, k in [
        (400, K.INVALID_PARAMETERS), (401, K.AUTH_ERROR), (402, K.QUOTA_EXCEEDED),
        (403, K.AUTH_ERROR), (404, K.NOT_FOUND), (405, K.UNSUPPORTED), (410, K.NOT_FOUND),
        (413, K.INVALID_PARAMETERS), (422, K.INVALID_PARAMETERS), (501, K.UNSUPPORTED),
        (418, K.INVALID_PARAMETERS),  # unlisted 4xx: permanent
    ]),
    status_row(429, K.RATE_LIMIT, T, via="requests"),
    status_row(503, K.SERVICE_UNAVAILABLE, T, via="requests"),
    status_row(401, K.AUTH_ERROR, P, via="requests"),
    status_row(404, K.NOT_FOUND, P, via="requests"),
    status_row(418, K.INVALID_PARAMETERS, P, via="requests"),
    status_row(507, K.SERVICE_UNAVAILABLE, T, via="requests"),
    Row(
        "status-anthropic-overloaded-529",
        lambda: FakeAnthropic.OverloadedError("Overloaded", status_code=529),
        K.RATE_LIMIT, T, True, Rule.STATUS_CODE, status_code=529,
    ),
    # 6. exception classes: httpx
    cls_row("httpx-ConnectTimeout", lambda: httpx.ConnectTimeout("connect"), K.TIMEOUT),
    cls_row("httpx-ReadTimeout", lambda: httpx.ReadTimeout("read"), K.TIMEOUT),
    cls_row("httpx-PoolTimeout", lambda: httpx.PoolTimeout("pool"), K.TIMEOUT),
    cls_row("httpx-ConnectError", lambda: httpx.ConnectError("connect"), K.NETWORK_ERROR),
    cls_row("httpx-ReadError", lambda: httpx.ReadError("read"), K.CONNECTION_RESET),
    cls_row(
        "httpx-RemoteProtocolError",
        lambda: httpx.RemoteProtocolError("peer closed connection"),
        K.CONNECTION_RESET,
    ),
    Row("class-httpx-LocalProtocolError", lambda: httpx.LocalProtocolError("bad"),
        K.TRANSPORT_ERROR, P, False, Rule.EXCEPTION_CLASS),
    cls_row("httpx-DecodingError", lambda: httpx.DecodingError("gzip"), K.INVALID_RESPONSE),
    Row("class-httpx-TooManyRedirects", lambda: httpx.TooManyRedirects("loop"),
        K.TRANSPORT_ERROR, P, False, Rule.EXCEPTION_CLASS),
    cls_row(
        "httpx-UnsupportedProtocol",
        lambda: httpx.UnsupportedProtocol("ftp://"),
        K.UNSUPPORTED,
    ),
    # requests
    cls_row("requests-ConnectTimeout", lambda: requests.ConnectTimeout("connect"), K.TIMEOUT),
    cls_row("requests-ReadTimeout", lambda: requests.ReadTimeout("read"), K.TIMEOUT),
    cls_row(
        "requests-ConnectionError-not-builtin",
        lambda: requests.ConnectionError("Max retries exceeded"),
        K.NETWORK_ERROR,
    ),
    cls_row(
        "requests-ChunkedEncodingError",
        lambda: requests.exceptions.ChunkedEncodingError("ended prematurely"),
        K.CONNECTION_RESET,
    ),
    cls_row("requests-SSLError", lambda: requests.exceptions.SSLError("bad"), K.NETWORK_ERROR),
    cls_row("requests-InvalidURL", lambda: requests.exceptions.InvalidURL("x"),
            K.INVALID_PARAMETERS),
    cls_row(
        "requests-JSONDecodeError",
        lambda: requests.JSONDecodeError("Expecting value", "", 0),
        K.INVALID_RESPONSE,
    ),
    # builtins
    cls_row("TimeoutError-not-caught-as-OSError", lambda: TimeoutError("slow"), K.TIMEOUT),
    cls_row("ConnectionResetError", ConnectionResetError, K.CONNECTION_RESET),
    cls_row("ConnectionRefusedError", ConnectionRefusedError, K.NETWORK_ERROR),
    cls_row("BrokenPipeError", BrokenPipeError, K.CONNECTION_RESET),
    cls_row(
        "OSError-ENETUNREACH",
        lambda: os_error(errno.ENETUNREACH),
        K.NETWORK_ERROR,
        reason_has=("ENETUNREACH",),
    ),
    cls_row("OSError-EHOSTUNREACH", lambda: os_error(errno.EHOSTUNREACH), K.NETWORK_ERROR),
    cls_row("OSError-ETIMEDOUT", lambda: os_error(errno.ETIMEDOUT), K.TIMEOUT),
    cls_row(
        "socket-gaierror",
        lambda: socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        K.NETWORK_ERROR,
    ),
    cls_row(
        "json-JSONDecodeError",
        lambda: json.JSONDecodeError("Expecting value", "<html>", 0),
        K.INVALID_RESPONSE,
    ),
    cls_row("ValueError", lambda: ValueError("bad"), K.INVALID_PARAMETERS),
    cls_row("TypeError", lambda: TypeError("bad"), K.INVALID_PARAMETERS),
    cls_row("KeyError", lambda: KeyError("price"), K.INTERNAL_ERROR),
    cls_row("AttributeError", lambda: AttributeError("no attr"), K.INTERNAL_ERROR),
    cls_row("NotImplementedError", NotImplementedError, K.UNSUPPORTED),
    cls_row("FileNotFoundError", lambda: FileNotFoundError(2, "gone"), K.NOT_FOUND),
    cls_row("PermissionError", lambda: PermissionError(13, "nope"), K.AUTH_ERROR),
    # provider SDKs (fakes)
    cls_row(
        "aiohttp-ServerDisconnectedError",
        lambda: FakeAiohttp.ServerDisconnectedError("Server disconnected"),
        K.CONNECTION_RESET,
    ),
    cls_row(
        "aiohttp-ClientConnectorError",
        lambda: FakeAiohttp.ClientConnectorError("Cannot connect to host"),
        K.NETWORK_ERROR,
    ),
    cls_row("openai-APITimeoutError", lambda: FakeOpenAI.APITimeoutError("Request timed out."),
            K.TIMEOUT),
    cls_row(
        "openai-APIConnectionError",
        lambda: FakeOpenAI.APIConnectionError("Connection error."),
        K.NETWORK_ERROR,
    ),
    cls_row(
        "openai-RateLimitError-without-status",
        lambda: FakeOpenAI.RateLimitError("slow", status_code=None),
        K.RATE_LIMIT,
    ),
    cls_row(
        "anthropic-AuthenticationError-without-status",
        lambda: FakeAnthropic.AuthenticationError("bad key", status_code=None),
        K.AUTH_ERROR,
    ),
    cls_row(
        "anthropic-OverloadedError-without-status",
        lambda: FakeAnthropic.OverloadedError("busy", status_code=None),
        K.RATE_LIMIT,
    ),
    cls_row("anyio-BrokenResourceError", anyio.BrokenResourceError, K.CONNECTION_RESET),
    cls_row("trio-TooSlowError", trio.TooSlowError, K.TIMEOUT),
    # most derived first along the MRO
    cls_row(
        "mro-aiohttp-ServerTimeoutError-before-ServerConnectionError",
        lambda: FakeAiohttp.ServerTimeoutError("Timeout on reading data from socket"),
        K.TIMEOUT,
    ),
    cls_row(
        "mro-requests-ConnectTimeout-before-ConnectionError",
        lambda: requests.ConnectTimeout("connect"),
        K.TIMEOUT,
        reason_has=("exception class ConnectTimeout",),
    ),
    cls_row(
        "mro-unknown-subclass-via-base",
        lambda: FlakyUpstreamDisconnect("gone"),
        K.CONNECTION_RESET,
        reason_has=("(as ServerDisconnectedError)",),
    ),
    # 7. message patterns (spec-map classify.message-patterns): the specification's wordings
    msg("Connection timeout after 30s", K.TIMEOUT, T),
    msg("Invalid airport code: XYZ", K.INVALID_PARAMETERS, P),
    msg("Rate limit exceeded (429)", K.RATE_LIMIT, T, status_code=429),
    msg("Authentication failed (401)", K.AUTH_ERROR, P, status_code=401),
    msg("Service unavailable (503)", K.SERVICE_UNAVAILABLE, T, status_code=503),
    msg("Tool timeout after 30s", K.TIMEOUT, T),
    # the LLM lists of spec-map classify.message-patterns: rate_limit
    msg("429 Too Many Requests: slow down", K.RATE_LIMIT, T),
    msg("ratelimit reached for org", K.RATE_LIMIT, T),
    msg("rate_limit_error: try again", K.RATE_LIMIT, T),
    msg("Overloaded", K.RATE_LIMIT, T),
    # LLM auth_error
    msg("Invalid API key provided", K.AUTH_ERROR, P),
    msg("UNAUTHENTICATED: request had no credentials", K.AUTH_ERROR, P),
    msg("Access denied for this project", K.AUTH_ERROR, P),
    msg("Forbidden", K.AUTH_ERROR, P),
    # LLM quota_exceeded
    msg("insufficient_quota", K.QUOTA_EXCEEDED, P),
    msg("Quota exceeded for this month", K.QUOTA_EXCEEDED, P),
    msg("Payment required", K.QUOTA_EXCEEDED, P),
    msg("Your credit balance is too low", K.QUOTA_EXCEEDED, P),
    # LLM model_error
    msg("model not found: gpt-9", K.MODEL_ERROR, P),
    msg("Unknown model: claude-9", K.MODEL_ERROR, P),
    msg("invalid model id", K.MODEL_ERROR, P),
    msg("unsupported model for this endpoint", K.MODEL_ERROR, P),
    msg("The model `gpt-9` is not available", K.MODEL_ERROR, P),
    msg("gpt-9 not available in your region", K.MODEL_ERROR, P),
    # LLM timeout
    msg("Request timed out", K.TIMEOUT, T),
    msg("deadline exceeded", K.TIMEOUT, T),
    msg("rpc error: context deadline exceeded", K.TIMEOUT, T),
    msg("connect ETIMEDOUT 10.0.0.1:443", K.TIMEOUT, T),
    msg("ECONNABORTED", K.TIMEOUT, T),
    # LLM network_error (socket hang up / epipe are kept apart as connection resets)
    msg("getaddrinfo EAI_AGAIN api.example.com", K.NETWORK_ERROR, T),
    msg("EAI_AGAIN", K.NETWORK_ERROR, T),
    msg("DNS lookup failed", K.NETWORK_ERROR, T),
    msg("TLS handshake failed", K.NETWORK_ERROR, T),
    msg("SSL: wrong version number", K.NETWORK_ERROR, T),
    msg("unable to get local issuer certificate", K.NETWORK_ERROR, T),
    msg("socket hang up", K.CONNECTION_RESET, T),
    msg("write EPIPE", K.CONNECTION_RESET, T),
    # MCP timeout
    msg("MCP tool call timeout", K.TIMEOUT, T),
    msg("MCP error -32001: Request timed out", K.TIMEOUT, T),
    msg("MCP: context deadline exceeded", K.TIMEOUT, T),
    msg("MCP server: ETIMEDOUT", K.TIMEOUT, T),
    # others
    msg("Circuit breaker is open", K.CIRCUIT_OPEN, T),
    msg("Service temporarily unavailable", K.SERVICE_UNAVAILABLE, T),
    msg("Invalid flight number (912)", K.INVALID_PARAMETERS, P, status_code=None),
    msg("Flight (777) not found", K.NOT_FOUND, P, status_code=None),
    # 8. default
    Row(
        "default-runtime-error",
        lambda: RuntimeError("something odd"),
        K.EXECUTION_ERROR, T, True, Rule.DEFAULT, status_code=None, retry_after_s=None,
    ),
    Row("default-empty-exception", Exception, K.EXECUTION_ERROR, T, True, Rule.DEFAULT),
]
# fmt: on


def test_table_is_big_and_ids_are_unique() -> None:
    assert len(ROWS) >= 60
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
def test_classify(row: Row) -> None:
    c = classify(row.make(), now=fixed_now)
    got = (c.kind, c.error_class, c.retryable, c.rule)
    assert got == (row.kind, row.error_class, row.retryable, row.rule), c.reason
    assert isinstance(c.reason, str)
    assert c.reason.strip()
    assert c.is_failure is (row.rule is not Rule.CANCELLATION)
    assert c.transient is (row.error_class is T)
    if row.status_code is not _UNSET:
        assert c.status_code == row.status_code
    if row.retry_after_s is not _UNSET:
        assert c.retry_after_s == row.retry_after_s
    for fragment in row.reason_has:
        assert fragment in c.reason


def test_too_deep_body_is_within_the_bound() -> None:
    """Else its row would pass by the bound alone, not by surviving the parser's RecursionError."""
    assert len(TOO_DEEP) <= MAX_RESPONSE_BODY_BYTES
    with pytest.raises(RecursionError):
        json.loads(TOO_DEEP)


def test_requests_connection_error_is_not_the_builtin() -> None:
    exc = requests.ConnectionError("refused")
    assert not isinstance(exc, ConnectionError)  # the builtin
    assert classify(exc).kind is K.NETWORK_ERROR


def test_to_dict() -> None:
    c = classify(httpx_status_error(429, {"Retry-After": "7"}), now=fixed_now)
    assert c.to_dict() == {
        "kind": "rate_limit",
        "class": "transient",
        "retryable": True,
        "rule": "status_code",
        "reason": c.reason,
        "status_code": 429,
        "retry_after_s": 7.0,
        "error_type": "HTTPStatusError",
    }
    json.dumps(c.to_dict())


# --- manifest overrides (spec-map classify.manifest-override) --------------------------------


def manifest(*overrides: ClassificationOverride) -> ToolManifest:
    return ToolManifest(id="custom_api", classification=overrides)


def override(**kwargs: Any) -> ClassificationOverride:
    return ClassificationOverride(**kwargs)


@dataclass(frozen=True)
class OverrideRow:
    id: str
    manifest: ToolManifest
    make: Callable[[], BaseException]
    kind: ErrorKind
    error_class: ErrorClass
    retryable: bool
    rule: Rule = Rule.MANIFEST_OVERRIDE
    reason_has: tuple[str, ...] = ()


TREAT_503_PERMANENT = manifest(override(status_code=503, treat_as="permanent"))

# fmt: off
OVERRIDE_ROWS = [
    OverrideRow(
        "seed000-1.5-message-503-treated-permanent",
        TREAT_503_PERMANENT,
        lambda: Exception("Service unavailable (503)"),
        K.SERVICE_UNAVAILABLE, P, False, reason_has=("status 503", "was transient"),
    ),
    OverrideRow(
        "status-503-httpx",
        TREAT_503_PERMANENT,
        lambda: httpx_status_error(503),
        K.SERVICE_UNAVAILABLE, P, False,
    ),
    OverrideRow(
        "status-503-does-not-touch-502",
        TREAT_503_PERMANENT,
        lambda: httpx_status_error(502),
        K.SERVICE_UNAVAILABLE, T, True, rule=Rule.STATUS_CODE,
    ),
    OverrideRow(
        "by-kind-timeout-permanent",
        manifest(override(kind="timeout", treat_as="permanent", reason="non-idempotent")),
        lambda: httpx.ReadTimeout("slow"),
        K.TIMEOUT, P, False, reason_has=("kind timeout", "non-idempotent"),
    ),
    OverrideRow(
        "by-kind-400-transient",
        manifest(override(kind="invalid_parameters", treat_as="transient")),
        lambda: httpx_status_error(400),
        K.INVALID_PARAMETERS, T, True,
    ),
    OverrideRow(
        "by-exception-class-name",
        manifest(override(exception="ReadTimeout", treat_as="permanent")),
        lambda: httpx.ReadTimeout("slow"),
        K.TIMEOUT, P, False, reason_has=("exception ReadTimeout",),
    ),
    OverrideRow(
        "by-exception-qualified-name",
        manifest(override(exception="httpx.ReadTimeout", treat_as="permanent")),
        lambda: httpx.ReadTimeout("slow"),
        K.TIMEOUT, P, False,
    ),
    OverrideRow(
        "by-exception-base-class-via-mro",
        manifest(override(exception="TimeoutException", treat_as="permanent")),
        lambda: httpx.ConnectTimeout("slow"),
        K.TIMEOUT, P, False,
    ),
    OverrideRow(
        "by-exception-name-on-cause",
        manifest(override(exception="ConnectError", treat_as="permanent")),
        lambda: raised_from(RuntimeError("tool failed"), httpx.ConnectError("refused")),
        K.NETWORK_ERROR, P, False,
    ),
    OverrideRow(
        "by-exception-name-no-match",
        manifest(override(exception="ConnectError", treat_as="permanent")),
        lambda: httpx.ReadTimeout("slow"),
        K.TIMEOUT, T, True, rule=Rule.EXCEPTION_CLASS,
    ),
    OverrideRow(
        "as-kind-404-eventually-consistent",
        manifest(override(status_code=404, treat_as="transient", as_kind="service_unavailable")),
        lambda: httpx_status_error(404),
        K.SERVICE_UNAVAILABLE, T, True, reason_has=("status 404", "was permanent"),
    ),
    OverrideRow(
        "first-matching-override-wins",
        manifest(
            override(exception="HTTPStatusError", treat_as="transient", as_kind="rate_limit"),
            override(status_code=503, treat_as="permanent"),
        ),
        lambda: httpx_status_error(503),
        K.RATE_LIMIT, T, True, reason_has=("exception HTTPStatusError",),
    ),
    OverrideRow(
        "cancellation-is-never-overridden",
        manifest(override(kind="canceled", treat_as="transient")),
        KeyboardInterrupt,
        K.CANCELED, P, False, rule=Rule.CANCELLATION,
    ),
]
# fmt: on


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in OVERRIDE_ROWS])
def test_manifest_override(row: OverrideRow) -> None:
    c = classify(row.make(), row.manifest, now=fixed_now)
    got = (c.kind, c.error_class, c.retryable, c.rule)
    assert got == (row.kind, row.error_class, row.retryable, row.rule), c.reason
    assert c.reason.strip()
    if row.rule is Rule.MANIFEST_OVERRIDE:
        assert "custom_api" in c.reason
    for fragment in row.reason_has:
        assert fragment in c.reason


def test_override_needs_exactly_one_matcher() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ClassificationOverride(status_code=503, kind="timeout", treat_as="permanent")
    with pytest.raises(ValueError, match="exactly one"):
        ClassificationOverride(treat_as="permanent")


# --- real wire --------------------------------------------------------------------------------


JSON_ROUTES: dict[str, tuple[int, bytes]] = {
    "/429-quota": (429, json_bytes(OPENAI_QUOTA_BODY)),
    "/429-quota-huge": (429, padded(OPENAI_QUOTA_BODY, MAX_RESPONSE_BODY_BYTES)),
    "/429-rate-limit": (429, json_bytes(OPENAI_RATE_LIMIT_BODY)),
    "/429-gemini-per-day": (429, json_bytes(gemini_quota_body(PER_DAY))),
    "/529-overloaded": (529, json_bytes(ANTHROPIC_OVERLOADED_BODY)),
}
"""Provider error bodies on the wire; each also says Retry-After: 7."""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b""
        if self.path == "/429":
            self.send_response(429)
            self.send_header("Retry-After", "7")
        elif self.path == "/503":
            self.send_response(503)
        elif self.path in JSON_ROUTES:
            status, body = JSON_ROUTES[self.path]
            self.send_response(status)
            self.send_header("Retry-After", "7")
            self.send_header("Content-Type", "application/json")
        else:
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fetch_httpx(url: str) -> BaseException:
    with httpx.Client(trust_env=False) as client:
        response = client.get(url)
    with pytest.raises(httpx.HTTPStatusError) as info:
        response.raise_for_status()
    return info.value


def fetch_requests(url: str) -> BaseException:
    with requests.Session() as session:
        session.trust_env = False  # no proxy from the environment for 127.0.0.1
        response = session.get(url, timeout=5)
    with pytest.raises(requests.HTTPError) as info:
        response.raise_for_status()
    return info.value


@pytest.mark.parametrize(
    ("fetch", "path", "kind", "status", "retry_after_s"),
    [
        pytest.param(fetch_httpx, "/429", K.RATE_LIMIT, 429, 7.0, id="wire-httpx-429"),
        pytest.param(fetch_httpx, "/503", K.SERVICE_UNAVAILABLE, 503, None, id="wire-httpx-503"),
        pytest.param(fetch_requests, "/429", K.RATE_LIMIT, 429, 7.0, id="wire-requests-429"),
        pytest.param(fetch_requests, "/503", K.SERVICE_UNAVAILABLE, 503, None, id="wire-requests-503"),
    ],
)
def test_real_wire(
    base_url: str,
    fetch: Callable[[str], BaseException],
    path: str,
    kind: ErrorKind,
    status: int,
    retry_after_s: float | None,
) -> None:
    c = classify(fetch(base_url + path), now=fixed_now)
    assert (c.kind, c.error_class, c.retryable, c.rule) == (kind, T, True, Rule.STATUS_CODE)
    assert c.status_code == status
    assert c.retry_after_s == retry_after_s
    assert c.reason.strip()


def test_real_wire_503_manifest_override(base_url: str) -> None:
    c = classify(fetch_httpx(base_url + "/503"), TREAT_503_PERMANENT, now=fixed_now)
    assert (c.error_class, c.retryable, c.rule) == (P, False, Rule.MANIFEST_OVERRIDE)
    assert "custom_api" in c.reason


def test_real_connection_refused() -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with httpx.Client(trust_env=False) as client, pytest.raises(httpx.ConnectError) as info:
        client.get(f"http://127.0.0.1:{port}/")
    c = classify(info.value, now=fixed_now)
    assert (c.kind, c.error_class, c.retryable, c.rule) == (
        K.NETWORK_ERROR,
        T,
        True,
        Rule.EXCEPTION_CLASS,
    )
    assert c.reason.strip()


# --- provider error bodies on the wire (direct HTTP calls, raise_for_status) ------------------


@pytest.mark.parametrize("fetch", [fetch_httpx, fetch_requests], ids=["httpx", "requests"])
@pytest.mark.parametrize(
    ("path", "kind", "error_class", "rule"),
    [
        pytest.param("/429-quota", K.QUOTA_EXCEEDED, P, Rule.BODY_TYPE, id="openai-insufficient-quota"),
        pytest.param("/429-gemini-per-day", K.QUOTA_EXCEEDED, P, Rule.BODY_TYPE, id="gemini-per-day"),
        pytest.param("/429-rate-limit", K.RATE_LIMIT, T, Rule.BODY_TYPE, id="openai-rate-limit"),
        pytest.param("/529-overloaded", K.RATE_LIMIT, T, Rule.BODY_TYPE, id="anthropic-overloaded"),
        pytest.param("/429-quota-huge", K.RATE_LIMIT, T, Rule.STATUS_CODE, id="over-the-bound"),
        pytest.param("/429", K.RATE_LIMIT, T, Rule.STATUS_CODE, id="no-body"),
    ],
)
def test_real_wire_error_body(
    base_url: str,
    fetch: Callable[[str], BaseException],
    path: str,
    kind: ErrorKind,
    error_class: ErrorClass,
    rule: Rule,
) -> None:
    c = classify(fetch(base_url + path), now=fixed_now)
    assert (c.kind, c.error_class, c.retryable, c.rule) == (kind, error_class, error_class is T, rule), (
        c.reason
    )
    assert c.status_code == int(path[1:4])
    assert c.retry_after_s == 7.0, "Retry-After is read from the response headers either way"
    if rule is Rule.BODY_TYPE:
        assert "read from the HTTP response" in c.reason


@pytest.mark.parametrize("fetch", [fetch_httpx, fetch_requests], ids=["httpx", "requests"])
def test_response_body_is_read_only_up_to_the_bound(
    base_url: str, fetch: Callable[[str], BaseException]
) -> None:
    small, huge = fetch(base_url + "/429-quota"), fetch(base_url + "/429-quota-huge")
    assert len(huge.response.content) > MAX_RESPONSE_BODY_BYTES  # type: ignore[attr-defined]
    assert classify(small).kind is K.QUOTA_EXCEEDED
    over = classify(huge)
    assert (over.kind, over.rule, over.status_code) == (K.RATE_LIMIT, Rule.STATUS_CODE, 429)


def test_httpx_streamed_response_is_never_read_by_the_classifier(base_url: str) -> None:
    with httpx.Client(trust_env=False) as client, client.stream("GET", base_url + "/429-quota") as response:
        with pytest.raises(httpx.HTTPStatusError) as info:
            response.raise_for_status()
        with pytest.raises(httpx.ResponseNotRead):
            _ = response.content  # what a careless classifier would trip over
        unread = classify(info.value, now=fixed_now)
        assert not response.is_stream_consumed
        response.read()
        read = classify(info.value, now=fixed_now)
    assert (unread.kind, unread.rule, unread.retry_after_s) == (K.RATE_LIMIT, Rule.STATUS_CODE, 7.0)
    assert (read.kind, read.error_class, read.rule) == (K.QUOTA_EXCEEDED, P, Rule.BODY_TYPE)


def test_requests_streamed_response_is_never_consumed_by_the_classifier(base_url: str) -> None:
    with requests.Session() as session:
        session.trust_env = False
        with session.get(base_url + "/429-quota", stream=True, timeout=5) as response:
            with pytest.raises(requests.HTTPError) as info:
                response.raise_for_status()
            unread = classify(info.value, now=fixed_now)
            assert vars(response)["_content_consumed"] is False, "the classifier must not read the stream"
            assert json.loads(response.content) == OPENAI_QUOTA_BODY  # the caller still gets it all
            read = classify(info.value, now=fixed_now)
    assert (unread.kind, unread.rule) == (K.RATE_LIMIT, Rule.STATUS_CODE)
    assert (read.kind, read.error_class, read.rule) == (K.QUOTA_EXCEEDED, P, Rule.BODY_TYPE)


@pytest.fixture(params=[fetch_httpx, fetch_requests], ids=["httpx", "requests"])
def wire_errors(request: pytest.FixtureRequest, base_url: str) -> tuple[BaseException, BaseException]:
    """A real 429 with OpenAI's insufficient_quota body, and a plain one; both say Retry-After: 7."""
    fetch: Callable[[str], BaseException] = request.param
    return fetch(base_url + "/429-quota"), fetch(base_url + "/429")


@pytest.mark.anyio
async def test_quota_429_is_attempted_once_and_a_plain_429_is_retried_after_retry_after(
    wire_errors: tuple[BaseException, BaseException],
) -> None:
    quota, plain = wire_errors
    policy = RetryPolicy(max_attempts=5, max_total_time_ms=60_000)
    engine = await new_engine(
        ToolManifest(id="billing", retry_policy=policy), ToolManifest(id="busy", retry_policy=policy)
    )
    billing, busy = Scripted(quota), Scripted(plain, "ok")
    engine.register("billing", billing)
    engine.register("busy", busy)

    result = await engine.try_call("billing")
    assert billing.calls == 1, "a quota does not reset on retry"
    assert result.error is not None and result.attempts == 1
    assert (result.error.kind, result.error.status_code) == (K.QUOTA_EXCEEDED, 429)

    result = await engine.try_call("busy")
    assert result.ok and result.attempts == 2
    assert busy.gaps() == [pytest.approx(7.0)], "the server's Retry-After is honoured"


# --- reading exception attributes never fires a deprecated property ------------------------------


class ClientResponseError(Exception):
    """aiohttp's ClientResponseError as it is: ``status`` stored, ``code`` a deprecated alias."""

    def __init__(self, status: int, message: str, headers: dict[str, str]) -> None:
        super().__init__(f"{status}, message={message!r}")
        self.status = status
        self.message = message
        self.headers = headers

    @property
    def code(self) -> int:
        warnings.warn("code property is deprecated, use status instead", DeprecationWarning, stacklevel=2)
        return self.status


class DeprecatedAliasError(Exception):
    """A PEP 702 ``@deprecated`` getter (typing_extensions, warnings.deprecated in 3.13)."""

    status_code = 503

    @property
    @deprecated("use status_code")
    def code(self) -> str:
        return "overloaded_error"


def aiohttp_wire_error(url: str) -> BaseException:
    aiohttp = pytest.importorskip("aiohttp")

    async def get() -> None:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            response.raise_for_status()

    with pytest.raises(aiohttp.ClientResponseError) as info:
        asyncio.run(get())
    error: BaseException = info.value
    return error


def websockets_connection_closed() -> BaseException:
    websockets = pytest.importorskip("websockets")
    frames = pytest.importorskip("websockets.frames")
    error: BaseException = websockets.ConnectionClosedError(frames.Close(1011, "internal error"), None)
    return error


def warnings_seen(recwarn: pytest.WarningsRecorder) -> list[str]:
    return [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in recwarn]


@pytest.mark.parametrize(
    ("make", "kind", "status", "rule"),
    [
        pytest.param(
            lambda url: ClientResponseError(429, "Too Many Requests", {"Retry-After": "7"}),
            K.RATE_LIMIT, 429, Rule.STATUS_CODE, id="aiohttp-shaped",
        ),
        pytest.param(lambda url: DeprecatedAliasError("busy"), K.SERVICE_UNAVAILABLE, 503,
                     Rule.STATUS_CODE, id="pep702-deprecated-getter"),
        pytest.param(lambda url: aiohttp_wire_error(url + "/429"), K.RATE_LIMIT, 429, Rule.STATUS_CODE,
                     id="aiohttp-real-wire"),
        pytest.param(lambda url: websockets_connection_closed(), K.CONNECTION_RESET, None,
                     Rule.EXCEPTION_CLASS, id="websockets-ConnectionClosedError"),
    ],
)  # fmt: skip
def test_classifying_fires_no_deprecated_property(
    base_url: str,
    recwarn: pytest.WarningsRecorder,
    make: Callable[[str], BaseException],
    kind: ErrorKind,
    status: int | None,
    rule: Rule,
) -> None:
    error = make(base_url)
    recwarn.clear()
    c = classify(error, now=fixed_now)
    assert warnings_seen(recwarn) == []
    assert (c.kind, c.status_code, c.rule) == (kind, status, rule), c.reason


def test_websockets_invalid_status_response_body_is_read() -> None:
    """websockets' handshake rejection carries a Response dataclass with a bytes ``body``."""
    pytest.importorskip("websockets")
    from websockets.datastructures import Headers
    from websockets.exceptions import InvalidStatus
    from websockets.http11 import Response

    response = Response(429, "Too Many Requests", Headers(), json_bytes(OPENAI_QUOTA_BODY))
    c = classify(InvalidStatus(response))
    assert (c.kind, c.error_class, c.rule, c.status_code) == (K.QUOTA_EXCEEDED, P, Rule.BODY_TYPE, 429)


@pytest.mark.parametrize(
    ("message", "kind", "status"),
    [
        ("HTTP 503", K.SERVICE_UNAVAILABLE, 503),  # an MCP isError text, as servers write it
        ("Status Code: 429", K.RATE_LIMIT, 429),
        ("ERROR 404", K.NOT_FOUND, 404),
        ("http 503", K.SERVICE_UNAVAILABLE, 503),
    ],
)
def test_a_status_named_in_a_message_is_read_in_any_case(message: str, kind: ErrorKind, status: int) -> None:
    c = classify(RuntimeError(message))
    assert (c.kind, c.status_code) == (kind, status), c.reason
