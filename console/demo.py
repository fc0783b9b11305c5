"""``tripwire demo``: the engine against the bundled travel tools through a scripted outage.

Runs on trio's virtual clock by default, so the 30 s breaker timeout and the 15 s tool
timeout play out in milliseconds and the run is identical every time.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import trio.testing
from rich.console import Console
from rich.table import Table

from engine import Engine, ToolError
from engine.demo import DEMO_TOOLS
from engine.events import Event

DEMO_EPOCH = 1_762_338_645.0  # 2025-11-05T10:30:45Z

STYLES = {
    "CallSucceeded": "green",
    "ToolError": "yellow",
    "ToolTimeout": "dark_orange",
    "CallFailed": "red",
    "CallRejected": "blue",
    "BreakerOpened": "bold red",
    "BreakerHalfOpened": "bold yellow",
    "BreakerClosed": "bold green",
}


class Outage:
    """Wraps a tool: raises ``error`` for calls made while ``down`` says so."""

    def __init__(self, fn: Callable[..., Awaitable[Any]], error: Callable[[], Exception]) -> None:
        self.fn, self.error, self.down = fn, error, False
        self.hang = False

    async def __call__(self, **args: Any) -> Any:
        if self.hang:
            await anyio.sleep_forever()
        if self.down:
            raise self.error()
        return await self.fn(**args)


async def play(manifests: Path, console: Console) -> Engine:
    start = anyio.current_time()
    engine = Engine(
        manifests, rng=random.Random(2025), wall_clock=lambda: DEMO_EPOCH + anyio.current_time() - start
    )
    tools = {
        name: Outage(fn, lambda: ConnectionResetError("connection reset by peer"))
        for name, fn in DEMO_TOOLS.items()
    }
    tools["custom_api"].error = lambda: _Http503("Service unavailable (503)")
    for name, tool in tools.items():
        engine.register(name, tool)

    def show(event: Event) -> None:
        if event.event_type == "AttemptStarted":
            return
        style = STYLES.get(event.event_type, "dim")
        console.print(
            f"[dim]{event.t - start:8.3f}s[/] [{style}]{event.event_type:<17}[/] {event.describe()}"
        )

    engine.subscribe(show, direct=True)

    async def call(tool: str, **args: Any) -> None:
        console.rule(
            f"[bold]{tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})", align="left", style="dim"
        )
        try:
            value = await engine.call(tool, **args)
        except ToolError as error:
            console.print(f"          [red]→ ToolError[/] {error.kind}: {error.message}")
        else:
            console.print(f"          [green]→[/] {str(value)[:100]}")

    async with engine:
        flaky = tools["flight_search"]
        flaky.down = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(call, "flight_search", origin="SFO", destination="JFK"))
            await anyio.sleep(0.25)  # two attempts fail, then the service is back
            flaky.down = False
        await call("flight_search", origin="XYZ", destination="JFK")
        tools["custom_api"].down = True
        await call("custom_api", region="antarctica")
        tools["hotel_search"].down = True
        await call("hotel_search", city="Lisbon")
        await call("hotel_search", city="Lisbon")
        await anyio.sleep(30)
        tools["hotel_search"].down = False
        await call("hotel_search", city="Lisbon")
        tools["activity_search"].hang = True
        with anyio.move_on_after(16):
            await call("activity_search", city="Lisbon")
    return engine


class _Http503(Exception):
    status_code = 503


def breaker_table(engine: Engine) -> Table:
    table = Table(title="circuit breakers", title_justify="left")
    for column in ("tool", "state", "consecutive failures", "opens"):
        table.add_column(column)
    for name in engine.tools:
        breaker = engine.breaker(name)
        colour = {"CLOSED": "green", "OPEN": "red", "HALF_OPEN": "yellow"}.get(breaker.state, "magenta")
        table.add_row(
            name, f"[{colour}]{breaker.state}[/]", str(breaker.consecutive_failures), str(breaker.opens)
        )
    return table


def run_demo(manifests: Path, *, real_time: bool = False, console: Console | None = None) -> None:
    console = console or Console()
    if real_time:
        engine = anyio.run(play, manifests, console)
    else:
        clock = trio.testing.MockClock(autojump_threshold=0)
        engine = anyio.run(play, manifests, console, backend="trio", backend_options={"clock": clock})
    console.print(breaker_table(engine))
