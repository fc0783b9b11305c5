"""Turns recorded by ``tripwire serve`` on the real clock replay as matching (issue 10 §5).

The recording carries the real clock's scheduling delays; the replay runs on virtual time.
Decisions must match exactly, times within the replay's stated tolerance.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.replay import Recording, ReplayError, replay_all_on_virtual_time
from engine.store import TraceStore, TraceStoreError
from tests.polling import wait_for
from tests.serving import served

FINISHED_TURNS = 2
"""The live demo's first two turns: retries, a 429 honoured, a breaker opening, an alternative."""


def finished_turns(db: Path) -> list[str]:
    try:
        with TraceStore(db, readonly=True, create=False) as store:
            return [row.turn_id for row in store.list_turns(limit=100).rows if row.outcome != "running"]
    except TraceStoreError:  # not created yet, or still being created by serve
        return []


def test_every_turn_recorded_by_serve_on_the_real_clock_replays_as_matching(tmp_path: Path) -> None:
    with served(tmp_path) as (process, db):

        def enough() -> bool:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            return len(finished_turns(db)) >= FINISHED_TURNS

        wait_for(enough, "serve recording enough turns", 30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0, (tmp_path / "serve.log").read_text()

    recordings: list[Recording] = []
    with TraceStore(db, readonly=True) as store:
        rows = store.list_turns(limit=100).rows
        assert all(row.outcome != "running" for row in rows), "a clean stop leaves no turn running"
        for row in rows:
            stored = store.load_turn(row.turn_id)
            if row.outcome == "interrupted":  # cut by the SIGTERM: nothing to replay, and it says so
                with pytest.raises(ReplayError, match="was interrupted"):
                    Recording.from_events(stored.events, store.manifest)
            else:
                recordings.append(Recording.from_events(stored.events, store.manifest))
    assert len(recordings) >= FINISHED_TURNS
    reports = replay_all_on_virtual_time(recordings)
    for report in reports:
        assert report.matches, (report.turn_id, report.mismatches, report.unmatched, report.unused)
    assert sum(r.decisions for r in reports) > 30

    turn_id = recordings[0].turn_id
    cli = subprocess.run(
        [sys.executable, "-m", "console", "replay", turn_id, "--traces", str(db)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"replay of {turn_id} matches" in cli.stdout
    exact = subprocess.run(
        [sys.executable, "-m", "console", "replay", turn_id, "--traces", str(db), "--tolerance-ms", "0"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert exact.returncode == 1, "a real clock's delays are there: no tolerance, no match"
    assert f"replay of {turn_id} differs" in exact.stdout
