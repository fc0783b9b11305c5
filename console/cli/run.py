"""``tripwire run``: a scenario of turns against the bundled tools, with a Rich report."""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import trio.testing
from rich.console import Console
from rich.table import Table
from rich.text import Text

from console.cli.tables import Column, TableColumn, aligned_rows, fitted_tables, headed_lines
from engine.clock import VirtualWallClock
from engine.demo import demo_engine
from engine.engine import Engine
from engine.events import AttemptStarted, BulkheadQueued, CooldownEnded, Event, ToolEvent
from engine.faults import FaultInjector
from engine.metrics import ToolStats
from engine.outcomes import CallStatus, TurnResult
from engine.scenario import Scenario, load_scenario, run_scenario
from engine.store import TraceRecorder, TraceStore

VIRTUAL_EPOCH = 1_762_338_645.0
"""2025-11-05T10:30:45Z: wall-clock stamps on a virtual clock start here."""

STATUS_STYLE = {
    CallStatus.SUCCEEDED: "green",
    CallStatus.PARTIAL: "yellow",
    CallStatus.FAILED: "red",
    CallStatus.SKIPPED: "dim",
    CallStatus.ESCALATED: "magenta",
    CallStatus.TIMED_OUT: "dark_orange",
    CallStatus.CANCELED: "dim",
}


def turn_lines(console: Console, result: TurnResult, offset_s: float) -> list[Text]:
    """A turn's heading and calls, a line each, ids never wrapped (print with ``soft_wrap=True``)."""
    heading = Text.assemble((result.turn_id, "bold"), f"  +{offset_s:.3f}s")
    columns = (Column("call"), Column("tool"), Column("outcome"), Column("attempts", "right"))
    cells, reasons = [], []
    for outcome in result.outcomes.values():
        tool = outcome.tool_id if not outcome.served_by else f"{outcome.tool_id} → {outcome.served_by}"
        label = Text(outcome.label, style=STATUS_STYLE[outcome.status])
        cells.append((outcome.call_id, tool, label, str(outcome.attempts)))
        reasons.append(outcome.reason if not outcome.ok or outcome.used_default or outcome.served_by else "")
    calls = aligned_rows(console, columns, cells, reasons, note_header="reason")
    return [*headed_lines(console, heading, result.summary), *calls, *strategy_lines(console, result)]


Decision = ToolEvent | CooldownEnded


def strategy_events(result: TurnResult) -> list[Decision]:
    """What the turn's strategies decided (a bulkhead queueing or refusing an attempt, a retry
    budget refusing a retry, a rate limit's waits, refusals and cooldowns): the tool events
    declared outside the engine's own vocabulary (:mod:`engine.events`), i.e. in a strategy's
    package, and a cooldown one of the turn's calls found over. In call order for simultaneous
    ones: concurrent calls announce them in whatever order their tasks ran."""
    position = {call_id: n for n, call_id in enumerate(result.outcomes)}
    found: list[Decision] = [
        e for e in result.trace.events
        if (isinstance(e, ToolEvent) and not type(e).__module__.startswith("engine.events"))
        or (isinstance(e, CooldownEnded) and e.call_id is not None)
    ]  # fmt: skip
    return sorted(found, key=lambda e: (e.t, position.get(e.call_id or "", len(position))))


def strategy_decision(event: Decision, trace: list[Event]) -> str:
    """The event's own line, without the tool it begins with; a queued attempt says when it ran."""
    text = event.describe().removeprefix(f"{event.tool_id} ")
    if isinstance(event, BulkheadQueued):
        started = next(
            (e for e in trace if isinstance(e, AttemptStarted) and e.call_id == event.call_id
             and e.attempt == event.attempt and e.t >= event.t),
            None,
        )  # fmt: skip
        if started is not None:
            text += f"; served after {started.t - event.t:.2f} s"
    return text


def strategy_lines(console: Console, result: TurnResult) -> list[Text]:
    """A line per strategy decision of the turn, under its calls; none when no strategy spoke."""
    events = strategy_events(result)
    if not events:
        return []
    cells = [(e.call_id or "", e.tool_id) for e in events]
    notes = [strategy_decision(e, result.trace.events) for e in events]
    return aligned_rows(
        console, (Column("call"), Column("tool")), cells, notes, note_header="strategy decision"
    )


def strategy_state_lines(console: Console, stats: dict[str, ToolStats]) -> list[Text]:
    """Each tool's strategies as ``engine.stats()`` has them now (a budget's window, a bulkhead's
    rejections); an engine-wide one once. None when no tool has a strategy beyond the backbone."""
    cells, notes, shared = [], [], set()
    for tool, tool_stats in stats.items():
        for section, facts in tool_stats.strategies.items():
            if section.startswith("shared."):
                if section in shared:
                    continue
                shared.add(section)
                tool = "(every tool)"
            cells.append((tool, section.removeprefix("shared.")))
            notes.append(", ".join(f"{name} {_fact(value)}" for name, value in facts.items()))
    if not cells:
        return []
    title = Text.assemble(("per-tool strategies", "bold"), " (now)")
    return [
        title,
        *aligned_rows(console, (Column("tool"), Column("strategy")), cells, notes, note_header="state"),
    ]


def _fact(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)


def metrics_tables(console: Console, engine: Engine, stats: dict[str, ToolStats]) -> list[Table]:
    """Per-tool metrics: one table, or several side by side in time when the console is narrow."""
    columns = ("calls", "ok", "failed", "rejected", "skipped", "errors", "timeouts", "retries",
               "retry ok", "opens", "state", "p50 ms", "p95 ms", "p99 ms")  # fmt: skip
    cells: dict[str, list[str]] = {column: [] for column in columns}
    for tool, tool_stats in stats.items():
        life = tool_stats.life
        rate = "—" if life.retry_success_rate is None else f"{life.retry_success_rate:.0%}"
        counts = (life.calls, life.successes, life.failures, life.rejections, life.skipped, life.error_count,
                  life.timeout_count, life.retry_count)  # fmt: skip
        latencies = (_ms(life.p50_ms), _ms(life.p95_ms), _ms(life.p99_ms))
        state = str(engine.breaker(tool).state) if tool in engine.tool_ids else "—"  # "(unknown)": no breaker
        row = (*map(str, counts), rate, str(life.circuit_breaker_opens), state, *latencies)
        for column, value in zip(columns, row, strict=True):
            cells[column].append(value)
    title = Text.assemble(("per-tool metrics", "bold"), " (engine lifetime)")
    key = TableColumn("tool", list(stats))
    others = [TableColumn(c, cells[c], "left" if c == "state" else "right") for c in columns]
    return fitted_tables(console, title, key, others)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def report(
    scenario: Scenario, results: list[TurnResult], injector: FaultInjector | None, stats: dict[str, ToolStats]
) -> dict[str, Any]:
    """The run as JSON-safe data (``--json``)."""
    return {
        "scenario": scenario.name,
        "turns": [
            {
                "turn_id": r.turn_id,
                "summary": r.summary,
                "timed_out": r.timed_out,
                "executed": r.executed,
                "strategy_events": [e.to_dict() for e in strategy_events(r)],
                "outcomes": {
                    cid: {
                        "tool": o.tool_id,
                        "status": str(o.status),
                        "label": o.label,
                        "attempts": o.attempts,
                        "served_by": o.served_by,
                        "used_default": o.used_default,
                        "decision": o.decision,
                        "reason": o.reason,
                    }
                    for cid, o in r.outcomes.items()
                },
            }
            for r in results
        ],
        "metrics": {tool: tool_stats.to_dict() for tool, tool_stats in stats.items()},
        "faults": dict(sorted(injector.counters.items())) if injector is not None else {},
    }


def warn_refused(engine: Engine) -> None:
    """One line on stderr per manifest file skipped at start-up: never silently ignored."""
    for path, reason in engine.manifests.refused.items():
        print(f"tripwire: warning: {path}: {reason}; skipped", file=sys.stderr)


def run_command(
    scenario_path: Path,
    manifests: Path,
    *,
    real_time: bool,
    as_json: bool,
    console: Console,
    traces: Path | None = None,
) -> int:
    """Play a scenario; with ``traces``, record every turn there for browsing and replay."""
    scenario = load_scenario(scenario_path)
    started = time.time()
    # On the virtual clock, wall-clock stamps follow it from an epoch: a fixed one makes runs
    # identical; a recorded run starts at the real now, so its turns are found by when they ran.
    wall = time.time if real_time else VirtualWallClock(VIRTUAL_EPOCH if traces is None else started)
    injector = FaultInjector(scenario.faults) if scenario.faults is not None else None
    engine = demo_engine(
        manifests, faults=injector, seed=scenario.spec.seed, wall_clock=wall, record=traces is not None
    )
    scenario.check(engine.tools)  # before anything runs or prints
    warn_refused(engine)
    store = TraceStore(traces) if traces is not None else None
    # Recorded runs namespace their turns by when they ran: the same scenario can be stored again.
    run_id = (
        f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(started))}-{secrets.token_hex(2)}" if store else None
    )
    # A virtual clock would jump ahead while a turn waited on the disk: record in batches there.
    recorder = TraceRecorder(store, durability="turn" if real_time else "batch") if store else None
    if recorder is not None:
        recorder.attach(engine)

    async def main() -> tuple[list[TurnResult], dict[str, ToolStats]]:
        start = anyio.current_time()

        def show(result: TurnResult) -> None:
            if not as_json:
                console.print()
                for line in turn_lines(console, result, anyio.current_time() - start):
                    console.print(line, soft_wrap=True)

        async with engine:
            results = await run_scenario(engine, scenario, on_turn=show, run=run_id)
        return results, engine.stats()

    if not as_json:
        clock = "real time" if real_time else "virtual time"
        recording = f", recorded in {traces}" if traces is not None else ""
        count = len(scenario.spec.turns)
        turns = f"{count} turn{'' if count == 1 else 's'}"
        console.print(f"[bold]{scenario.name}[/] — {turns}, {clock}{recording}")
    try:
        if real_time:
            results, stats = anyio.run(main)
        else:
            mock = trio.testing.MockClock(autojump_threshold=0)
            results, stats = anyio.run(main, backend="trio", backend_options={"clock": mock})
    finally:
        if recorder is not None:
            recorder.close()
        if store is not None:
            store.close()
        engine.close()
    if as_json:
        console.print_json(json.dumps(report(scenario, results, injector, stats), default=str))
    else:
        for table in metrics_tables(console, engine, stats):
            console.print(table)
        for line in strategy_state_lines(console, stats):
            console.print(line, soft_wrap=True)
        if injector is not None and injector.counters:
            fired = ", ".join(f"{kind} ×{n}" for kind, n in sorted(injector.counters.items()))
            console.print(f"[dim]injected faults: {fired}[/]")
        if traces is not None:
            console.print(f"[dim]browse: tripwire traces list --traces {traces}[/]")
    return 0
