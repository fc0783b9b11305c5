"""Turns: the tool calls of one agent step, with declared dependencies, under one deadline.

A :class:`Turn` is a DAG of :class:`ToolCall`. Independent calls run concurrently; a call
starts when its dependencies have succeeded and receives their outputs as arguments. When
a dependency fails, a dependant runs with its declared ``default`` if it has one, is skipped
when optional, and is escalated when required (spec §5) — transitively. At the turn's
deadline the turn returns at once with what it has: unfinished calls are cancelled and
reported as timed out (spec §4.2, as the issue settles it).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import anyio

from engine.engine import CallContext
from engine.errors import TurnNotPersisted, jsonable
from engine.events import (
    CallEscalated,
    CallSkipped,
    DefaultUsed,
    DependencyBlocked,
    Event,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
    allocate,
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
    depends_on: Sequence[str] = ()
    """Stored as a tuple."""
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
    """A DAG of calls. Its structure is checked when it is made: an invalid turn cannot exist.

    Raises :class:`TurnError` for duplicate ids, dangling or self dependencies, cycles,
    ``inputs`` from a non-dependency and a non-positive deadline. Whether the tools exist is
    checked when the turn runs.
    """

    calls: Sequence[ToolCall]
    """Stored as a tuple."""
    id: str | None = None
    deadline_s: float | None = 300.0
    """The spec's per-turn timeout (5 minutes); None for no deadline."""
    by_id: Mapping[str, ToolCall] = field(init=False, repr=False, compare=False)
    dependants: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    """Call id → the calls that depend on it, in turn order."""
    ranks: Mapping[str, tuple[int, int]] = field(init=False, repr=False, compare=False)
    """Call id → (dependency depth, position): the canonical order of simultaneous events."""
    ids: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The call ids, in turn order."""
    roots: tuple[ToolCall, ...] = field(init=False, repr=False, compare=False)
    """The calls without dependencies, in turn order: they start with the turn."""
    blockers: Mapping[str, int] = field(init=False, repr=False, compare=False)
    """Call id → how many distinct dependencies it waits for (calls that have any)."""
    tools: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The distinct tools the calls use, in turn order."""
    sources: Mapping[str, tuple[tuple[str, str], ...]] = field(init=False, repr=False, compare=False)
    """Call id → (argument name, dependency id) for each dependency output it receives."""
    _spec: dict[str, Any] | None = field(init=False, default=None, repr=False, compare=False)
    _success_summary: str | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        calls = tuple(self.calls)
        object.__setattr__(self, "calls", calls)
        problems = _structure_problems(self)
        depth = _depths(calls)
        if depth is None and (cycle := _find_cycle(calls)):
            problems.append(f"{self.label}: dependency cycle {' → '.join(cycle)}")
        if problems:
            raise TurnError(problems)
        dependants: dict[str, list[str]] = {c.id: [] for c in calls}
        blockers: dict[str, int] = {}
        for call in calls:
            distinct = dict.fromkeys(call.depends_on)  # a dependency named twice is waited for once
            for dep in distinct:
                dependants[dep].append(call.id)
            if distinct:
                blockers[call.id] = len(distinct)
        object.__setattr__(self, "by_id", {c.id: c for c in calls})
        object.__setattr__(self, "dependants", {cid: tuple(ds) for cid, ds in dependants.items()})
        object.__setattr__(self, "ids", tuple(c.id for c in calls))
        object.__setattr__(self, "roots", tuple(c for c in calls if not c.depends_on))
        object.__setattr__(self, "blockers", blockers)
        object.__setattr__(self, "tools", tuple(dict.fromkeys(c.tool for c in calls)))
        sources = {
            c.id: tuple((c.inputs if c.inputs is not None else {d: d for d in c.depends_on}).items())
            for c in calls
        }
        object.__setattr__(self, "sources", sources)
        assert depth is not None, "cycles and dangling dependencies were refused above"
        object.__setattr__(self, "ranks", {c.id: (depth[c.id], i) for i, c in enumerate(calls)})

    @property
    def label(self) -> str:
        return f"turn {self.id}" if self.id else "turn"

    @property
    def spec(self) -> dict[str, Any]:
        """The turn as JSON-safe data (built once); :meth:`from_spec` rebuilds the turn."""
        if self._spec is None:
            object.__setattr__(self, "_spec", self._make_spec())
        assert self._spec is not None
        return self._spec

    @property
    def success_summary(self) -> str:
        """What :func:`summarize` says when every call simply succeeded (no alternative, default or
        partial result): that depends only on the turn's tools, so it is worked out once."""
        if self._success_summary is None:
            plain = [CallOutcome(c.id, c.tool, CallStatus.SUCCEEDED) for c in self.calls]
            object.__setattr__(self, "_success_summary", summarize(plain))
        assert self._success_summary is not None
        return self._success_summary

    def _make_spec(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "deadline_s": self.deadline_s,
            "calls": [
                {
                    "id": c.id,
                    "tool": c.tool,
                    "args": jsonable(dict(c.args)),
                    "depends_on": list(c.depends_on),
                    "optional": c.optional,
                    **({"default": jsonable(c.default)} if c.default is not MISSING else {}),
                    **({"inputs": dict(c.inputs)} if c.inputs is not None else {}),
                }
                for c in self.calls
            ],
        }

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Turn:
        calls = [
            ToolCall(
                c["id"],
                c["tool"],
                c.get("args") or {},
                tuple(c.get("depends_on") or ()),
                bool(c.get("optional", False)),
                c.get("default", MISSING),
                c.get("inputs"),
            )
            for c in spec["calls"]
        ]
        return cls(calls, spec.get("id"), spec.get("deadline_s"))


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
    INTERRUPTED = "interrupted"
    """Still running when the turn's caller was cancelled (stored turns only: run_turn raised)."""


_OK = (CallStatus.SUCCEEDED, CallStatus.PARTIAL)
_SUCCEEDED = CallStatus.SUCCEEDED.value
_CUT_OFF = (CallStatus.TIMED_OUT, CallStatus.CANCELED, CallStatus.INTERRUPTED)
_time_of = operator.attrgetter("t")
_LANE_TASK = f"{__name__}.TurnRunner._lane"
"""The name anyio gives a lane's task: given, it is not worked out again for every task."""


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
        """Seed 004: a turn fails only when it had calls and none of them executed."""
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


def validate(turn: Turn, tools: Collection[str]) -> None:
    """Reject a turn that names tools the engine does not have, before anything runs."""
    for tool in turn.tools:  # each distinct tool once
        if tool not in tools:
            break
    else:
        return
    unknown = [call for call in turn.calls if call.tool not in tools]
    if unknown:
        listed = ", ".join(sorted(tools))
        raise TurnError(
            f"{turn.label}: call {call.id!r} uses unknown tool {call.tool!r} (known: {listed})"
            for call in unknown
        )


def _structure_problems(turn: Turn) -> list[str]:
    problems: list[str] = []
    name = turn.label
    seen: set[str] = set()
    for call in turn.calls:
        if call.id in seen:
            problems.append(f"{name}: call id {call.id!r} is used twice")
        seen.add(call.id)
    if turn.deadline_s is not None and not turn.deadline_s > 0:
        problems.append(f"{name}: deadline_s must be positive, got {turn.deadline_s!r}")
    for call in turn.calls:
        for dep in call.depends_on:
            if dep == call.id:
                problems.append(f"{name}: call {call.id!r} depends on itself")
            elif dep not in seen:
                problems.append(f"{name}: call {call.id!r} depends on {dep!r}, which is not in the turn")
        for param, dep in (call.inputs or {}).items():
            if dep not in call.depends_on:
                problems.append(
                    f"{name}: call {call.id!r} takes input {param!r} from {dep!r}, not a dependency"
                )
    return problems


def _depths(calls: Sequence[ToolCall]) -> dict[str, int] | None:
    """Each call's dependency depth (roots are 0), or None when the calls hold a cycle.

    Kahn's algorithm, iterative: a 10,000-call chain listed in any order costs no recursion.
    """
    waiting = {c.id: len(set(c.depends_on)) for c in calls}
    dependants: dict[str, list[str]] = {c.id: [] for c in calls}
    for call in calls:
        for dep in set(call.depends_on):
            if dep in dependants:
                dependants[dep].append(call.id)
    depth = {c.id: 0 for c in calls}
    ready = [cid for cid, n in waiting.items() if n == 0]
    done = 0
    while ready:
        cid = ready.pop()
        done += 1
        for dependant in dependants[cid]:
            depth[dependant] = max(depth[dependant], depth[cid] + 1)
            waiting[dependant] -= 1
            if waiting[dependant] == 0:
                ready.append(dependant)
    return depth if done == len(waiting) else None


def _find_cycle(calls: Sequence[ToolCall]) -> list[str] | None:
    """A dependency cycle as ``[a, b, …, a]``, or None; an iterative depth-first search."""
    graph = {c.id: [d for d in c.depends_on if d != c.id] for c in calls}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    for root in graph:
        if root in state:
            continue
        path: list[str] = [root]
        branches = [iter(graph[root])]
        state[root] = 1
        while branches:
            nxt = next(branches[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                branches.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt in graph and nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                branches.append(iter(graph[nxt]))
    return None


@dataclass(slots=True)
class _Ready:
    """A call whose dependencies are settled, with the arguments it will run with."""

    call: ToolCall
    args: dict[str, Any]
    used_default: bool = False


class TurnRunner:
    """Runs one turn on an engine; see :meth:`engine.Engine.run_turn`."""

    __slots__ = (
        "_tasks",
        "calls",
        "deadline",
        "dependants",
        "engine",
        "handler",
        "launched",
        "outcomes",
        "seed",
        "stop",
        "stopped",
        "succeeded",
        "trace",
        "turn",
        "turn_id",
        "waiting",
    )

    def __init__(
        self,
        engine: Engine,
        turn: Turn,
        *,
        stop: anyio.Event | None = None,
        handler: ErrorHandler | None = None,
        seed: str | None = None,
    ) -> None:
        validate(turn, engine.tool_ids)  # the structure was checked when the turn was made
        self.engine = engine
        self.turn = turn
        self.stop = stop
        self.handler = handler
        self.calls = turn.by_id
        self.dependants = turn.dependants
        self.outcomes: dict[str, CallOutcome] = {}
        self.succeeded = 0
        """How many outcomes simply succeeded (no alternative, default or partial result)."""
        self.launched: set[str] = set()
        self.waiting = dict(turn.blockers)
        """Call id → how many of its dependencies are not final yet."""
        self.stopped = False
        self.turn_id = turn.id or engine.next_turn_id()
        self.trace = TurnTrace(self.turn_id)
        # One draw per turn seeds every call's jitter: retries never depend on task scheduling.
        self.seed = seed or f"{engine.rng.getrandbits(64):x}"
        self.deadline: float | None = None
        self._tasks: anyio.abc.TaskGroup | None = None

    async def run(self) -> TurnResult:
        engine, turn, turn_id = self.engine, self.turn, self.turn_id
        clock = engine.clock
        start = clock()
        self.deadline = start + turn.deadline_s if turn.deadline_s is not None else None
        breakers, manifests = (
            engine.starting_state((c.tool for c in turn.calls), start) if engine.record else (None, None)
        )
        started = allocate(TurnStarted)
        TurnStarted.__init__(
            started, at=engine.wall_clock(), t=start, turn_id=turn_id, calls=turn.ids,
            deadline_ms=turn.deadline_s * 1000.0 if turn.deadline_s is not None else None,
            spec=turn.spec, seed=self.seed, breakers=breakers, manifests=manifests,
        )  # fmt: skip
        self._publish(started)
        ready = [_Ready(c, dict(c.args)) for c in turn.roots]
        try:
            if self.stop is None:
                cut = await self._run_calls(ready)
            else:
                async with anyio.create_task_group() as watcher:
                    watcher.start_soon(self._watch_stop, self.stop)
                    cut = await self._run_calls(ready)
                    watcher.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():  # the caller was cancelled: the engine or host stops
            self._interrupted(start)
            raise
        now = clock()
        stopped = self.stopped
        unfinished: tuple[str, ...] = ()
        if len(self.outcomes) < len(turn.ids):  # cut off by the deadline or a stop
            unfinished = tuple(cid for cid in turn.ids if cid not in self.outcomes)
        timed_out = cut and not stopped
        for cid in unfinished:
            self._cut_off(self.calls[cid], stopped=stopped)
        if unfinished and stopped:
            self._publish(TurnCanceled(at=engine.wall_clock(), t=now, turn_id=turn_id, unfinished=unfinished))
        elif timed_out:
            assert turn.deadline_s is not None
            self._publish(
                TurnDeadlineExceeded(
                    at=engine.wall_clock(), t=now, turn_id=turn_id, deadline_ms=turn.deadline_s * 1000.0,
                    unfinished=unfinished,
                )
            )  # fmt: skip
        self._sort_trace()
        outcomes = {cid: self.outcomes[cid] for cid in turn.ids}
        if self.succeeded == len(outcomes):  # nearly every turn: nothing to look into
            summary = turn.success_summary
            statuses = dict.fromkeys(turn.ids, _SUCCEEDED)
            executed, ok = len(outcomes), True
        else:
            summary = summarize(outcomes.values())
            statuses = {cid: o.status.value for cid, o in outcomes.items()}
            executed = sum(o.executed for o in outcomes.values())
            ok = all(o.ok for o in outcomes.values())
        result = TurnResult(
            turn_id, outcomes, self.trace, summary, timed_out, stopped and bool(unfinished), now - start
        )
        finished = allocate(TurnFinished)
        TurnFinished.__init__(
            finished, at=engine.wall_clock(), t=now, turn_id=turn_id, summary=summary, statuses=statuses,
            executed=executed, duration_ms=(now - start) * 1000.0, outcome=result._outcome(executed, ok),
        )  # fmt: skip
        self._publish(finished)
        if engine.recorder is not None:  # durable when run_turn returns, or it says it is not
            problem = await engine.recorder.turn_finished(turn_id)
            if problem is not None:
                raise TurnNotPersisted(problem.path, problem.problem, result)
        return result

    def _interrupted(self, start: float) -> None:
        """End the turn's record as ``interrupted``: its caller was cancelled mid-turn.

        Nothing can be awaited any more; the events are published so that a recorder stores
        the turn as finished, with the calls that were in flight, instead of running for ever.
        """
        engine, turn = self.engine, self.turn
        now = engine.clock()
        unfinished = tuple(cid for cid in turn.ids if cid not in self.outcomes)
        in_flight = tuple(cid for cid in unfinished if cid in self.launched)
        self._publish(
            TurnInterrupted(
                at=engine.wall_clock(),
                t=now,
                turn_id=self.turn_id,
                in_flight=in_flight,
                unfinished=unfinished,
            )
        )
        outcomes = dict(self.outcomes)
        for cid in unfinished:
            call = self.calls[cid]
            launched = cid in self.launched
            reason = "in flight when the turn's caller was cancelled" if launched else "never started"
            outcomes[cid] = CallOutcome(
                cid, call.tool, CallStatus.INTERRUPTED, reason=reason, launched=launched
            )
        ordered = [outcomes[cid] for cid in turn.ids]
        self._publish(
            TurnFinished(
                at=engine.wall_clock(), t=now, turn_id=self.turn_id,
                statuses={o.call_id: o.status.value for o in ordered}, summary=summarize(ordered),
                executed=sum(o.executed for o in ordered), duration_ms=(now - start) * 1000.0,
                outcome="interrupted",
            )
        )  # fmt: skip

    def _sort_trace(self) -> None:
        """Put the trace in canonical order (see :meth:`_trace_order`).

        Events are appended as they happen, so the trace is nearly always in that order
        already: one pass checks it, and only a trace that is not gets sorted.
        """
        events = self.trace.events
        times = list(map(_time_of, events))
        if all(map(operator.lt, times, times[1:])):  # no two at the same instant: in order
            return
        key = self._trace_order
        for before, after in pairwise(events):
            if after.t < before.t or (after.t == before.t and key(after) < key(before)):
                events.sort(key=key)
                return

    def _trace_order(self, event: Event) -> tuple[float, int, int]:
        """Time, then — for events at the same instant — the call's rank.

        Task scheduling decides how simultaneous events of different calls interleave; the
        trace does not depend on it. A call ranks by dependency depth, then turn order, so
        a dependant never comes before what released it; a call's own events keep their order.
        """
        if isinstance(event, TurnStarted):
            return (event.t, -1, 0)
        call_id = getattr(event, "call_id", None)
        rank = self.turn.ranks.get(call_id, (1 << 30, 0)) if call_id is not None else (1 << 30, 0)
        return (event.t, *rank)

    async def _run_calls(self, ready: list[_Ready]) -> bool:
        """Run the turn's calls in one task group whose scope is the turn's deadline.

        Returns whether the deadline (or a stop) cut the turn off.
        """
        timeouts = self.engine.timeouts
        bucket = None
        try:
            async with self.engine.new_task_group() as self._tasks:
                scope = self._tasks.cancel_scope
                if self.stopped:  # the stop came before the calls started
                    scope.cancel()
                if self.deadline is not None and self.turn.deadline_s is not None:
                    if timeouts.running:  # one supervisor enforces every deadline: no timer per turn
                        bucket = timeouts.watch(self.turn.deadline_s, scope, self.deadline)
                    else:
                        scope.deadline = self.deadline
                await self._start(ready)
        finally:
            # Only once every call has ended: the first call's end is not the turn's.
            if bucket is not None:
                timeouts.done(bucket, scope)
        return scope.cancelled_caught

    async def _watch_stop(self, stop: anyio.Event) -> None:
        await stop.wait()
        self.stopped = True
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()

    def _publish(self, event: Any) -> None:
        self.engine.publish(event, self.trace.events)

    async def _start(self, ready: list[_Ready]) -> None:
        """Run ready calls: all but the first in new tasks, the first in this one."""
        if ready:
            await self._lane(*self._launch(ready))

    def _launch(self, ready: list[_Ready]) -> tuple[_Ready, CallContext]:
        """Start all but the first ready call in new tasks; returns the first, for this task to run.

        Launch order (and so call ordinals) is decided here, synchronously: deterministic
        whatever order the tasks then run in.
        """
        contexts = [self._context(item.call) for item in ready]
        assert self._tasks is not None
        for item, ctx in zip(ready[1:], contexts[1:], strict=True):
            self._tasks.start_soon(self._lane, item, ctx, name=_LANE_TASK)
        return ready[0], contexts[0]

    async def _lane(self, item: _Ready, ctx: CallContext) -> None:
        """Run a call; then carry on in this task with what it released (a task saved per edge).

        A loop, not recursion: a chain of any length runs in one task at constant stack depth.
        """
        execute, handler, dependants = self.engine.execute, self.handler, self.dependants
        while True:
            call = item.call
            result = await execute(call.tool, item.args, ctx, handler)
            outcome = self.outcomes[call.id] = _outcome_of(call, result, item.used_default)
            if outcome.status is CallStatus.SUCCEEDED and not outcome.served_by and not item.used_default:
                self.succeeded += 1
            if not dependants[call.id]:
                return
            ready: list[_Ready] = []
            self._settle(call.id, ready)
            if not ready:
                return
            if len(ready) > 1:
                item, ctx = self._launch(ready)
            else:
                item, ctx = ready[0], self._context(ready[0].call)

    def _context(self, call: ToolCall) -> CallContext:
        self.launched.add(call.id)
        # Positional: keywords would cost a dict per call.
        return CallContext(
            call.id, self.turn_id, self.deadline, call.optional, self.dependants[call.id], self.trace.events,
            self.seed, self.engine.next_call_ordinal(call.tool),
        )  # fmt: skip

    def _settle(self, call_id: str, ready: list[_Ready]) -> None:
        """A call is final: resolve the dependants that were waiting only for it, transitively.

        Depth-first like the recursion it replaces (so launch order is unchanged), on an explicit
        stack: a cascade through 10,000 calls costs no Python recursion.
        """
        waiting, dependants, calls = self.waiting, self.dependants, self.calls
        stack = [iter(dependants[call_id])]
        while stack:
            dependant = next(stack[-1], None)
            if dependant is None:
                stack.pop()
                continue
            waiting[dependant] -= 1
            if not waiting[dependant] and self._resolve(calls[dependant], ready):
                stack.append(iter(dependants[dependant]))  # blocked: final too, its dependants next

    def _resolve(self, call: ToolCall, ready: list[_Ready]) -> bool:
        """Every dependency of ``call`` is final: run it, run it with its default, or cascade.

        Returns whether the call was blocked (skipped or escalated): final without running.
        """
        outcomes = self.outcomes
        failed: tuple[str, ...] = ()
        for dep in call.depends_on:
            if not outcomes[dep].ok:
                failed += (dep,)
        args = dict(call.args)
        for param, dep in self.turn.sources[call.id]:
            outcome = outcomes[dep]
            args[param] = outcome.value if outcome.ok else call.default
        if not failed:
            ready.append(_Ready(call, args))
            return False
        now = self.engine.clock()
        engine = self.engine
        why = "; ".join(f"{d} {self.outcomes[d].status.replace('_', ' ')}" for d in failed)
        if call.default is not MISSING:
            self._publish(
                DefaultUsed(
                    at=engine.wall_clock(), t=now, tool_id=call.tool, call_id=call.id, turn_id=self.turn_id,
                    blocked_by=failed, reason=f"dependency did not succeed ({why}); ran with its default",
                )
            )  # fmt: skip
            ready.append(_Ready(call, args, used_default=True))
            return False
        engine.metrics.tool(call.tool).on_skipped(now)
        status = CallStatus.SKIPPED if call.optional else CallStatus.ESCALATED
        if call.optional:
            reason = f"optional; dependency did not succeed ({why})"
        else:
            reason = f"required but missing input ({why})"
        event_type: type[DependencyBlocked] = CallSkipped if call.optional else CallEscalated
        self._publish(
            event_type(
                at=engine.wall_clock(), t=now, tool_id=call.tool, call_id=call.id, turn_id=self.turn_id,
                blocked_by=failed, reason=reason,
            )
        )  # fmt: skip
        self.outcomes[call.id] = CallOutcome(call.id, call.tool, status, reason=reason)
        return True

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
    error, reason = result.error, result.reason
    if result.partial:
        status = CallStatus.PARTIAL
    elif error is None:
        status = CallStatus.SUCCEEDED
    else:
        status = CallStatus.FAILED
        reason = f"{error.kind}: {error.message} → {result.decision}: {reason}"
    # Positional: every call of a turn makes one.
    return CallOutcome(
        call.id, call.tool, status, result.value, error, reason, result.attempts, result.served_by,
        used_default, result.decision, True,
    )  # fmt: skip


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
