"""What the MCP adapter adds per call: a guarded MCP tool call against the SDK's own call.

    python bench/adapter_mcp.py [--calls 2000] [--repeat 7] [--mode auto|legacy] [--clock cpu|wall] [--json]

An ``MCPServer`` with one ``echo`` tool runs in-process (the SDK's ``Client(server)``: ``auto``
dispatches directly, ``legacy`` goes through JSON-RPC over memory streams), so no pipe or
process adds noise. Four ways of making the same call run in one process on one asyncio loop,
interleaved in small batches within each repeat (the machine's noise hits them alike):

- *session*: ``session.call_tool("echo", {"text": …})``, the SDK alone;
- *guarded MCP*: ``engine.call("mcp.echo", text=…)`` through :class:`MCPToolset`;
- *guarded by hand*: ``engine.call("hand.echo", text=…)`` on a function that awaits
  ``session.call_tool`` and returns the result's text: what one writes without the adapter;
- *plain*: ``await echo(text=…)``, an equivalent local async function;
- *guarded plain*: ``engine.call("echo", text=…)`` on that function.

Two figures: the adapter's cost as issue 16 defines it, what the guarded MCP call adds over the
SDK call less what the engine adds over the plain function, (guarded MCP − session) − (guarded
plain − plain), target ≤ 5 µs; and the adapter's own code, guarded MCP − guarded by hand. The two
differ by what running the SDK's call inside the engine's cancel scope costs the SDK's own cancel
scopes and tasks (a guarded SDK call pays it, adapter or not). The engine runs started, without
subscribers. Figures are µs per call, the median of the repeats and their spread (min–max); the
costs are medians of the per-repeat differences. Time is the process's CPU time by default
(``--clock wall`` for wall time): the work is CPU-bound on one thread, and CPU time is steadier when
other processes share the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer

from engine import Engine, ToolManifest
from engine.adapters.mcp import MCPToolset

Runner = Callable[[], Awaitable[object]]
NAMES = ("session", "guarded MCP", "guarded by hand", "plain", "guarded plain")
BATCH = 50


async def echo(text: str) -> str:
    return text


def build_server() -> MCPServer:
    server = MCPServer("bench", log_level="CRITICAL")
    server.add_tool(echo, name="echo", structured_output=False)
    return server


async def run(calls: int, repeat: int, mode: str, clock: Callable[[], float]) -> dict[str, list[float]]:
    engine = Engine([ToolManifest(id="mcp.echo"), ToolManifest(id="hand.echo"), ToolManifest(id="echo")])
    engine.register("echo", echo)
    toolset = MCPToolset(engine, prefix="mcp.")
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    async with engine, Client(build_server(), mode=mode, message_handler=toolset.message_handler) as client:
        session = client.session

        async def by_hand(**arguments: Any) -> Any:
            result = await session.call_tool("echo", arguments)
            return result.content[0].text  # type: ignore[union-attr]

        engine.register("hand.echo", by_hand)
        async with toolset.attach(session):
            runners: dict[str, Runner] = {
                "session": lambda: session.call_tool("echo", {"text": "hi"}),
                "guarded MCP": lambda: engine.call("mcp.echo", text="hi"),
                "guarded by hand": lambda: engine.call("hand.echo", text="hi"),
                "plain": lambda: echo(text="hi"),
                "guarded plain": lambda: engine.call("echo", text="hi"),
            }
            for runner in runners.values():  # warm-up
                for _ in range(BATCH):
                    await runner()
            gc.collect()
            for _ in range(repeat):
                spent = dict.fromkeys(NAMES, 0.0)
                for _ in range(calls // BATCH):
                    for name, runner in runners.items():
                        start = clock()
                        for _ in range(BATCH):
                            await runner()
                        spent[name] += clock() - start
                for name in NAMES:
                    samples[name].append(spent[name] / (calls // BATCH * BATCH) * 1e6)
    return samples


def adapter_costs(samples: dict[str, list[float]]) -> list[float]:
    """Per repeat: (guarded MCP − session) − (guarded plain − plain)."""
    return [
        (mcp - sdk) - (guarded - plain)
        for sdk, mcp, _, plain, guarded in zip(*(samples[name] for name in NAMES), strict=True)
    ]


def own_costs(samples: dict[str, list[float]]) -> list[float]:
    """Per repeat: guarded MCP − guarded by hand."""
    return [mcp - hand for mcp, hand in zip(samples["guarded MCP"], samples["guarded by hand"], strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls of each kind per repeat")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--mode", choices=("auto", "legacy"), default="auto", help="the SDK's in-process path"
    )
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    samples = anyio.run(run, args.calls, args.repeat, args.mode, clock)
    costs = adapter_costs(samples)
    cost = statistics.median(costs)
    owns = own_costs(samples)
    own = statistics.median(owns)
    if args.json:
        out: dict[str, Any] = {
            "us_per_call": {name: statistics.median(values) for name, values in samples.items()},
            "spread": {name: [min(values), max(values)] for name, values in samples.items()},
            "adapter_us": cost,
            "adapter_spread": [min(costs), max(costs)],
            "adapter_own_us": own,
            "adapter_own_spread": [min(owns), max(owns)],
            "mode": args.mode,
            "clock": args.clock,
        }
        print(json.dumps(out, indent=2))
        return
    runs = f"{args.calls:,} calls × {args.repeat} repeats"
    print(f"Python {platform.python_version()}, mode {args.mode}, {args.clock} time, {runs}")
    print("| call | µs/call (median) | spread |")
    print("| --- | ---: | ---: |")
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}–{max(values):.1f} |")
    print(f"\nadapter cost: {cost:.2f} µs per call (spread {min(costs):.2f}–{max(costs):.2f}; target ≤ 5)")
    spread = f"{min(owns):.2f}–{max(owns):.2f}"
    print(f"adapter's own code (guarded MCP − guarded by hand): {own:.2f} µs (spread {spread})")


if __name__ == "__main__":
    main()
