"""The rate limit in the engine (issue 24 §1): a token bucket before each attempt, waits first come
first served within max wait and the turn's deadline, refusals at once that say the tool never
executed, and a cooldown after a 429 that every caller shares — 50 concurrent callers none of whom
reach the tool before the advised time, honoured when the 429'd call falls back to an alternative,
extended never shortened, kept across a reload and ended by an operator's reset. Virtual time, both
backends, every engine mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine, FailureContext, HandlerDecision, ToolManifest, Turn
from engine.kinds import ErrorKind
from engine.outcomes import CallStatus
from engine.strategies.retry.policy import RetryPolicy
from engine.turn import ToolCall
from tests.engine.conftest import Scripted, after, new_engine, recorded

pytestmark = pytest.mark.anyio

NO_RETRY = RetryPolicy(max_attempts=1)


class TooManyRequests(Exception):
    """An HTTP client's 429, as the classifier reads one: a status and a ``Retry-After`` header."""

    def __init__(self, retry_after_s: float | None = None) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.headers = {} if retry_after_s is None else {"Retry-After": f"{retry_after_s:g}"}


def limited(tool: str = "t", **options: Any) -> ToolManifest:
    return ToolManifest(id=tool, retry_policy=NO_RETRY, rate_limit=options)


async def test_the_bucket_lets_its_burst_through_then_one_attempt_per_token() -> None:
    engine = await new_engine(limited(rate_per_s=10, burst=2, max_wait_ms=5000))
    tool = Scripted("ok")
    engine.register("t", tool)
    events = recorded(engine)
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(engine.call, "t")
    assert [t - start for t in tool.started] == pytest.approx([0, 0, 0.1, 0.2, 0.3], abs=1e-4)
    assert [round(e.waited_ms) for e in events.of("RateLimitWaited")] == [100, 200, 300]
    facts = engine.stats()["t"].strategies["rate_limit"]
    assert (facts["waited"], facts["rejected"], facts["waiting"], facts["burst"]) == (3, 0, 0, 2)
    await anyio.sleep(10)
    assert engine.stats()["t"].strategies["rate_limit"]["tokens"] == 2.0, "refilled up to the burst"


async def test_a_wait_longer_than_max_wait_is_refused_at_once_unsent() -> None:
    engine = await new_engine(limited(rate_per_s=1, burst=1, max_wait_ms=500))
    tool = Scripted("ok")
    engine.register("t", tool)
    events = recorded(engine)
    assert await engine.call("t") == "ok"
    start = anyio.current_time()
    refused = await engine.try_call("t")
    assert anyio.current_time() == start, "refused without waiting"
    assert refused.error is not None
    assert refused.error.kind is ErrorKind.THROTTLED
    assert refused.error.executed is False
    assert (refused.attempts, refused.reason) == (0, "rate limit: next token in 1 s, max wait 0.5 s")
    assert tool.calls == 1
    [rejected] = events.of("RateLimitRejected")
    assert (rejected.reason, rejected.wait_needed_ms, rejected.waited_ms) == (refused.reason, 1000.0, 0.0)
    [call_rejected] = events.of("CallRejected")
    assert call_rejected.kind is ErrorKind.THROTTLED
    assert engine.stats()["t"].life.rejections == 1
    await anyio.sleep(1)
    assert await engine.call("t") == "ok", "the next token came on time"


async def test_max_wait_zero_never_waits() -> None:
    engine = await new_engine(limited(rate_per_s=100, burst=1, max_wait_ms=0))
    engine.register("t", Scripted("ok"))
    assert (await engine.try_call("t")).ok
    refused = await engine.try_call("t")
    assert refused.reason == "rate limit: next token in 0.01 s, max wait 0 s"


async def test_a_wait_the_turn_cannot_afford_is_refused_at_once_and_the_turn_goes_on() -> None:
    engine = await new_engine(limited(rate_per_s=1, burst=1, max_wait_ms=10_000))
    tool = Scripted("ok")
    engine.register("t", tool)
    start = anyio.current_time()
    result = await engine.run_turn(
        Turn([ToolCall("a", "t"), ToolCall("b", "t", optional=True)], deadline_s=0.5)
    )
    assert anyio.current_time() - start < 0.01, "nobody waited for a token the turn would not see"
    assert not result.timed_out
    outcomes = result.outcomes
    assert outcomes["a"].status is CallStatus.SUCCEEDED
    b = outcomes["b"]
    assert b.status is not CallStatus.SUCCEEDED and b.error is not None
    assert b.error.kind is ErrorKind.THROTTLED and not b.error.executed
    assert "rate limit: next token in 1 s, the turn ends in 0.5 s" in b.reason
    assert tool.calls == 1


async def test_a_wait_cut_by_the_deadline_leaves_no_token_reserved() -> None:
    engine = await new_engine(limited(rate_per_s=1, burst=1, max_wait_ms=10_000))
    tool = Scripted("ok")
    engine.register("t", tool)
    await engine.call("t")
    start = anyio.current_time()

    async def cut() -> None:
        with anyio.move_on_after(0.5):  # a deadline from outside the engine: a cancellation
            await engine.try_call("t", who="cut")

    async with anyio.create_task_group() as tg:
        tg.start_soon(cut)  # first in line, due at 1 s
        await anyio.sleep(0.1)
        tg.start_soon(engine.call, "t")  # second, due at 2 s: moves up to 1 s once the first is cut
        await anyio.sleep(0.6)
        assert engine.stats()["t"].strategies["rate_limit"]["waiting"] == 1
    assert [a.get("who") for a in tool.args] == [None, None], "the cut call never reached the tool"
    assert tool.started[1] - start == pytest.approx(1.0, abs=1e-4)
    assert engine.stats()["t"].strategies["rate_limit"]["waiting"] == 0


async def test_a_429_with_retry_after_pauses_fifty_concurrent_callers_for_30_s() -> None:
    engine = await new_engine(limited(max_wait_ms=60_000))
    tool = Scripted(TooManyRequests(30), "ok")
    engine.register("t", tool)
    events = recorded(engine)
    first = await engine.try_call("t")
    assert first.error is not None and first.error.kind is ErrorKind.RATE_LIMIT
    limited_at = tool.started[0]
    facts = engine.stats()["t"].strategies["rate_limit"]
    assert (facts["cooldown_remaining_s"], facts["cooldown_started_by"]) == (30.0, first_call_id(events))
    results = []

    async def caller() -> None:
        results.append(await engine.try_call("t"))

    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(caller)
        await anyio.sleep(1)
        assert engine.stats()["t"].strategies["rate_limit"]["waiting"] == 50
    assert all(r.ok for r in results) and len(results) == 50
    assert tool.calls == 51
    assert min(tool.started[1:]) - limited_at >= 30.0, "nobody reached the tool before the advice"
    assert min(tool.started[1:]) - limited_at == pytest.approx(30.0, abs=1e-4)
    [started] = events.of("CooldownStarted")
    assert (started.retry_after_s, started.cooldown_s, started.extended) == (30.0, 30.0, False)
    [ended] = events.of("CooldownEnded")
    assert (ended.how, ended.started_by) == ("expired", started.call_id)
    assert len(events.of("RateLimitWaited")) == 50


def first_call_id(events: Any) -> str:
    return str(events.of("AttemptStarted")[0].call_id)


async def test_attempts_during_a_cooldown_that_cannot_wait_are_refused_with_what_is_left() -> None:
    engine = await new_engine(limited(rate_per_s=100, max_wait_ms=1000))
    tool = Scripted(TooManyRequests(30), "ok")
    engine.register("t", tool)
    await engine.try_call("t")
    await anyio.sleep(10)
    results = [await engine.try_call("t") for _ in range(3)]
    assert tool.calls == 1
    for result in results:
        assert result.error is not None and result.error.kind is ErrorKind.THROTTLED
        assert result.reason == "rate limit: cooling down for 20 s more, max wait 1 s"
        assert (result.attempts, result.error.executed) == (0, False)
    await anyio.sleep(20)
    assert (await engine.try_call("t")).ok


async def test_a_429_without_retry_after_pauses_for_cooldown_ms() -> None:
    engine = await new_engine(limited(max_wait_ms=0, cooldown_ms=2500))
    tool = Scripted(TooManyRequests(), "ok")
    engine.register("t", tool)
    events = recorded(engine)
    await engine.try_call("t")
    [started] = events.of("CooldownStarted")
    assert (started.retry_after_s, started.cooldown_s) == (None, 2.5)
    assert (await engine.try_call("t")).reason == "rate limit: cooling down for 2.5 s more, max wait 0 s"
    await anyio.sleep(2.5)
    assert (await engine.try_call("t")).ok


async def test_waiters_in_line_when_the_429_arrives_wait_or_are_refused_at_once() -> None:
    engine = await new_engine(limited(rate_per_s=1, burst=1, max_wait_ms=40_000))
    tool = Scripted(after(0.5, TooManyRequests(30)), "ok")
    engine.register("t", tool)
    results: dict[int, Any] = {}

    async def caller(n: int) -> None:
        results[n] = await engine.try_call("t")

    async with anyio.create_task_group() as tg:
        for n in range(12):  # the first takes the token; the rest wait in line, 1 s apart
            tg.start_soon(caller, n)
            await anyio.sleep(0.01)
        await anyio.sleep(0.6)  # the 429 at 0.5 s: the line is re-planned after the cooldown
        refused = [
            n for n, r in results.items() if r.error is not None and r.error.kind is ErrorKind.THROTTLED
        ]
        assert refused == [11], "its turn would come after its max wait (40.5 s > 40.11 s): refused at once"
        assert (
            results[11].reason == "rate limit: cooling down for 30 s more (next token in 40 s), max wait 40 s"
        )
    assert min(tool.started[1:]) >= 30.5, "none of the waiters reached the tool before the advice"
    assert [round(t - 30.5, 3) for t in tool.started[1:]] == list(range(10)), "then one a second, in order"
    assert all(results[n].ok for n in range(1, 11))


async def test_a_later_429_extends_the_cooldown_and_a_shorter_one_does_not_shorten_it() -> None:
    engine = await new_engine(limited(max_wait_ms=0))
    tool = Scripted(
        after(0.1, TooManyRequests(30)), after(0.2, TooManyRequests(10)), after(0.3, TooManyRequests(60))
    )
    engine.register("t", tool)
    events = recorded(engine)
    async with anyio.create_task_group() as tg:
        for _ in range(3):  # all three in flight before the first 429
            tg.start_soon(engine.try_call, "t")
    started = events.of("CooldownStarted")
    assert [(round(e.until, 3), e.extended) for e in started] == [(30.1, False), (60.3, True)]
    assert engine.stats()["t"].strategies["rate_limit"]["cooldown_remaining_s"] == pytest.approx(60.0)


async def test_the_cooldown_holds_when_the_429d_call_falls_back_to_an_alternative() -> None:
    engine = await new_engine(
        ToolManifest(id="t", retry_policy=NO_RETRY, alternatives=["u"], rate_limit={"max_wait_ms": 1000}),
        ToolManifest(id="u", retry_policy=NO_RETRY),
    )
    t, u = Scripted(TooManyRequests(30), "t ok"), Scripted("u ok")
    engine.register("t", t)
    engine.register("u", u)
    events = recorded(engine)
    first = await engine.try_call("t")
    assert (first.value, first.served_by) == ("u ok", "u"), "the 429'd call went to the alternative"
    assert len(events.of("CooldownStarted")) == 1, "…and the cooldown still began"
    await anyio.sleep(5)
    later = await engine.try_call("t")
    assert later.value == "u ok"
    assert t.calls == 1, "later calls of t do not reach it during the cooldown"
    rejected = [e for e in events.of("CallRejected") if e.tool_id == "t"]
    assert [e.kind for e in rejected] == [ErrorKind.THROTTLED]
    assert rejected[0].reason == "rate limit: cooling down for 25 s more, max wait 1 s"
    await anyio.sleep(25)
    assert await engine.call("t") == "t ok"


async def test_an_operator_reset_ends_the_cooldown_at_once() -> None:
    engine = await new_engine(limited(max_wait_ms=60_000))
    tool = Scripted(TooManyRequests(30), "ok")
    engine.register("t", tool)
    events = recorded(engine)
    await engine.try_call("t")
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(engine.call, "t")
        await anyio.sleep(5)
        reset_at = anyio.current_time()
        engine.reset("t", actor="alice")
    assert tool.started[1:] == pytest.approx([reset_at] * 3)
    [ended] = events.of("CooldownEnded")
    assert (ended.how, ended.actor) == ("reset", "alice")
    assert engine.stats()["t"].strategies["rate_limit"]["cooldown_remaining_s"] == 0.0
    engine.reset("t")
    assert len(events.of("CooldownEnded")) == 1, "a reset with no cooldown ends nothing"


async def test_a_custom_handler_sees_the_cooldown_the_429_began() -> None:
    seen: list[FailureContext] = []

    def handler(failure: FailureContext) -> HandlerDecision | None:
        seen.append(failure)
        return None

    engine = await new_engine(limited(rate_per_s=5, max_wait_ms=0), handler=handler)
    engine.register("t", Scripted(TooManyRequests(30)))
    await engine.try_call("t")
    [failure] = seen
    facts = failure.strategies["rate_limit"]
    assert facts["cooldown_remaining_s"] == 30.0
    assert facts["cooldown_started_by"] is not None
    assert (facts["rate_per_s"], facts["burst"], facts["scope"]) == (5.0, 5, "process")


async def test_a_retry_during_the_cooldown_it_cannot_wait_for_ends_the_call_on_its_429() -> None:
    manifest = ToolManifest(
        id="t",
        retry_policy=RetryPolicy(max_attempts=3, initial_delay_ms=100, jitter_percent=0),
        rate_limit={"max_wait_ms": 500, "cooldown_ms": 5000},
    )
    engine = await new_engine(manifest)
    tool = Scripted(TooManyRequests(), "ok")
    engine.register("t", tool)
    result = await engine.try_call("t")
    assert tool.calls == 1
    assert result.error is not None and result.error.kind is ErrorKind.RATE_LIMIT
    assert result.error.executed is True
    assert result.reason.startswith("retry refused: rate limit: cooling down for 4.9 s more, max wait 0.5 s")


async def test_scope_fleet_behaves_as_process_without_a_fleet() -> None:
    engine = await new_engine(limited(rate_per_s=1, burst=1, max_wait_ms=0, scope="fleet"))
    engine.register("t", Scripted("ok"))
    assert (await engine.try_call("t")).ok
    assert (await engine.try_call("t")).reason == "rate limit: next token in 1 s, max wait 0 s"
    assert engine.stats()["t"].strategies["rate_limit"]["scope"] == "fleet"


async def test_nothing_configured_changes_nothing() -> None:
    engine = await new_engine(ToolManifest(id="t", retry_policy=NO_RETRY))
    tool = Scripted(TooManyRequests(30), "ok")
    engine.register("t", tool)
    await engine.try_call("t")
    assert (await engine.try_call("t")).ok, "no rate_limit section: no cooldown"
    assert "rate_limit" not in engine.stats()["t"].strategies


def write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text)


TOOL = "tool:\n  id: t\n  side_effect: read_only\n  retry_policy: {max_attempts: 1}\n"


async def test_a_reload_keeps_the_tokens_and_the_cooldowns_end(tmp_path: Path) -> None:
    write(tmp_path, "t.yaml", TOOL + "  rate_limit: {rate_per_s: 0.1, burst: 5, max_wait_ms: 0}\n")
    engine = Engine(tmp_path)
    tool = Scripted("ok", "ok", "ok", "ok", TooManyRequests(30), "ok")
    engine.register("t", tool)
    for _ in range(4):
        assert (await engine.try_call("t")).ok
    await engine.try_call("t")  # the fifth token: a 429 with Retry-After 30 s
    await anyio.sleep(10)
    write(
        tmp_path,
        "t.yaml",
        TOOL + "  rate_limit: {rate_per_s: 0.1, burst: 3, max_wait_ms: 0, cooldown_ms: 1}\n",
    )
    engine.reload_manifests()
    facts = engine.stats()["t"].strategies["rate_limit"]
    assert facts["burst"] == 3
    assert facts["tokens"] == pytest.approx(1.0), "the bucket kept its tokens (one refilled in 10 s)"
    assert facts["cooldown_remaining_s"] == pytest.approx(20.0), "the cooldown's end: not re-armed, not lost"
    assert (await engine.try_call("t")).reason == "rate limit: cooling down for 20 s more, max wait 0 s"
    await anyio.sleep(20)
    assert (await engine.try_call("t")).ok
    assert tool.calls == 6


async def test_a_section_under_defaults_gives_every_tool_a_limiter_of_its_own(tmp_path: Path) -> None:
    write(tmp_path, "defaults.yaml", "defaults:\n  rate_limit: {rate_per_s: 1, burst: 1, max_wait_ms: 0}\n")
    write(tmp_path, "a.yaml", TOOL.replace("id: t", "id: a"))
    write(tmp_path, "b.yaml", TOOL.replace("id: t", "id: b"))
    engine = Engine(tmp_path)
    engine.register("a", Scripted("a"))
    engine.register("b", Scripted("b"))
    assert (await engine.try_call("a")).ok
    assert (await engine.try_call("b")).ok, "b's bucket is its own"
    assert (await engine.try_call("a")).error is not None


async def test_an_attempt_queued_by_the_bulkhead_spends_one_token_not_two() -> None:
    """The rate limit admits at once, the bulkhead cannot: admission goes on at the bulkhead, keeping
    the token taken (asking the rate limit again took a second one)."""
    manifest = ToolManifest(
        id="t", retry_policy=NO_RETRY, rate_limit={"rate_per_s": 0.001, "burst": 10},
        bulkhead={"max_concurrent": 1, "max_queued": 5, "queue_timeout_ms": 10_000},
    )  # fmt: skip
    engine = await new_engine(manifest)
    tool = Scripted("ok", duration=1.0)
    engine.register("t", tool)
    async with anyio.create_task_group() as tg:
        for _ in range(3):  # one runs, two queue at the bulkhead
            tg.start_soon(engine.call, "t")
    assert tool.calls == 3
    tokens = engine.stats()["t"].strategies["rate_limit"]["tokens"]
    assert tokens == pytest.approx(7.0, abs=0.01), "one token per attempt"
