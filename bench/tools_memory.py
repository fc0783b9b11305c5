"""Memory and registration time per tool, when most registered tools sit idle.

    python bench/tools_memory.py [--tools 1000 10000] [--repeat 5] [--directory-max 1000] [--json]

For each tool count N and each way of giving manifests, one repeat measures:

- registration time: ``engine.register`` for N tools, untraced (``perf_counter``);
- bytes per idle tool: tracemalloc's traced bytes after registering the N tools minus before, / N.
  The engine object, the tool names and the manifests the user built or loaded are outside the
  figure; a defaults-only tool's manifest is made by registering it, so it is counted;
- bytes per tool after one call each: the same, after one guarded call per tool (asyncio, engine
  started), the results dropped.

Ways: ``defaults`` (``Engine()``: every tool runs on the default manifest), ``manifests``
(``Engine([ToolManifest(...), ...])``) and ``directory`` (one YAML file per tool plus
``defaults.yaml``, loaded as the demo and the console load theirs; only up to ``--directory-max``
tools, as loading 10,000 files takes a while; loading is not counted).

The composed stack is what a user would otherwise keep per tool: an aiobreaker ``CircuitBreaker``
and a tenacity ``AsyncRetrying`` (stop after 5, exponential jitter wait), measured the same way
(idle, then after one call each through breaker, retrying and ``anyio.fail_after``).

Repeats interleave the engine and the composed stack; figures are medians with min–max.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import statistics
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiobreaker
import anyio
import tenacity

from engine import Engine, ManifestRegistry, ToolManifest

WAYS = ("defaults", "manifests", "directory")
Stacks = dict[str, tuple[aiobreaker.CircuitBreaker, tenacity.AsyncRetrying]]
"""The composed stack: a breaker and a retrying object per tool."""
DEFAULTS_YAML = """defaults:
  timeout_ms: 30000
  retry_policy:
    max_attempts: 5
  circuit_breaker:
    failure_threshold: 5
"""


async def tool() -> int:
    return 1


def names(n: int) -> list[str]:
    return [f"tool_{i:05d}" for i in range(n)]


class Sources:
    """What the user has before registering: names and, per way, the manifests (made once)."""

    def __init__(self, n: int, directory_max: int, tmp: Path) -> None:
        self.names = names(n)
        self.manifests = [ToolManifest(id=name) for name in self.names]
        self.registry: ManifestRegistry | None = None
        if n <= directory_max:
            folder = tmp / f"manifests-{n}"
            folder.mkdir()
            (folder / "defaults.yaml").write_text(DEFAULTS_YAML)
            for name in self.names:
                (folder / f"{name}.yaml").write_text(f"tool:\n  id: {name}\n  side_effect: read_only\n")
            self.registry = ManifestRegistry.from_directory(folder)

    def engine(self, way: str) -> Engine:
        if way == "defaults":
            return Engine()
        if way == "manifests":
            return Engine(self.manifests)
        assert self.registry is not None
        return Engine(self.registry)


def register_all(engine: Engine, tool_names: list[str]) -> float:
    """Seconds to register every tool."""
    start = time.perf_counter()
    for name in tool_names:
        engine.register(name, tool)
    return time.perf_counter() - start


async def call_each(engine: Engine, tool_names: list[str]) -> None:
    async with engine:
        for name in tool_names:
            await engine.call(name)


def traced(build: Callable[[], Any], use: Callable[[Any], None], n: int) -> tuple[float, float, Any]:
    """Bytes per tool held after ``build()`` and after ``use(built)``; the built object is returned."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        built = build()
        idle = tracemalloc.get_traced_memory()[0] - base
        use(built)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return idle / n, used / n, built


def measure_engine(sources: Sources, way: str) -> dict[str, float]:
    n = len(sources.names)
    engine = sources.engine(way)
    gc.collect()
    seconds = register_all(engine, sources.names)
    engine.close()
    del engine
    fresh = sources.engine(way)  # made outside the traced span

    def build() -> Engine:
        register_all(fresh, sources.names)
        return fresh

    def use(engine: Engine) -> None:
        anyio.run(call_each, engine, sources.names)

    idle, used, built = traced(build, use, n)
    built.close()
    return {"register_ms": seconds * 1e3, "idle_b": idle, "called_b": used}


def composed_stack(tool_names: list[str]) -> Stacks:
    stacks: Stacks = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in tool_names:
            breaker = aiobreaker.CircuitBreaker(fail_max=5, timeout_duration=datetime.timedelta(seconds=30))
            retrying = tenacity.AsyncRetrying(
                stop=tenacity.stop_after_attempt(5),
                wait=tenacity.wait_exponential_jitter(initial=0.1, max=0.8),
                reraise=True,
            )
            stacks[name] = (breaker, retrying)
    return stacks


async def composed_call_each(stacks: Stacks) -> None:
    for breaker, retrying in stacks.values():
        async for attempt in retrying:
            with attempt:
                with anyio.fail_after(30):
                    await breaker.call_async(tool)


def measure_composed(sources: Sources) -> dict[str, float]:
    n = len(sources.names)
    gc.collect()
    start = time.perf_counter()
    composed_stack(sources.names)
    seconds = time.perf_counter() - start

    def use(stacks: Stacks) -> None:
        anyio.run(composed_call_each, stacks)

    idle, used, _ = traced(lambda: composed_stack(sources.names), use, n)
    return {"register_ms": seconds * 1e3, "idle_b": idle, "called_b": used}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def warm_up() -> None:
    """One call through each stack first: the imports and caches of a first call are not per tool."""
    sources = Sources(1, 0, Path())
    measure_engine(sources, "defaults")
    measure_composed(sources)


def run(counts: list[int], repeat: int, directory_max: int) -> dict[str, dict[str, dict[str, float]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    warm_up()
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            sources = Sources(n, directory_max, Path(tmp))
            ways = [w for w in WAYS if w != "directory" or sources.registry is not None]
            samples: dict[str, list[dict[str, float]]] = {w: [] for w in (*ways, "composed")}
            for _ in range(repeat):  # interleaved: every stack once per repeat
                for way in ways:
                    samples[way].append(measure_engine(sources, way))
                samples["composed"].append(measure_composed(sources))
            for stack, runs in samples.items():
                results[f"{n} {stack}"] = {key: summary([r[key] for r in runs]) for key in runs[0]}
    return results


def spread(figure: dict[str, float], fmt: str) -> str:
    return f"{figure['median']:{fmt}} ({figure['min']:{fmt}}–{figure['max']:{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tools", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--directory-max", type=int, default=1_000, help="largest N for the directory way")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = run(args.tools, args.repeat, args.directory_max)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"Python {platform.python_version()} on {platform.machine()}, medians of {args.repeat} (min–max)")
    print("| tools | stack | register, ms | B per idle tool | B per tool after one call |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for key, figures in results.items():
        n, stack = key.split(" ", 1)
        print(
            f"| {int(n):,} | {stack} | {spread(figures['register_ms'], '.1f')} "
            f"| {spread(figures['idle_b'], ',.0f')} | {spread(figures['called_b'], ',.0f')} |"
        )


if __name__ == "__main__":
    main()
