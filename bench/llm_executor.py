"""Per-tool-call cost of ``ToolCallExecutor`` against a plain gather + parse + call + format.

    python bench/llm_executor.py [--calls 20] [--batches 300] [--repeat 7] [--json]

One assistant message holds ``--calls`` tool calls to zero-latency async tools; every
``--fail-every``-th call goes to a tool that raises ``ValueError`` (a permanent failure: no
retry, the breaker is not moved). Three ways of answering the same message run in one process
on one asyncio loop, interleaved in each repeat (so the machine's noise hits them alike):

- *baseline*: ``asyncio.gather`` over the calls, ``json.loads`` of each call's arguments, the
  call, and its result (or a three-line error) formatted as the tool message's text;
- ``ToolCallExecutor.run_openai`` on the OpenAI message;
- ``ToolCallExecutor.run_anthropic`` on the same calls as Anthropic ``tool_use`` blocks;
- ``Engine.run_turn`` on the same calls as a ready-made ``Turn``: the engine's own share, which
  the executor cannot go below (the executor's overhead is ``run_openai`` minus this).

Each figure is µs per tool call over ``--batches`` messages; the table gives the median of the
repeats and their spread (min–max), and the executor / baseline ratio (median of the per-repeat
ratios). The engine runs started, without subscribers or a recorder. Time is the process's CPU
time by default (``--clock wall`` for wall time): the work is CPU-bound on one thread, and CPU
time is steadier when other processes share the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from engine import Engine, ToolCall, ToolCallExecutor, ToolManifest, Turn

Runner = Callable[[], Awaitable[object]]


async def lookup(city: str, n: int = 0) -> dict[str, Any]:
    return {"city": city, "n": n, "temperature_c": 21.5}


async def broken(city: str, n: int = 0) -> dict[str, Any]:
    raise ValueError(f"no station near {city!r}")


TOOLS: dict[str, Callable[..., Awaitable[Any]]] = {"lookup": lookup, "broken": broken}


def messages(calls: int, fail_every: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same calls as an OpenAI assistant message and as an Anthropic one."""
    names = ["broken" if fail_every and (i + 1) % fail_every == 0 else "lookup" for i in range(calls)]
    arguments = [{"city": "Paris", "n": i} for i in range(calls)]
    openai = {
        "role": "assistant",
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(zip(names, arguments, strict=True))
        ],
    }
    anthropic = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(zip(names, arguments, strict=True))
        ],
    }
    return openai, anthropic


async def baseline(message: dict[str, Any]) -> list[dict[str, Any]]:
    """What a user would write without the executor."""

    async def one(call: dict[str, Any]) -> dict[str, Any]:
        function = call["function"]
        name = function["name"]
        try:
            value = await TOOLS[name](**json.loads(function["arguments"]))
            content = value if isinstance(value, str) else json.dumps(value)
        except Exception as exc:
            content = f"Tool Execution Failed\nTool: {name}\nError Type: {type(exc).__name__}\nMessage: {exc}"
        return {"role": "tool", "tool_call_id": call["id"], "content": content}

    return list(await asyncio.gather(*(one(call) for call in message["tool_calls"])))


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time


async def per_call_us(run: Runner, batches: int, calls: int) -> float:
    gc.collect()
    start = clock()
    for _ in range(batches):
        await run()
    return (clock() - start) / (batches * calls) * 1e6


async def measure(calls: int, batches: int, repeat: int, fail_every: int) -> dict[str, list[float]]:
    openai, anthropic = messages(calls, fail_every)
    engine = Engine([ToolManifest(id=name) for name in TOOLS], rng=random.Random(1))
    for name, fn in TOOLS.items():
        engine.register(name, fn)
    executor = ToolCallExecutor(engine)
    turn_calls = [
        ToolCall(call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in openai["tool_calls"]
    ]
    runners: dict[str, Runner] = {
        "baseline": lambda: baseline(openai),
        "run_openai": lambda: executor.run_openai(openai),
        "run_anthropic": lambda: executor.run_anthropic(anthropic),
        "engine.run_turn": lambda: engine.run_turn(Turn(turn_calls, deadline_s=120.0)),
    }
    samples: dict[str, list[float]] = {name: [] for name in runners}
    async with engine:
        for run in runners.values():  # warm up: caches, the breaker and metrics of each tool
            await per_call_us(run, max(1, batches // 10), calls)
        order = list(runners)
        for r in range(repeat):
            for name in order[r % len(order) :] + order[: r % len(order)]:  # rotate who goes first
                samples[name].append(await per_call_us(runners[name], batches, calls))
    engine.close()
    return samples


def _row(values: list[float], base: list[float]) -> dict[str, float]:
    ratios = [v / b for v, b in zip(values, base, strict=True)]
    return {
        "us_per_call": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def summary(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    base = samples["baseline"]
    out = {name: _row(values, base) for name, values in samples.items()}
    overhead = [o - t for o, t in zip(samples["run_openai"], samples["engine.run_turn"], strict=True)]
    out["executor's own share (run_openai − run_turn)"] = _row(overhead, base)
    return out


def message_arguments(description: str | None, *, calls: int, batches: int) -> argparse.ArgumentParser:
    """The command line of a benchmark of tool-call messages (this one's, bench/adapter_langgraph.py's)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=calls, help="tool calls per message")
    parser.add_argument("--batches", type=int, default=batches, help="messages per measurement")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--fail-every", type=int, default=5, help="every n-th call fails (0: none)")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu",
        help="cpu: this process's CPU time (steadier on a shared machine; the work is CPU-bound); wall",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main() -> None:
    args = message_arguments(__doc__, calls=20, batches=300).parse_args()
    global clock
    clock = CLOCKS[args.clock]
    samples = anyio.run(measure, args.calls, args.batches, args.repeat, args.fail_every, backend="asyncio")
    result = summary(samples)
    if args.json:
        report = {"calls": args.calls, "fail_every": args.fail_every, "clock": args.clock, "results": result}
        print(json.dumps(report, indent=2))
        return
    python = f"Python {platform.python_version()} on {platform.machine()}"
    failing = f"every {args.fail_every}th failing" if args.fail_every else "none failing"
    print(
        f"{python}; {args.calls} calls per message ({failing}), {args.batches} messages,"
        f" {args.repeat} repeats, {args.clock} time"
    )
    print("| way | µs per tool call (median, min–max) | × baseline (median, min–max) |")
    print("| --- | ---: | ---: |")
    for name, r in result.items():
        print(
            f"| {name} | {r['us_per_call']:.1f} ({r['min']:.1f}–{r['max']:.1f}) |"
            f" {r['ratio']:.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f}) |"
        )
    print("\ntarget: run_openai ≤ 3× baseline")


if __name__ == "__main__":
    main()
