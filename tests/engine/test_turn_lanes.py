"""How a turn's concurrent calls (its lanes) start, end and fail, on both backends alike.

On asyncio the lanes are the loop's own tasks, joined and cancelled by the turn (issue 15 §5:
anyio's spawn cost a wide turn a third of its time); these hold it to what anyio's task group
does on every backend: an unexpected error in a lane ends the turn with the error raised in a
group and its siblings cancelled, a stop cancels every lane, a tool's shielded section holds
when its turn is cut off, and a finished turn leaves nothing for the cyclic garbage collector.
"""

from __future__ import annotations

import gc

import anyio
import pytest

from engine import ToolManifest
from engine.outcomes import CallStatus, TurnResult
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted, after, new_engine, recorded

pytestmark = pytest.mark.anyio


class Boom(BaseException):
    """Not an ``Exception``: the engine lets it through, as it does ``KeyboardInterrupt``."""


@pytest.mark.parametrize("failing", [0, 1], ids=["first-call", "spawned-lane"])
async def test_an_unexpected_error_in_a_lane_cancels_its_siblings_and_is_raised(failing: int) -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    slow = Scripted("late", duration=1000)
    engine.register("slow", slow)
    engine.register("boom", Scripted(after(5, Boom())))
    tools = ["slow", "slow"]
    tools[failing] = "boom"
    start = anyio.current_time()
    with pytest.raises(BaseExceptionGroup) as raised:
        await engine.run_turn(Turn([ToolCall(f"c{i}", tool) for i, tool in enumerate([*tools, "slow"])]))
    assert raised.group_contains(Boom)
    assert anyio.current_time() - start == pytest.approx(5.0)
    assert slow.cancelled == 2, "every sibling was cancelled"


async def test_a_stop_cancels_every_lane_in_flight() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    engine.register("first", Scripted("ok", duration=1))
    slow = Scripted("late", duration=1000)
    engine.register("slow", slow)
    events = recorded(engine)
    stop = anyio.Event()
    turn = Turn(
        [
            ToolCall("a", "first"),
            ToolCall("b", "slow", depends_on=("a",), inputs={}),
            ToolCall("c", "slow", depends_on=("a",), inputs={}),
        ]
    )
    results: list[TurnResult] = []

    async def run() -> None:
        results.append(await engine.run_turn(turn, stop=stop))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(1.5)
        stop.set()
    (result,) = results
    assert result.canceled
    assert [result.outcomes[c].status for c in "abc"] == [
        CallStatus.SUCCEEDED, CallStatus.CANCELED, CallStatus.CANCELED,
    ]  # fmt: skip
    assert slow.calls == 2 and slow.cancelled == 2
    assert events.types().count("AttemptStarted") == 3


async def test_a_turn_leaves_no_garbage_for_the_cyclic_collector() -> None:
    engine = await new_engine()
    engine.register("ok", Scripted("ok"))
    engine.register("slow", Scripted("ok", duration=1))
    turn = Turn(
        [ToolCall("a", "ok"), ToolCall("b", "slow"), ToolCall("c", "ok", depends_on=("a", "b"), inputs={})]
        + [ToolCall(f"f{i}", "ok") for i in range(20)]
    )
    await engine.run_turn(turn)  # the first turn fills caches (its spec, the tools' tallies)
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            await engine.run_turn(turn)
        left = gc.collect()
    finally:
        gc.enable()
    assert left == 0


@pytest.mark.parametrize("position", [0, 1], ids=["first-call", "spawned-lane"])
async def test_a_shielded_section_of_a_tool_holds_when_the_turn_is_cut_off(position: int) -> None:
    finished: list[float] = []

    async def careful() -> str:
        with anyio.CancelScope(shield=True):  # e.g. a commit that must not be torn
            await anyio.sleep(20)
            finished.append(anyio.current_time())
        await anyio.sleep(1000)
        return "late"

    engine = await new_engine(ToolManifest(id="careful", timeout_ms=3_600_000))
    engine.register("careful", careful)
    engine.register("fast", Scripted("ok"))
    tools = ["fast", "fast"]
    tools[position] = "careful"
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall(f"c{i}", t) for i, t in enumerate(tools)], deadline_s=10))
    assert finished == [pytest.approx(start + 20)]
    assert anyio.current_time() - start == pytest.approx(20.0)
    assert result.timed_out
    assert result.outcomes[f"c{position}"].status is CallStatus.TIMED_OUT


async def test_every_lane_sees_the_same_deadline() -> None:
    seen: list[float] = []

    async def look() -> str:
        seen.append(anyio.current_effective_deadline())
        return "ok"

    engine = await new_engine(ToolManifest(id="look", timeout_ms=3_600_000))
    engine.register("look", look)
    await engine.run_turn(Turn([ToolCall("a", "look"), ToolCall("b", "look")], deadline_s=10))
    assert len(seen) == 2 and seen[0] == seen[1]
