"""The classifier's tables: provider error types and JSON-RPC codes, HTTP statuses, exception
class names and errno values, and message patterns (spec-map classify.message-patterns).

Data only; the rules that read them are in :mod:`engine.classify.classifier`.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable

from engine.kinds import ErrorClass, ErrorKind

__all__ = [
    "BODY_TYPES",
    "CLASS_NAMES",
    "DAILY_QUOTA",
    "EMBEDDED_STATUS",
    "ERRNO_KINDS",
    "JSONRPC_CODES",
    "PATTERNS_AFTER_STATUS",
    "PATTERNS_BEFORE_STATUS",
    "PERMANENT_STATUSES",
    "QUALIFIED_CLASS_NAMES",
    "STATUS_KINDS",
    "TRANSIENT_STATUSES",
]

K = ErrorKind
_P = ErrorClass.PERMANENT


# --- rule 4: error body types and codes ------------------------------------------------

BODY_TYPES: dict[str, ErrorKind] = {
    "overloaded_error": K.RATE_LIMIT,
    "rate_limit_error": K.RATE_LIMIT,
    "rate_limit_exceeded": K.RATE_LIMIT,
    "resource_exhausted": K.RATE_LIMIT,
    "insufficient_quota": K.QUOTA_EXCEEDED,
    "billing_error": K.QUOTA_EXCEEDED,
    "billing_hard_limit_reached": K.QUOTA_EXCEEDED,
    "authentication_error": K.AUTH_ERROR,
    "invalid_api_key": K.AUTH_ERROR,
    "unauthenticated": K.AUTH_ERROR,
    "permission_error": K.AUTH_ERROR,
    "permission_denied": K.AUTH_ERROR,
    "not_found_error": K.NOT_FOUND,
    "not_found": K.NOT_FOUND,
    "model_not_found": K.MODEL_ERROR,
    "invalid_request_error": K.INVALID_PARAMETERS,
    "invalid_argument": K.INVALID_PARAMETERS,
    "failed_precondition": K.INVALID_PARAMETERS,
    "context_length_exceeded": K.INVALID_PARAMETERS,
    "request_too_large": K.INVALID_PARAMETERS,
    "api_error": K.SERVICE_UNAVAILABLE,
    "server_error": K.SERVICE_UNAVAILABLE,
    "internal": K.SERVICE_UNAVAILABLE,
    "unavailable": K.SERVICE_UNAVAILABLE,
    "timeout_error": K.TIMEOUT,
    "deadline_exceeded": K.TIMEOUT,
    "unimplemented": K.UNSUPPORTED,
}

# JSON-RPC / MCP error codes (MCP v1 used 408 for request timeout, v2 uses -32001).
JSONRPC_CODES: dict[int, ErrorKind] = {
    -32700: K.TRANSPORT_ERROR,
    -32600: K.INVALID_PARAMETERS,
    -32601: K.UNKNOWN_TOOL,
    -32602: K.INVALID_PARAMETERS,
    -32603: K.EXECUTION_ERROR,
    -32001: K.TIMEOUT,
    -32002: K.NOT_FOUND,
    408: K.TIMEOUT,
}

# Gemini's per-minute limits also say "quota"; only a per-day quota is permanent.
DAILY_QUOTA = re.compile(r"per[ _-]?day|daily", re.IGNORECASE)

# --- rule 5: status codes --------------------------------------------------------------

STATUS_KINDS: dict[int, ErrorKind] = {
    408: K.TIMEOUT,
    409: K.EXECUTION_ERROR,
    425: K.EXECUTION_ERROR,
    429: K.RATE_LIMIT,
    500: K.SERVICE_UNAVAILABLE,
    502: K.SERVICE_UNAVAILABLE,
    503: K.SERVICE_UNAVAILABLE,
    504: K.TIMEOUT,
    529: K.RATE_LIMIT,
    400: K.INVALID_PARAMETERS,
    401: K.AUTH_ERROR,
    402: K.QUOTA_EXCEEDED,
    403: K.AUTH_ERROR,
    404: K.NOT_FOUND,
    405: K.UNSUPPORTED,
    410: K.NOT_FOUND,
    413: K.INVALID_PARAMETERS,
    422: K.INVALID_PARAMETERS,
    501: K.UNSUPPORTED,
}
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
PERMANENT_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 410, 413, 422, 501})

# --- rule 6: exception classes ---------------------------------------------------------

# Matched by class name along the MRO, so httpx and httpx2, requests, urllib3, aiohttp,
# openai, anthropic, mcp, websockets, trio and anyio are recognised without importing them.
# Qualified names (module.Class) disambiguate where two libraries share a name.
QUALIFIED_CLASS_NAMES: dict[str, tuple[ErrorKind, ErrorClass | None]] = {
    "urllib3.exceptions.ProtocolError": (K.CONNECTION_RESET, None),
    "urllib3.exceptions.IncompleteRead": (K.CONNECTION_RESET, None),
    "http.client.IncompleteRead": (K.PARTIAL_RESULT, None),
    "asyncio.exceptions.IncompleteReadError": (K.CONNECTION_RESET, None),
}

CLASS_NAMES: dict[str, tuple[ErrorKind, ErrorClass | None]] = {
    # timeouts
    "TimeoutError": (K.TIMEOUT, None),
    "TooSlowError": (K.TIMEOUT, None),
    "TimeoutException": (K.TIMEOUT, None),
    "ConnectTimeout": (K.TIMEOUT, None),
    "ReadTimeout": (K.TIMEOUT, None),
    "WriteTimeout": (K.TIMEOUT, None),
    "PoolTimeout": (K.TIMEOUT, None),
    "Timeout": (K.TIMEOUT, None),
    "ReadTimeoutError": (K.TIMEOUT, None),
    "ConnectTimeoutError": (K.TIMEOUT, None),
    "ServerTimeoutError": (K.TIMEOUT, None),
    "ConnectionTimeoutError": (K.TIMEOUT, None),
    "SocketTimeoutError": (K.TIMEOUT, None),
    "APITimeoutError": (K.TIMEOUT, None),
    "DeadlineExceededError": (K.TIMEOUT, None),
    # dropped connections: the request may have been processed
    "ConnectionResetError": (K.CONNECTION_RESET, None),
    "ConnectionAbortedError": (K.CONNECTION_RESET, None),
    "BrokenPipeError": (K.CONNECTION_RESET, None),
    "RemoteDisconnected": (K.CONNECTION_RESET, None),
    "ServerDisconnectedError": (K.CONNECTION_RESET, None),
    "RemoteProtocolError": (K.CONNECTION_RESET, None),
    "ReadError": (K.CONNECTION_RESET, None),
    "WriteError": (K.CONNECTION_RESET, None),
    "ChunkedEncodingError": (K.CONNECTION_RESET, None),
    "ClientPayloadError": (K.CONNECTION_RESET, None),
    "BrokenResourceError": (K.CONNECTION_RESET, None),
    "EndOfStream": (K.CONNECTION_RESET, None),
    "ConnectionClosed": (K.CONNECTION_RESET, None),
    "ConnectionClosedError": (K.CONNECTION_RESET, None),
    # unreachable peer
    "ConnectionRefusedError": (K.NETWORK_ERROR, None),
    "ConnectionError": (K.NETWORK_ERROR, None),
    "gaierror": (K.NETWORK_ERROR, None),
    "herror": (K.NETWORK_ERROR, None),
    "SSLError": (K.NETWORK_ERROR, None),
    "SSLCertVerificationError": (K.NETWORK_ERROR, None),
    "ConnectError": (K.NETWORK_ERROR, None),
    "NetworkError": (K.NETWORK_ERROR, None),
    "ProxyError": (K.NETWORK_ERROR, None),
    "NewConnectionError": (K.NETWORK_ERROR, None),
    "NameResolutionError": (K.NETWORK_ERROR, None),
    "MaxRetryError": (K.NETWORK_ERROR, None),
    "URLError": (K.NETWORK_ERROR, None),
    "ClientConnectorError": (K.NETWORK_ERROR, None),
    "ClientConnectorDNSError": (K.NETWORK_ERROR, None),
    "ClientConnectorCertificateError": (K.NETWORK_ERROR, None),
    "ClientSSLError": (K.NETWORK_ERROR, None),
    "ClientOSError": (K.NETWORK_ERROR, None),
    "ClientConnectionError": (K.NETWORK_ERROR, None),
    "ServerConnectionError": (K.NETWORK_ERROR, None),
    "APIConnectionError": (K.NETWORK_ERROR, None),
    # transport / protocol
    "ProtocolError": (K.TRANSPORT_ERROR, None),
    "LocalProtocolError": (K.TRANSPORT_ERROR, _P),  # our request is malformed: no retry heals it
    "TransportError": (K.TRANSPORT_ERROR, None),
    "TooManyRedirects": (K.TRANSPORT_ERROR, _P),  # a redirect loop stays a loop
    "ClosedResourceError": (K.TRANSPORT_ERROR, None),
    "RequestError": (K.TRANSPORT_ERROR, None),
    "RequestException": (K.TRANSPORT_ERROR, None),
    "McpError": (K.TRANSPORT_ERROR, None),
    "MCPError": (K.TRANSPORT_ERROR, None),
    # provider SDK status classes (status usually decides first)
    "RateLimitError": (K.RATE_LIMIT, None),
    "OverloadedError": (K.RATE_LIMIT, None),
    "InternalServerError": (K.SERVICE_UNAVAILABLE, None),
    "ServiceUnavailableError": (K.SERVICE_UNAVAILABLE, None),
    "ConflictError": (K.EXECUTION_ERROR, None),
    "AuthenticationError": (K.AUTH_ERROR, None),
    "PermissionDeniedError": (K.AUTH_ERROR, None),
    "NotFoundError": (K.NOT_FOUND, None),
    "BadRequestError": (K.INVALID_PARAMETERS, None),
    "UnprocessableEntityError": (K.INVALID_PARAMETERS, None),
    "RequestTooLargeError": (K.INVALID_PARAMETERS, None),
    "APIResponseValidationError": (K.INVALID_RESPONSE, None),
    "LengthFinishReasonError": (K.PARTIAL_RESULT, None),
    # malformed responses
    "JSONDecodeError": (K.INVALID_RESPONSE, None),
    "DecodingError": (K.INVALID_RESPONSE, None),
    "ContentDecodingError": (K.INVALID_RESPONSE, None),
    "ContentTypeError": (K.INVALID_RESPONSE, None),
    "UnicodeDecodeError": (K.INVALID_RESPONSE, None),
    "IncompleteRead": (K.PARTIAL_RESULT, None),
    # caller errors: the model must fix the call
    "ValidationError": (K.INVALID_PARAMETERS, None),
    "InvalidURL": (K.INVALID_PARAMETERS, None),
    "InvalidUrlClientError": (K.INVALID_PARAMETERS, None),
    "MissingSchema": (K.INVALID_PARAMETERS, None),
    "InvalidSchema": (K.INVALID_PARAMETERS, None),
    "InvalidHeader": (K.INVALID_PARAMETERS, None),
    "ValueError": (K.INVALID_PARAMETERS, None),
    "TypeError": (K.INVALID_PARAMETERS, None),
    "UnsupportedProtocol": (K.UNSUPPORTED, None),
    "NotImplementedError": (K.UNSUPPORTED, None),
    "FileNotFoundError": (K.NOT_FOUND, None),
    "PermissionError": (K.AUTH_ERROR, None),
    # programming errors inside the tool
    "AttributeError": (K.INTERNAL_ERROR, None),
    "NameError": (K.INTERNAL_ERROR, None),
    "KeyError": (K.INTERNAL_ERROR, None),
    "IndexError": (K.INTERNAL_ERROR, None),
    "AssertionError": (K.INTERNAL_ERROR, None),
    "ZeroDivisionError": (K.INTERNAL_ERROR, None),
    "RecursionError": (K.INTERNAL_ERROR, None),
}

ERRNO_KINDS: dict[int, ErrorKind] = {
    errno.ECONNRESET: K.CONNECTION_RESET,
    errno.ECONNABORTED: K.CONNECTION_RESET,
    errno.EPIPE: K.CONNECTION_RESET,
    errno.ECONNREFUSED: K.NETWORK_ERROR,
    errno.EHOSTUNREACH: K.NETWORK_ERROR,
    errno.ENETUNREACH: K.NETWORK_ERROR,
    errno.ENETDOWN: K.NETWORK_ERROR,
    errno.EHOSTDOWN: K.NETWORK_ERROR,
    errno.ETIMEDOUT: K.TIMEOUT,
    errno.ENOENT: K.NOT_FOUND,
    errno.EACCES: K.AUTH_ERROR,
    errno.EPERM: K.AUTH_ERROR,
}


# --- rule 7: message patterns ----------------------------------------------------------

# The LLM, MCP and specification wordings of spec-map classify.message-patterns, most specific first.
_BEFORE_STATUS_SOURCES: list[tuple[str, ErrorKind]] = [
    (r"insufficient_quota|quota[ _]exceeded|exceeded your current quota|payment required"
     r"|\bcredits?\b", K.QUOTA_EXCEEDED),
    (r"model[ _]not[ _]found|unknown model|invalid model|unsupported model"
     r"|model \S+ (?:is )?not available", K.MODEL_ERROR),
]  # fmt: skip
EMBEDDED_STATUS = re.compile(r"\((\d{3})\)|\b(?:http|status(?: code)?|error)[ :]+(\d{3})\b", re.IGNORECASE)
_AFTER_STATUS_SOURCES: list[tuple[str, ErrorKind]] = [
    (r"invalid api[ _-]?key|unauthenticated|unauthori[sz]ed|access denied|forbidden"
     r"|authentication fail|permission denied|invalid credentials|invalid token|expired token",
     K.AUTH_ERROR),
    (r"too many requests|rate[ _-]?limit|ratelimit|overload|throttl", K.RATE_LIMIT),
    (r"service (?:is )?(?:temporarily )?(?:unavailable|not available)|temporarily unavailable"
     r"|bad gateway|internal server error|server error|upstream (?:error|failure)",
     K.SERVICE_UNAVAILABLE),
    (r"timed? ?out|timeout|deadline exceeded|etimedout|econnaborted", K.TIMEOUT),
    (r"econnreset|connection (?:was )?(?:reset|dropped|aborted|closed)|socket hang up|\bepipe\b"
     r"|broken pipe|server disconnected|remote end closed|connection lost", K.CONNECTION_RESET),
    (r"econnrefused|connection refused|eai_again|enotfound|getaddrinfo|name resolution"
     r"|\bdns\b|\btls\b|\bssl\b|certificate|network (?:is )?unreachable|host unreachable"
     r"|no route to host", K.NETWORK_ERROR),
    (r"circuit (?:breaker )?(?:is )?open", K.CIRCUIT_OPEN),
    (r"not available", K.MODEL_ERROR),
    (r"malformed response|invalid response|unexpected response|schema validation"
     r"|response validation|failed to parse|invalid json|unexpected token|not valid json",
     K.INVALID_RESPONSE),
    (r"partial result|partial response|truncated|incomplete", K.PARTIAL_RESULT),
    (r"not supported|unsupported|not implemented", K.UNSUPPORTED),
    (r"not found|no such|does not exist|doesn't exist", K.NOT_FOUND),
    (r"invalid|malformed|missing required|required (?:field|parameter|argument)"
     r"|validation (?:error|failed)|bad request|must be|out of range", K.INVALID_PARAMETERS),
]  # fmt: skip


def _compile(patterns: Iterable[tuple[str, ErrorKind]]) -> list[tuple[re.Pattern[str], ErrorKind]]:
    return [(re.compile(p, re.IGNORECASE), kind) for p, kind in patterns]


PATTERNS_BEFORE_STATUS = _compile(_BEFORE_STATUS_SOURCES)
PATTERNS_AFTER_STATUS = _compile(_AFTER_STATUS_SOURCES)
