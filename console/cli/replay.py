"""``tripwire replay``: a stored turn run again on virtual time, its decisions checked against the
recorded ones (:mod:`engine.replay`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.text import Text

from console.cli.traces import open_store
from engine.store import TraceStoreError


def replay_command(
    traces: Path, turn_id: str, console: Console, *, as_json: bool, tolerance_s: float = 0.05
) -> int:
    """Replay a stored turn on virtual time; exit 0 when every decision matches, 1 otherwise.

    Times match when they are within ``tolerance_s`` of the recorded ones.
    """
    # Imported here: it brings trio.testing (and pytest), 0.15 s on the start of every other command.
    from engine.replay import Recording, ReplayError, replay_on_virtual_time

    with open_store(traces) as store:
        stored = store.load_turn(turn_id)
        try:
            recording = Recording.from_events(stored.events, store.manifest)
        except ReplayError as exc:
            raise TraceStoreError(traces, str(exc), untouched=False) from None
    report = replay_on_virtual_time(recording, tolerance_s=tolerance_s)
    if as_json:
        print(json.dumps(report.to_dict()))
        return 0 if report.matches else 1
    if report.matches:
        decisions = f": {report.decisions} decisions, all the same"
        console.print(Text.assemble((f"replay of {turn_id} matches", "green"), decisions), soft_wrap=True)
    else:
        console.print(Text(f"replay of {turn_id} differs", style="red"), soft_wrap=True)
        for line in (*report.mismatches, *(f"unmatched: {u}" for u in report.unmatched),
                     *(f"unused: {u}" for u in report.unused)):  # fmt: skip
            console.print(f"  {line}", highlight=False, markup=False)
    if report.result is not None:
        console.print(Text(report.result.summary, style="dim"))
    return 0 if report.matches else 1
