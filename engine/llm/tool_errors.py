"""The structured tool failure (:class:`ToolExecutionError`) and its registry (spec-map llm.registry).

Every failed call the executor answers becomes a :class:`ToolExecutionError` — its kind from
:func:`engine.classify`, its ``error_type`` the root exception's class name — and is counted in a
:class:`ToolErrorRegistry` under ``"tool:ErrorType"``.
"""

from __future__ import annotations

import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

from engine.classify import classify
from engine.errors import ToolError


def root_error_type(error: BaseException) -> str:
    """The class name of the exception at the root; a bare ToolError names its kind."""
    link: BaseException = error
    while type(link) is ToolError and link.original_error is not None:
        link = link.original_error
    if type(link) is ToolError:
        return str(link.kind)
    if isinstance(link, ToolExecutionError):
        return link.error_type
    return type(link).__name__


class ToolExecutionError(ToolError):
    """Structured tool failure (spec-map llm.tool-execution-error), its kind from :func:`engine.classify`."""

    def __init__(
        self,
        tool_name: str,
        original_error: BaseException,
        tool_input: Any = None,
        message: str | None = None,
        *,
        error_type: str | None = None,
        at: float | None = None,
    ) -> None:
        classification = classify(original_error)
        inner = original_error if isinstance(original_error, ToolError) else None
        if not message:
            message = inner.message if inner is not None else str(original_error)
        if at is None:
            at = inner.at if inner is not None and inner.at is not None else time.time()
        super().__init__(
            classification.kind,
            message or type(original_error).__name__,
            tool_id=tool_name,
            original_error=original_error,
            tool_input=tool_input,
            status_code=classification.status_code,
            retry_after_s=classification.retry_after_s,
            at=at,
            classification=classification,
            attempts=inner.attempts if inner is not None else 0,
            executed=inner.executed if inner is not None else None,  # a call's: from all its attempts
        )
        self._error_type = error_type or root_error_type(original_error)

    @property
    def error_type(self) -> str:
        """The original exception's class name, or the kind if the call never ran (spec-map llm.registry)."""
        return self._error_type

    def to_dict(self) -> dict[str, Any]:
        return {"tool_name": self.tool_name, **super().to_dict()}

    def __repr__(self) -> str:
        return f"ToolExecutionError({self.tool_name!r}, {self.error_type}, {self.message!r})"


class ToolErrorRegistry:
    """The error registry (spec-map llm.registry): entries by ``"tool:ErrorType"``, with counts.

    Counts are exact; at most ``max_entries`` of the newest entries are kept per key.
    """

    def __init__(self, *, max_entries: int = 1000) -> None:
        self.max_entries = max_entries
        self._counts: dict[str, int] = {}
        self._entries: dict[str, deque[dict[str, str]]] = {}
        self._keys_by_tool: dict[str, dict[str, None]] = {}

    def record_error(self, tool_name: str, error: BaseException) -> None:
        """Record one failure: ``{timestamp (ISO), error_type, error_message}``."""
        error_type = root_error_type(error)
        key = f"{tool_name}:{error_type}"
        at = error.timestamp if isinstance(error, ToolError) else None
        entry = {
            "timestamp": (at or datetime.now(UTC)).isoformat(),
            "error_type": error_type,
            "error_message": str(error),
        }
        self._counts[key] = self._counts.get(key, 0) + 1
        self._entries.setdefault(key, deque(maxlen=self.max_entries)).append(entry)
        self._keys_by_tool.setdefault(tool_name, {})[key] = None

    def get_error_summary(self) -> dict[str, int]:
        """``{"tool:ErrorType": count}`` in first-seen order."""
        return dict(self._counts)

    def get_errors_for_tool(self, tool_name: str) -> dict[str, list[dict[str, str]]]:
        """``{"tool:ErrorType": [entries]}`` for one tool."""
        return {key: list(self._entries[key]) for key in self._keys_by_tool.get(tool_name, {})}

    def clear(self) -> None:
        self._counts.clear()
        self._entries.clear()
        self._keys_by_tool.clear()
