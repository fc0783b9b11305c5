"""What a turn came to: each call's status and outcome, the turn's result, the sentence for the user.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from engine.handler import Decision
from engine.trace import TurnTrace

if TYPE_CHECKING:
    from engine.errors import ToolError


class CallStatus(StrEnum):
    """How one call of a turn ended; SUCCEEDED and PARTIAL are ``ok``."""

    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    SKIPPED = "skipped"
    ESCALATED = "escalated"
    TIMED_OUT = "timed_out"
    CANCELED = "canceled"
    INTERRUPTED = "interrupted"
    """Still running when the turn's caller was cancelled (stored turns only: run_turn raised)."""


_OK = (CallStatus.SUCCEEDED, CallStatus.PARTIAL)
_CUT_OFF = (CallStatus.TIMED_OUT, CallStatus.CANCELED, CallStatus.INTERRUPTED)


@dataclass(slots=True)
class CallOutcome:
    """One call's end in a turn: its status, its value or error, and the decision that led there."""

    call_id: str
    tool_id: str
    status: CallStatus
    value: Any = None
    error: ToolError | None = None
    reason: str = ""
    attempts: int = 0
    served_by: str | None = None
    used_default: bool = False
    decision: Decision | None = None
    launched: bool = False

    @property
    def ok(self) -> bool:
        return self.status in _OK

    @property
    def executed(self) -> bool:
        """Did it run? A call rejected or refused before running did not (spec-map kinds.count-executed)."""
        if self.status in _OK:
            return True
        if self.status is CallStatus.FAILED:
            return self.error is not None and self.error.executed
        # Cut off by the deadline, a stop or an interruption while running: the tool did run.
        return self.status in _CUT_OFF and self.launched

    @property
    def label(self) -> str:
        """How the console names the outcome."""
        if self.ok and self.served_by:
            return "alternative used"
        if self.ok and self.used_default:
            return "defaulted"
        return self.status.replace("_", " ")


@dataclass(slots=True)
class TurnResult:
    turn_id: str
    outcomes: dict[str, CallOutcome]
    """By call id, in the turn's order."""
    trace: TurnTrace
    summary: str
    timed_out: bool = False
    canceled: bool = False
    duration_s: float = 0.0

    @property
    def results(self) -> dict[str, Any]:
        return {cid: o.value for cid, o in self.outcomes.items() if o.ok}

    @property
    def escalations(self) -> list[CallOutcome]:
        return [
            o
            for o in self.outcomes.values()
            if o.status is CallStatus.ESCALATED or o.decision is Decision.ESCALATE
        ]

    @property
    def executed(self) -> int:
        return sum(o.executed for o in self.outcomes.values())

    @property
    def failed(self) -> bool:
        """A turn fails only when it had calls and none of them executed (spec-map kinds.turn-failed)."""
        return bool(self.outcomes) and self.executed == 0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes.values())

    @property
    def outcome(self) -> str:
        """One word for the whole turn: ok, degraded, failed, timed_out or canceled."""
        return self._outcome(self.executed, self.ok)

    def _outcome(self, executed: int, ok: bool) -> str:
        """:attr:`outcome`, given :attr:`executed` and :attr:`ok` (the runner has them already)."""
        if self.canceled:
            return "canceled"
        if self.timed_out:
            return "timed_out"
        if self.outcomes and executed == 0:  # failed
            return "failed"
        return "ok" if ok else "degraded"


_PROBLEM_VERBS = {
    CallStatus.FAILED: "failed",
    CallStatus.TIMED_OUT: "timed out",
    CallStatus.SKIPPED: "was skipped",
    CallStatus.ESCALATED: "could not run",
    CallStatus.CANCELED: "was canceled",
    CallStatus.INTERRUPTED: "was interrupted",
}


def summarize(outcomes: Iterable[CallOutcome]) -> str:
    """The plain sentence for the user: "Completed flight search, but hotel search timed out."."""
    done: list[str] = []
    problems: dict[str, list[str]] = {}
    for o in outcomes:
        name = o.tool_id.replace("_", " ")
        status = o.status
        if status in _OK:
            label = name
            if o.served_by or o.used_default or status is CallStatus.PARTIAL:
                extra = [f"via {o.served_by.replace('_', ' ')}"] if o.served_by else []
                extra += ["partial"] if status is CallStatus.PARTIAL else []
                extra += ["with a default input"] if o.used_default else []
                label = f"{name} ({', '.join(extra)})"
            if label not in done:
                done.append(label)
        else:
            names = problems.setdefault(_PROBLEM_VERBS[o.status], [])
            if name not in names:
                names.append(name)
    trouble = [
        f"{_join(names)} {_plural(verb) if len(names) > 1 else verb}" for verb, names in problems.items()
    ]
    if not done and not trouble:
        return "Nothing to do."
    if not trouble:
        return f"Completed {_join(done)}."
    if not done:
        text = _join(trouble)
        return f"{text[0].upper()}{text[1:]}."
    return f"Completed {_join(done)}, but {_join(trouble)}."


def _plural(verb: str) -> str:
    """ "was skipped" → "were skipped": several tools share one verb."""
    return f"were {verb[4:]}" if verb.startswith("was ") else verb


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
