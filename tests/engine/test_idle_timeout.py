"""Progress extends an idle timeout up to the hard cap (issue 16 §1): a manifest's ``idle_timeout_ms``
cuts off an attempt that goes quiet, ``engine.report_progress`` pushes that deadline back,
and ``timeout_ms`` stays the absolute ceiling. On virtual time, on both backends, engine started
and not.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from engine import ErrorKind, ManifestError, RetryPolicy, ToolManifest, load_manifest
from engine.events import ToolTimedOut
from engine.manifest import ManifestRegistry
from engine.strategies.timeout.supervisor import report_progress
from tests.engine.conftest import new_engine, recorded

pytestmark = pytest.mark.anyio

ONCE = RetryPolicy(max_attempts=1)
AFTER_1S = RetryPolicy(
    strategy="fixed", max_attempts=2, initial_delay_ms=1000, max_delay_ms=1000, jitter_percent=0,
    max_total_time_ms=60_000,
)  # fmt: skip


def idle_tool(tool_id: str, **policy: object) -> ToolManifest:
    return ToolManifest.model_validate(
        {"id": tool_id, "timeout_ms": 30_000, "idle_timeout_ms": 5_000, "retry_policy": ONCE, **policy}
    )


async def test_progress_every_4s_runs_to_the_hard_cap_and_is_cut_there() -> None:
    engine = await new_engine(idle_tool("crawl"))
    events = recorded(engine)
    reports: list[float] = []

    async def crawl() -> str:
        while True:
            await anyio.sleep(4)
            assert report_progress()
            reports.append(anyio.current_time())

    engine.register("crawl", crawl)
    start = anyio.current_time()
    result = await engine.try_call("crawl")
    assert anyio.current_time() - start == pytest.approx(30, abs=0.01)
    assert len(reports) == 7  # at 4, 8, ... 28 s: never idle for 5 s
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    assert result.error.message == "Tool timeout after 30s"
    [timed_out] = events.of("ToolTimeout")
    assert isinstance(timed_out, ToolTimedOut)
    assert timed_out.idle_ms is None and timed_out.timeout_ms == 30_000
    assert timed_out.describe() == "Tool timeout after 30s (crawl, attempt 1)"


async def test_a_silent_tool_is_cut_at_the_idle_window_and_the_event_says_idle() -> None:
    engine = await new_engine(idle_tool("quiet"))
    events = recorded(engine)
    engine.register("quiet", anyio.sleep_forever)
    start = anyio.current_time()
    result = await engine.try_call("quiet")
    assert anyio.current_time() - start == pytest.approx(5, abs=0.01)
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    assert result.error.message == "Tool idle timeout: no progress for 5s"
    [timed_out] = events.of("ToolTimeout")
    assert timed_out.idle_ms == 5_000 and timed_out.timeout_ms == 30_000
    assert timed_out.describe() == "Tool idle for 5s without progress (quiet, attempt 1)"


async def test_progress_that_stops_is_cut_one_idle_window_after_the_last_report() -> None:
    engine = await new_engine(idle_tool("stalls"))
    events = recorded(engine)

    async def stalls() -> None:
        for _ in range(3):  # reports at 3, 6 and 9 s, then nothing
            await anyio.sleep(3)
            report_progress()
        await anyio.sleep_forever()

    engine.register("stalls", stalls)
    start = anyio.current_time()
    await engine.try_call("stalls")
    assert anyio.current_time() - start == pytest.approx(14, abs=0.01)
    assert events.of("ToolTimeout")[0].idle_ms == 5_000


async def test_each_retry_gets_a_fresh_idle_window() -> None:
    engine = await new_engine(idle_tool("again", retry_policy=AFTER_1S))
    events = recorded(engine)
    engine.register("again", anyio.sleep_forever)
    start = anyio.current_time()
    result = await engine.try_call("again")
    assert result.attempts == 2
    assert anyio.current_time() - start == pytest.approx(5 + 1 + 5, abs=0.01)
    assert [e.idle_ms for e in events.of("ToolTimeout")] == [5_000, 5_000]


async def test_report_progress_is_a_no_op_without_an_idle_window() -> None:
    engine = await new_engine(ToolManifest(id="plain", timeout_ms=3_000, retry_policy=ONCE))
    seen: list[bool] = []

    async def plain() -> None:
        seen.append(report_progress())  # no idle window: the hard timeout alone applies
        await anyio.sleep_forever()

    engine.register("plain", plain)
    start = anyio.current_time()
    result = await engine.try_call("plain")
    assert seen == [False]
    assert report_progress() is False  # outside any attempt
    assert anyio.current_time() - start == pytest.approx(3, abs=0.01)
    assert result.error is not None and result.error.message == "Tool timeout after 3s"


async def test_a_nested_call_leaves_the_outer_window_in_force() -> None:
    engine = await new_engine(idle_tool("outer"), idle_tool("inner"), ToolManifest(id="bare"))
    seen: list[bool] = []

    async def inner() -> bool:
        return report_progress()  # its own window

    async def bare() -> bool:
        return report_progress()  # no window of its own: the report reaches its caller's

    async def outer() -> str:
        await anyio.sleep(4)
        seen.append(await engine.call("inner"))
        seen.append(await engine.call("bare"))
        seen.append(report_progress())  # the outer window is current again once inner's is over
        await anyio.sleep(4)  # 8 s in: alive only because the outer window was pushed at 4 s
        return "out"

    for name, fn in (("outer", outer), ("inner", inner), ("bare", bare)):
        engine.register(name, fn)
    assert await engine.call("outer") == "out"
    assert seen == [True, True, True]


# Real clocks: trio's MockClock jumps to the next deadline while a worker thread runs (a thread is
# no activity to it), so the idle window would run out before the thread could report.
@pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
async def test_a_plain_tool_reports_progress_from_its_worker_thread() -> None:
    engine = await new_engine(idle_tool("threaded"))

    def threaded() -> bool:
        return report_progress()

    engine.register("threaded", threaded)
    assert await engine.call("threaded") is True


# --- the manifest field ----------------------------------------------------------------------


def test_idle_timeout_is_off_by_default_and_leaves_digests_as_they_were() -> None:
    assert ToolManifest(id="x").idle_timeout_ms is None
    registry = ManifestRegistry.from_manifests(
        [ToolManifest(id="x"), ToolManifest(id="y", idle_timeout_ms=5)]
    )
    assert registry.digest("x") == "c895e7ea2aca"  # the digest before the field existed
    assert registry.digest("y") != registry.digest("x")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("idle_timeout_ms: 30000", "must be less than timeout_ms (30000), the hard cap"),
        ("idle_timeout_ms: 0", "greater than 0"),
        ("idle_timeout_ms: true", ""),
    ],
)
def test_a_bad_idle_timeout_is_refused_at_its_line(tmp_path: Path, line: str, fragment: str) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text(f"tool:\n  id: slow\n  side_effect: read_only\n  timeout_ms: 30000\n  {line}\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert message.startswith(f"{path}:5: tool.idle_timeout_ms: "), message
    assert fragment in message


def test_a_manifest_file_sets_the_idle_window(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text("tool:\n  id: slow\n  side_effect: read_only\n  idle_timeout_ms: 5000\n")
    assert load_manifest(path).idle_timeout_ms == 5000
