"""A tool's rate limit in the view model (issue 24 §1): its tokens, waits, throttled refusals and a
cooldown every caller shares, folded from the engine's events alone, agreeing with ``engine.stats()``
at every moment; the reason a throttled call was refused is shown as the engine gave it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from console.host import seeds_of
from console.model import ConsoleModel, ManifestView, StrategyFigures, ToolSeed
from console.model.rate_limit import RateLimitFigures
from engine import Engine
from engine.clock import VirtualWallClock
from engine.events import CooldownEnded, CooldownStarted, Event, RateLimitRejected, RateLimitWaited
from engine.kinds import ErrorKind
from tests.console import factory as f

QUOTA = (
    "tool:\n  id: quota\n  side_effect: read_only\n"
    "  retry_policy: {max_attempts: 2, initial_delay_ms: 0, max_delay_ms: 0}\n"
    "  rate_limit: {rate_per_s: 2, burst: 2, max_wait_ms: 1000}\n"
)
"""Two attempts a second, two at once; a wait of 1 s at most; a 429's retry comes at once."""


class TooManyRequests(Exception):
    """An HTTP client's 429 with a ``Retry-After``, as the classifier reads one."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.headers = {"Retry-After": f"{retry_after_s:g}"}


def agrees(model: ConsoleModel, engine: Engine, now: float) -> list[str]:
    """Where the model's rate-limit figures differ from ``engine.stats()``'s facts."""
    facts = dict(engine.stats()["quota"].strategies["rate_limit"])
    view = model.tools["quota"]
    rate_limit = view.strategies.figures(now, len(view.in_flight)).rate_limit
    if rate_limit is None:
        return [f"at {now}: no rate limit shown"]
    got = {
        "rate_per_s": rate_limit.rate_per_s, "burst": rate_limit.burst, "waited": rate_limit.waited,
        "rejected": rate_limit.rejected, "cooldowns": rate_limit.cooldowns,
        "cooldown_remaining_s": rate_limit.cooldown_remaining_s(now),
        "cooldown_started_by": rate_limit.cooldown_started_by(now),
        "max_wait_ms": rate_limit.max_wait_ms, "scope": rate_limit.scope,
    }  # fmt: skip
    problems = [f"at {now}: {k} {v!r} != {facts[k]!r}" for k, v in got.items() if v != facts[k]]
    if rate_limit.tokens != pytest.approx(facts["tokens"], abs=1e-6):
        problems.append(f"at {now}: tokens {rate_limit.tokens} != {facts['tokens']}")
    return problems


@pytest.mark.anyio
async def test_the_folded_rate_limit_is_the_engines_at_every_moment(tmp_path: Path) -> None:
    """A burst that waits and is refused, a 429 with Retry-After 5 s pausing the tool for every
    caller (concurrent calls refused, naming the cooldown), the cooldown found over, then another
    ended by an operator's reset: the model shows what the engine's facts say, each time."""
    (tmp_path / "quota.yaml").write_text(QUOTA)
    engine = Engine(tmp_path, wall_clock=VirtualWallClock(f.WALL))
    calls: list[float] = []

    async def quota() -> str:
        calls.append(anyio.current_time() - start)
        if len(calls) in (5, 7):  # the 5th and the 7th attempts meet the provider's limit
            raise TooManyRequests(5.0)
        return "ok"

    engine.register("quota", quota)
    pending: list[Event] = []
    engine.subscribe(pending.append, direct=True)
    model = ConsoleModel(seeds_of(engine))
    start = anyio.current_time()
    problems: list[str] = []
    cooling: list[tuple[float, str | None]] = []

    async def at(t: float) -> None:
        await anyio.sleep(max(0.0, start + t - anyio.current_time()))

    async def call(t: float) -> None:
        await at(t)
        await engine.try_call("quota")

    async def check() -> None:
        for t in (0.0, 0.01, 0.6, 1.1, 2.0, 2.9, 3.5, 4.2, 7.9, 8.5, 9.5, 10.2, 10.6, 11.0, 12.0):
            await at(t)
            model.apply(pending[:])
            pending.clear()
            now = anyio.current_time()
            problems.extend(agrees(model, engine, now))
            shown = model.tools["quota"].row(now).strategies
            assert shown is not None and shown.rate_limit is not None
            if shown.rate_limit.cooldown_remaining_s(now) > 0:
                cooling.append((t, shown.rate_limit.cooldown_started_by(now)))

    async def reset() -> None:
        await at(10.5)
        engine.reset("quota", actor="ops")

    async with engine, anyio.create_task_group() as tg:
        tg.start_soon(check)
        for t in (0.0, 0.0, 0.0, 0.0, 0.0):  # two at once, two wait (0.5 s, 1 s), one refused
            tg.start_soon(call, t)
        tg.start_soon(call, 3.0)  # the 5th attempt: a 429, its retry refused by the cooldown
        tg.start_soon(call, 3.2)  # refused at once: the cooldown has 4.8 s left
        tg.start_soon(call, 8.2)  # finds the cooldown over: CooldownEnded (expired)
        tg.start_soon(call, 10.0)  # the 7th attempt: a 429 again, reset at 10.5
        tg.start_soon(reset)
    assert not problems, "\n".join(problems)
    seen = [type(e) for e in model.events]
    for kind in (RateLimitWaited, RateLimitRejected, CooldownStarted, CooldownEnded):
        assert kind in seen, kind
    assert [t for t, _ in cooling] == [3.5, 4.2, 7.9, 10.2], "cooling down from the 429 to its end"
    starters = [by for _, by in cooling]
    assert len(set(starters)) == 2 and all(starters), "each cooldown names the call that started it"
    figures = model.tools["quota"].row(anyio.current_time()).strategies
    assert figures is not None and figures.rate_limit is not None
    end = figures.rate_limit.last_end
    assert end is not None and (end.how, end.actor) == ("reset", "ops")
    refusal = figures.last_refusal
    assert refusal is not None and refusal.by == "rate limit"
    assert refusal.reason.startswith("rate limit: cooling down for 4.8 s more"), refusal.reason


# --- from events made by hand -----------------------------------------------------------------


def seed(**section: Any) -> ToolSeed:
    content = {"id": "quota", "rate_limit": section}
    return ToolSeed("quota", manifest=ManifestView("d1", 1, "manifests/quota.yaml", f.WALL, content))


def shown(model: ConsoleModel, now: float) -> tuple[StrategyFigures, RateLimitFigures]:
    figures = model.tools["quota"].row(now).strategies
    assert figures is not None and figures.rate_limit is not None
    return figures, figures.rate_limit


def waited(call: str, t: float, ms: float, attempt: int = 1) -> RateLimitWaited:
    return RateLimitWaited(
        at=f.WALL + t, t=t, tool_id="quota", call_id=call, turn_id=None, attempt=attempt, waited_ms=ms
    )


def throttled(call: str, t: float, reason: str, attempt: int = 1) -> RateLimitRejected:
    return RateLimitRejected(
        at=f.WALL + t, t=t, tool_id="quota", call_id=call, turn_id=None, attempt=attempt, reason=reason,
        wait_needed_ms=2000.0, cooldown_ms=2000.0, waited_ms=0.0,
    )  # fmt: skip


def cooldown(call: str, t: float, until: float) -> CooldownStarted:
    return CooldownStarted(
        at=f.WALL + t, t=t, tool_id="quota", call_id=call, turn_id=None, attempt=1, until=until,
        cooldown_s=until - t, retry_after_s=until - t, extended=False,
    )  # fmt: skip


def test_a_token_is_taken_once_per_attempt_whether_it_waited_or_not() -> None:
    model = ConsoleModel([seed(rate_per_s=1, burst=3)])
    model.apply([f.started("quota", "c1", 1.0), f.started("quota", "c2", 1.0)])
    assert shown(model, 1.0)[1].tokens == pytest.approx(1.0)
    model.apply([waited("c3", 1.5, 500.0), f.started("quota", "c3", 1.5)])  # its token at its wait's end
    _, rate_limit = shown(model, 1.5)
    assert rate_limit.tokens == pytest.approx(0.5) and rate_limit.waited == 1
    assert shown(model, 20.0)[1].tokens == 3.0, "refilled up to the burst"


def test_a_cooldown_counts_down_names_who_started_it_and_ends_on_its_event() -> None:
    model = ConsoleModel([seed(rate_per_s=1)])
    reason = "rate limit: cooling down for 27 s more, max wait 1 s"
    model.apply([cooldown("c1", 3.0, 30.0), throttled("c2", 3.0, reason), f.rejected("quota", "c2", 3.0)])
    figures, rate_limit = shown(model, 3.0)
    assert (rate_limit.cooldown_remaining_s(3.0), rate_limit.cooldown_started_by(3.0)) == (27.0, "c1")
    assert rate_limit.cooldown_remaining_s(29.5) == 0.5 and rate_limit.cooldown_remaining_s(31.0) == 0.0
    assert rate_limit.cooldown_started_by(31.0) is None, "over, as the engine's facts say, unannounced"
    assert figures.last_refusal is not None and figures.last_refusal.reason == reason
    assert (rate_limit.rejected, rate_limit.rejected_recent, rate_limit.cooldowns) == (1, 1, 1)
    ended = CooldownEnded(at=f.WALL + 5, t=5.0, tool_id="quota", started_by="c1", until=30.0, how="reset",
                          actor="ops")  # fmt: skip
    model.apply([ended])
    _, rate_limit = shown(model, 5.0)
    assert rate_limit.cooldown is None and rate_limit.last_end is not None
    assert rate_limit.last_end.actor == "ops"


def test_a_throttled_rejection_is_not_the_breakers() -> None:
    """The call's first event is the strategy's refusal: a budget counts the call once."""
    content = {"id": "quota", "rate_limit": {"rate_per_s": 1},
               "retry_budget": {"budget_percent": 0, "min_retries_per_s": 0, "window_s": 10}}  # fmt: skip
    model = ConsoleModel([ToolSeed("quota", manifest=ManifestView("d", 1, "q.yaml", f.WALL, content))])
    model.apply([throttled("c1", 1.0, "rate limit: next token in 1 s, max wait 0 s"),
                 f.rejected("quota", "c1", 1.0, kind=ErrorKind.THROTTLED)])  # fmt: skip
    figures, _ = shown(model, 1.0)
    assert figures.retry_budget is not None and figures.retry_budget.calls == 1


def test_a_reload_keeps_the_tokens_and_the_cooldown_and_a_removed_section_drops_them() -> None:
    model = ConsoleModel([seed(rate_per_s=1, burst=4)])
    model.apply([f.started("quota", "c1", 1.0), cooldown("c1", 1.0, 9.0)])
    smaller = {"rate_per_s": 1, "burst": 2}
    model.apply([f.manifest_loaded("quota", 2.0, version=2, digest="d2", rate_limit=smaller)])
    _, rate_limit = shown(model, 2.0)
    assert (rate_limit.tokens, rate_limit.burst, rate_limit.cooldown_remaining_s(2.0)) == (2.0, 2, 7.0)
    model.apply([f.manifest_loaded("quota", 3.0, version=3, digest="d3")])
    assert model.tools["quota"].row(3.0).strategies is None
