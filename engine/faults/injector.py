"""The injector: for each attempt, which fault of a plan applies; and what the engine asks of one.

The engine types against :class:`AttemptInjector` and :class:`InjectedAttempt` (a replay
injects recorded outcomes through the same protocols); :class:`FaultInjector` is the one
that reads a :class:`~engine.faults.plan.FaultPlan`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol

from engine.faults.models import CHAOS_FAULT_TYPES, Fault, Invoke, StreamCut, ToolCallFault
from engine.faults.plan import FaultPlan

__all__ = [
    "AttemptInjector",
    "FaultInjector",
    "FiredFault",
    "InjectedAttempt",
    "chaos_unit",
]


def chaos_unit(
    seed: int, tool_id: str, call: int, attempt: int, turn_id: str | None, call_id: str | None
) -> float:
    """The chaos draw in [0, 1) for one attempt: a hash of its identity, never of the pick order."""
    key = json.dumps([seed, tool_id, call, attempt, turn_id, call_id])
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass(frozen=True, slots=True)
class FiredFault:
    """One injected fault, for the trace."""

    tool_id: str
    call: int
    attempt: int
    turn_id: str | None
    call_id: str | None
    fault_type: str
    source: str
    """Where it came from: ``steps[0].sequence[1]`` or ``chaos``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InjectedAttempt(Protocol):
    """What an attempt does instead of (or around) the tool: a fault, or a replayed outcome."""

    @property
    def fault_type(self) -> str | None: ...

    @property
    def is_ok(self) -> bool: ...

    async def run(self, invoke: Invoke) -> Any: ...

    def stream_cut(self) -> StreamCut | None:
        """How the attempt cuts a streaming tool's stream (the tool runs, its chunks wrapped), or
        None when :meth:`run` runs in the tool's place."""
        ...


class AttemptInjector(Protocol):
    """Consulted by the engine before every attempt; ordinals come from the engine, never timing."""

    def pick(
        self,
        tool_id: str,
        *,
        call: int,
        attempt: int,
        turn_id: str | None = None,
        call_id: str | None = None,
    ) -> InjectedAttempt | None: ...


class FaultInjector:
    """Answers, for each attempt, which fault of a :class:`FaultPlan` applies.

    ``counters`` counts injected faults per type and ``fired`` lists them (``ok`` steps are
    neither). A ``{tool}`` step consumes one element per attempt it governs, in ``pick()``
    order; ``{tool, call}`` and ``{turn, call_id}`` steps index their sequence by attempt.
    """

    _NO_STEP: ClassVar[int] = -1

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.counters: dict[str, int] = {}
        self.fired: list[FiredFault] = []
        self._by_call_id: dict[tuple[str, str, str | None], int] = {}
        self._by_call: dict[tuple[str, int], int] = {}
        self._by_tool: dict[str, int] = {}
        for index, step in enumerate(plan.steps):
            m = step.match
            if m.turn is not None and m.call_id is not None:
                self._by_call_id[(m.turn, m.call_id, m.tool)] = index
            elif m.tool is not None and m.call is not None:
                self._by_call[(m.tool, m.call)] = index
            elif m.tool is not None:
                self._by_tool[m.tool] = index
        self._cursors = [0] * len(plan.steps)
        self._chaos: list[tuple[float, Fault]] = []
        if plan.chaos is not None:
            total = 0.0
            rated = sorted(plan.chaos.rates.items(), key=lambda item: CHAOS_FAULT_TYPES.index(item[0]))
            for fault_type, rate in rated:
                if rate > 0:
                    total += rate
                    self._chaos.append((total, plan.chaos.defaults[fault_type]))

    def reset(self) -> None:
        """Start over: sequence cursors, counters and the fired list (the plan is kept)."""
        self._cursors = [0] * len(self.plan.steps)
        self.counters = {}
        self.fired = []

    def pick(
        self,
        tool_id: str,
        *,
        call: int,
        attempt: int,
        turn_id: str | None = None,
        call_id: str | None = None,
    ) -> Fault | None:
        """The fault for this attempt, an ``ok`` step, or None (no plan applies: run the tool).

        ``call`` is the tool's 1-based call ordinal assigned at launch; ``attempt`` the
        1-based attempt within that call.
        """
        if call < 1 or attempt < 1:
            raise ValueError(f"call and attempt are 1-based (got call={call}, attempt={attempt})")
        fault: Fault | None = None
        source = "chaos"
        index = self._step_for(tool_id, call, turn_id, call_id)
        if index != self._NO_STEP:
            step = self.plan.steps[index]
            if step.match.level == "tool":
                position = self._cursors[index]
                self._cursors[index] = position + 1
            else:
                position = attempt - 1
            if position >= len(step.sequence) and step.repeat:
                position = len(step.sequence) - 1
            if position < len(step.sequence):
                fault = step.sequence[position]
                source = f"steps[{index}].sequence[{position}]"
        if fault is None and self._chaos:
            fault = self._draw(tool_id, call, attempt, turn_id, call_id)
        if fault is not None and not fault.is_ok:
            self._fired(FiredFault(tool_id, call, attempt, turn_id, call_id, fault.fault_type, source))
        return fault

    def tool_call_fault(
        self, tool_id: str, *, turn_id: str | None, call_id: str | None
    ) -> ToolCallFault | None:
        """Before a model's tool call runs: a ``tool_call_fault`` a step puts first for it.

        Only ``{turn, call_id}`` and ``{tool}`` steps can say (the call has no ordinal yet).
        A fault found is consumed, counted and recorded (as attempt 0) like any other.
        """
        index = self._step_for(tool_id, 0, turn_id, call_id)
        if index == self._NO_STEP:
            return None
        step = self.plan.steps[index]
        # call 0 matches no {tool, call} step (ordinals are 1-based): a {tool} or {turn, call_id} one
        position = self._cursors[index] if step.match.level == "tool" else 0
        if position >= len(step.sequence):
            return None
        fault = step.sequence[position]
        if not isinstance(fault, ToolCallFault):
            return None
        if step.match.level == "tool":
            self._cursors[index] = position + 1
        source = f"steps[{index}].sequence[{position}]"
        self._fired(FiredFault(tool_id, 0, 0, turn_id, call_id, fault.fault_type, source))
        return fault

    def _fired(self, fired: FiredFault) -> None:
        """Count and record an injected fault."""
        self.counters[fired.fault_type] = self.counters.get(fired.fault_type, 0) + 1
        self.fired.append(fired)

    def _step_for(self, tool_id: str, call: int, turn_id: str | None, call_id: str | None) -> int:
        if turn_id is not None and call_id is not None and self._by_call_id:
            turn_id = turn_id.rsplit("/", 1)[-1]  # "run-2/plan-trip" is turn plan-trip of a run
            index = self._by_call_id.get((turn_id, call_id, tool_id))
            if index is None:
                index = self._by_call_id.get((turn_id, call_id, None))
            if index is not None:
                return index
        index = self._by_call.get((tool_id, call))
        if index is not None:
            return index
        return self._by_tool.get(tool_id, self._NO_STEP)

    def _draw(
        self, tool_id: str, call: int, attempt: int, turn_id: str | None, call_id: str | None
    ) -> Fault | None:
        assert self.plan.chaos is not None
        u = chaos_unit(self.plan.chaos.seed, tool_id, call, attempt, turn_id, call_id)
        for cumulative, fault in self._chaos:
            if u < cumulative:
                return fault
        return None
