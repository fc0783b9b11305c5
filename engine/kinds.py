"""The catalogue of error kinds: what went wrong, whether the tool ran, and whether it heals.

One kind per meaning (spec-map kinds.one-catalogue). The tool kinds, the spec's categories and the
LLM-provider kinds overlap (``timeout`` appears in all three, "rate limited" is the
provider's ``rate_limit``, "authentication/permission" is ``auth_error``); each meaning
is listed once, and :data:`KIND_SOURCES` records the spec-map entries that asked for it. A
strategy's refusal (``bulkhead_full``, ``throttled``) is a kind of its own, its source the strategy's package.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorClass(StrEnum):
    """The two classes (spec-map kinds.two-classes): will the same call succeed if tried again later?"""

    TRANSIENT = "transient"
    PERMANENT = "permanent"


class ErrorKind(StrEnum):
    """What went wrong with a tool call; :data:`KIND_INFO` says what each kind means."""

    # spec-map kinds.tool-kinds
    UNKNOWN_TOOL = "unknown_tool"
    NOT_PERMITTED = "not_permitted"
    INVALID_PARAMETERS = "invalid_parameters"
    LIMIT_EXCEEDED = "limit_exceeded"
    CANCELED = "canceled"
    TIMEOUT = "timeout"
    TRANSPORT_ERROR = "transport_error"
    EXECUTION_ERROR = "execution_error"
    INTERNAL_ERROR = "internal_error"
    # spec-map kinds.spec-categories not already above
    RATE_LIMIT = "rate_limit"
    SERVICE_UNAVAILABLE = "service_unavailable"
    CONNECTION_RESET = "connection_reset"
    PARTIAL_RESULT = "partial_result"
    AUTH_ERROR = "auth_error"
    NOT_FOUND = "not_found"
    UNSUPPORTED = "unsupported"
    INVALID_RESPONSE = "invalid_response"
    CIRCUIT_OPEN = "circuit_open"
    # the strategies' own (engine.strategies)
    BULKHEAD_FULL = "bulkhead_full"
    THROTTLED = "throttled"
    # spec-map kinds.llm-kinds not already above
    QUOTA_EXCEEDED = "quota_exceeded"
    MODEL_ERROR = "model_error"
    NETWORK_ERROR = "network_error"

    @property
    def info(self) -> KindInfo:
        return KIND_INFO[self]

    @property
    def executed(self) -> bool:
        return KIND_INFO[self].executed

    @property
    def default_class(self) -> ErrorClass:
        return KIND_INFO[self].default_class

    @property
    def transient(self) -> bool:
        return KIND_INFO[self].default_class is ErrorClass.TRANSIENT


@dataclass(frozen=True, slots=True)
class KindInfo:
    """What a kind means, in code (spec-map kinds.one-catalogue)."""

    executed: bool
    """Did the tool run (or may it have run)? Only executed kinds count as executed tools."""
    default_class: ErrorClass
    ambiguous: bool
    """The request may have reached the tool but its outcome is unknown (matters for side effects)."""
    description: str


_T, _P = ErrorClass.TRANSIENT, ErrorClass.PERMANENT

KIND_INFO: dict[ErrorKind, KindInfo] = {
    ErrorKind.UNKNOWN_TOOL: KindInfo(False, _P, False, "The tool does not exist or is disabled."),
    ErrorKind.NOT_PERMITTED: KindInfo(False, _P, False, "The tool is blocked by policy or allowlist."),
    ErrorKind.INVALID_PARAMETERS: KindInfo(
        False, _P, False, "The arguments failed validation; the caller must fix them."
    ),
    ErrorKind.LIMIT_EXCEEDED: KindInfo(False, _P, False, "A per-turn tool-call limit was reached."),
    ErrorKind.CANCELED: KindInfo(False, _P, False, "Stop or abort was requested before the tool ran."),
    ErrorKind.TIMEOUT: KindInfo(True, _T, True, "The call did not finish within its time limit."),
    ErrorKind.TRANSPORT_ERROR: KindInfo(
        True, _T, True, "The transport or protocol failed mid-exchange (JSON-RPC, framing, HTTP)."
    ),
    ErrorKind.EXECUTION_ERROR: KindInfo(
        True, _T, False, "The tool ran and failed for an unrecognised reason (transient by default)."
    ),
    ErrorKind.INTERNAL_ERROR: KindInfo(
        True, _P, False, "The tool crashed on a programming error; retrying repeats the bug."
    ),
    ErrorKind.RATE_LIMIT: KindInfo(True, _T, False, "Rate limited or overloaded; resets over time."),
    ErrorKind.SERVICE_UNAVAILABLE: KindInfo(
        True, _T, False, "The service is temporarily down or failing (5xx)."
    ),
    ErrorKind.CONNECTION_RESET: KindInfo(
        True, _T, True, "The connection dropped mid-request; the request may have been processed."
    ),
    ErrorKind.PARTIAL_RESULT: KindInfo(
        True, _T, False, "The tool returned an incomplete result (truncated or cut short)."
    ),
    ErrorKind.AUTH_ERROR: KindInfo(True, _P, False, "Credentials or permissions were rejected."),
    ErrorKind.NOT_FOUND: KindInfo(True, _P, False, "The requested resource does not exist."),
    ErrorKind.UNSUPPORTED: KindInfo(True, _P, False, "The tool does not support this operation."),
    ErrorKind.INVALID_RESPONSE: KindInfo(
        True, _P, False, "The response was malformed or failed schema validation."
    ),
    ErrorKind.CIRCUIT_OPEN: KindInfo(
        False, _T, False, "Rejected by the tool's open circuit breaker; no attempt was made."
    ),
    ErrorKind.BULKHEAD_FULL: KindInfo(
        False,
        _T,
        False,
        "Rejected by the tool's bulkhead: too many calls in flight or queued; no attempt was made.",
    ),
    ErrorKind.THROTTLED: KindInfo(
        False,
        _T,
        False,
        "Held back by the tool's rate limit or its cooldown after a rate-limit error; no attempt was made.",
    ),
    ErrorKind.QUOTA_EXCEEDED: KindInfo(
        True, _P, False, "A billing or daily quota is exhausted; retrying will not help."
    ),
    ErrorKind.MODEL_ERROR: KindInfo(
        True, _P, False, "The model is unknown, invalid or unavailable to this account."
    ),
    # Not executed: nothing reached the peer, so the request was never sent (a retry is safe).
    ErrorKind.NETWORK_ERROR: KindInfo(
        False, _T, False, "The peer could not be reached (DNS, refused connection, TLS): nothing was sent."
    ),
}
"""Every kind's :class:`KindInfo`: did the tool run, its default class, ambiguity, a description."""

KIND_SOURCES: dict[ErrorKind, tuple[str, ...]] = {
    ErrorKind.UNKNOWN_TOOL: ("kinds.tool-kinds", "kinds.spec-categories: tool not found"),
    ErrorKind.NOT_PERMITTED: ("kinds.tool-kinds",),
    ErrorKind.INVALID_PARAMETERS: ("kinds.tool-kinds", "kinds.spec-categories: invalid input"),
    ErrorKind.LIMIT_EXCEEDED: ("kinds.tool-kinds",),
    ErrorKind.CANCELED: ("kinds.tool-kinds",),
    ErrorKind.TIMEOUT: ("kinds.tool-kinds", "kinds.llm-kinds", "kinds.spec-categories: network timeout"),
    ErrorKind.TRANSPORT_ERROR: ("kinds.tool-kinds",),
    ErrorKind.EXECUTION_ERROR: ("kinds.tool-kinds",),
    ErrorKind.INTERNAL_ERROR: ("kinds.tool-kinds",),
    ErrorKind.RATE_LIMIT: ("kinds.llm-kinds", "kinds.spec-categories: rate limited"),
    ErrorKind.SERVICE_UNAVAILABLE: ("kinds.spec-categories: service unavailable",),
    ErrorKind.CONNECTION_RESET: ("kinds.spec-categories: connection reset",),
    ErrorKind.PARTIAL_RESULT: ("kinds.spec-categories: partial result",),
    ErrorKind.AUTH_ERROR: ("kinds.llm-kinds", "kinds.spec-categories: authentication/permission"),
    ErrorKind.NOT_FOUND: ("kinds.spec-categories: not found",),
    ErrorKind.UNSUPPORTED: ("kinds.spec-categories: unsupported operation",),
    ErrorKind.INVALID_RESPONSE: ("kinds.spec-categories: response/schema validation",),
    ErrorKind.CIRCUIT_OPEN: ("kinds.spec-categories: circuit open",),
    ErrorKind.BULKHEAD_FULL: ("strategies.bulkhead",),
    ErrorKind.THROTTLED: ("strategies.rate_limit",),
    ErrorKind.QUOTA_EXCEEDED: ("kinds.llm-kinds",),
    ErrorKind.MODEL_ERROR: ("kinds.llm-kinds",),
    ErrorKind.NETWORK_ERROR: ("kinds.llm-kinds",),
}


def kinds_table_markdown() -> str:
    """README's table of kinds, generated from :data:`KIND_INFO` (a test keeps README in sync)."""
    rows = [
        "| kind | class | executed | ambiguous | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, info in KIND_INFO.items():
        rows.append(
            f"| `{kind}` | {info.default_class} | {'yes' if info.executed else 'no'} "
            f"| {'yes' if info.ambiguous else 'no'} | {info.description} |"
        )
    return "\n".join(rows)
