"""What the classifier answers (:class:`Classification`, with the :class:`Rule` that decided)
and what a manifest may say to override it (:class:`ClassificationOverride`).

Plain data with no dependency on the rules, so :mod:`engine.errors` can name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.kinds import ErrorClass, ErrorKind

__all__ = ["Classification", "ClassificationOverride", "Rule"]


class Rule(StrEnum):
    """Which rule decided; ordered strongest first."""

    REFUSAL = "refusal"
    """Not classified at all: one of the tool's strategies refused the call before any attempt
    (a full bulkhead); its reason is the strategy's own words."""
    CANCELLATION = "cancellation"
    TOOL_ERROR = "tool_error"
    SERVER_ADVICE = "server_advice"
    BODY_TYPE = "body_type"
    STATUS_CODE = "status_code"
    EXCEPTION_CLASS = "exception_class"
    MESSAGE_PATTERN = "message_pattern"
    DEFAULT = "default"
    MANIFEST_OVERRIDE = "manifest_override"


@dataclass(frozen=True, slots=True)
class Classification:
    kind: ErrorKind
    error_class: ErrorClass
    retryable: bool
    rule: Rule
    reason: str
    status_code: int | None = None
    retry_after_s: float | None = None
    error_type: str | None = None
    """Class name of the exception that decided."""

    @property
    def transient(self) -> bool:
        return self.error_class is ErrorClass.TRANSIENT

    @property
    def is_failure(self) -> bool:
        """False for cancellation, which propagates and is never a tool failure."""
        return self.rule is not Rule.CANCELLATION

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "class": str(self.error_class),
            "retryable": self.retryable,
            "rule": str(self.rule),
            "reason": self.reason,
            "status_code": self.status_code,
            "retry_after_s": self.retry_after_s,
            "error_type": self.error_type,
        }


class ClassificationOverride(BaseModel):
    """A manifest rule: "treat 503 as permanent for this tool" (spec-map classify.manifest-override).

    Exactly one of ``status_code``, ``kind`` or ``exception`` (a class name, matched along
    the MRO and the cause chain) selects the errors it applies to.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    status_code: int | None = Field(default=None, ge=100, le=599)
    kind: ErrorKind | None = None
    exception: str | None = Field(default=None, min_length=1)
    treat_as: ErrorClass
    as_kind: ErrorKind | None = None
    reason: str | None = None

    @model_validator(mode="after")
    def _one_matcher(self) -> Self:
        given = [n for n in ("status_code", "kind", "exception") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of status_code, kind or exception")
        return self
