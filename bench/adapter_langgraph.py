"""Per-tool-call cost of ``TripwireToolNode`` over the direct guarded path, and ``ToolNode`` beside it.

    python bench/adapter_langgraph.py [--calls 10] [--batches 200] [--repeat 7] [--json]

One AI message holds ``--calls`` tool calls; every ``--fail-every``-th call goes to a tool that
raises ``ValueError`` (permanent: no retry, the breaker is not moved). The ways of answering the
same calls run in one process on one asyncio loop, interleaved in each repeat (so the machine's
noise hits them alike):

- ``run_openai``: ``ToolCallExecutor.run_openai`` on the same calls as an OpenAI message
  (arguments as dicts, nothing to decode), on the engine holding the node's tools: the direct
  guarded path;
- ``TripwireToolNode``: ``node.ainvoke({"messages": [ai_message]})`` — LangGraph's runnable
  wrapper, reading the AI message, the same executor run, and one ``ToolMessage`` per call;
- ``ToolNode`` (reference, unguarded): LangGraph's own node on the same tools, with
  ``handle_tool_errors=True`` so that failures become messages rather than raising.

Two tables. *adapter*: the tools the node registered are replaced, under the same names, by
plain zero-latency coroutines, so that both paths run the very same cheap calls and what is left
between them is the adapter's own work — ``TripwireToolNode − run_openai`` per repeat (side by
side in one run), target ≤ 5 µs per call. *langchain tools*: the real ``@tool``s, each invoked
through its own ``ainvoke`` (schema validation, callback manager: about 180 µs a call, the same
on every path), with ``ToolNode`` for reference.

Each figure is µs per tool call over ``--batches`` messages: the median of the repeats and their
spread (min–max). The engines run started, without subscribers or a recorder. Time is the
process's CPU time by default (``--clock wall`` for wall time): the work is CPU-bound on one
thread, and CPU time is steadier on a shared machine.
"""

from __future__ import annotations

import json
import platform
import random
import statistics
from typing import Any

import anyio
import llm_executor
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph._internal._constants import CONFIG_KEY_RUNTIME  # ToolNode needs a runtime outside a graph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import DEFAULT_RUNTIME
from llm_executor import CLOCKS, Runner, per_call_us  # the same timing as the executor's bench
from llm_executor import TOOLS as PLAIN  # zero-latency stand-ins for the langchain tools, same names

from engine import Engine, ToolCallExecutor, ToolManifest
from engine.adapters.langgraph import TripwireToolNode


@tool
async def lookup(city: str, n: int = 0) -> dict[str, Any]:
    """Today's weather in a city."""
    return {"city": city, "n": n, "temperature_c": 21.5}


@tool
async def broken(city: str, n: int = 0) -> dict[str, Any]:
    """Always refuses."""
    raise ValueError(f"no station near {city!r}")


TOOLS = [lookup, broken]


def messages(calls: int, fail_every: int) -> tuple[AIMessage, dict[str, Any]]:
    """The same calls as a langchain AI message and as an OpenAI one."""
    names = ["broken" if fail_every and (i + 1) % fail_every == 0 else "lookup" for i in range(calls)]
    arguments = [{"city": "Paris", "n": i} for i in range(calls)]
    ai = AIMessage(
        "",
        tool_calls=[
            {"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(zip(names, arguments, strict=True))
        ],
    )
    openai = {
        "role": "assistant",
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(zip(names, arguments, strict=True))
        ],
    }
    return ai, openai


async def interleaved(
    runners: dict[str, Runner], batches: int, repeat: int, calls: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for run in runners.values():  # warm up: caches, the breaker and metrics of each tool
        await per_call_us(run, max(1, batches // 10), calls)
    order = list(runners)
    for r in range(repeat):
        for name in order[r % len(order) :] + order[: r % len(order)]:  # rotate who goes first
            samples[name].append(await per_call_us(runners[name], batches, calls))
    return samples


async def measure(
    calls: int, batches: int, repeat: int, fail_every: int, plain: bool
) -> dict[str, list[float]]:
    ai, openai = messages(calls, fail_every)
    engine = Engine([ToolManifest(id=t.name) for t in TOOLS], rng=random.Random(1))
    node = TripwireToolNode(TOOLS, engine=engine)  # registers the tools in the engine
    executor = ToolCallExecutor(engine)
    state = {"messages": [ai]}
    runners: dict[str, Runner] = {
        "run_openai": lambda: executor.run_openai(openai),
        "TripwireToolNode": lambda: node.ainvoke(state),
    }
    if plain:  # the same names, cheap bodies: only the paths' own work differs
        for name, fn in PLAIN.items():
            engine.unregister(name)
            engine.register(name, fn)
    else:
        reference = ToolNode(TOOLS, handle_tool_errors=True)
        config: Any = {"configurable": {CONFIG_KEY_RUNTIME: DEFAULT_RUNTIME}}
        runners["ToolNode"] = lambda: reference.ainvoke(state, config)
    async with engine:
        samples = await interleaved(runners, batches, repeat, calls)
    engine.close()
    return samples


def _row(values: list[float]) -> dict[str, float]:
    return {"us_per_call": statistics.median(values), "min": min(values), "max": max(values)}


COST = "adapter's cost (TripwireToolNode − run_openai)"


def summary(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {name: _row(values) for name, values in samples.items()}
    out[COST] = _row([n - d for n, d in zip(samples["TripwireToolNode"], samples["run_openai"], strict=True)])
    return out


def main() -> None:
    args = llm_executor.message_arguments(__doc__, calls=10, batches=200).parse_args()
    llm_executor.clock = CLOCKS[args.clock]  # what per_call_us reads
    results = {
        "adapter": summary(
            anyio.run(
                measure, args.calls, args.batches, args.repeat, args.fail_every, True, backend="asyncio"
            )
        ),
        "langchain tools": summary(
            anyio.run(
                measure, args.calls, max(1, args.batches // 2), args.repeat, args.fail_every, False,
                backend="asyncio",
            )
        ),
    }  # fmt: skip
    if args.json:
        report = {"calls": args.calls, "fail_every": args.fail_every, "clock": args.clock, "results": results}
        print(json.dumps(report, indent=2))
        return
    python = f"Python {platform.python_version()} on {platform.machine()}"
    failing = f"every {args.fail_every}th failing" if args.fail_every else "none failing"
    print(
        f"{python}; {args.calls} calls per message ({failing}), {args.batches} messages"
        f" ({max(1, args.batches // 2)} with langchain tools), {args.repeat} repeats, {args.clock} time"
    )
    for title, result in results.items():
        print(f"\n{title}\n\n| way | µs per tool call (median, min–max) |\n| --- | ---: |")
        for name, r in result.items():
            print(f"| {name} | {r['us_per_call']:.1f} ({r['min']:.1f}–{r['max']:.1f}) |")
    print(f"\ntarget: the adapter's cost ≤ 5 µs per call: {results['adapter'][COST]['us_per_call']:.1f}")


if __name__ == "__main__":
    main()
