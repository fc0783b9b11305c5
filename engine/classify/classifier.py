"""The one classifier: any exception in, a kind, a class and the rule that decided out.

Order (first decisive rule wins, the weaker ones only fill in details):

1. non-``Exception`` BaseExceptions (cancellation, KeyboardInterrupt) are not tool failures;
   ExceptionGroups are unwrapped (most severe leaf wins) and ``__cause__`` chains followed;
2. an explicit :class:`~engine.errors.ToolError` kind;
3. server advice: ``x-should-retry``, ``retry-after-ms``, ``retry-after``;
4. the error body's type or code (provider error types, JSON-RPC codes): an SDK error's parsed
   ``body``, else the JSON of the response the exception carries (httpx's or requests'
   ``raise_for_status()``), only if already loaded and small: never a network or stream read;
5. the HTTP status code;
6. the exception class, by name along the MRO, most derived first;
7. message patterns — the only place in tripwire that reads error text;
8. otherwise transient, the safer default (spec-map classify.unknown-default).

A tool manifest's overrides are applied last.

The tables the rules read (body types, status codes, class names, message patterns) are in
:mod:`engine.classify.patterns`; they are bound here once, at import.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from engine.classify.classification import Classification, ClassificationOverride, Rule
from engine.classify.patterns import (
    BODY_TYPES,
    CLASS_NAMES,
    DAILY_QUOTA,
    EMBEDDED_STATUS,
    ERRNO_KINDS,
    JSONRPC_CODES,
    PATTERNS_AFTER_STATUS,
    PATTERNS_BEFORE_STATUS,
    QUALIFIED_CLASS_NAMES,
    STATUS_KINDS,
    TRANSIENT_STATUSES,
)
from engine.error_payload import error_body, safe_attr
from engine.errors import ToolError
from engine.kinds import ErrorClass, ErrorKind

__all__ = ["classify"]

K = ErrorKind
_T, _P = ErrorClass.TRANSIENT, ErrorClass.PERMANENT

_RULE_RANK = {rule: rank for rank, rule in enumerate(Rule)}


class _HasOverrides(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def classification(self) -> Sequence[ClassificationOverride]: ...


def classify(
    error: BaseException,
    manifest: _HasOverrides | None = None,
    *,
    now: Callable[[], float] = time.time,
) -> Classification:
    """Classify ``error``; ``manifest`` supplies overrides, ``now`` dates HTTP Retry-After."""
    result = _BY_CLASS_ALONE.get(type(error))
    if result is None or not _plain_builtin(error):
        result = _classify(error, now)
    if manifest is not None and manifest.classification and result.is_failure:
        result = _apply_overrides(result, error, manifest.classification, manifest.id)
    return result


def _classify(error: BaseException, now: Callable[[], float]) -> Classification:
    if not isinstance(error, Exception):
        return Classification(
            K.CANCELED, _P, False, Rule.CANCELLATION,
            f"{type(error).__name__} is cancellation, not a tool failure: it propagates",
            error_type=type(error).__name__,
        )  # fmt: skip
    if isinstance(error, BaseExceptionGroup):
        return _classify_group(error, now)
    if error.__cause__ is None:
        return _classify_one(error, now)
    best: Classification | None = None
    for link in _cause_chain(error):
        if isinstance(link, ExceptionGroup):  # e.g. a wrapper raised from a task group's group
            candidate = _classify_group(link, now)
        else:
            candidate = _classify_one(link, now)
        if best is None or _RULE_RANK[candidate.rule] < _RULE_RANK[best.rule]:
            best = candidate
        if best.rule is Rule.TOOL_ERROR:
            break
    assert best is not None
    if best.error_type != type(error).__name__:
        best = replace(best, reason=f"{best.reason} (via cause of {type(error).__name__})")
    return best


def _classify_group(group: BaseExceptionGroup[Any], now: Callable[[], float]) -> Classification:
    leaves = list(_leaves(group))
    for leaf in leaves:
        if not isinstance(leaf, Exception):
            return _classify(leaf, now)
    results = [_classify(leaf, now) for leaf in leaves]
    # Most severe: permanent beats transient; then the stronger rule.
    worst = min(results, key=lambda c: (c.transient, _RULE_RANK[c.rule]))
    return replace(worst, reason=f"{worst.reason} (most severe of {len(leaves)} grouped errors)")


def _leaves(group: BaseExceptionGroup[Any]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def _cause_chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen and len(seen) < 16:
        seen.add(id(link))
        yield link
        link = link.__cause__


_BY_CLASS_ALONE: dict[type[BaseException], Classification] = {}
"""Builtin exception classes whose plain instances (see :func:`_plain_builtin`) rule 6 decides by
class name: every such instance gets the same answer, so it is worked out once per class.
Builtin classes only, so the cache stays small."""


def _plain_builtin(exc: BaseException) -> bool:
    """A builtin ``Exception`` with no attributes and no cause: the only instances
    :data:`_BY_CLASS_ALONE` answers for, and the only ones it learns from."""
    return (
        exc.__cause__ is None
        and not exc.__dict__
        and type(exc).__module__ == "builtins"
        and isinstance(exc, Exception)
    )


def _classify_one(exc: BaseException, now: Callable[[], float]) -> Classification:
    name = type(exc).__name__
    if isinstance(exc, ToolError):
        if exc.classification is not None:  # classified before (a replayed failure): keep it
            return exc.classification
        return Classification(
            exc.kind, exc.kind.default_class, _retryable(exc.kind, exc.kind.default_class),
            Rule.TOOL_ERROR, f"explicit ToolError kind {exc.kind}",
            exc.status_code, exc.retry_after_s, name,
        )  # fmt: skip

    if type(exc).__module__ == "builtins" and not getattr(exc, "__dict__", None):
        # A plain builtin exception carries no headers, body or status: skip those rules.
        headers, should_retry, retry_after, status = None, None, None, None
        decided, by_class_alone = _class_rule(exc)
        decided = decided or _by_message(exc)
    else:
        by_class_alone = False
        response = safe_attr(exc, "response")
        headers = _headers_of(exc, response)
        should_retry = _header(headers, "x-should-retry")
        retry_after = _retry_after(headers, now)
        status = _status_of(exc, response)
        decided = _by_body(exc, status, response) or _by_status(status) or _by_class(exc) or _by_message(exc)
    if decided is None:
        if retry_after is not None:
            decided = (K.EXECUTION_ERROR, _T, Rule.SERVER_ADVICE,
                       f"server asked to retry after {retry_after:g}s")  # fmt: skip
        else:
            decided = (K.EXECUTION_ERROR, _T, Rule.DEFAULT,
                       "no rule matched; unknown errors are transient "
                       "(the spec's safer default)")  # fmt: skip
    kind, error_class, rule, reason = decided
    if status is None and rule is Rule.MESSAGE_PATTERN:
        status = _message_status(_message_of(exc))  # so "treat 503 as permanent" applies

    if should_retry is not None and should_retry.strip().lower() in {"true", "false"}:
        advised = should_retry.strip().lower() == "true"
        error_class = _T if advised else _P
        reason = f"server advice x-should-retry: {should_retry.strip().lower()} ({reason})"
        rule = Rule.SERVER_ADVICE
    if retry_after is not None and rule is not Rule.SERVER_ADVICE:
        reason = f"{reason}; server asked to retry after {retry_after:g}s"
    result = Classification(
        kind, error_class, _retryable(kind, error_class), rule, reason, status, retry_after, name
    )
    if by_class_alone and _plain_builtin(exc):
        _BY_CLASS_ALONE[type(exc)] = result
    return result


def _retryable(kind: ErrorKind, error_class: ErrorClass) -> bool:
    return error_class is _T and kind is not K.CIRCUIT_OPEN


_Decision = tuple[ErrorKind, ErrorClass, Rule, str]


# --- rule 3: server advice -------------------------------------------------------------


def _headers_of(exc: BaseException, response: object) -> Mapping[str, str] | None:
    for holder in (exc, response):
        headers = safe_attr(holder, "headers") if holder is not None else None
        if headers is not None and hasattr(headers, "items"):
            try:
                return {str(k).lower(): str(v) for k, v in headers.items()}
            except Exception:
                return None
    return None


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    return headers.get(name) if headers else None


def _retry_after(headers: Mapping[str, str] | None, now: Callable[[], float]) -> float | None:
    if not headers:
        return None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now())
    except (TypeError, ValueError, IndexError):
        return None


# --- rule 4: error body ----------------------------------------------------------------

# Most specific first: OpenAI's ``code`` (billing_hard_limit_reached, model_not_found) refines its
# ``type`` (invalid_request_error); Google's ``status`` names a gRPC class.
_TOKEN_KEYS = ("code", "type", "status")


def _body_tokens(exc: BaseException, body: Mapping[str, Any] | None) -> tuple[list[str], str]:
    """String type/code tokens found on the error and in its body, and the body's message."""
    tokens: list[str] = []
    message = safe_attr(exc, "message")  # google-genai's APIError: .status, .message attributes
    message = message if isinstance(message, str) else ""
    for attr in _TOKEN_KEYS:
        value = safe_attr(exc, attr)
        if isinstance(value, str):
            tokens.append(value)
    layers: list[Any] = [body]
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        layers.append(body["error"])
    for layer in layers:
        if not isinstance(layer, Mapping):
            continue
        for key in _TOKEN_KEYS:
            value = layer.get(key)
            if isinstance(value, str) and value != "error":
                tokens.append(value)
        if isinstance(layer.get("message"), str):
            message = layer["message"]
    return [t.lower() for t in tokens], message


def _jsonrpc_code(exc: BaseException, body: Mapping[str, Any] | None) -> int | None:
    error = safe_attr(exc, "error")  # MCP's McpError / MCPError carry ErrorData
    code = safe_attr(error, "code") if error is not None else None
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    if body is not None:
        inner = body.get("error", body)
        code = inner.get("code") if isinstance(inner, Mapping) else None
        if isinstance(code, int) and not isinstance(code, bool) and code < 0:
            return code
    return None


def _by_body(exc: BaseException, status: int | None, response: object) -> _Decision | None:
    body, from_response = error_body(exc, response)
    source = " (read from the HTTP response)" if from_response else ""
    tokens, message = _body_tokens(exc, body)
    for token in tokens:
        kind = BODY_TYPES.get(token)
        if kind is None:
            continue
        if kind is K.RATE_LIMIT and token == "resource_exhausted" and DAILY_QUOTA.search(message):
            return (K.QUOTA_EXCEEDED, _P, Rule.BODY_TYPE,
                    "error body RESOURCE_EXHAUSTED names a quota: "
                    f"quotas do not reset on retry{source}")  # fmt: skip
        where = f" with status {status}" if status is not None else ""
        return (kind, kind.default_class, Rule.BODY_TYPE,
                f"error body type {token!r}{where} means {kind}{source}")  # fmt: skip
    code = _jsonrpc_code(exc, body)
    if code is not None:
        kind = JSONRPC_CODES.get(code)
        if kind is None and -32099 <= code <= -32000:
            kind = K.TRANSPORT_ERROR
        if kind is not None:
            return (kind, kind.default_class, Rule.BODY_TYPE,
                    f"JSON-RPC error code {code} means {kind}{source}")  # fmt: skip
    return None


# --- rule 5: status code ---------------------------------------------------------------


def _as_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _status_of(exc: BaseException, response: object) -> int | None:
    for attr in ("status_code", "status", "http_status"):
        if (status := _as_status(safe_attr(exc, attr))) is not None:
            return status
    if response is not None:
        for attr in ("status_code", "status"):
            if (status := _as_status(safe_attr(response, attr))) is not None:
                return status
    if type(exc).__name__ == "HTTPError":  # urllib's HTTPError keeps the status in .code
        return _as_status(safe_attr(exc, "code"))
    return None


def _by_status(status: int | None) -> _Decision | None:
    if status is None or status < 400:
        return None
    kind = STATUS_KINDS.get(status)
    if kind is not None:
        error_class = _T if status in TRANSIENT_STATUSES else _P
        return (kind, error_class, Rule.STATUS_CODE,
                f"HTTP {status} is {error_class} ({kind})")  # fmt: skip
    if status < 500:
        return (K.INVALID_PARAMETERS, _P, Rule.STATUS_CODE,
                f"HTTP {status} is a client error: permanent")  # fmt: skip
    return (K.SERVICE_UNAVAILABLE, _T, Rule.STATUS_CODE,
            f"HTTP {status} is a server error: transient")  # fmt: skip


# --- rule 6: exception class -----------------------------------------------------------


def _by_class(exc: BaseException) -> _Decision | None:
    return _class_rule(exc)[0]


def _class_rule(exc: BaseException) -> tuple[_Decision | None, bool]:
    """Rule 6, and whether the class alone decided it (no instance attribute was read)."""
    alone = True
    for cls in type(exc).__mro__:
        if cls is Exception:
            break
        match = QUALIFIED_CLASS_NAMES.get(f"{cls.__module__}.{cls.__qualname__}") or CLASS_NAMES.get(
            cls.__name__
        )
        if match is None and cls is OSError:
            alone = False  # the errno decides, or at least was read
            code = safe_attr(exc, "errno")
            if isinstance(code, int) and code in ERRNO_KINDS:
                kind = ERRNO_KINDS[code]
                name = errno.errorcode.get(code, code)
                return (kind, kind.default_class, Rule.EXCEPTION_CLASS,
                        f"OSError errno {name} means {kind}"), False  # fmt: skip
        if match is not None:
            kind, forced = match
            error_class = forced or kind.default_class
            via = "" if cls is type(exc) else f" (as {cls.__name__})"
            return (kind, error_class, Rule.EXCEPTION_CLASS,
                    f"exception class {type(exc).__name__}{via} means {kind}"), alone  # fmt: skip
    return None, False


# --- rule 7: message patterns ----------------------------------------------------------


def _message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        return ""
    return text[:2000]


def _by_message(exc: BaseException) -> _Decision | None:
    message = _message_of(exc)
    if not message:
        return None
    for pattern, kind in PATTERNS_BEFORE_STATUS:
        if m := pattern.search(message):
            return _pattern_decision(kind, m)
    if (status := _message_status(message)) is not None and (decided := _by_status(status)):
        kind, error_class, _, _ = decided
        return (kind, error_class, Rule.MESSAGE_PATTERN,
                f"message mentions HTTP {status}: {error_class} ({kind})")  # fmt: skip
    for pattern, kind in PATTERNS_AFTER_STATUS:
        if m := pattern.search(message):
            return _pattern_decision(kind, m)
    return None


def _message_status(message: str) -> int | None:
    """The first error status (4xx/5xx) a message states, as in "Rate limit exceeded (429)"."""
    for m in EMBEDDED_STATUS.finditer(message):
        status = int(m.group(1) or m.group(2))
        if status <= 599 and _by_status(status) is not None:  # "(777)" is no HTTP status
            return status
    return None


def _pattern_decision(kind: ErrorKind, match: re.Match[str]) -> _Decision:
    text = match.group(0).lower()
    return (kind, kind.default_class, Rule.MESSAGE_PATTERN,
            f"message matches {text!r}: {kind.default_class} ({kind})")  # fmt: skip


# --- manifest overrides ----------------------------------------------------------------


def _exception_names(error: BaseException) -> set[str]:
    names: set[str] = set()
    for link in _cause_chain(error):
        for cls in type(link).__mro__:
            names.add(cls.__name__)
            names.add(f"{cls.__module__}.{cls.__qualname__}")
    return names


def _apply_overrides(
    result: Classification,
    error: BaseException,
    overrides: Sequence[ClassificationOverride],
    tool_id: str,
) -> Classification:
    names: set[str] | None = None
    for override in overrides:
        if override.status_code is not None:
            hit = result.status_code == override.status_code
            what = f"status {override.status_code}"
        elif override.kind is not None:
            hit = result.kind is override.kind
            what = f"kind {override.kind}"
        else:
            if names is None:
                names = _exception_names(error)
            hit = override.exception in names
            what = f"exception {override.exception}"
        if not hit:
            continue
        kind = override.as_kind or result.kind
        error_class = override.treat_as
        why = f": {override.reason}" if override.reason else ""
        return replace(
            result,
            kind=kind,
            error_class=error_class,
            retryable=_retryable(kind, error_class),
            rule=Rule.MANIFEST_OVERRIDE,
            reason=(
                f"manifest override for {tool_id}: {what} treated as {error_class}{why} "
                f"(was {result.error_class}: {result.reason})"
            ),
        )
    return result
