"""Replay a recorded turn: the recorded outcomes in place of the tools, on virtual time.

A turn recorded with ``Engine(record=True)`` carries what a replay needs: its definition
and jitter seed, the breakers and manifests it started with, and every attempt's outcome
(value, or error with its full classification, and latency). The replay rebuilds an engine
with those manifests and breakers, and answers each attempt through the engine's injection
point with the recorded outcome: it sleeps the recorded latency on the virtual clock, then
returns the value, re-raises the failure (classified exactly as recorded), or hangs when the
attempt was timed out or cut off. It then compares every decision the engine takes with the
recording. Strict: an attempt with no recorded outcome, or a recorded outcome never asked
for, is a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio
import trio.testing
from anyio import current_time

from engine.classify import Classification, Rule
from engine.clock import VirtualWallClock
from engine.engine import Engine
from engine.errors import ToolError
from engine.events import (
    AlternativeUsed,
    AttemptFailed,
    AttemptStarted,
    BreakerTransitioned,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    DefaultUsed,
    Event,
    ToolEvent,
    ToolTimedOut,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnStarted,
)
from engine.kinds import ErrorKind
from engine.manifest import ToolManifest
from engine.turns import Turn, TurnResult


class ReplayError(Exception):
    """The turn cannot be replayed (e.g. it was not recorded); ``str()`` is one line."""


Outcome = Literal["ok", "error", "timeout", "cut"]


@dataclass(frozen=True, slots=True)
class RecordedAttempt:
    tool_id: str
    call_id: str
    attempt: int
    outcome: Outcome
    latency_s: float
    value: Any = None
    classification: Classification | None = None
    message: str = ""
    fault_type: str | None = None
    partial: bool = False

    def describe(self) -> str:
        return f"{self.call_id}/{self.tool_id} attempt {self.attempt} ({self.outcome})"


@dataclass(slots=True)
class Recording:
    """A recorded turn, ready to replay."""

    turn: Turn
    seed: str
    started_at: float
    breakers: dict[str, dict[str, Any]]
    manifests: dict[str, dict[str, Any]]
    """Tool id → the manifest content in force when the turn started."""
    attempts: dict[tuple[str, str, int], RecordedAttempt]
    """(call id, tool id, attempt) → what happened."""
    events: list[Event]

    @property
    def turn_id(self) -> str:
        return self.turn.id or ""

    @classmethod
    def from_events(
        cls, events: Iterable[Event], manifest_content: Callable[[str], dict[str, Any] | None]
    ) -> Recording:
        """Build from a turn's events; ``manifest_content(digest)`` looks up stored manifests."""
        events = list(events)
        started = next((e for e in events if isinstance(e, TurnStarted)), None)
        if started is None or started.spec is None:
            raise ReplayError("the events hold no TurnStarted with the turn's definition")
        if started.breakers is None or started.manifests is None:
            raise ReplayError(
                f"turn {started.turn_id} was not recorded for replay (run the engine with record=True)"
            )
        manifests = {}
        for tool_id, digest in started.manifests.items():
            content = manifest_content(digest)
            if content is None:
                raise ReplayError(
                    f"turn {started.turn_id}: the manifest of {tool_id} ({digest}) is not stored"
                )
            manifests[tool_id] = content
        spec = {**started.spec, "id": started.turn_id}
        return cls(
            Turn.from_spec(spec),
            started.seed,
            started.at,
            dict(started.breakers),
            manifests,
            _attempts(events),
            events,
        )


def _attempts(events: list[Event]) -> dict[tuple[str, str, int], RecordedAttempt]:
    started: dict[tuple[str, str, int], AttemptStarted] = {}
    timed_out: set[tuple[str, str, int]] = set()
    attempts: dict[tuple[str, str, int], RecordedAttempt] = {}
    for e in events:
        if isinstance(e, AttemptStarted):
            started[(e.call_id, e.tool_id, e.attempt)] = e
        elif isinstance(e, ToolTimedOut):
            timed_out.add((e.call_id, e.tool_id, e.attempt))
        elif isinstance(e, AttemptFailed):
            key = (e.call_id, e.tool_id, e.attempt)
            classification = Classification(
                e.kind, e.classification, e.retryable, Rule(e.rule), e.reason, e.status_code, e.retry_after_s,
                e.error_type,
            )  # fmt: skip
            outcome: Outcome = "timeout" if key in timed_out else "error"
            attempts[key] = RecordedAttempt(
                e.tool_id, e.call_id, e.attempt, outcome, e.latency_ms / 1000.0, None, classification,
                e.error, e.fault_type, e.has_partial,
            )  # fmt: skip
        elif isinstance(e, CallSucceeded):
            key = (e.call_id, e.tool_id, e.attempts)
            if e.partial:  # the failed attempt is recorded; it carried this partial value
                if key in attempts:
                    attempts[key] = _with_partial_value(attempts[key], e.value)
                continue
            begun = started.get(key)
            attempts[key] = RecordedAttempt(
                e.tool_id, e.call_id, e.attempts, "ok", e.attempt_ms / 1000.0, e.value, None, "",
                begun.fault_type if begun else None,
            )  # fmt: skip
    for key, begun in started.items():
        if key not in attempts:  # cut off by the turn's deadline or a stop: it never ended
            attempts[key] = RecordedAttempt(begun.tool_id, begun.call_id, begun.attempt, "cut", 0.0)
    return attempts


def _with_partial_value(attempt: RecordedAttempt, value: Any) -> RecordedAttempt:
    return replace(attempt, value=value, partial=True)


class _Replayed:
    """One recorded outcome, played back in place of the tool."""

    __slots__ = ("recorded",)
    is_ok = False

    def __init__(self, recorded: RecordedAttempt) -> None:
        self.recorded = recorded

    @property
    def fault_type(self) -> str | None:
        return self.recorded.fault_type

    async def run(self, invoke: Callable[[], Any]) -> Any:
        r = self.recorded
        if r.outcome in ("timeout", "cut"):
            await anyio.sleep_forever()  # the engine's timeout, or the turn, ends it as it did
        await anyio.sleep(r.latency_s)
        if r.outcome == "ok":
            return r.value
        assert r.classification is not None
        raise ToolError(
            r.classification.kind,
            r.message,
            tool_id=r.tool_id,
            status_code=r.classification.status_code,
            retry_after_s=r.classification.retry_after_s,
            classification=r.classification,
            partial_result=(r.value if r.value is not None else {}) if r.partial else None,
        )


class _Unmatched:
    __slots__ = ("what",)
    is_ok = False
    fault_type = None

    def __init__(self, what: str) -> None:
        self.what = what

    async def run(self, invoke: Callable[[], Any]) -> Any:
        raise ToolError(ErrorKind.INTERNAL_ERROR, f"replay: no recorded outcome for {self.what}")


class ReplayInjector:
    """Answers each attempt with its recorded outcome, and notes what did not match."""

    def __init__(self, attempts: dict[tuple[str, str, int], RecordedAttempt]) -> None:
        self.attempts = attempts
        self.used: set[tuple[str, str, int]] = set()
        self.unmatched: list[str] = []

    def pick(
        self,
        tool_id: str,
        *,
        call: int,
        attempt: int,
        turn_id: str | None = None,
        call_id: str | None = None,
    ) -> _Replayed | _Unmatched:
        key = (call_id or "", tool_id, attempt)
        recorded = self.attempts.get(key)
        if recorded is None or key in self.used:
            what = f"{call_id}/{tool_id} attempt {attempt}"
            self.unmatched.append(what)
            return _Unmatched(what)
        self.used.add(key)
        return _Replayed(recorded)

    def unused(self) -> list[str]:
        return sorted(a.describe() for key, a in self.attempts.items() if key not in self.used)


@dataclass(slots=True)
class ReplayReport:
    turn_id: str
    mismatches: list[str] = field(default_factory=list)
    """Decisions that differ, as ``what: recorded … ≠ replayed …``."""
    unmatched: list[str] = field(default_factory=list)
    """Attempts the replay made that the recording does not have."""
    unused: list[str] = field(default_factory=list)
    """Recorded attempts the replay never asked for."""
    decisions: int = 0
    """How many recorded decisions were compared."""
    result: TurnResult | None = None

    @property
    def matches(self) -> bool:
        return not (self.mismatches or self.unmatched or self.unused)

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "matches": self.matches,
            "decisions": self.decisions,
            "mismatches": self.mismatches,
            "unmatched": self.unmatched,
            "unused": self.unused,
            "summary": self.result.summary if self.result else None,
        }


async def replay(recording: Recording) -> ReplayReport:
    """Replay on the running event loop (use a virtual clock: see :func:`replay_on_virtual_time`)."""
    injector = ReplayInjector(recording.attempts)
    manifests = [ToolManifest.model_validate(content) for content in recording.manifests.values()]
    engine = Engine(manifests, wall_clock=VirtualWallClock(recording.started_at), faults=injector)
    for tool_id in recording.manifests:
        engine.register(tool_id, _never_runs(tool_id))
    report = ReplayReport(recording.turn_id)
    async with engine:
        now = current_time()
        for tool_id, snapshot in recording.breakers.items():
            engine.breaker(tool_id).restore(snapshot, now)
        report.result = await engine.run_turn(recording.turn, seed=recording.seed)
    engine.close()
    recorded, replayed = decisions(recording.events), decisions(report.result.trace.events)
    report.decisions = len(recorded)
    for what in sorted(recorded.keys() | replayed.keys()):
        was, now_is = recorded.get(what, "—"), replayed.get(what, "—")
        if was != now_is:
            report.mismatches.append(f"{what}: recorded {was} ≠ replayed {now_is}")
    report.unmatched = injector.unmatched
    report.unused = injector.unused()
    return report


def replay_on_virtual_time(recording: Recording) -> ReplayReport:
    """Replay in a fresh event loop on trio's virtual clock: an hour of recording in a blink."""
    return replay_all_on_virtual_time([recording])[0]


def replay_all_on_virtual_time(recordings: Iterable[Recording]) -> list[ReplayReport]:
    """Replay several recordings, one after another, in one event loop on a virtual clock."""

    async def each() -> list[ReplayReport]:
        return [await replay(recording) for recording in recordings]

    clock = trio.testing.MockClock(autojump_threshold=0)
    reports: list[ReplayReport] = anyio.run(each, backend="trio", backend_options={"clock": clock})
    return reports


def _never_runs(tool_id: str) -> Callable[..., Any]:
    async def tool(**_: Any) -> Any:
        raise ToolError(ErrorKind.INTERNAL_ERROR, f"replay ran the real {tool_id}: every attempt is recorded")

    return tool


def decisions(events: Iterable[Event]) -> dict[str, str]:
    """What the engine decided in a turn, keyed so two runs can be compared fact by fact.

    Times are relative to the turn's start; wall-clock stamps are left out.
    """
    events = list(events)
    start = next((e.t for e in events if isinstance(e, TurnStarted)), 0.0)
    facts: dict[str, str] = {}
    transitions: dict[str, list[str]] = {}
    for e in events:
        at = f"@{e.t - start:.6f}"
        if isinstance(e, BreakerTransitioned):
            transitions.setdefault(e.tool_id, []).append(f"{e.from_state}→{e.to_state}{at}")
            continue
        if isinstance(e, TurnFinished):
            facts["turn outcome"] = f"{e.outcome} {sorted(e.statuses.items())}"
            continue
        if isinstance(e, TurnDeadlineExceeded):
            facts["turn deadline"] = f"{sorted(e.unfinished)}{at}"
            continue
        if not isinstance(e, ToolEvent):
            continue
        where = f"{e.call_id}/{e.tool_id}"
        if isinstance(e, AttemptStarted):
            facts[f"{where} attempt {e.attempt} start"] = f"{at} probe={e.probe}"
        elif isinstance(e, ToolTimedOut):
            facts[f"{where} attempt {e.attempt} timeout"] = at
        elif isinstance(e, AttemptFailed):
            delay = "" if e.delay_ms is None else f" after {e.delay_ms:.3f}ms"
            facts[f"{where} attempt {e.attempt} failure"] = (
                f"{e.kind}/{e.classification} → {e.decision}{delay} ({e.circuit_breaker_state}){at}"
            )
        elif isinstance(e, CallSucceeded):
            facts[f"{where} end"] = f"succeeded after {e.attempts}{' (partial)' if e.partial else ''}{at}"
        elif isinstance(e, CallFailed):
            facts[f"{where} end"] = f"failed {e.kind} → {e.decision}{at}"
        elif isinstance(e, CallRejected):
            facts[f"{where} end"] = f"rejected ({e.state}){at}"
        elif isinstance(e, AlternativeUsed):
            facts[f"{where} alternative"] = f"{e.alternative}{at}"
        elif isinstance(e, CallSkipped | CallEscalated | DefaultUsed):
            facts[f"{e.call_id} cascade"] = f"{e.event_type} {sorted(e.blocked_by)}{at}"
    for tool_id, changes in transitions.items():
        facts[f"breaker {tool_id}"] = " ".join(changes)
    return facts


__all__ = [
    "RecordedAttempt",
    "Recording",
    "ReplayError",
    "ReplayInjector",
    "ReplayReport",
    "decisions",
    "replay",
    "replay_all_on_virtual_time",
    "replay_on_virtual_time",
]
