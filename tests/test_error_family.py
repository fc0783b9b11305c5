"""One error family: every error tripwire raises is a TripwireError, and still what it was before.

The classes are found by importing every module of ``engine`` and ``console``, so an error added
later without the base fails here. The provider look-alikes of ``engine.faults`` stand in for
other libraries' exceptions and stay outside the family.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import console
import engine
from engine import TripwireError
from engine.classify import classify
from engine.config import ConfigIssue
from engine.errors import ToolError
from engine.kinds import ErrorKind

OLD_BASES: dict[str, tuple[str, ...]] = {
    "ToolError": ("Exception",),
    "ToolExecutionError": ("ToolError",),
    "TurnError": ("ValueError",),
    "ConfigError": ("Exception",),
    "ManifestError": ("ConfigError",),
    "FaultPlanError": ("ConfigError",),
    "ScenarioError": ("ConfigError",),
    "TraceStoreError": ("Exception",),
    "TurnNotPersisted": ("TraceStoreError",),
    "StoreWriteError": ("TraceStoreError",),
    "CommandKeyError": ("TraceStoreError",),
    "ExportRefused": ("Exception",),
    "ReplayError": ("Exception",),
    "CommandFailed": ("Exception",),
    "UsageError": ("Exception",),
    "ProjectExists": ("Exception",),
    "WorkloadError": ("Exception",),
    "MCPNotSent": ("ToolError",),
    "ToolCallFailed": ("Exception",),
    "FleetConfigError": ("ValueError",),
    "CommandConflict": ("RuntimeError",),
}
"""Each library error's direct bases before the family existed (TripwireError aside)."""

PROVIDER_LOOK_ALIKES = {
    "APIStatusError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "UnprocessableEntityError",
    "RateLimitError",
    "InternalServerError",
    "LengthFinishReasonError",
    "RemoteProtocolError",
}

TOOL_SIDE = {"MCPToolError", "MCPErrorResult"}
"""Raised for a tool's own failure (an MCP ``isError`` result, or pydantic-ai's MCP toolset's word
for one), for the classifier to read as any tool's error text: not the library's error, so not a
TripwireError."""

ISSUES = [ConfigIssue("tools.yaml", 3, "retry_policy", "must be a mapping")]
BUILDERS: dict[str, Callable[[Any], BaseException]] = {
    "ToolError": lambda cls: cls(ErrorKind.TIMEOUT, "slow", tool_id="search"),
    "ToolExecutionError": lambda cls: cls("search", TimeoutError("slow")),
    "TurnError": lambda cls: cls(["the turn has no calls"]),
    "ConfigError": lambda cls: cls(ISSUES),
    "ManifestError": lambda cls: cls(ISSUES),
    "FaultPlanError": lambda cls: cls(ISSUES),
    "ScenarioError": lambda cls: cls(ISSUES),
    "TraceStoreError": lambda cls: cls("traces.db", "database is locked"),
    "TurnNotPersisted": lambda cls: cls("traces.db", "disk full", SimpleNamespace(turn_id="t1")),
    "StoreWriteError": lambda cls: cls("traces.db", "write failed: disk full", "full"),
    "CommandKeyError": lambda cls: cls("traces.db", "no command key"),
    "ExportRefused": lambda cls: cls("out.jsonl", "exists", remedy="force"),
    "MCPNotSent": lambda cls: cls("search", "the connection is closed"),
    "ToolCallFailed": lambda cls: cls("Tool Execution Failed", ToolError(ErrorKind.TIMEOUT, "slow")),
}
"""How to make each error as the library does; the others take one message."""


def _modules(package: ModuleType) -> list[ModuleType]:
    names = [package.__name__]
    names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return [importlib.import_module(name) for name in names if not name.endswith("__main__")]


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _modules(engine) + _modules(console):
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[obj.__name__] = obj
    return found


CLASSES = _exception_classes()
NOT_OURS = PROVIDER_LOOK_ALIKES | TOOL_SIDE | {"TripwireError"}
FAMILY = {name: cls for name, cls in CLASSES.items() if name not in NOT_OURS}


def _make(cls: type[BaseException]) -> BaseException:
    build = BUILDERS.get(cls.__name__)
    return build(cls) if build is not None else cls("one line")


def test_every_error_is_known_and_the_look_alikes_are_the_providers() -> None:
    assert set(FAMILY) == set(OLD_BASES), "a new error needs its old bases listed (OLD_BASES)"
    for name in PROVIDER_LOOK_ALIKES:
        assert CLASSES[name].__module__.startswith("engine.faults")
        assert not issubclass(CLASSES[name], TripwireError), f"{name} must look like the provider's own"
    for name in TOOL_SIDE:
        assert not issubclass(CLASSES[name], TripwireError), f"{name} is the tool's failure, not tripwire's"


@pytest.mark.parametrize("name", sorted(OLD_BASES))
def test_each_error_is_a_tripwire_error_and_what_it_was(name: str) -> None:
    cls = FAMILY[name]
    error = _make(cls)
    assert isinstance(error, TripwireError)
    assert tuple(b.__name__ for b in cls.__bases__ if b is not TripwireError) == (
        () if OLD_BASES[name] == ("Exception",) else OLD_BASES[name]
    )
    for base in OLD_BASES[name]:
        assert any(isinstance(error, klass) for klass in cls.__mro__ if klass.__name__ == base)
    with pytest.raises(TripwireError) as caught:
        raise error
    assert caught.value is error


def _without_family_base(cls: type[BaseException], made: dict[type, type]) -> type:
    """``cls`` as it was before: same name, module and ancestry, without TripwireError."""
    if cls not in made:
        if cls is TripwireError or not issubclass(cls, TripwireError):
            return cls
        bases = tuple(_without_family_base(b, made) for b in cls.__bases__ if b is not TripwireError)
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        made[cls] = type(cls.__name__, bases or (Exception,), namespace)
    return made[cls]


@pytest.mark.parametrize("message", ["", "one line", "rate limit exceeded (429)", "connection refused"])
@pytest.mark.parametrize("name", sorted(set(OLD_BASES) - {"ToolError", "ToolExecutionError", "MCPNotSent"}))
def test_the_classifier_decides_as_before_the_base(name: str, message: str) -> None:
    cls = FAMILY[name]
    before = _without_family_base(cls, {})
    assert [k.__name__ for k in before.__mro__] == [k.__name__ for k in cls.__mro__ if k is not TripwireError]
    now: BaseException = BaseException.__new__(cls)
    then: BaseException = BaseException.__new__(before)
    for error in (now, then):
        BaseException.__init__(error, message)
    assert classify(now) == classify(then)


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_a_tool_error_is_still_decided_by_its_kind(kind: ErrorKind) -> None:
    decided = classify(ToolError(kind, "x"))
    assert decided.kind is kind
    assert decided.error_type == "ToolError"
