"""Turns of any depth or width run and fail cleanly: nothing recurses per call (issue 10 §9)."""

from __future__ import annotations

import sys

import anyio
import pytest

from engine.outcomes import CallStatus
from engine.turn import ToolCall, Turn, TurnError
from tests.engine.conftest import Scripted, new_engine

pytestmark = pytest.mark.anyio

DEEP = 10_000
LADDER = 2_000
assert sys.getrecursionlimit() < LADDER, "deeper than Python's recursion limit"


def chain(n: int, *, reverse: bool = False) -> Turn:
    calls = [ToolCall("c0", "first")] + [
        ToolCall(f"c{i}", "step", {"i": i}, depends_on=(f"c{i - 1}",), inputs={}) for i in range(1, n)
    ]
    return Turn(calls[::-1] if reverse else calls, deadline_s=None)


async def ok() -> str:
    return "ok"


def test_a_chain_listed_in_reverse_is_a_valid_turn() -> None:
    turn = chain(DEEP, reverse=True)
    assert turn.ranks["c0"][0] == 0 and turn.ranks[f"c{DEEP - 1}"][0] == DEEP - 1


def test_a_long_cycle_is_found_without_recursion() -> None:
    calls = [ToolCall(f"c{i}", "step", depends_on=(f"c{(i + 1) % DEEP}",)) for i in range(DEEP)]
    with pytest.raises(TurnError, match="dependency cycle c0 → c1 → c2"):
        Turn(calls)


async def test_a_deep_chain_runs_to_the_end() -> None:
    engine = await new_engine()
    engine.register("first", ok)
    step = engine.register("step", Scripted("ok"))
    result = await engine.run_turn(chain(DEEP))
    assert result.ok and step.calls == DEEP - 1


async def test_a_deep_chain_whose_first_call_fails_escalates_the_rest() -> None:
    engine = await new_engine()
    engine.register("first", Scripted(ValueError("bad input")))
    step = engine.register("step", Scripted("ok"))
    result = await engine.run_turn(chain(DEEP))
    assert result.outcomes["c0"].status is CallStatus.FAILED
    assert {result.outcomes[f"c{i}"].status for i in range(1, DEEP)} == {CallStatus.ESCALATED}
    assert step.calls == 0
    assert len(result.trace.of("CallEscalated")) == DEEP - 1


async def test_a_wide_fan_out_runs_and_fails_cleanly() -> None:
    engine = await new_engine()
    engine.register("first", Scripted(ValueError("bad input"), "ok"))
    step = engine.register("step", Scripted("ok"))
    fan = [ToolCall("root", "first")] + [
        ToolCall(f"f{i}", "step", depends_on=("root",), inputs={}) for i in range(DEEP)
    ]
    failed = await engine.run_turn(Turn(fan, deadline_s=None))
    assert sum(o.status is CallStatus.ESCALATED for o in failed.outcomes.values()) == DEEP
    done = await engine.run_turn(Turn(fan, deadline_s=None))
    assert done.ok and step.calls == DEEP


async def slow_step(delay: float) -> str:
    await anyio.sleep(delay)
    return "ok"


async def test_a_deep_ladder_of_parallel_steps_runs_in_constant_stack() -> None:
    """Each level releases two calls at once; the one run in place finishes last and releases
    the next level: a task that recursed into each level would overflow."""
    engine = await new_engine()
    engine.register("first", ok)
    engine.register("step", slow_step)
    calls = [ToolCall("l0a", "first"), ToolCall("l0b", "first")]
    for i in range(1, LADDER):
        deps = (f"l{i - 1}a", f"l{i - 1}b")
        calls += [
            ToolCall(f"l{i}{s}", "step", {"delay": d}, deps, inputs={}) for s, d in (("a", 0.001), ("b", 0))
        ]
    result = await engine.run_turn(Turn(calls, deadline_s=None))
    assert result.ok and len(result.outcomes) == 2 * LADDER
