"""The console under a flood: 200 tools, 20,000 events a second, for 10 seconds.

    python bench/console_flood.py [--tools 200] [--rate 20000] [--seconds 10] [--json]

The headless app (Textual's ``run_test``, 160×50) watches a producer thread that plays the
engine: every 5 ms it publishes a slice of events — calls that start, succeed, fail and retry,
calls rejected by open breakers, breakers opening, half-opening and closing, turns starting and
finishing — into the console's bridge, exactly as an engine's sink would. The board shows the
wide table (200 tools), refreshing ten times a second.

Measured:

* one UI flush: folding the drained events into the view model and updating the view
  (``ConsoleApp.flush``), then the frame it causes (the compositor's update, encoded as it
  would be for the terminal); p50, p95 and max, target p95 ≤ 30 ms;
* key press to screen: ``down`` delivered as the terminal driver delivers keys, every 0.1 s
  during the flood, until the frame showing the moved cursor is composed; p50, p95 and max,
  target ≤ 100 ms;
* memory: the process's resident set after 2 s and at the end (bounded: it must not grow
  with the number of events), and what the bridge dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import textual
from textual import events
from textual.screen import Screen

from console.app import ConsoleApp
from console.host import Action
from console.model import ManifestView, ToolSeed
from console.widgets.breaker_table import BreakerTable
from engine.events import (
    AttemptFailed,
    AttemptStarted,
    BreakerClosed,
    BreakerHalfOpened,
    BreakerOpened,
    CallFailed,
    CallRejected,
    CallSucceeded,
    Event,
    TurnFinished,
    TurnStarted,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.strategies.breaker.machine import BreakerState

WALL = 1_762_338_645.0
TICK_S = 0.005


def rss_mb() -> float:
    """Resident set size now (Linux), in MB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096 / 1e6


class FloodLink:
    """The engine side: 200 tools' seeds, an engine clock, and a producer thread."""

    description = "flood"
    read_only = False

    def __init__(self, tools: int) -> None:
        self.tool_ids = [f"tool_{i:03d}" for i in range(tools)]
        self.sink: Callable[[Event], None] | None = None
        self.start = time.monotonic()
        self.produced = 0
        self.stop = threading.Event()

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]:
        self.sink = sink
        return lambda: None

    def seeds(self) -> list[ToolSeed]:
        content = {"timeout_ms": 5000.0, "circuit_breaker": {"failure_threshold": 5}}
        return [
            ToolSeed(t, manifest=ManifestView(f"{i:08x}", 1, f"manifests/{t}.yaml", WALL, content))
            for i, t in enumerate(self.tool_ids)
        ]

    def now(self) -> float:
        return time.monotonic() - self.start

    def act(self, action: Action, tool_id: str, *, actor: str, reason: str) -> None:
        raise NotImplementedError

    def problem(self) -> str | None:
        return None

    def close(self) -> None:
        self.stop.set()

    def produce(self, rate: int, seconds: float) -> None:
        """Publish ``rate`` events a second for ``seconds``, in 5 ms slices, like an engine."""
        assert self.sink is not None
        sink = self.sink
        per_tick = max(1, round(rate * TICK_S))
        calls = itertools.count()
        tools = self.tool_ids
        begin = time.monotonic()
        ticks = 0
        open_tool: str | None = None
        while not self.stop.is_set() and time.monotonic() - begin < seconds:
            t = self.now()
            at = WALL + t
            sent = 0
            while sent < per_tick:
                n = next(calls)
                tool = tools[n % len(tools)]
                call = f"c{n}"
                turn = f"turn-{n // 5}"
                if n % 5 == 0:
                    sink(TurnStarted(at=at, t=t, turn_id=turn, calls=tuple(f"c{n + i}" for i in range(5)),
                                     deadline_ms=30_000.0))  # fmt: skip
                    sent += 1
                if tool == open_tool:
                    sink(CallRejected(at=at, t=t, tool_id=tool, call_id=call, turn_id=turn,
                                      state=BreakerState.OPEN, reason="circuit open"))  # fmt: skip
                    sent += 1
                    continue
                sink(AttemptStarted(at=at, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=1,
                                    timeout_ms=5000.0, deadline=t + 5.0))  # fmt: skip
                if n % 7 == 0:
                    sink(AttemptFailed(
                        at=at, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=1, error="reset",
                        error_type="ConnectionResetError", kind=ErrorKind.CONNECTION_RESET,
                        classification=ErrorClass.TRANSIENT, rule="exception_class", reason="transient",
                        status_code=None, circuit_breaker_state=BreakerState.CLOSED, retry_count=0,
                        decision="escalate", decision_reason="out of budget", latency_ms=12.0,
                        consecutive_failures=1,
                    ))  # fmt: skip
                    sink(CallFailed(at=at, t=t, tool_id=tool, call_id=call, turn_id=turn, attempts=1,
                                    kind=ErrorKind.CONNECTION_RESET, classification=ErrorClass.TRANSIENT,
                                    error="reset", reason="out of budget", latency_ms=12.0))  # fmt: skip
                    sent += 3
                else:
                    sink(CallSucceeded(at=at, t=t, tool_id=tool, call_id=call, turn_id=turn, attempts=1,
                                       latency_ms=40.0 + n % 90, attempt_ms=40.0 + n % 90))  # fmt: skip
                    sent += 2
                if n % 5 == 4:
                    sink(TurnFinished(at=at, t=t, turn_id=turn, summary="done", statuses={},
                                      executed=5, duration_ms=50.0, outcome="ok"))  # fmt: skip
                    sent += 1
            # Every second a breaker opens; half a second later it half-opens and closes.
            second, frac = divmod(ticks * TICK_S, 1.0)
            if frac < TICK_S / 2:
                open_tool = tools[int(second * 37) % len(tools)]
                sink(BreakerOpened(at=at, t=t, tool_id=open_tool, from_state=BreakerState.CLOSED,
                                   to_state=BreakerState.OPEN, reason="5 failures", actor="engine",
                                   consecutive_failures=5, half_open_at=t + 0.5))  # fmt: skip
            elif abs(frac - 0.5) < TICK_S / 2 and open_tool is not None:
                sink(BreakerHalfOpened(at=at, t=t, tool_id=open_tool, from_state=BreakerState.OPEN,
                                       to_state=BreakerState.HALF_OPEN, reason="timer", actor="engine",
                                       consecutive_failures=5))  # fmt: skip
                sink(BreakerClosed(at=at, t=t, tool_id=open_tool, from_state=BreakerState.HALF_OPEN,
                                   to_state=BreakerState.CLOSED, reason="probe ok", actor="engine",
                                   consecutive_failures=0))  # fmt: skip
                open_tool = None
            self.produced += sent
            ticks += 1
            # Pace against the start, not the last tick: slow ticks catch up instead of drifting.
            delay = begin + ticks * TICK_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)


class FloodApp(ConsoleApp):
    """The console, with its flushes and frames timed."""

    def __init__(self, link: FloodLink) -> None:
        super().__init__(link, freeze_gc=True)  # as `tripwire console` runs it
        self.flush_s: list[float] = []
        self.frame_s: list[float] = []
        self.frame_at: list[float] = []

    def flush(self) -> None:
        start = time.perf_counter()
        super().flush()
        self.flush_s.append(time.perf_counter() - start)


def time_frames(app: FloodApp) -> None:
    """Time each frame the active screen composes, and encode it as the terminal driver would."""
    original = Screen._compositor_refresh

    def timed(screen: Screen[Any]) -> None:
        start = time.perf_counter()
        update = screen._compositor.render_update(screen_stack=app._background_screens)
        if update is not None:
            update.render_segments(app.console)
        original(screen)  # the real refresh (headless: no driver write)
        end = time.perf_counter()
        app.frame_s.append(end - start)
        app.frame_at.append(end)

    Screen._compositor_refresh = timed  # type: ignore[method-assign]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def flood(tools: int, rate: int, seconds: float) -> dict[str, Any]:
    link = FloodLink(tools)
    app = FloodApp(link)
    time_frames(app)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.3)
        table = app.screen.query_one(BreakerTable)
        table.focus()
        producer = threading.Thread(target=link.produce, args=(rate, seconds), daemon=True)
        begin = time.monotonic()
        producer.start()
        await pilot.pause(2.0)
        rss_early = rss_mb()
        latencies = []
        driver = app._driver
        assert driver is not None
        while time.monotonic() - begin < seconds - 0.5:
            await asyncio.sleep(0.1)
            frames = len(app.frame_at)
            cursor = table.cursor
            pressed = time.perf_counter()
            # As a terminal driver delivers a key: the app's queue, behind whatever is waiting.
            driver.send_message(events.Key("down" if cursor < tools - 1 else "home", None))
            while True:  # the first frame composed after the cursor moved
                if table.cursor != cursor and len(app.frame_at) > frames:
                    moved = next((at for at in app.frame_at[frames:] if at > pressed), None)
                    if moved is not None:
                        latencies.append(moved - pressed)
                        break
                await asyncio.sleep(0.001)
        producer.join()
        elapsed = time.monotonic() - begin
        await pilot.pause(0.3)
        rss_end = rss_mb()
        flushes = app.flush_s[5:]  # after start-up
        frames = app.frame_s[5:]
        cycles = [a + b for a, b in zip(flushes, frames, strict=False)]
        return {
            "tools": tools,
            "events": link.produced,
            "events_per_s": link.produced / elapsed,
            "folded": app.model.seen,
            "dropped": app.bridge.dropped,
            "flushes": len(flushes),
            "flush_ms": {k: f(flushes) * 1000 for k, f in _STATS.items()},
            "frame_ms": {k: f(frames) * 1000 for k, f in _STATS.items()},
            "flush_and_frame_ms": {k: f(cycles) * 1000 for k, f in _STATS.items()},
            "key_to_screen_ms": {k: f(latencies) * 1000 for k, f in _STATS.items()},
            "presses": len(latencies),
            "rss_mb": {"after_2s": rss_early, "end": rss_end},
            "events_kept": len(app.model.events),
        }


_STATS: dict[str, Callable[[list[float]], float]] = {
    "p50": statistics.median,
    "p95": lambda v: percentile(v, 0.95),
    "max": lambda v: max(v, default=float("nan")),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tools", type=int, default=200)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(flood(args.tools, args.rate, args.seconds))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Console flood — Python {platform.python_version()}, Textual {textual.__version__}")
    r = result
    print(f"{r['tools']} tools, {r['events']:,} events in {args.seconds:g} s ({r['events_per_s']:,.0f}/s), "
          f"{r['dropped']:,} dropped, {r['flushes']} flushes\n")  # fmt: skip
    print("| measure | p50 | p95 | max | target |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, key, target in (
        ("flush (fold + view update)", "flush_ms", ""),
        ("frame (compose + encode)", "frame_ms", ""),
        ("one UI flush: both", "flush_and_frame_ms", "p95 ≤ 30 ms"),
        (f"key press to screen ({result['presses']} presses)", "key_to_screen_ms", "≤ 100 ms"),
    ):
        s = result[key]
        print(f"| {name} | {s['p50']:.1f} ms | {s['p95']:.1f} ms | {s['max']:.1f} ms | {target} |")
    rss = result["rss_mb"]
    print(f"\nmemory: {rss['after_2s']:.0f} MB after 2 s, {rss['end']:.0f} MB at the end; "
          f"{result['events_kept']:,} events kept for the event log")  # fmt: skip


if __name__ == "__main__":
    main()
