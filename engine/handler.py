"""Decisions the engine takes after a failure, and why."""

from __future__ import annotations

from enum import StrEnum


class Decision(StrEnum):
    RETRY = "retry"
    ALTERNATIVE = "alternative"
    PARTIAL_SUCCESS = "partial_success"
    ESCALATE = "escalate"
    FAIL_GRACEFULLY = "fail_gracefully"
