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

A hedged call (:mod:`engine.pipeline.hedged`) replays its race: each hedge starts as recorded
(``HedgeStarted.after_ms`` after the attempt before it, and no other), each attempt ends as it
did — the winner with its value, a cancelled loser when the winner's success cancels it again — so
the same attempt wins (``CallSucceeded.attempts`` is the winner's number).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio
from anyio import current_time

from engine.classify import Classification, Rule
from engine.clock import VirtualWallClock
from engine.engine import Engine
from engine.errors import ToolError, TripwireError
from engine.events import (
    AlternativeUsed,
    AttemptAbandoned,
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
    HedgeRaceWon,
    HedgeRefused,
    HedgeStarted,
    IdempotencyKeyAssigned,
    ToolEvent,
    ToolTimedOut,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
)
from engine.kinds import ErrorKind
from engine.manifest import ToolManifest
from engine.outcomes import TurnResult
from engine.redaction import MARKER
from engine.turn import Turn

TIME_TOLERANCE_S = 0.05
"""How far a replayed time may be from the recorded one. A turn recorded on a real clock
carries its scheduling delays (a backoff sleep that woke a little late, a busy event loop);
the replay, on a virtual clock, has none. Attempts end on the recorded timeline, so those
delays never add up: each time differs by at most one of them."""


class ReplayError(TripwireError):
    """The turn cannot be replayed (e.g. it was not recorded); ``str()`` is one line."""


Outcome = Literal["ok", "error", "timeout", "cut"]


@dataclass(frozen=True, slots=True)
class RecordedAttempt:
    """One attempt as the trace recorded it: what the replay makes the tool do again."""

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
    ends_at_s: float | None = None
    """When the attempt ended, in seconds since the turn began (None: it never ended)."""

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
    hedges: dict[tuple[str, str, int], float] = field(default_factory=dict)
    """(call id, tool id, hedge's attempt) → how long after the attempt before it the hedge started (s)."""

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
        if any(isinstance(e, TurnInterrupted) for e in events):
            raise ReplayError(
                f"turn {started.turn_id} was interrupted (its engine stopped mid-turn): "
                "there is no ending to replay"
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
            {
                (e.call_id, e.tool_id, e.attempt): e.after_ms / 1000.0
                for e in events
                if isinstance(e, HedgeStarted)
            },
        )


def _attempts(events: list[Event]) -> dict[tuple[str, str, int], RecordedAttempt]:
    origin = next((e.t for e in events if isinstance(e, TurnStarted)), 0.0)
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
                e.error, e.fault_type, e.has_partial, e.t - origin,
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
                begun.fault_type if begun else None, False, e.t - origin,
            )  # fmt: skip
    for key, begun in started.items():
        if key not in attempts:  # cut off by the turn's deadline or a stop: it never ended
            attempts[key] = RecordedAttempt(begun.tool_id, begun.call_id, begun.attempt, "cut", 0.0)
    return attempts


def _with_partial_value(attempt: RecordedAttempt, value: Any) -> RecordedAttempt:
    return replace(attempt, value=value, partial=True)


class _Replayed:
    """One recorded outcome, played back in place of the tool.

    It ends when the recorded attempt ended, counted from the turn's start (``origin``), not
    after the recorded latency: a recording made on a real clock has scheduling delays between
    attempts that a replay does not, and ending on the recorded timeline keeps them from
    adding up over the turn.
    """

    __slots__ = ("origin", "recorded")
    is_ok = False

    def __init__(self, recorded: RecordedAttempt, origin: float | None) -> None:
        self.recorded = recorded
        self.origin = origin

    @property
    def fault_type(self) -> str | None:
        return self.recorded.fault_type

    def stream_cut(self) -> None:
        """A recorded outcome plays in the tool's place, streaming or not."""
        return

    async def run(self, invoke: Callable[[], Any]) -> Any:
        r = self.recorded
        if r.outcome in ("timeout", "cut"):
            await anyio.sleep_forever()  # the engine's timeout, or the turn, ends it as it did
        if self.origin is not None and r.ends_at_s is not None:
            await anyio.sleep_until(self.origin + r.ends_at_s)
        else:
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

    def stream_cut(self) -> None:
        return None

    async def run(self, invoke: Callable[[], Any]) -> Any:
        raise ToolError(ErrorKind.INTERNAL_ERROR, f"replay: no recorded outcome for {self.what}")


class ReplayInjector:
    """Answers each attempt with its recorded outcome, and notes what did not match."""

    def __init__(
        self,
        attempts: dict[tuple[str, str, int], RecordedAttempt],
        hedges: dict[tuple[str, str, int], float] | None = None,
    ) -> None:
        self.attempts = attempts
        self.hedges = hedges or {}
        self.used: set[tuple[str, str, int]] = set()
        self.unmatched: list[str] = []
        self.origin: float | None = None
        """Engine time at which the replayed turn began: recorded attempts end relative to it."""

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
        return _Replayed(recorded, self.origin)

    def recorded_hedge_after_s(self, call_id: str, tool_id: str, attempt: int) -> float | None:
        """The recorded delay of hedge ``attempt`` (a :class:`~engine.strategies.hedging.HedgeSchedule`):
        a replay starts the hedges the recording started, when it started them, and no other."""
        return self.hedges.get((call_id, tool_id, attempt))

    def unused(self) -> list[str]:
        return sorted(a.describe() for key, a in self.attempts.items() if key not in self.used)


@dataclass(slots=True)
class ReplayReport:
    """A replayed turn checked against its recording; ``matches`` when every decision was the same."""

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


async def replay(recording: Recording, *, tolerance_s: float = TIME_TOLERANCE_S) -> ReplayReport:
    """Replay on the running event loop (use a virtual clock: see :func:`replay_on_virtual_time`).

    Decisions must match exactly; times (and retry delays) within ``tolerance_s``.
    """
    injector = ReplayInjector(recording.attempts, recording.hedges)
    manifests = [ToolManifest.model_validate(content) for content in recording.manifests.values()]
    engine = Engine(manifests, wall_clock=VirtualWallClock(recording.started_at), faults=injector)
    for tool_id in recording.manifests:
        engine.register(tool_id, _never_runs(tool_id))
    report = ReplayReport(recording.turn_id)
    async with engine:
        now = current_time()
        for tool_id, snapshot in recording.breakers.items():
            engine.breaker(tool_id).restore(snapshot, now)
        injector.origin = current_time()  # the turn starts now: no time passes before it does
        report.result = await engine.run_turn(recording.turn, seed=recording.seed)
    engine.close()
    recorded, replayed = decisions(recording.events), decisions(report.result.trace.events)
    report.decisions = len(recorded)
    for what in sorted(recorded.keys() | replayed.keys()):
        was, now_is = recorded.get(what, _NOTHING), replayed.get(what, _NOTHING)
        if not was.matches(now_is, tolerance_s):
            report.mismatches.append(f"{what}: recorded {was} ≠ replayed {now_is}")
    report.unmatched = injector.unmatched
    report.unused = injector.unused()
    return report


def replay_on_virtual_time(recording: Recording, *, tolerance_s: float = TIME_TOLERANCE_S) -> ReplayReport:
    """Replay in a fresh event loop on trio's virtual clock: an hour of recording in a blink."""
    return replay_all_on_virtual_time([recording], tolerance_s=tolerance_s)[0]


def replay_all_on_virtual_time(
    recordings: Iterable[Recording], *, tolerance_s: float = TIME_TOLERANCE_S
) -> list[ReplayReport]:
    """Replay several recordings, one after another, in one event loop on a virtual clock."""

    async def each() -> list[ReplayReport]:
        return [await replay(recording, tolerance_s=tolerance_s) for recording in recordings]

    # start-up: trio.testing (and pytest, where installed) only when replaying: importing it with
    # this module cost every `tripwire` command and any program loading a Recording 90-150 ms.
    import trio.testing

    clock = trio.testing.MockClock(autojump_threshold=0)
    reports: list[ReplayReport] = anyio.run(each, backend="trio", backend_options={"clock": clock})
    return reports


def _never_runs(tool_id: str) -> Callable[..., Any]:
    async def tool(**_: Any) -> Any:
        raise ToolError(ErrorKind.INTERNAL_ERROR, f"replay ran the real {tool_id}: every attempt is recorded")

    return tool


@dataclass(frozen=True, slots=True)
class Fact:
    """One thing the engine decided in a turn: ``what`` is compared exactly, ``times`` (seconds
    since the turn began, and retry delays) within the replay's tolerance."""

    what: str
    times: tuple[float, ...] = ()

    def matches(self, other: Fact, tolerance_s: float) -> bool:
        return (
            self.what == other.what
            and len(self.times) == len(other.times)
            and all(abs(a - b) <= tolerance_s for a, b in zip(self.times, other.times, strict=True))
        )

    def __str__(self) -> str:
        return " ".join([self.what, *(f"@{t:.6f}" for t in self.times)]) if self.times else self.what


_NOTHING = Fact("—")


def decisions(events: Iterable[Event]) -> dict[str, Fact]:
    """What the engine decided in a turn, keyed so two runs can be compared fact by fact.

    Times are relative to the turn's start; wall-clock stamps are left out.
    """
    events = list(events)
    start = next((e.t for e in events if isinstance(e, TurnStarted)), 0.0)
    facts: dict[str, Fact] = {}
    transitions: dict[str, list[tuple[str, float]]] = {}
    for e in events:
        at = e.t - start
        if isinstance(e, BreakerTransitioned):
            transitions.setdefault(e.tool_id, []).append((f"{e.from_state}→{e.to_state}", at))
            continue
        if isinstance(e, TurnFinished):
            facts["turn outcome"] = Fact(f"{e.outcome} {sorted(e.statuses.items())}")
            break  # what follows is not the turn's: the LLM executor's refusals and answers
        if isinstance(e, TurnDeadlineExceeded):
            facts["turn deadline"] = Fact(f"{sorted(e.unfinished)}", (at,))
            continue
        if not isinstance(e, ToolEvent):
            continue
        where = f"{e.call_id}/{e.tool_id}"
        if isinstance(e, AttemptStarted):
            facts[f"{where} attempt {e.attempt} start"] = Fact(f"probe={e.probe}", (at,))
        elif isinstance(e, ToolTimedOut):
            facts[f"{where} attempt {e.attempt} timeout"] = Fact("timed out", (at,))
        elif isinstance(e, AttemptFailed):
            what = f"{e.kind}/{e.classification} → {e.decision} ({e.circuit_breaker_state})"
            delay = () if e.delay_ms is None else (e.delay_ms / 1000.0,)
            facts[f"{where} attempt {e.attempt} failure"] = Fact(what, (*delay, at))
        elif isinstance(e, CallSucceeded):
            partial = " (partial)" if e.partial else ""
            facts[f"{where} end"] = Fact(f"succeeded after {e.attempts}{partial}", (at,))
        elif isinstance(e, CallFailed):
            facts[f"{where} end"] = Fact(f"failed {e.kind} → {e.decision}", (at,))
        elif isinstance(e, CallRejected):
            # By the breaker (circuit_open) or a strategy (bulkhead_full): the kind says whose.
            facts[f"{where} end"] = Fact(f"rejected {e.kind} ({e.state})", (at,))
        elif isinstance(e, HedgeStarted):
            facts[f"{where} attempt {e.attempt} hedge"] = Fact(f"after attempt {e.after_attempt}", (at,))
        elif isinstance(e, HedgeRefused):
            facts[f"{where} attempt {e.attempt} hedge"] = Fact(f"refused: {e.reason}", (at,))
        elif isinstance(e, AttemptAbandoned):
            facts[f"{where} attempt {e.attempt} abandoned"] = Fact(f"won by {e.won_by}", (at,))
        elif isinstance(e, HedgeRaceWon):
            facts[f"{where} race"] = Fact(f"won by {e.attempt}, cancelled {list(e.cancelled)}", (at,))
        elif isinstance(e, AlternativeUsed):
            facts[f"{where} alternative"] = Fact(e.alternative, (at,))
        elif isinstance(e, IdempotencyKeyAssigned):  # a replay derives the recorded key again
            # A secret key is masked with each engine's own hash key: only that it was, compares.
            key = e.key if MARKER.search(e.key) is None else f"redacted ({e.source})"
            facts[f"{where} idempotency key"] = Fact(key)
        elif isinstance(e, CallSkipped | CallEscalated | DefaultUsed):
            facts[f"{e.call_id} cascade"] = Fact(f"{e.event_type} {sorted(e.blocked_by)}", (at,))
    for tool_id, changes in transitions.items():
        facts[f"breaker {tool_id}"] = Fact(" ".join(c for c, _ in changes), tuple(t for _, t in changes))
    return facts


__all__ = [
    "TIME_TOLERANCE_S",
    "Fact",
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
