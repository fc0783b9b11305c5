"""The library's errors: one family under :class:`TripwireError`, and :class:`ToolError`, the one
exception the engine raises for a failed tool call.

Tools may raise ``ToolError`` themselves to state a kind explicitly (the classifier's rule 2); the
engine raises a fresh one, carrying the last attempt's exception, when a call fails.

``except TripwireError`` catches every error tripwire itself raises. Each class keeps the bases it
had before the family existed (``TurnError`` is still a ``ValueError``), so older ``except``
clauses still catch what they caught::

    TripwireError(Exception)                      engine.errors
    ├── ToolError                                 engine.errors    a failed tool call
    │   └── ToolExecutionError                    engine.llm       spec-map llm.tool-execution-error
    ├── TurnError (also a ValueError)             engine.turn      a turn that cannot run
    ├── ConfigError                               engine.config    a configuration file's problems
    │   ├── ManifestError                         engine.manifest
    │   ├── FaultPlanError                        engine.faults
    │   └── ScenarioError                         engine.scenario
    ├── TraceStoreError                           engine.errors    a store that cannot be opened or used
    │   ├── TurnNotPersisted                      engine.errors    the turn ran, the store failed it
    │   ├── StoreWriteError                       engine.store     a write the store refused
    │   └── CommandKeyError                       engine.store     an unusable command key
    ├── ExportRefused                             engine.store     an export that would destroy something
    ├── ReplayError                               engine.replay    a turn that cannot be replayed
    └── the console's own
        ├── CommandFailed                         console.attach   the engine refused an operator command
        ├── UsageError                            console.usage    bad command-line input
        ├── ProjectExists                         console.cli.init tripwire init would overwrite
        └── WorkloadError                         console.host     a --workload that cannot be loaded

Outside the family on purpose: the provider look-alike exceptions of :mod:`engine.faults`
(``RateLimitError``, ``APIStatusError``, …) stand in for other libraries' errors, which a fault
plan raises as if a provider had; the classifier reads them by class name like the real ones.
``TripwireError`` itself names no kind, so the classifier decides every class as before.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.kinds import ErrorKind

if TYPE_CHECKING:
    from engine.classify.classification import Classification


class TripwireError(Exception):
    """The base of every error tripwire raises (the tree is in this module's docstring)."""


class ToolError(TripwireError):
    """A failed tool call, with everything needed to explain and handle it."""

    __slots__ = (
        "at",
        "attempts",
        "classification",
        "executed",
        "kind",
        "message",
        "original_error",
        "partial_result",
        "retry_after_s",
        "status_code",
        "tool_id",
        "tool_input",
    )

    def __init__(
        self,
        kind: ErrorKind | str,
        message: str | None = None,
        *,
        tool_id: str | None = None,
        original_error: BaseException | None = None,
        tool_input: Any = None,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        at: float | None = None,
        classification: Classification | None = None,
        attempts: int = 0,
        partial_result: Any = None,
        executed: bool | None = None,
    ) -> None:
        self.kind = kind if type(kind) is ErrorKind else ErrorKind(kind)
        self.executed: bool = self.kind.executed if executed is None else executed
        """Did the tool run (or may it have)? By default what the kind says; a failed call's is True
        when any of its attempts ran, whatever its last kind (spec-map kinds.count-executed)."""
        if not message:
            message = str(original_error) if original_error else self.kind.info.description
        self.message = message
        self.tool_id = tool_id
        self.original_error = original_error
        self.tool_input = tool_input
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.at = at  # wall-clock epoch seconds, from the engine's clock
        self.classification = classification
        self.attempts = attempts
        self.partial_result = partial_result  # what the tool returned before failing, if anything
        super().__init__(message)

    @property
    def tool_name(self) -> str | None:
        """``tool_id`` as the model-facing error names it (spec-map llm.tool-execution-error)."""
        return self.tool_id

    @property
    def timestamp(self) -> datetime | None:
        """When it happened, as a UTC ``datetime`` (spec-map llm.tool-execution-error)."""
        return datetime.fromtimestamp(self.at, UTC) if self.at is not None else None

    @property
    def error_type(self) -> str:
        """The class name of the underlying exception (``error_type``: spec-map llm.tool-execution-error)."""
        return type(self.original_error or self).__name__

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "tool_id": self.tool_id,
            "message": self.message,
            "error_type": self.error_type,
            "executed": self.executed,
            "status_code": self.status_code,
            "retry_after_s": self.retry_after_s,
            "timestamp": iso_timestamp(self.at) if self.at is not None else None,
            "attempts": self.attempts,
            "classification": self.classification.to_dict() if self.classification else None,
            "tool_input": jsonable(self.tool_input),
        }

    def __repr__(self) -> str:
        return f"ToolError({self.kind!s}, {self.message!r}, tool_id={self.tool_id!r})"


class TraceStoreError(TripwireError):
    """A trace store that cannot be opened or used; ``str()`` is one line naming the file.

    ``untouched`` says the file was left exactly as it was found (every refusal to open).
    """

    def __init__(self, path: str | Path, problem: str, *, untouched: bool = True) -> None:
        self.path = str(path)
        self.problem = problem
        self.untouched = untouched
        suffix = " (left untouched)" if untouched else ""
        super().__init__(one_line(f"{self.path}: {problem}{suffix}"))


class TurnNotPersisted(TraceStoreError):
    """A turn ran, but the trace store could not make it durable (``durability="turn"``).

    ``result`` is the turn's :class:`~engine.outcomes.TurnResult`: nothing the tools returned is
    lost. ``problem`` names the store's real cause ("database or disk is full").
    """

    def __init__(self, path: str | Path, problem: str, result: Any) -> None:
        super().__init__(path, f"turn {result.turn_id} not persisted: {problem}", untouched=False)
        self.result = result


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters left once the line breaks are joined (every one but the tab): an ANSI
escape moves a terminal's cursor, so it could overwrite a line already shown."""


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def one_line(text: str) -> str:
    """``text`` on one line, whatever it holds: line breaks shown as ``\\n`` and every other control
    character escaped (``\\x1b``). Keys, YAML and SQLite messages may hold line breaks, and a value
    read from outside (a fleet command from Redis) must never print a line of its own into a log."""
    return _CONTROL.sub(_escaped, "\\n".join(text.splitlines()))


def iso_timestamp(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    """A JSON-safe copy of ``value``; anything exotic becomes its repr."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return repr(value)
