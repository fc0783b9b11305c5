"""How far behind the engine an attached console's board is.

    python bench/attach_lag.py [--seconds 20] [--load CALLS_PER_S] [--json]

Starts ``tripwire serve`` in a subprocess (the bundled demo by default; with ``--load`` a
workload of 20 tools answering at once, called that many times a second) recording into a
fresh trace store, and attaches the headless console to it (``ConsoleApp`` on an
``AttachedLink``, Textual's ``run_test``, refreshing ten times a second, as
``tripwire console --attach`` runs it). For every event the engine emits after the console
attached, measured on the wall clock of this machine:

* to the console: from the event's ``at`` (stamped by the engine as it happened) until the
  link's follower thread hands it to the console's bridge — the recorder's batch interval
  (50 ms), the commit and the follower's poll (100 ms);
* on the board: until the console's flush folds it into the view model the board is drawn
  from — the above plus the flush interval (100 ms).

p50, p95 and max of each; the target is the board no more than 500 ms behind.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console.app import ConsoleApp  # noqa: E402
from console.attach import AttachedLink  # noqa: E402
from console.model import Changes, ConsoleModel  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.events import Event  # noqa: E402

LOAD_ENV = "ATTACH_LAG_CALLS_PER_S"


async def busy(engine: Engine) -> None:
    """``--load``'s workload (``tripwire serve --workload bench/attach_lag.py:busy``)."""
    rate = float(os.environ.get(LOAD_ENV, "200"))
    tools = [f"tool_{i:02d}" for i in range(20)]

    async def answer(**_: Any) -> str:
        return "ok"

    for tool in tools:
        engine.register(tool, answer)
    calls = 0
    started = anyio.current_time()
    while True:
        await engine.try_call(tools[calls % len(tools)])
        calls += 1
        await anyio.sleep(max(0.0, started + calls / rate - anyio.current_time()))


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "max_ms": float("nan")}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return {"p50_ms": statistics.median(ordered) * 1e3, "p95_ms": p95 * 1e3, "max_ms": ordered[-1] * 1e3}


async def measure(db: Path, seconds: float) -> dict[str, Any]:
    link = AttachedLink(db, read_only=True, history=0)
    attached = time.time()
    handed: list[float] = []
    folded: list[float] = []

    subscribe = link.subscribe

    def timed_subscribe(sink: Any) -> Any:
        def timed(event: Event) -> None:
            if event.at >= attached:
                handed.append(time.time() - event.at)
            sink(event)

        return subscribe(timed)

    link.subscribe = timed_subscribe  # type: ignore[method-assign]
    apply = ConsoleModel.apply

    def timed_apply(model: ConsoleModel, events: Iterable[Event]) -> Changes:
        batch = events if isinstance(events, list) else list(events)
        changes = apply(model, batch)
        now = time.time()
        folded.extend(now - e.at for e in batch if e.at >= attached)
        return changes

    ConsoleModel.apply = timed_apply  # type: ignore[method-assign]
    try:
        app = ConsoleApp(link, refresh_hz=10.0)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(seconds)
    finally:
        ConsoleModel.apply = apply  # type: ignore[method-assign]
    return {"events": len(folded), "to_console": percentiles(handed), "on_board": percentiles(folded)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to watch (default 20)")
    parser.add_argument("--load", type=float, default=None, help="calls per second instead of the demo")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "traces.db"
        command = [
            sys.executable,
            "-m",
            "console",
            "serve",
            "--manifests",
            str(ROOT / "manifests"),
            "--traces",
            str(db),
        ]
        env = dict(os.environ)
        if args.load is not None:
            command += ["--workload", f"{Path(__file__).resolve()}:busy"]
            env[LOAD_ENV] = str(args.load)
        service = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert service.stdout is not None
            service.stdout.readline()  # recording: the store is there to attach to
            result = anyio.run(measure, db, args.seconds)
        finally:
            service.terminate()
            service.wait(10)
    result["workload"] = "demo (manifests/demo/live.yaml)" if args.load is None else f"{args.load:g} calls/s"
    result["seconds"] = args.seconds
    result["python"] = platform.python_version()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"attached console lag, {result['workload']}, {result['events']:,} events in {args.seconds:g}s")
    for key, label in (("to_console", "event → console (follower)"), ("on_board", "event → board model")):
        p = result[key]
        print(
            f"  {label:28} p50 {p['p50_ms']:6.1f} ms   p95 {p['p95_ms']:6.1f} ms   max {p['max_ms']:6.1f} ms"
        )


if __name__ == "__main__":
    main()
