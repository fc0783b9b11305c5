"""The strategy pipeline's cost per successful call, side by side with another checkout (issue 23).

    python bench/pipeline.py [--calls 50000] [--repeat 5]            # µs per call, wall clock
    python bench/pipeline.py --instructions [--against PATH]         # instructions per call (callgrind)

Cases, each a zero-latency async tool on asyncio:

* ``started`` — ``async with engine``, nothing but the backbone configured (the fused path);
* ``unstarted`` — the same engine never started (each attempt makes its own cancel scope);
* ``strategies`` — started, with a generous bulkhead and retry budget on the tool (the general path);
* ``composed`` — tenacity + aiobreaker + ``anyio.fail_after`` around the same tool.

Wall-clock figures on a shared VM vary run to run; ``--instructions`` counts instructions with
valgrind's callgrind instead (repeatable whatever else the machine does): each case runs twice
in a fresh interpreter, with ``--calls`` and with none, and the difference divided by the calls
is the cost of one call. ``--against PATH`` runs the same cases on the engine checked out at PATH
(a ``git worktree`` of the commit before; the ``strategies`` case is skipped where it has none).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from call_overhead import composed_call, tool

from engine import Engine, ToolManifest

CASES = ("started", "unstarted", "strategies", "composed")
GENEROUS = {
    "bulkhead": {"max_concurrent": 1000, "max_queued": 1000},
    "retry_budget": {"budget_percent": 20},
}


def engine_for(case: str) -> Engine:
    sections = GENEROUS if case == "strategies" else {}
    engine = Engine([ToolManifest(id="tool", **sections)], rng=random.Random(1))
    engine.register("tool", tool)
    return engine


async def loop(fn: Callable[[], Awaitable[object]], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - start) / max(calls, 1) * 1e6


async def run_case(case: str, calls: int, repeat: int) -> float:
    """Best µs per call of ``repeat`` runs of ``calls`` calls (one warm-up call first)."""
    if case == "composed":
        fn = composed_call()
        await fn()
        return min([await loop(fn, calls) for _ in range(repeat)])
    engine = engine_for(case)

    async def guarded() -> object:
        return await engine.call("tool")

    await guarded()
    if case == "unstarted":
        return min([await loop(guarded, calls) for _ in range(repeat)])
    async with engine:
        return min([await loop(guarded, calls) for _ in range(repeat)])


def instructions(case: str, calls: int, root: Path) -> float | None:
    """Instructions per call of ``case`` on the engine at ``root``, by callgrind (None: no such case)."""
    counts = []
    for n in (0, calls):
        with tempfile.TemporaryDirectory() as out:
            command = [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out",
                sys.executable, __file__, "--case", case, "--calls", str(n), "--repeat", "1",
            ]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                if "unknown" in done.stdout + done.stderr or "Extra inputs" in done.stderr:
                    return None
                raise RuntimeError(done.stderr[-2000:])
            totals = [
                line for line in Path(out, "cg.out").read_text().splitlines() if line.startswith("totals:")
            ]
            counts.append(int(totals[0].split()[1]))
    return (counts[1] - counts[0]) / calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--case", choices=CASES, help="run one case and print µs per call")
    parser.add_argument("--instructions", action="store_true", help="count instructions per call")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES, help="the cases to run")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    if args.case is not None:
        print(f"{anyio.run(run_case, args.case, args.calls, args.repeat):.3f}")
        return
    roots = {"this checkout": here, **({"against": args.against.resolve()} if args.against else {})}
    unit = "instructions/call" if args.instructions else "µs/call"
    print(f"| case | {' | '.join(f'{name} ({unit})' for name in roots)} |")
    print(f"| --- |{' ---: |' * len(roots)}")
    for case in args.cases:
        cells = []
        for root in roots.values():
            if args.instructions:
                value = instructions(case, min(args.calls, 20_000), root)
                cells.append("—" if value is None else f"{value:,.0f}")
            else:
                command = [sys.executable, __file__, "--case", case, "--calls", str(args.calls),
                           "--repeat", str(args.repeat)]  # fmt: skip
                done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(root)},
                                      capture_output=True, text=True, check=False)  # fmt: skip
                cells.append(done.stdout.strip() if done.returncode == 0 else "—")
        print(f"| {case} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
