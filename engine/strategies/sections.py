"""Strategy sections in manifests: each registered strategy's section validated by its own options
model, its problems reported at their own field path (``tool.bulkhead.max_concurrent``) and line.

Internal: the engine's machinery (:mod:`engine.policy` and :mod:`engine.manifest` use it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from engine.strategies import registry
from engine.strategies.base import StrategyOptions


def take_sections(
    data: Mapping[str, Any], known: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, StrategyOptions], list[InitErrorDetails]]:
    """``data`` without the sections of ``known`` strategies, those sections validated, and the
    problems found in them (locations relative to ``data``)."""
    rest = dict(data)
    options: dict[str, StrategyOptions] = {}
    problems: list[InitErrorDetails] = []
    for section, strategy in known.items():
        if section not in rest:
            continue
        value = rest.pop(section)
        if value is None:
            continue
        if isinstance(value, strategy.options_type):
            options[section] = value
            continue
        try:
            options[section] = strategy.options_type.model_validate(value)
        except ValidationError as exc:
            problems += relocated(exc, (section,))
    return rest, options, problems


def relocated(exc: ValidationError, prefix: tuple[str | int, ...]) -> list[InitErrorDetails]:
    """``exc``'s problems with ``prefix`` before each location, ready to raise again."""
    return [
        InitErrorDetails(
            type=err["type"],
            loc=(*prefix, *err["loc"]),
            input=err["input"],
            ctx=err.get("ctx", {}),
        )
        for err in exc.errors()
    ]


def validate_with_sections(data: Any, handler: Callable[[Any], Any], title: str) -> Any:
    """A policy's wrap validator: registered strategy sections become its ``strategies`` field."""
    if not isinstance(data, Mapping):
        return handler(data)
    rest, options, problems = take_sections(data, registry.sections())
    if options or "strategies" in rest:
        given = rest.get("strategies") or {}
        rest["strategies"] = {**given, **options} if isinstance(given, Mapping) else given
    try:
        validated = handler(rest)
    except ValidationError as exc:
        problems += relocated(exc, ())
    else:
        problems += _refused(options, validated, data)
    if problems:
        raise ValidationError.from_exception_data(title, problems)
    return validated


def _refused(
    options: Mapping[str, StrategyOptions], policy: Any, data: Mapping[str, Any]
) -> list[InitErrorDetails]:
    """The sections the validated ``policy`` may not have (:meth:`Strategy.refuse_policy`)."""
    known = registry.sections()
    problems = []
    for section, section_options in options.items():
        reason = known[section].refuse_policy(section_options, policy)
        if reason is not None:
            problems.append(
                InitErrorDetails(
                    type=PydanticCustomError("section_refused", "{reason}", {"reason": reason}),
                    loc=(section,), input=data.get(section),
                )
            )  # fmt: skip
    return problems


T = TypeVar("T")


def inheriting(validate: Callable[[Any], T], tool: Any, own: Collection[str]) -> T:
    """``validate(tool)``, a tool's policy merged with the defaults; a strategy section the tool
    refuses (:meth:`Strategy.refuse_policy`) that it did not set itself (not in ``own``) is left
    out rather than refused: a section in the defaults is a default for the tools it suits
    (``hedging`` for the read-only ones)."""
    try:
        return validate(tool)
    except ValidationError as exc:
        refused = {str(e["loc"][-1]) for e in exc.errors() if e["type"] == "section_refused" and e["loc"]}
        inherited = refused - set(own)
        if not inherited or not isinstance(tool, Mapping):
            raise
        return validate({key: value for key, value in tool.items() if key not in inherited})


def dump_sections(strategies: Mapping[str, StrategyOptions], mode: str) -> dict[str, Any]:
    """The sections as a manifest file writes them (top-level keys beside ``timeout_ms``)."""
    return {section: options.model_dump(mode=mode) for section, options in strategies.items()}
