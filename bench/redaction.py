"""What redaction costs where events are made (issue 12, item 1).

    python bench/redaction.py [--n 20000] [--repeat 5] [--json]

Event creation with the engine's policy on and off: an ``AttemptFailed`` whose message carries
credentials (a Bearer token, an ``sk-`` key, a ``password=`` pair and the call's own secret
argument) or an ordinary one; finding a call's secret argument values (once per failing call);
a ``TurnStarted`` whose 5 calls have secret arguments (``api_key``, an ``Authorization`` header,
a nested ``token``), for a new turn and for a turn run again (its redacted spec is remembered).
Then end to end, events on: a guarded call failing with that message, and a new turn of those 5
calls. A call that succeeds is not touched (bench/call_overhead.py: no change). Each figure is
the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio

from engine import Engine, RetryPolicy, ToolCall, ToolManifest, Turn
from engine.events import AttemptFailed, TurnStarted
from engine.kinds import ErrorClass, ErrorKind
from engine.redaction import RedactionPolicy
from engine.runner import traced_spec
from engine.strategies.breaker.machine import BreakerState

SECRET_ARGS = {"query": "hotels in Lyon", "api_key": "k-live-0123456789", "page": 2}
CREDENTIALS = (
    "upstream 401: Authorization: Bearer eyQ1a2b3c4d5e6f7g8h9 rejected; key sk-live-0123456789abcdefghij "
    "revoked; retry with password=hunter2 for k-live-0123456789"
)
PLAIN = "Connection reset by peer"
ORDINARY_ARGS = {"query": "hotels in Lyon", "page": 2, "filters": {"stars": 4, "city": "Lyon"}}
ORDINARY = Turn([ToolCall(f"c{i}", "tool", ORDINARY_ARGS) for i in range(5)], id="ordinary")
TURN = Turn(
    [
        ToolCall(f"c{i}", "tool", {
            "query": "hotels in Lyon", "api_key": f"k-live-{i}0123456789",
            "headers": {"Authorization": f"Bearer eyQ{i}a2b3c4d5e6f7g8h9", "Accept": "application/json"},
            "auth": {"scheme": "custom", "credentials": [{"token": f"tok-{i}-0123456789"}]},
        })
        for i in range(5)
    ],
    id="bench",
)  # fmt: skip


def best(fn: Callable[[], object], n: int, repeat: int) -> float:
    """µs per call: the best of ``repeat`` runs of ``n`` calls."""
    fastest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        fastest = min(fastest, (time.perf_counter() - start) / n * 1e6)
    return fastest


async def best_async(fn: Callable[[], Awaitable[object]], n: int, repeat: int) -> float:
    fastest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(n):
            await fn()
        fastest = min(fastest, (time.perf_counter() - start) / n * 1e6)
    return fastest


def attempt_failed(
    policy: RedactionPolicy, message: str, args: dict[str, Any] = SECRET_ARGS
) -> Callable[[], object]:
    """What the engine does for a failed attempt: its text redacted (the call's secret values were
    found once per failing call: ``secrets in arguments`` below), and the event."""
    secrets = policy.secrets_in(args)

    def make() -> object:
        error = policy.text(message, secrets) if policy.enabled else message
        return AttemptFailed(
            at=0.0, t=0.0, tool_id="tool", call_id="c1", turn_id="t1", attempt=1, error=error,
            error_type="PermissionError", kind=ErrorKind.AUTH_ERROR, classification=ErrorClass.PERMANENT,
            rule="exception_class", reason="r", status_code=401, circuit_breaker_state=BreakerState.CLOSED,
            retry_count=0, decision="escalate", decision_reason="permanent error",
        )  # fmt: skip

    return make


def turn_started(engine: Engine, *, again: bool, turn: Turn = TURN) -> Callable[[], object]:
    """A turn's ``TurnStarted``: run ``again`` (its redacted spec remembered) or for the first time
    (a new spec dict: a new turn)."""
    spec = turn.spec

    def make() -> object:
        return TurnStarted(
            at=0.0, t=0.0, turn_id="t1", calls=turn.ids, deadline_ms=300_000.0,
            spec=traced_spec(engine, spec if again else {**spec}), seed="5",
        )  # fmt: skip

    return make


async def new_turn(engine: Engine) -> object:
    """A turn made for this run (as an LLM executor makes one per message): its spec is new."""
    return await engine.run_turn(Turn(TURN.calls))


def engine_with(policy: RedactionPolicy, message: str) -> Engine:
    no_retry = RetryPolicy(max_attempts=1)
    engine = Engine([ToolManifest(id="bad", retry_policy=no_retry), ToolManifest(id="tool")],
                    rng=random.Random(1), redaction=policy)  # fmt: skip

    async def bad(**_: Any) -> None:
        raise PermissionError(message)

    async def tool(**_: Any) -> int:
        return 1

    engine.register("bad", bad)
    engine.register("tool", tool)
    return engine


async def run(n: int, repeat: int) -> dict[str, float]:
    on, off = RedactionPolicy(), RedactionPolicy.off()
    results: dict[str, float] = {}
    for name, policy in (("on", on), ("off", off)):
        results[f"AttemptFailed, credential-bearing message, redaction {name}"] = best(
            attempt_failed(policy, CREDENTIALS), n, repeat
        )
    results["AttemptFailed, ordinary message, redaction on"] = best(attempt_failed(on, PLAIN, {}), n, repeat)
    results["AttemptFailed, ordinary message, call with a secret argument, redaction on"] = best(
        attempt_failed(on, PLAIN), n, repeat
    )
    results["secrets in arguments (once per failing call)"] = best(
        lambda: on.secrets_in(SECRET_ARGS), n, repeat
    )
    for name, policy in (("on", on), ("off", off)):
        engine = engine_with(policy, PLAIN)
        results[f"TurnStarted, new turn of 5 calls with secret args, redaction {name}"] = best(
            turn_started(engine, again=False), n, repeat
        )
    results["TurnStarted, new turn of 5 calls with ordinary args, redaction on"] = best(
        turn_started(engine_with(on, PLAIN), again=False, turn=ORDINARY), n, repeat
    )
    results["TurnStarted, the same turn run again, redaction on"] = best(
        turn_started(engine_with(on, PLAIN), again=True), n, repeat
    )
    sink: deque[object] = deque(maxlen=1000)
    for name, policy in (("on", on), ("off", off)):
        engine = engine_with(policy, CREDENTIALS)
        engine.subscribe(sink.append, direct=True)
        async with engine:
            results[f"failed call, credential-bearing error, events on, redaction {name}"] = await best_async(
                partial(engine.try_call, "bad", **SECRET_ARGS), n, repeat
            )
            results[f"new turn of 5 calls with secret args, events on, redaction {name}"] = await best_async(
                partial(new_turn, engine), max(n // 10, 1), repeat
            )
        engine.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("tripwire.engine").setLevel(logging.ERROR)  # "redaction is off" is meant here
    results = anyio.run(run, args.n, args.repeat)
    if args.json:
        print(json.dumps({"us": results}, indent=2))
        return
    print(f"Python {platform.python_version()} on {platform.machine()}, best of {args.repeat}")
    print("| what | µs |")
    print("| --- | ---: |")
    for name, micros in results.items():
        print(f"| {name} | {micros:.2f} |")


if __name__ == "__main__":
    main()
