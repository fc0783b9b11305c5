"""What the OpenAI Agents SDK adapter adds to a guarded call: a guarded ``FunctionTool``'s
``on_invoke_tool`` against ``engine.call`` of the same work.

    python bench/adapter_openai_agents.py [--calls 20000] [--repeat 7] [--json]

One engine (started, asyncio: the SDK is asyncio-only), one ``function_tool`` over a zero-latency
async function ``echo(x)``, invoked directly with a ``ToolContext`` and its JSON arguments (as the
``Runner`` invokes it, without the Runner's or a model's cost). Four ways to run one call, CPU µs
per call:

* ``SDK on_invoke_tool``: the plain tool's own invoker — the SDK's cost (argument parsing and
  validation), no guard;
* ``engine.call(echo)``: a direct guarded call of the bare function — the guard alone;
* ``engine.call(SDK invoke)``: a direct guarded call of a tool registered by hand whose function
  is the plain tool's invoker — the guarded work without the adapter;
* ``guarded on_invoke_tool``: the adapter's tool (``guard_tool``) — the SDK's failure-handling
  wrapper, the arguments decoded for the engine, the call's context, the guarded call through
  ``engine.try_call`` and the relay to the same invoker.

The adapter's cost is the fourth minus the third, taken within each repeat. Each figure is the
median of ``--repeat`` interleaved repeats (min–max), with events off (no subscriber) and on (a
direct subscriber appending to a deque, as bench/call_overhead.py). Target: ≤ 5 µs per call.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
from adapter_cost import arguments, compare, report  # the same timing and table for each adapter
from agents import function_tool
from agents.tool_context import ToolContext

from engine import Engine, ToolManifest
from engine.adapters.openai_agents import guard_tool

WAYS = ("SDK on_invoke_tool", "engine.call(echo)", "engine.call(SDK invoke)", "guarded on_invoke_tool")


async def run(calls: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    async def echo(x: int) -> int:
        """Echo a number."""
        return x

    plain = function_tool(echo)
    engine = Engine(
        [ToolManifest(id="echo"), ToolManifest(id="bare"), ToolManifest(id="direct")], rng=random.Random(1)
    )
    guarded = guard_tool(echo, engine)  # registers echo in the engine
    raw = '{"x": 1}'
    ctx: ToolContext[None] = ToolContext(None, tool_name="echo", tool_call_id="call_1", tool_arguments=raw)

    async def direct_fn(**tool_args: Any) -> Any:
        return await plain.on_invoke_tool(ctx, raw)

    engine.register("bare", echo)
    engine.register("direct", direct_fn)

    async def sdk() -> object:
        return await plain.on_invoke_tool(ctx, raw)

    async def bare() -> object:
        return await engine.call("bare", x=1)

    async def direct() -> object:
        return await engine.call("direct", x=1)

    async def adapter() -> object:
        return await guarded.on_invoke_tool(ctx, raw)

    assert await adapter() == await sdk() == 1
    ways = dict(zip(WAYS, (sdk, bare, direct, adapter), strict=True))
    return await compare(engine, ways, calls, repeat, adapter=WAYS[3], baseline=WAYS[2])


def main() -> None:
    args = arguments(__doc__)
    results = anyio.run(run, args.calls, args.repeat)  # asyncio: the SDK runs on nothing else
    report(results, args)


if __name__ == "__main__":
    main()
