"""Operator actions from a shell (issue 13 §6): ``tripwire breaker list|trip|reset|disable``.

A real ``tripwire serve`` in another process; the command line lists its breakers from the store
and trips one through the console's own path (a signed command the engine checks, applies,
records and acknowledges). Exit 0 when applied, 1 when refused or unanswered, saying why, 2 on
bad input.
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.attach import NO_COMMANDS
from console.cli import main
from engine.demo import DEMO_TOOLS
from engine.events import BreakerTripped
from engine.store import TraceStore
from engine.store.command_auth import command_origin
from tests.serving import ROOT, served

DEADLINE_S = 20.0
ME = command_origin()


def ready(process: subprocess.Popen[str]) -> str:
    """The service's first line: its manifests are stored by then."""
    assert process.stdout is not None
    found, _, _ = select.select([process.stdout], [], [], DEADLINE_S)
    assert found, "tripwire serve said nothing"
    return process.stdout.readline()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with served(tmp_path_factory.mktemp("serve")) as (process, db):
        assert ready(process).startswith("tripwire serve: recording to")
        yield db


def breaker(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["breaker", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_list_shows_every_tool_and_says_the_engine_is_heard_from(
    service: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = breaker(capsys, "list", "--attach", str(service))
    assert (status, err) == (0, "")
    lines = out.splitlines()
    heading = f"breakers of the engine recording into {service}: the engine is heard from ({ME.host} pid "
    assert lines[0].startswith(heading)
    assert lines[1].split() == ["tool", "state", "fails", "half-open", "changed"]
    listed = {line.split()[0] for line in lines[3:] if not line.startswith(" ")}
    assert set(DEMO_TOOLS) <= listed


def test_list_json_shape(service: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = breaker(capsys, "list", "--attach", str(service), "--json")
    assert status == 0
    listing = json.loads(out)
    assert listing["store"] == str(service)
    assert listing["engine"]["stale"] is False and listing["engine"]["takes_commands"] is True
    assert listing["engine"]["status"] == "live" and listing["engine"]["writer"].startswith(f"{ME.host} pid ")
    assert 0 <= listing["engine"]["heard_from_s_ago"] < 10
    tools = {tool["tool"]: tool for tool in listing["tools"]}
    assert set(DEMO_TOOLS) <= set(tools)
    for tool in tools.values():
        assert set(tool) == {"tool", "state", "consecutive_failures", "half_open_in_s", "last_transition"}
        assert tool["state"] in ("CLOSED", "OPEN", "HALF_OPEN", "FORCED_OPEN", "DISABLED")


def test_trip_is_applied_by_the_engine_and_listed_with_who_and_why(
    service: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = breaker(
        capsys, "trip", "create_itinerary", "--attach", str(service), "--reason", "vendor maintenance"
    )
    assert (status, err) == (0, "")
    applied = r"create_itinerary: FORCED_OPEN \(trip applied by the engine, command \d+; was \w+\)\n"
    assert re.fullmatch(applied, out)

    def listed() -> dict[str, Any]:
        status, out, _ = breaker(capsys, "list", "--attach", str(service), "--json")
        assert status == 0
        return next(tool for tool in json.loads(out)["tools"] if tool["tool"] == "create_itinerary")

    # Acknowledged at once; the transition reaches the store with the recorder's next batch.
    deadline = time.monotonic() + DEADLINE_S
    while (entry := listed())["state"] != "FORCED_OPEN":
        assert time.monotonic() < deadline, entry
        time.sleep(0.05)
    last = entry["last_transition"]
    assert (last["to"], last["actor"], last["reason"]) == (
        "FORCED_OPEN", f"operator:{ME.user}@{ME.host}", "vendor maintenance"
    )  # fmt: skip
    with TraceStore(service, readonly=True) as store:
        assert store.last_transition("create_itinerary") == next(
            e for e in reversed(list(store.events())) if isinstance(e, BreakerTripped)
        ), "recorded like any transition"

    status, out, _ = breaker(
        capsys, "reset", "create_itinerary", "--attach", str(service), "--reason", "back", "--json"
    )
    assert status == 0
    assert json.loads(out) | {"command_id": 0} == {
        "tool": "create_itinerary", "action": "reset", "reason": "back", "status": "applied",
        "state": "CLOSED", "was": "FORCED_OPEN", "command_id": 0, "why": None,
    }  # fmt: skip


def test_the_real_command_exits_2_on_an_unknown_tool(service: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "console", "breaker", "trip", "no_such_tool", "--attach", str(service),
         "--reason", "x"],
        capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE_S,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"tripwire: unknown tool 'no_such_tool': the tools of {service} are ")
    assert "flight_search" in line


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--reason", " "], "--reason must say why: it is recorded with the transition and in the audit"),
        (["--reason", "x", "--wait", "0"], "--wait must be above 0 and at most 3600, got 0"),
    ],
)
def test_bad_input_is_exit_2(
    service: Path, capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    status, out, err = breaker(capsys, "trip", "flight_search", "--attach", str(service), *argv)
    assert (status, out, err) == (2, "", f"tripwire: {problem}\n")


def test_a_service_taking_no_commands_refuses_with_exit_1_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with served(tmp_path, "--no-commands") as (process, db):
        ready(process)
        status, out, err = breaker(capsys, "trip", "flight_search", "--attach", str(db), "--reason", "x")
        assert (status, out) == (1, "")
        assert err == f"tripwire: trip flight_search: refused: {NO_COMMANDS}\n"
        status, out, _ = breaker(
            capsys, "trip", "flight_search", "--attach", str(db), "--reason", "x", "--json"
        )
        assert status == 1
        assert json.loads(out)["status"] == "refused" and json.loads(out)["why"] == NO_COMMANDS


def test_without_a_key_it_is_read_only_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        store.write([], manifests=[("d1", "flight_search", {"id": "flight_search"})])
    status, out, err = breaker(capsys, "disable", "flight_search", "--attach", str(db), "--reason", "x")
    assert (status, out) == (2, "")
    assert err == (
        "tripwire: read-only: traces.db.key: no command key: no engine has served operator commands on"
        " this store yet\n"
    )


def test_unanswered_is_exit_1_saying_no_engine_serves_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        store.command_key()  # served with commands once; nobody serves them now
        store.write([], manifests=[("d1", "flight_search", {"id": "flight_search"})])
    status, out, err = breaker(
        capsys, "trip", "flight_search", "--attach", str(db), "--reason", "x", "--wait", "0.3"
    )
    assert (status, out) == (1, "")
    assert err.startswith(
        "tripwire: trip flight_search: unanswered: no acknowledgement within 0.3s: is an engine serving"
        " commands (tripwire serve)?"
    )
    assert err.endswith("the command expired unapplied\n")
    with TraceStore(db, readonly=True) as store:
        (command,) = store.command_history(limit=5)
        assert command.status == "pending" and command.expires_at is not None, "never applied late"
