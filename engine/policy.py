"""What a manifest sets for a tool: :class:`ToolPolicy` (``defaults.yaml`` holds one) and
:class:`ToolManifest` (one tool's, with its identity).

The backbone's fields (``timeout_ms``, ``retry_policy``, ``circuit_breaker``…) are declared here;
every other strategy's section (``bulkhead``, ``retry_budget``…) is validated by that strategy's
own options model (:mod:`engine.strategies.sections`) and kept in :attr:`ToolPolicy.strategies`,
so a strategy added to :mod:`engine.strategies.registry` is configurable with no edit here.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from engine.classify import ClassificationOverride
from engine.config import DAY_MS, NOT_BOOL
from engine.side_effect import SideEffect
from engine.strategies.base import StrategyOptions
from engine.strategies.breaker.machine import BreakerConfig
from engine.strategies.retry.policy import RetryPolicy
from engine.strategies.sections import dump_sections, validate_with_sections

TOOL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


SecretField = Annotated[str, Field(min_length=1, max_length=200, pattern=r"\S")]


class ToolPolicy(BaseModel):
    """Everything a manifest can set besides identity; ``defaults.yaml`` holds one of these."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    timeout_ms: Annotated[float, NOT_BOOL] = Field(default=30_000.0, gt=0, le=DAY_MS)
    idle_timeout_ms: Annotated[float, NOT_BOOL] | None = Field(default=None, gt=0, le=DAY_MS)
    """Cut an attempt off after this long without progress (:func:`engine.report_progress`, MCP
    progress notifications); each report pushes the deadline back, never past ``timeout_ms``.
    None: no idle window."""
    retry_policy: RetryPolicy = RetryPolicy()
    circuit_breaker: BreakerConfig = BreakerConfig()
    classification: tuple[ClassificationOverride, ...] = ()
    alternatives: tuple[str, ...] = ()
    side_effect: SideEffect = SideEffect.IDEMPOTENT
    """Defaults to idempotent for manifests built in code; a manifest file must state it."""
    retry_ambiguous: bool = False
    """Allow retrying a side-effecting call after an ambiguous failure (timeout, reset)."""
    secret_fields: tuple[SecretField, ...] = ()
    """More field names whose values events never hold (see :mod:`engine.redaction`)."""
    strategies: dict[str, StrategyOptions] = Field(default_factory=dict, exclude=True)
    """The other strategies' sections by name (``bulkhead``, ``retry_budget``…), validated by each
    strategy's options; set them as top-level keys, as a manifest file does."""

    @model_validator(mode="wrap")
    @classmethod
    def _strategy_sections(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        return validate_with_sections(data, handler, cls.__name__)

    @model_serializer(mode="wrap")
    def _with_sections(self, handler: Callable[[Any], Any], info: SerializationInfo) -> Any:
        out = handler(self)
        if self.strategies and isinstance(out, dict):
            out.update(dump_sections(self.strategies, info.mode))
        return out

    def __hash__(self) -> int:  # the sections' dict is not hashable: hash what identifies a policy
        return hash(self.model_dump_json())

    @field_validator("idle_timeout_ms")
    @classmethod
    def _idle_below_timeout(cls, value: float | None, info: ValidationInfo) -> float | None:
        timeout_ms = info.data.get("timeout_ms")
        if value is not None and timeout_ms is not None and value >= timeout_ms:
            raise ValueError(f"must be less than timeout_ms ({timeout_ms:g}), the hard cap")
        return value


class ToolManifest(ToolPolicy):
    id: str = Field(pattern=TOOL_ID_PATTERN)
    description: str = ""

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0


__all__ = ["TOOL_ID_PATTERN", "SecretField", "SideEffect", "ToolManifest", "ToolPolicy"]
