"""A turn: the tool calls of one agent step, with declared dependencies, under one deadline.

A :class:`Turn` is a DAG of :class:`ToolCall`. Its structure is checked when it is made, without
recursion (a 10,000-call chain in any order is fine): an invalid turn cannot exist. How a turn
runs is :mod:`engine.runner`; what it came to, :mod:`engine.outcomes`.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import TripwireError, jsonable
from engine.handler import MISSING
from engine.outcomes import CallOutcome, CallStatus, summarize


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
    idempotency_key: str | None = None
    """The call's own idempotency key, for a keyed tool (the manifest's ``idempotency``); None: the
    engine derives ``<turn id>:<call id>``. The LLM executor sets the model's tool-call id."""

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
    """The default per-turn timeout, 5 minutes (spec-map timeout.turn-default); None for no deadline."""
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
                    **({"idempotency_key": c.idempotency_key} if c.idempotency_key is not None else {}),
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
                c.get("idempotency_key"),
            )
            for c in spec["calls"]
        ]
        return cls(calls, spec.get("id"), spec.get("deadline_s"))


class TurnError(TripwireError, ValueError):
    """A turn that cannot run; nothing ran. ``str()`` is the first problem, on one line."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{self.problems[0]}{more}")


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
