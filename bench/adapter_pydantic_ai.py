"""What the pydantic-ai adapter adds to a guarded call: ``GuardedToolset.call_tool`` against
``engine.call`` of the same work.

    python bench/adapter_pydantic_ai.py [--calls 20000] [--repeat 7] [--json]

One engine (started, asyncio), one pydantic-ai ``FunctionToolset`` with a zero-latency async tool
``echo(x)``. Three ways to run one call of it, CPU µs per call:

* ``pydantic-ai call_tool``: the inner toolset's own ``call_tool`` — pydantic-ai's cost, no guard;
* ``engine.call``: a direct guarded call of a tool registered by hand whose function is that same
  ``call_tool`` — the guarded work without the adapter;
* ``GuardedToolset.call_tool``: the adapter — registration check, the call's context, the guarded
  call through ``engine.try_call`` and the relay to the same ``call_tool``.

The adapter's cost is the third minus the second, taken within each repeat. Each figure is the
median of ``--repeat`` interleaved repeats (min–max), with events off (no subscriber) and on (a
direct subscriber appending to a deque, as bench/call_overhead.py). Target: ≤ 5 µs per call.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
from adapter_cost import arguments, compare, report  # the same timing and table for each adapter
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage

from engine import Engine, ToolManifest
from engine.adapters.pydantic_ai import GuardedToolset

WAYS = ("pydantic-ai call_tool", "engine.call", "GuardedToolset.call_tool")


def never_called(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("unused")])


async def run(calls: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    inner: FunctionToolset[None] = FunctionToolset()

    @inner.tool_plain
    async def echo(x: int) -> int:
        return x

    engine = Engine([ToolManifest(id="echo"), ToolManifest(id="direct")], rng=random.Random(1))
    guarded: GuardedToolset[None] = GuardedToolset(inner, engine)
    ctx = RunContext(deps=None, model=FunctionModel(never_called), usage=RunUsage())
    tool = (await guarded.get_tools(ctx))["echo"]  # registers echo in the engine
    args: dict[str, Any] = {"x": 1}

    async def direct_fn(**tool_args: Any) -> Any:
        return await inner.call_tool("echo", tool_args, ctx, tool)

    engine.register("direct", direct_fn)

    async def plain() -> object:
        return await inner.call_tool("echo", args, ctx, tool)

    async def direct() -> object:
        return await engine.call("direct", x=1)

    async def adapter() -> object:
        return await guarded.call_tool("echo", args, ctx, tool)

    ways = dict(zip(WAYS, (plain, direct, adapter), strict=True))
    return await compare(engine, ways, calls, repeat, adapter=WAYS[2], baseline=WAYS[1])


def main() -> None:
    args = arguments(__doc__)
    results = anyio.run(run, args.calls, args.repeat)
    report(results, args)


if __name__ == "__main__":
    main()
