"""The Prometheus exporter's rate-limit metrics (issue 24 §1), parsed back with prometheus-client's
own parser: tokens, waits, throttled refusals and a cooldown read from the strategy when scraped
(what ``engine.stats()`` reports), only for the tools that have a ``rate_limit``, with the ``tool``
label alone; a throttled rejection is told from the breaker's by its kind. Virtual time, both
backends, both engine modes.
"""

from __future__ import annotations

import anyio
import pytest

from engine import ToolManifest
from tests.engine.conftest import Scripted, new_engine
from tests.engine.integrations.test_prometheus import LABELS, NO_RETRY, Samples, attached, metric, scrape
from tests.engine.integrations.test_prometheus_strategies import Manifest, scrape_on_a_thread, series_of
from tests.engine.strategies.test_rate_limit_engine import TooManyRequests

pytestmark = pytest.mark.anyio

RATE_LIMIT_FAMILIES = (
    "tripwire_rate_limit_tokens",
    "tripwire_rate_limit_burst",
    "tripwire_rate_limit_rate_per_second",
    "tripwire_rate_limit_waiting",
    "tripwire_rate_limit_waits_total",
    "tripwire_rate_limit_rejections_total",
    "tripwire_cooldowns_total",
    "tripwire_cooldown_remaining_seconds",
)


def rate_limit(samples: Samples, tool: str) -> dict[str, float]:
    """The tool's rate-limit series, by the name of the fact ``engine.stats()`` gives it."""
    return {
        "tokens": metric(samples, "tripwire_rate_limit_tokens", tool=tool),
        "burst": metric(samples, "tripwire_rate_limit_burst", tool=tool),
        "rate_per_s": metric(samples, "tripwire_rate_limit_rate_per_second", tool=tool),
        "waiting": metric(samples, "tripwire_rate_limit_waiting", tool=tool),
        "waited": metric(samples, "tripwire_rate_limit_waits_total", tool=tool),
        "rejected": metric(samples, "tripwire_rate_limit_rejections_total", tool=tool),
        "cooldowns": metric(samples, "tripwire_cooldowns_total", tool=tool),
        "cooldown_remaining_s": metric(samples, "tripwire_cooldown_remaining_seconds", tool=tool),
    }


async def test_a_rate_limit_shows_its_tokens_waits_refusals_and_cooldown_as_its_strategy_has_them() -> None:
    engine = await new_engine(
        Manifest(
            id="t", retry_policy=NO_RETRY, rate_limit={"rate_per_s": 2, "burst": 2, "max_wait_ms": 1000}
        ),
        ToolManifest(id="plain"),
    )
    tool = Scripted("ok", "ok", "ok", "ok", TooManyRequests(30.0), "ok")
    engine.register("t", tool)
    engine.register("plain", Scripted("pong"))
    _, registry = attached(engine)
    await engine.call("plain")
    start = anyio.current_time()

    async with anyio.create_task_group() as tg:
        for _ in range(5):  # two at once, two wait (0.5 s, 1 s), the fifth would wait 1.5 s: refused
            tg.start_soon(engine.try_call, "t")
        await anyio.sleep(0.25)
        waiting = scrape(registry)
        waiting_facts = dict(engine.stats()["t"].strategies["rate_limit"])
    burst_over = scrape(registry)

    await anyio.sleep(start + 5.0 - anyio.current_time())
    await engine.try_call("t")  # the 429: the tool pauses 30 s for every caller
    await anyio.sleep(2.0)
    await engine.try_call("t")  # refused at once: 28 s of cooldown left, 1 s of wait allowed
    cooling = scrape(registry)
    cooling_there = scrape_on_a_thread(registry)
    facts = dict(engine.stats()["t"].strategies["rate_limit"])

    assert rate_limit(waiting, "t") == {
        "tokens": pytest.approx(0.5), "burst": 2, "rate_per_s": 2, "waiting": 2, "waited": 0, "rejected": 1,
        "cooldowns": 0, "cooldown_remaining_s": 0,
    }  # fmt: skip
    assert (waiting_facts["waiting"], waiting_facts["rejected"]) == (2, 1), "what engine.stats() says"
    assert rate_limit(burst_over, "t")["waited"] == 2 and rate_limit(burst_over, "t")["waiting"] == 0
    assert rate_limit(cooling, "t") == {
        "tokens": facts["tokens"], "burst": 2, "rate_per_s": 2, "waiting": 0, "waited": 2, "rejected": 2,
        "cooldowns": 1, "cooldown_remaining_s": pytest.approx(28.0),
    }  # fmt: skip
    # The single source: the figures engine.stats() reports for the strategy, not counted apart.
    assert (facts["rejected"], facts["cooldowns"]) == (2, 1)
    assert facts["cooldown_remaining_s"] == pytest.approx(28.0)
    # From start_metrics_server's thread, where the engine's clock may not be readable: the same end.
    there = metric(cooling_there, "tripwire_cooldown_remaining_seconds", tool="t")
    assert there == pytest.approx(28.0, abs=0.05)
    # Calls refused before any attempt, told from the breaker's by their kind.
    assert metric(cooling, "tripwire_rejections_total", tool="t", kind="throttled") == 2
    assert metric(cooling, "tripwire_calls_total", tool="t", outcome="rejected") == 2
    assert tool.calls == 5, "a throttled call never reached the tool"
    assert not series_of(cooling, "plain") & set(RATE_LIMIT_FAMILIES), "no rate limit: no series"
    names = {name for _, labels in cooling for name, _ in labels}
    assert names <= LABELS | {"reason"}, "who started a cooldown is never a label"

    await anyio.sleep(30.0)
    over = scrape(registry)
    assert metric(over, "tripwire_cooldown_remaining_seconds", tool="t") == 0
    assert metric(over, "tripwire_rate_limit_tokens", tool="t") == 2, "refilled up to the burst"


async def test_a_limit_with_only_a_cooldown_has_no_bucket_series() -> None:
    engine = await new_engine(Manifest(id="t", retry_policy=NO_RETRY, rate_limit={"cooldown_ms": 5000}))
    engine.register("t", Scripted(TooManyRequests(None), "ok"))  # a 429 without Retry-After: 5 s
    _, registry = attached(engine)
    await engine.try_call("t")
    samples = scrape(registry)
    assert metric(samples, "tripwire_cooldown_remaining_seconds", tool="t") == pytest.approx(5.0)
    assert metric(samples, "tripwire_cooldowns_total", tool="t") == 1
    present = series_of(samples, "t")
    assert not present & {"tripwire_rate_limit_tokens", "tripwire_rate_limit_burst"}
