"""A generated workload reaching every kind of counted fact: retried and timed-out attempts,
streams cut mid-way, partial results, alternatives, breaker and bulkhead rejections, retry budget
refusals, hedged reads (hedges winning, losing, refused), unknown tools, skipped and escalated turn
calls — for tests that compare what different
readers of the same calls count."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import anyio

from engine import Engine, ErrorKind, ToolCall, ToolError, ToolManifest, Turn
from engine.events import Event
from tests.engine.conftest import new_engine

RETRY = {"initial_delay_ms": 20, "max_delay_ms": 80, "max_attempts": 3}


def manifests() -> list[ToolManifest]:
    common = {"timeout_ms": 200, "retry_policy": RETRY}
    return [
        ToolManifest.model_validate({"id": "flaky", **common, "alternatives": ["backup"]}),
        ToolManifest.model_validate({"id": "backup", **common}),
        ToolManifest.model_validate(
            {
                "id": "guarded",
                **common,
                "circuit_breaker": {"failure_threshold": 2, "timeout_ms": 400},
                "bulkhead": {"max_concurrent": 1, "max_queued": 1, "queue_timeout_ms": 60},
            }
        ),
        ToolManifest.model_validate(
            {
                "id": "budgeted",
                **common,
                "retry_budget": {"budget_percent": 10, "min_retries_per_s": 0.5, "window_s": 2},
            }
        ),
        ToolManifest.model_validate(
            {
                "id": "mirror",
                **common,
                "side_effect": "read_only",
                "hedging": {"hedge_after_ms": 50, "max_hedges": 2},
                "bulkhead": {"max_concurrent": 4},
            }
        ),
        ToolManifest.model_validate(
            {"id": "mirror95", **common, "side_effect": "read_only", "hedging": {"hedge_after_ms": "p95"}}
        ),
        ToolManifest.model_validate({"id": "feed", **common}),
        ToolManifest.model_validate({"id": "doomed", **common, "retry_policy": {"max_attempts": 1}}),
    ]


class Behaviour:
    """What each invocation of a tool does: drawn from an rng of its own per operation and
    invocation (trio schedules tasks in random order: a shared rng would make the runs differ),
    or, for the workload's fixed operations, what ``hold`` / ``partial`` ask."""

    def __init__(self, seed: int, name: str) -> None:
        self.seed, self.name = seed, name
        self.invocations: dict[int, int] = {}

    async def __call__(
        self, op: int, hold: float | None = None, partial: bool = False, lag: bool = False
    ) -> Any:
        n = self.invocations[op] = self.invocations.get(op, 0) + 1
        if lag:  # the first invocation lags (a hedge wins), later ones answer at once
            await anyio.sleep(0.15 if n == 1 else 0.01)
            return {"ok": True}
        if hold is not None:  # held this long, then succeeds (past the 200 ms timeout: times out)
            await anyio.sleep(hold)
            return {"ok": True}
        if partial:
            raise ToolError(ErrorKind.PARTIAL_RESULT, "cut short", partial_result={"rows": 2})
        rng = random.Random(f"{self.seed}/{self.name}/{op}/{n}")
        await anyio.sleep(rng.choice((0.0, 0.004, 0.03, 0.12, 0.35)))  # 0.35 s: past the 200 ms timeout
        roll = rng.random()
        if roll < 0.25:
            raise ConnectionError("reset by peer")  # transient
        if roll < 0.35:
            raise ToolError(ErrorKind.INVALID_PARAMETERS, "no such city")  # permanent
        if roll < 0.42:
            raise ToolError(ErrorKind.PARTIAL_RESULT, "cut short", partial_result={"rows": 2})
        return {"ok": True}


async def _doomed(op: int) -> None:
    raise ConnectionError("refused")


def _feed(seed: int) -> Any:
    async def feed(op: int, cut: bool = False) -> AsyncIterator[int]:
        if cut:  # one chunk, then the connection drops
            yield 0
            raise ConnectionError("stream reset")
        rng = random.Random(f"{seed}/feed/{op}")
        for chunk in range(rng.randint(0, 3)):
            await anyio.sleep(
                rng.choice((0.0, 0.01, 0.3) if chunk else (0.0, 0.01))
            )  # 0.3 s: past the timeout
            roll = rng.random()
            if roll < 0.2:
                raise ConnectionError("stream reset")
            if roll < 0.3:
                raise ValueError("bad chunk")
            if roll < 0.4:
                raise TimeoutError("upstream read timed out")
            yield chunk

    return feed


async def _consume(engine: Engine, **args: Any) -> None:
    try:
        async with engine.stream("feed", **args) as chunks:
            async for _ in chunks:
                pass
    except ToolError:
        pass


async def _turn(engine: Engine, op: int, first: str) -> None:
    turn = Turn(
        [
            ToolCall("a", first, {"op": op}),
            ToolCall("b", "backup", {"op": op}, depends_on=("a",), optional=True),
            ToolCall("c", "budgeted", {"op": op}, depends_on=("a",)),
        ],
        deadline_s=5.0,
    )
    await engine.run_turn(turn)


Operation = tuple[float, str, dict[str, Any]]
FIXED: tuple[Operation, ...] = (
    (0.0, "guarded", {"hold": 0.15}),  # in flight,
    (0.0, "guarded", {"hold": 0.15}),  # queued, its wait runs out (bulkhead_full),
    (0.0, "guarded", {"hold": 0.15}),  # the queue is full: rejected at once
    (0.5, "guarded", {"hold": 0.35}),  # times out twice: the breaker opens
    (0.9, "guarded", {}),  # rejected: the breaker is open
    (1.0, "turn:doomed", {}),  # a fails: b skipped, c escalated
    (1.2, "flaky", {"partial": True}),  # a partial result kept
    (0.0, "stream", {"cut": True}),  # cut after it opened
    (1.6, "unknown", {}),
)
"""Operations every workload starts with, so each run reaches every kind of counted fact."""
HEDGED: tuple[Operation, ...] = (
    (0.3, "mirror", {"lag": True}),  # a hedge wins, the first attempt is cancelled
)


def operations(rng: random.Random, count: int) -> list[Operation]:
    kinds = ("flaky", "guarded", "guarded", "budgeted", "backup", "stream", "turn:guarded", "turn:budgeted")
    drawn = [(rng.uniform(0.0, 4.0), rng.choice(kinds), {}) for _ in range(count)]
    # Hedged reads last, drawn after the rest (which keep their draws and their op numbers).
    reads = [(rng.uniform(0.0, 4.0), rng.choice(("mirror", "mirror95")), {}) for _ in range(count // 4)]
    return [*FIXED, *drawn, *HEDGED, *reads]


async def workload(engine: Engine, rng: random.Random, operations_count: int = 60) -> None:
    """Run the fixed operations and ``operations_count`` drawn from ``rng``, each from its own
    moment (engine time), concurrently; returns when all have ended."""

    async def one(op: int, delay: float, kind: str, args: dict[str, Any]) -> None:
        await anyio.sleep(delay)
        if kind == "stream":
            await _consume(engine, op=op, **args)
        elif kind.startswith("turn:"):
            await _turn(engine, op, kind.removeprefix("turn:"))
        elif kind == "unknown":
            await engine.try_call("no_such_tool", op=op)
        else:
            await engine.try_call(kind, op=op, **args)

    async with anyio.create_task_group() as tg:
        for op, (delay, kind, args) in enumerate(operations(rng, operations_count)):
            tg.start_soon(one, op, delay, kind, args)


async def mixed_engine(seed: int) -> tuple[Engine, random.Random, list[Event]]:
    """An engine (in the test's engine mode) with the workload's tools, seeded, and the list every
    event it publishes is appended to."""
    rng = random.Random(seed)
    engine = await new_engine(*manifests(), seed=seed)
    for name in ("flaky", "backup", "guarded", "budgeted", "mirror", "mirror95"):
        engine.register(name, Behaviour(seed, name))
    engine.register("doomed", _doomed)
    engine.register("feed", _feed(seed))
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)
    return engine, rng, events
