"""Turns: the tool calls of one agent step, with declared dependencies, under one deadline.

A :class:`Turn` is a DAG of :class:`ToolCall`. Independent calls run concurrently; a call
starts when its dependencies have succeeded and receives their outputs as arguments. When
a dependency fails, a dependant runs with its declared ``default`` if it has one, is skipped
when optional, and is escalated when required (spec §5) — transitively. At the turn's
deadline the turn returns at once with what it has: unfinished calls are cancelled and
reported as timed out (spec §4.2, as the issue settles it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope, current_time

from engine.engine import CallContext
from engine.events import (
    CallEscalated,
    CallSkipped,
    DefaultUsed,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnStarted,
)
from engine.handler import MISSING, Decision, ErrorHandler
from engine.trace import TurnTrace

if TYPE_CHECKING:
    from engine.engine import CallResult, Engine
    from engine.errors import ToolError


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    optional: bool = False
    default: Any = MISSING
    """Used in place of a failed dependency's output; the call then runs anyway."""
    inputs: Mapping[str, str] | None = None
    """Argument name → dependency id. By default each dependency's output is passed under its id;
    ``{}`` makes the dependencies ordering-only."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "depends_on", tuple(self.depends_on))


@dataclass(frozen=True, slots=True)
class Turn:
    calls: tuple[ToolCall, ...]
    id: str | None = None
    deadline_s: float | None = 300.0
    """The spec's per-turn timeout (5 minutes); None for no deadline."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", tuple(self.calls))


class TurnError(ValueError):
    """A turn that cannot run; nothing ran. ``str()`` is the first problem, on one line."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{self.problems[0]}{more}")


class CallStatus(StrEnum):
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    SKIPPED = "skipped"
    ESCALATED = "escalated"
    TIMED_OUT = "timed_out"
    CANCELED = "canceled"


_OK = (CallStatus.SUCCEEDED, CallStatus.PARTIAL)


@dataclass(slots=True)
class CallOutcome:
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
        """Seed 004: did the tool run? Calls rejected or refused before running do not count."""
        if self.status in _OK:
            return True
        if self.status is CallStatus.FAILED:
            return self.error is not None and self.error.executed
        return self.status is CallStatus.TIMED_OUT and self.launched

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
            o for o in self.outcomes.values() if o.status is CallStatus.ESCALATED or o.decision is Decision.ESCALATE
        ]

    @property
    def executed(self) -> int:
        return sum(o.executed for o in self.outcomes.values())

    @property
    def failed(self) -> bool:
        """Seed 004: a turn fails only when it had calls and none of them executed."""
        return bool(self.outcomes) and self.executed == 0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes.values())


def validate(turn: Turn, tools: Iterable[str]) -> None:
    """Reject cycles, unknown tools, dangling dependencies and duplicates before anything runs."""
    known = set(tools)
    problems: list[str] = []
    name = f"turn {turn.id}" if turn.id else "turn"
    ids = [c.id for c in turn.calls]
    seen: set[str] = set()
    for cid in ids:
        if cid in seen:
            problems.append(f"{name}: call id {cid!r} is used twice")
        seen.add(cid)
    if turn.deadline_s is not None and not turn.deadline_s > 0:
        problems.append(f"{name}: deadline_s must be positive, got {turn.deadline_s!r}")
    for call in turn.calls:
        if call.tool not in known:
            problems.append(
                f"{name}: call {call.id!r} uses unknown tool {call.tool!r} (known: {', '.join(sorted(known))})"
            )
        for dep in call.depends_on:
            if dep == call.id:
                problems.append(f"{name}: call {call.id!r} depends on itself")
            elif dep not in seen:
                problems.append(f"{name}: call {call.id!r} depends on {dep!r}, which is not in the turn")
        for param, dep in (call.inputs or {}).items():
            if dep not in call.depends_on:
                problems.append(
                    f"{name}: call {call.id!r} takes input {param!r} from {dep!r}, which it does not depend on"
                )
    if cycle := _find_cycle(turn.calls):
        problems.append(f"{name}: dependency cycle {' → '.join(cycle)}")
    if problems:
        raise TurnError(problems)


def _find_cycle(calls: tuple[ToolCall, ...]) -> list[str] | None:
    graph = {c.id: [d for d in c.depends_on if d != c.id] for c in calls}
    state: dict[str, int] = {}  # 1 visiting, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt in graph and state.get(nxt) is None and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if state.get(node) is None and (found := visit(node)):
            return found
    return None


class TurnRunner:
    """Runs one turn on an engine; see :meth:`engine.Engine.run_turn`."""

    def __init__(
        self, engine: Engine, turn: Turn, *, stop: anyio.Event | None = None, handler: ErrorHandler | None = None
    ) -> None:
        self.engine = engine
        self.turn = turn
        self.stop = stop
        self.handler = handler
        self.calls = {c.id: c for c in turn.calls}
        self.outcomes: dict[str, CallOutcome] = {}
        self.launched: set[str] = set()
        self.waiting = {c.id: set(c.depends_on) for c in turn.calls}
        self.dependants: dict[str, list[str]] = {c.id: [] for c in turn.calls}
        for call in turn.calls:
            for dep in call.depends_on:
                self.dependants[dep].append(call.id)
        self.stopped = False
        self.turn_id = ""
        self.trace = TurnTrace("")
        self.deadline: float | None = None
        self.seed = ""
        self._tasks: anyio.abc.TaskGroup | None = None

    async def run(self) -> TurnResult:
        engine, turn = self.engine, self.turn
        validate(turn, engine.tools)
        self.turn_id = turn.id or engine.next_turn_id()
        self.trace = TurnTrace(self.turn_id)
        # One draw per turn seeds every call's jitter: retries never depend on task scheduling.
        self.seed = f"{engine.rng.getrandbits(64):x}"
        start = current_time()
        self.deadline = start + turn.deadline_s if turn.deadline_s is not None else None
        self._publish(
            TurnStarted(
                at=engine.wall_clock(), t=start, turn_id=self.turn_id, calls=tuple(self.calls),
                deadline_ms=turn.deadline_s * 1000.0 if turn.deadline_s is not None else None,
            )
        )  # fmt: skip
        with CancelScope(deadline=self.deadline if self.deadline is not None else math.inf) as scope:
            async with anyio.create_task_group() as outer:
                if self.stop is not None:
                    outer.start_soon(self._watch_stop, self.stop, scope)
                async with anyio.create_task_group() as self._tasks:
                    for call in turn.calls:
                        if not call.depends_on:
                            self._launch(call, dict(call.args))
                outer.cancel_scope.cancel()
        now = current_time()
        unfinished = tuple(cid for cid in self.calls if cid not in self.outcomes)
        timed_out = scope.cancelled_caught and not self.stopped
        for cid in unfinished:
            self._cut_off(self.calls[cid], stopped=self.stopped)
        if unfinished and self.stopped:
            self._publish(TurnCanceled(at=engine.wall_clock(), t=now, turn_id=self.turn_id, unfinished=unfinished))
        elif timed_out:
            assert turn.deadline_s is not None
            self._publish(
                TurnDeadlineExceeded(
                    at=engine.wall_clock(), t=now, turn_id=self.turn_id, deadline_ms=turn.deadline_s * 1000.0,
                    unfinished=unfinished,
                )
            )  # fmt: skip
        outcomes = {cid: self.outcomes[cid] for cid in self.calls}
        summary = summarize(outcomes.values())
        result = TurnResult(
            self.turn_id, outcomes, self.trace, summary, timed_out, self.stopped and bool(unfinished), now - start
        )
        self._publish(
            TurnFinished(
                at=engine.wall_clock(), t=now, turn_id=self.turn_id, summary=summary,
                statuses={cid: str(o.status) for cid, o in outcomes.items()}, executed=result.executed,
                duration_ms=(now - start) * 1000.0,
            )
        )  # fmt: skip
        return result

    async def _watch_stop(self, stop: anyio.Event, scope: CancelScope) -> None:
        await stop.wait()
        self.stopped = True
        scope.cancel()

    def _publish(self, event: Any) -> None:
        self.engine.publish(event, self.trace.events)

    def _launch(self, call: ToolCall, args: dict[str, Any], *, used_default: bool = False) -> None:
        ctx = CallContext(
            call.id,
            self.turn_id,
            self.deadline,
            call.optional,
            tuple(self.dependants[call.id]),
            self.trace.events,
            seed=f"{self.seed}:{call.id}",
            call_ordinal=self.engine.next_call_ordinal(call.tool),
        )
        self.launched.add(call.id)
        assert self._tasks is not None
        self._tasks.start_soon(self._run_call, call, args, ctx, used_default)

    async def _run_call(
        self, call: ToolCall, args: dict[str, Any], ctx: CallContext, used_default: bool
    ) -> None:
        result = await self.engine.execute(call.tool, args, ctx, handler=self.handler)
        self.outcomes[call.id] = _outcome_of(call, result, used_default)
        self._settle(call.id)

    def _settle(self, call_id: str) -> None:
        """A call is final: release the dependants that were waiting only for it."""
        for dependant in self.dependants[call_id]:
            waiting = self.waiting[dependant]
            waiting.discard(call_id)
            if not waiting:
                self._resolve(self.calls[dependant])

    def _resolve(self, call: ToolCall) -> None:
        """Every dependency of ``call`` is final: run it, run it with its default, or cascade."""
        failed = tuple(d for d in call.depends_on if not self.outcomes[d].ok)
        args = dict(call.args)
        mapping = call.inputs if call.inputs is not None else {d: d for d in call.depends_on}
        for param, dep in mapping.items():
            outcome = self.outcomes[dep]
            args[param] = outcome.value if outcome.ok else call.default
        if not failed:
            self._launch(call, args)
            return
        now = current_time()
        engine = self.engine
        why = "; ".join(f"{d} {self.outcomes[d].status.replace('_', ' ')}" for d in failed)
        if call.default is not MISSING:
            self._publish(
                DefaultUsed(
                    at=engine.wall_clock(), t=now, tool_id=call.tool, call_id=call.id, turn_id=self.turn_id,
                    dependencies=failed,
                )
            )  # fmt: skip
            self._launch(call, args, used_default=True)
            return
        engine.metrics.tool(call.tool).on_skipped(now)
        status = CallStatus.SKIPPED if call.optional else CallStatus.ESCALATED
        if call.optional:
            reason = f"optional; dependency did not succeed ({why})"
        else:
            reason = f"required but missing input ({why})"
        event_type: type[CallSkipped | CallEscalated] = CallSkipped if call.optional else CallEscalated
        self._publish(
            event_type(
                at=engine.wall_clock(), t=now, tool_id=call.tool, call_id=call.id, turn_id=self.turn_id,
                blocked_by=failed, reason=reason,
            )
        )  # fmt: skip
        self.outcomes[call.id] = CallOutcome(call.id, call.tool, status, reason=reason)
        self._settle(call.id)

    def _cut_off(self, call: ToolCall, *, stopped: bool) -> None:
        launched = call.id in self.launched
        if stopped:
            status, reason = CallStatus.CANCELED, "the turn was stopped"
        elif launched:
            status = CallStatus.TIMED_OUT
            reason = f"cut off by the turn's {self.turn.deadline_s:g}s deadline"
        else:
            status = CallStatus.TIMED_OUT
            reason = f"never started: the turn's {self.turn.deadline_s:g}s deadline came first"
        self.outcomes[call.id] = CallOutcome(call.id, call.tool, status, reason=reason, launched=launched)


def _outcome_of(call: ToolCall, result: CallResult, used_default: bool) -> CallOutcome:
    if result.partial:
        status = CallStatus.PARTIAL
    elif result.error is None:
        status = CallStatus.SUCCEEDED
    else:
        status = CallStatus.FAILED
    reason = result.reason
    if status is CallStatus.FAILED and result.error is not None:
        reason = f"{result.error.kind}: {result.error.message} → {result.decision}: {result.reason}"
    return CallOutcome(
        call.id,
        call.tool,
        status,
        value=result.value,
        error=result.error,
        reason=reason,
        attempts=result.attempts,
        served_by=result.served_by,
        used_default=used_default,
        decision=result.decision,
        launched=True,
    )


_PROBLEM_VERBS = {
    CallStatus.FAILED: "failed",
    CallStatus.TIMED_OUT: "timed out",
    CallStatus.SKIPPED: "was skipped",
    CallStatus.ESCALATED: "could not run",
    CallStatus.CANCELED: "was canceled",
}


def summarize(outcomes: Iterable[CallOutcome]) -> str:
    """The plain sentence for the user: "Completed flight search, but hotel search timed out."."""
    done: list[str] = []
    problems: dict[str, list[str]] = {}
    for o in outcomes:
        name = o.tool_id.replace("_", " ")
        if o.ok:
            extra = [f"via {o.served_by.replace('_', ' ')}"] if o.served_by else []
            extra += ["partial"] if o.status is CallStatus.PARTIAL else []
            extra += ["with a default input"] if o.used_default else []
            label = f"{name} ({', '.join(extra)})" if extra else name
            if label not in done:
                done.append(label)
        else:
            names = problems.setdefault(_PROBLEM_VERBS[o.status], [])
            if name not in names:
                names.append(name)
    trouble = [f"{_join(names)} {verb}" for verb, names in problems.items()]
    if not done and not trouble:
        return "Nothing to do."
    if not trouble:
        return f"Completed {_join(done)}."
    if not done:
        text = _join(trouble)
        return f"{text[0].upper()}{text[1:]}."
    return f"Completed {_join(done)}, but {_join(trouble)}."


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
