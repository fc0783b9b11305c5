"""The fault plan: which steps govern which attempts, seeded chaos, and loading it from YAML.

A plan file's problems are :class:`FaultPlanError` issues, one line each
(``file:line: steps[1].sequence[0].field: message``), located the way every configuration
file is (:func:`engine.config.nearest_line`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engine.config import ConfigError, ConfigIssue, nearest_line, read_yaml
from engine.faults.models import (
    CHAOS_FAULT_TYPES,
    FAULT_TYPES,
    FIELDS_BY_TYPE,
    BaseFault,
    ChaosFaultType,
    Fault,
)
from engine.manifest import TOOL_ID_PATTERN

__all__ = [
    "ChaosConfig",
    "FaultPlan",
    "FaultPlanError",
    "FaultStep",
    "MatchLevel",
    "StepMatch",
    "load_fault_plan",
]

MatchLevel = Literal["call_id", "call", "tool"]
"""How specific a step's match is, most specific first: the most specific matching step wins."""


class StepMatch(BaseModel):
    """Which attempts a step governs: ``{tool}``, ``{tool, call}`` or ``{turn, call_id}``.

    A ``{turn, call_id}`` match may also name a ``tool``: without one it governs every tool
    that serves the call (an alternative included), with one only that tool.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str | None = Field(default=None, pattern=TOOL_ID_PATTERN)
    call: int | None = Field(default=None, ge=1)
    """The tool's call ordinal, 1-based, as the engine assigns it at launch."""
    turn: str | None = Field(default=None, min_length=1)
    call_id: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_shape(self) -> StepMatch:
        shapes = "give {tool}, {tool, call} or {turn, call_id} (optionally with tool)"
        if self.tool is None and self.call is None and self.turn is None and self.call_id is None:
            raise ValueError(f"empty match: {shapes}")
        if (self.turn is None) != (self.call_id is None):
            raise ValueError(f"turn and call_id go together: {shapes}")
        if self.turn is not None and self.call is not None:
            raise ValueError(f"a {{turn, call_id}} match takes no call ordinal: {shapes}")
        if self.call is not None and self.tool is None:
            raise ValueError(f"call needs tool: {shapes}")
        return self

    @property
    def level(self) -> MatchLevel:
        """How specific the match is; ``call_id`` beats ``call`` beats ``tool``."""
        if self.call_id is not None:
            return "call_id"
        return "call" if self.call is not None else "tool"

    def describe(self) -> str:
        if self.call_id is not None:
            tool = f", tool: {self.tool}" if self.tool is not None else ""
            return f"{{turn: {self.turn}, call_id: {self.call_id}{tool}}}"
        if self.call is not None:
            return f"{{tool: {self.tool}, call: {self.call}}}"
        return f"{{tool: {self.tool}}}"


class FaultStep(BaseModel):
    """A match and the sequence of faults (or successes) for the attempts it governs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    match: StepMatch
    sequence: tuple[Fault, ...] = Field(min_length=1)
    repeat: bool = False
    """After the sequence ends, repeat its last element (default: the real tool, or chaos)."""


Rate = Annotated[float, Field(ge=0.0, le=1.0)]


class ChaosConfig(BaseModel):
    """Seeded random faults for soak runs: a probability per attempt for each fault type.

    Fault parameters come from ``defaults``; a rated type whose parameters are required
    (``http_error``'s status code, ``timeout``'s ``after_ms``…) must have them there.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    rates: dict[ChaosFaultType, Rate]
    defaults: dict[ChaosFaultType, Fault] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _defaults_per_rated_type(cls, data: Any) -> Any:
        """Every rated type gets a defaults entry, and each entry its ``type`` (the key)."""
        if not isinstance(data, Mapping):
            return data
        rates, defaults = data.get("rates"), data.get("defaults")
        if defaults is None:
            defaults = {}
        if not isinstance(rates, Mapping) or not isinstance(defaults, Mapping):
            return data
        filled = dict(defaults)
        for fault_type in rates:
            if fault_type in CHAOS_FAULT_TYPES and fault_type not in filled:
                filled[fault_type] = {}
        for key, value in filled.items():
            if key in CHAOS_FAULT_TYPES and isinstance(value, Mapping) and "type" not in value:
                filled[key] = {**value, "type": key}
        return {**data, "defaults": filled}

    @field_validator("rates")
    @classmethod
    def _rates_add_up(cls, rates: dict[str, float]) -> dict[str, float]:
        total = sum(rates.values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"rates add up to {total:g}; one draw per attempt needs at most 1")
        return rates

    @field_validator("defaults")
    @classmethod
    def _defaults_match_rates(
        cls, defaults: dict[str, BaseFault], info: ValidationInfo
    ) -> dict[str, BaseFault]:
        for key, fault in defaults.items():
            if fault.type != key:
                raise ValueError(f"{key}: type {fault.type!r} differs from its key (leave type out)")
            if "rates" in info.data and key not in info.data["rates"]:
                raise ValueError(f"{key} has no rate in chaos.rates")
        return defaults


class FaultPlan(BaseModel):
    """A validated fault plan; load one with :func:`load_fault_plan` or :meth:`from_dict`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    steps: tuple[FaultStep, ...] = ()
    chaos: ChaosConfig | None = None

    @model_validator(mode="after")
    def _distinct_matches(self) -> FaultPlan:
        first: dict[StepMatch, int] = {}
        for index, step in enumerate(self.steps):
            if step.match in first:
                raise PydanticCustomError(
                    "duplicate_match",
                    "same match as steps[{first}] ({match}): one step per tool, call or call id",
                    {"step": index, "first": first[step.match], "match": step.match.describe()},
                )
            first[step.match] = index
        return self

    @property
    def tools(self) -> frozenset[str]:
        """Tool ids named by the plan's steps (to check against the registered tools)."""
        return frozenset(s.match.tool for s in self.steps if s.match.tool is not None)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<inline>") -> FaultPlan:
        """Validate a plan: the file's mapping (``{"fault_plan": {...}}``) or the plan itself.

        Raises :class:`FaultPlanError` naming ``source``, the step and the field.
        """
        if not (isinstance(data, Mapping) and "fault_plan" in data):
            data = {"fault_plan": data}
        return _validate(data, source, {})


class _PlanFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fault_plan: FaultPlan


class FaultPlanError(ConfigError):
    """Problems in a fault plan; each is one line: ``file:line: steps[1].sequence[0].field: message``."""

    what = "fault plan"


def load_fault_plan(path: str | Path) -> FaultPlan:
    """Load and validate a fault plan file (safe YAML); raises :class:`FaultPlanError`."""
    path = Path(path)
    try:
        parsed = read_yaml(path, "fault_plan", FaultPlanError)
    except FaultPlanError as exc:
        raise FaultPlanError(
            replace(issue, field=_YAML_INDEX.sub(r"[\1]", issue.field.removeprefix("fault_plan.")))
            for issue in exc.issues
        ) from None
    return _validate(parsed.raw, str(path), parsed.lines)


Loc = tuple[str | int, ...]
_YAML_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
"""``steps.1.match`` as the YAML line index spells a path: shown as ``steps[1].match``."""


def _validate(data: Any, source: str, lines: Mapping[Loc, int]) -> FaultPlan:
    try:
        return _PlanFile.model_validate(data).fault_plan
    except ValidationError as exc:
        raise FaultPlanError(_issues(exc, source, lines)) from None


def _strip_tags(loc: Loc) -> tuple[Loc, str | None]:
    """Drop pydantic's union tags (``sequence.0.http_error.status_code``); return the fault type."""
    out: list[str | int] = []
    tag = None
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        previous = loc[i - 1] if i else None
        is_tag = (
            isinstance(part, str)
            and part in FAULT_TYPES
            and (isinstance(previous, int) or (previous == part and i >= 2 and loc[i - 2] == "defaults"))
        )
        if is_tag:
            tag = str(part)
        else:
            out.append(part)
    return tuple(out), tag


def _field_name(loc: Loc) -> str:
    shown = loc[1:] if len(loc) > 1 and loc[0] == "fault_plan" else loc
    text = ""
    for part in shown:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    if loc[:3] == ("fault_plan", "chaos", "defaults") and len(loc) >= 4 and loc[:4] not in lines:
        # defaults filled in for a rated type: point at its rate
        rate_line = lines.get(("fault_plan", "chaos", "rates", loc[3]))
        if rate_line is not None:
            return rate_line
    return nearest_line(loc, lines)


def _issues(exc: ValidationError, source: str, lines: Mapping[Loc, int]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    expected = ", ".join(FAULT_TYPES)
    errors = exc.errors()
    failed = [tuple(err["loc"]) for err in errors]
    for err in errors:
        raw_loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        kind = err["type"]
        if kind == "too_short" and any(
            len(f) > len(raw_loc) and f[: len(raw_loc)] == raw_loc for f in failed
        ):
            continue  # pydantic counts only the valid items: the items' own errors say it all
        loc, tag = _strip_tags(raw_loc)
        message = err["msg"].removeprefix("Value error, ")
        if kind == "duplicate_match":
            loc = (*loc, "steps", err["ctx"]["step"], "match")
        elif kind == "extra_forbidden":
            valid = FIELDS_BY_TYPE.get(tag or "")
            message = (
                f"unknown key ({tag} takes {', '.join(valid) or 'no parameters'})"
                if valid is not None
                else "unknown key"
            )
        elif kind == "missing":
            message = "required"
        elif kind == "union_tag_invalid":
            message = f"unknown fault type {err['ctx']['tag']!r}; expected one of: {expected}"
            loc = (*loc, "type")
        elif kind == "union_tag_not_found":
            message = f"missing 'type'; expected one of: {expected}"
        elif kind == "model_attributes_type" and len(loc) >= 2 and loc[-2] == "sequence":
            message = f"a fault is a mapping with a 'type' (one of: {expected})"
        field_name = _field_name(loc)
        if field_name in seen:
            continue  # e.g. an unknown chaos type fails as a key and as a value
        seen.add(field_name)
        issues.append(ConfigIssue(source, _line_of(loc, lines), field_name, message))
    return issues
