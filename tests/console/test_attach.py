"""The console attached to an engine in another process, through its trace store.

The link is tested against a store the test writes (and a stand-in engine that acknowledges
commands), then end to end: ``tripwire serve`` in a real subprocess, a console attached to its
store tripping one of its breakers by keys.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from console.app import ConsoleApp
from console.attach import STALE_AFTER_S, AttachedLink, CommandFailed
from console.cli import main
from console.screens.board import BoardScreen, CardGrid
from console.screens.confirm import ConfirmActionModal
from console.widgets.breaker_table import BreakerTable
from engine.demo import DEMO_TOOLS
from engine.engine import Engine
from engine.events import BreakerOpened, BreakerTripped, Event, ManifestLoaded
from engine.store import TraceRecorder, TraceStore, TraceStoreError
from engine.store.command_auth import command_origin
from engine.strategies.breaker.machine import BreakerState
from tests.console import factory as f
from tests.polling import until, wait_for
from tests.serving import ROOT, served

SIZE = (140, 40)


ME = command_origin()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store, and its command key, as the engine serving it makes them."""
    path = tmp_path / "traces.db"
    with TraceStore(path) as store:
        store.command_key()
    return path


@pytest.fixture
def writer(db: Path) -> Iterator[TraceStore]:
    """The engine's side of the store, as another process would write it."""
    with TraceStore(db) as store:
        yield store


@pytest.fixture
def link(db: Path, writer: TraceStore) -> Iterator[AttachedLink]:
    opened = AttachedLink(db)
    yield opened
    opened.close()


class StandInEngine:
    """Acknowledges commands as ``serve_operator_commands`` would, from a thread of its own."""

    def __init__(self, store: TraceStore, known: tuple[str, ...] = ("flight_search",)) -> None:
        self.store, self.known = store, known
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.02):
            for command in self.store.pending_commands():
                if command.tool_id in self.known:
                    self.store.acknowledge_command(command.id, "applied", "FORCED_OPEN")
                else:
                    self.store.acknowledge_command(command.id, "failed", f"unknown tool {command.tool_id!r}")

    def __enter__(self) -> StandInEngine:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


# --- the link -------------------------------------------------------------------------------


def test_it_seeds_the_board_from_the_store(writer: TraceStore, db: Path) -> None:
    content = {"id": "flight_search", "circuit_breaker": {"failure_threshold": 3}}
    writer.write(
        [f.opened("flight_search", 90.0, timeout=30.0), f.manifest_loaded("hotel_search", 91.0, version=4,
         digest="hd4", threshold=2), f.tripped("car_rental", 92.0)],
        manifests=[("fd1", "flight_search", content)],
    )  # fmt: skip
    link = AttachedLink(db)
    try:
        assert link.description == f"attached to {db}" and not link.read_only
        seeds = {seed.tool_id: seed for seed in link.seeds()}
        assert list(seeds) == ["car_rental", "flight_search", "hotel_search"]
        flight = seeds["flight_search"]
        assert (flight.state, flight.consecutive_failures, flight.half_open_at) == (
            BreakerState.OPEN,
            5,
            120.0,
        )
        assert flight.manifest is not None
        assert (flight.manifest.digest, flight.manifest.version, flight.manifest.path) == ("fd1", 0, "—")
        assert flight.manifest.failure_threshold == 3, "the stored content"
        hotel = seeds["hotel_search"]
        assert hotel.state is BreakerState.CLOSED and hotel.manifest is not None
        assert (hotel.manifest.version, hotel.manifest.path, hotel.manifest.failure_threshold) == (
            4, "manifests/hotel_search.yaml", 2
        )  # fmt: skip
        assert seeds["car_rental"].state is BreakerState.FORCED_OPEN
    finally:
        link.close()


def test_it_hands_on_recent_history_then_every_new_event_in_order(writer: TraceStore, db: Path) -> None:
    writer.write([f.succeeded("flight_search", f"old{i}", float(i)) for i in range(10)])
    link = AttachedLink(db, history=3, poll_s=0.01)
    got: list[Event] = []
    try:
        link.subscribe(got.append)
        wait_for(lambda: len(got) == 3)
        assert [e.call_id for e in got] == ["old7", "old8", "old9"]  # type: ignore[attr-defined]
        for batch in range(3):  # the recorder commits a batch at a time
            writer.write([f.succeeded("hotel_search", f"new{batch}.{i}", 20.0 + batch) for i in range(4)])
        wait_for(lambda: len(got) == 15)
        assert [e.call_id for e in got[3:]] == [f"new{b}.{i}" for b in range(3) for i in range(4)]  # type: ignore[attr-defined]
        assert link.followed == 15
    finally:
        link.close()
    assert link._thread is not None and not link._thread.is_alive(), "closing stops the follower"
    writer.write([f.succeeded("hotel_search", "after", 30.0)])
    assert len(got) == 15, "a closed link hands on nothing"


def test_its_clock_runs_from_the_newest_event(writer: TraceStore, db: Path) -> None:
    engine_t = 5000.0
    writer.write([f.succeeded("flight_search", "c1", 0.0)])
    wall = [1_700_000_000.0]
    link = AttachedLink(db, poll_s=0.01, wall_clock=lambda: wall[0])
    try:
        got: list[Event] = []
        link.subscribe(got.append)
        event = f.succeeded("flight_search", "c2", engine_t)
        event.at = wall[0] - 2.0  # happened two seconds ago, at engine time 5000
        writer.write([event])
        wait_for(lambda: len(got) == 2)
        assert link.now() == pytest.approx(engine_t + 2.0, abs=0.5)
        first = link.now()
        wall[0] += 0.05
        assert link.now() > first, "countdowns run between events"
    finally:
        link.close()


def test_an_action_waits_for_the_engines_acknowledgement(writer: TraceStore, db: Path) -> None:
    link = AttachedLink(db)
    try:
        with StandInEngine(writer):
            command = link.send("trip", "flight_search", reason="drill")
            assert (command.status, command.result, command.actor, command.reason) == (
                "applied", "FORCED_OPEN", ME.user, "drill"
            )  # fmt: skip
            assert (command.host, command.pid) == (ME.host, ME.pid) and command.mac is not None
            assert command.expires_at == pytest.approx(command.created_at + link.ack_timeout_s)
            assert link.act_acknowledged("trip", "flight_search", actor="a", reason="") == "FORCED_OPEN"
            link.act("trip", "flight_search", actor="a", reason="")
            with pytest.raises(CommandFailed, match="the engine refused it: unknown tool 'car_rental'"):
                link.act("trip", "car_rental", actor="a", reason="")
    finally:
        link.close()


def test_without_an_engine_an_action_times_out_and_the_link_says_the_engine_seems_gone(
    writer: TraceStore, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("console.attach.ACK_GRACE_S", 0.05)
    monkeypatch.setattr("console.attach.CHECK_S", 0.01)
    writer.write([f.succeeded("flight_search", "c1", 1.0)])  # long ago
    link = AttachedLink(db, ack_timeout_s=0.1, unanswered_s=0.1, poll_s=0.01)
    try:
        link.subscribe(lambda event: None)
        assert link.problem() is None
        with pytest.raises(TimeoutError) as info:
            link.act("disable", "flight_search", actor="operator:alice", reason="")
        assert str(info.value) == (
            "no acknowledgement from the engine within 0.1s (is it serving commands: tripwire serve?);"
            " the command expires unapplied"
        )
        wait_for(lambda: link.problem() is not None)
        problem = link.problem()
        assert problem is not None and problem.startswith(
            "the engine seems gone (never heard from: no heartbeat"
        )
        assert "and a disable of flight_search sent at " in problem and problem.endswith(" is unacknowledged")
        link._check_engine()  # looked at again
        assert link.problem() == problem, "the same words while it lasts: the console shows it once"
        # An engine that records but serves no commands (a plain recorder, beating) is told apart.
        assert writer.heartbeat(register=True)
        wait_for(lambda: "applies no operator commands" in (link.problem() or ""))
        (pending,) = writer.pending_commands()
        writer.acknowledge_command(pending.id, "failed", "expired")
        wait_for(lambda: link.problem() is None)
    finally:
        link.close()


def test_a_read_only_link_cannot_act_and_never_writes(db: Path, writer: TraceStore) -> None:
    link = AttachedLink(db, read_only=True)
    try:
        assert link.read_only and link.store.readonly
        with pytest.raises(PermissionError, match="read-only"):
            link.act("trip", "flight_search", actor="a", reason="")
        assert writer.pending_commands() == []
    finally:
        link.close()


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda key: key.unlink(), "traces.db.key: no command key: no engine has served operator commands on"
         " this store yet"),
        (lambda key: key.chmod(0o644), "traces.db.key: the command key is open to others (mode 0644): chmod"
         " 600 it, or delete it for a new one"),
        (lambda key: os.chown(key, os.getuid() + 1, -1), "traces.db.key: the command key is owned by another"
         " user (uid {other}, this is uid {me})"),
        (lambda key: key.write_bytes(b"short"), "traces.db.key: not a command key: 5 bytes, expected 32"),
    ],
    ids=["missing", "open to others", "another user's", "not a key"],
)  # fmt: skip
def test_without_a_usable_key_the_link_is_read_only_and_says_why(
    db: Path, spoil: Callable[[Path], Any], reason: str
) -> None:
    if "another user" in reason and os.geteuid() != 0:
        pytest.skip("only root can give a file away")
    key = db.with_name("traces.db.key")
    spoil(key)
    link = AttachedLink(db)
    try:
        assert link.read_only and link.store.readonly, "it never writes"
        assert link.read_only_reason == reason.format(other=os.getuid() + 1, me=os.getuid())
        with pytest.raises(PermissionError) as info:
            link.send("trip", "flight_search", reason="")
        assert str(info.value) == f"the console is read-only: {link.read_only_reason}"
    finally:
        link.close()
    with TraceStore(db, readonly=True) as store:
        assert store.command_history() == []


def test_a_link_to_a_service_that_takes_no_commands_is_read_only(db: Path, writer: TraceStore) -> None:
    writer.set_taking_commands(False)
    link = AttachedLink(db)
    try:
        assert link.read_only and link.store.readonly
        assert link.read_only_reason == (
            "the service on this store takes no operator commands (tripwire serve --no-commands)"
        )
    finally:
        link.close()
    writer.set_taking_commands(True)
    link = AttachedLink(db)
    try:
        assert not link.read_only and link.read_only_reason is None
    finally:
        link.close()


@pytest.mark.asyncio
async def test_the_console_shows_why_it_is_read_only(db: Path) -> None:
    db.with_name("traces.db.key").unlink()
    app = ConsoleApp(AttachedLink(db), traces=db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        why = "traces.db.key: no command key: no engine has served operator commands on this store yet"
        assert f"read-only: {why}" in str(app.status_text())
        assert [(n.title, n.message) for n in app._notifications] == [
            ("Read-only: no trip, reset or disable", why)
        ]
        assert app.check_action("act", ("trip",)) is False


def test_an_unreadable_event_is_skipped_not_stuck_on(writer: TraceStore, db: Path) -> None:
    link = AttachedLink(db, poll_s=0.01)
    got: list[Event] = []
    try:
        link.subscribe(got.append)
        writer.db.execute("INSERT INTO events (event_type, at, t, data) VALUES ('FromTheFuture', 1, 1, '{}')")
        writer.write([f.succeeded("flight_search", "c1", 1.0)])
        wait_for(lambda: len(got) == 1)
        assert link.problem() is None
    finally:
        link.close()


def _foreign(path: Path) -> None:
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    conn.close()


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (None, "no trace store here"),
        (lambda p: p.write_bytes(b""), "empty file, not a trace store (left untouched)"),
        (
            lambda p: p.write_bytes(os.urandom(4096)),
            "not a SQLite database, so not a trace store (left untouched)",
        ),
        (_foreign, "a SQLite database that is not a trace store (tables: customers) (left untouched)"),
    ],
)
def test_a_store_it_cannot_attach_to_is_one_line_and_left_alone(
    tmp_path: Path, make: Callable[[Path], Any] | None, problem: str, read_only: bool
) -> None:
    path = tmp_path / "traces.db"
    if make is not None:
        make(path)
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(TraceStoreError) as info:
        AttachedLink(path, read_only=read_only)
    assert str(info.value) == f"{path}: {problem}"
    assert (path.read_bytes() if path.exists() else None) == before


# --- the command line -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["console", "--attach", "{tmp}/nope.db"], "tripwire: {tmp}/nope.db: no trace store here"),
        (["console", "--attach", "{tmp}/t.db", "--traces", "x.db"],
         "tripwire: --attach {tmp}/t.db: --traces cannot be used with it: an attached console records nothing"
         " and the engine reads its own manifests"),
        (["serve", "--traces", "{tmp}/t.db", "--scenario", "{tmp}/nope.yaml"],
         "tripwire: {tmp}/nope.yaml: cannot read: No such file or directory"),
        (["serve", "--traces", "{tmp}/t.db", "--poll-ms", "0"],
         "tripwire: --poll-ms must be positive, got 0"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(expected.format(tmp=tmp_path))
    assert not (tmp_path / "nope.db").exists() and not (tmp_path / "t.db").exists()


def test_console_attach_builds_the_app_on_an_attached_link(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[ConsoleApp] = []
    monkeypatch.setattr(ConsoleApp, "run", lambda app, *args, **kwargs: built.append(app))
    monkeypatch.setattr("console.cli.terminal_problem", lambda: None)  # as if in a terminal
    assert main(["console", "--attach", str(db), "--read-only", "--refresh-hz", "5"]) == 0
    (app,) = built
    link = app.link
    try:
        assert isinstance(link, AttachedLink) and link.read_only and link.path == db
        assert app.refresh_hz == 5.0
        assert app.traces == db, "the traces view browses the store it is attached to"
    finally:
        link.close()


def test_attach_excludes_running_an_engine_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["console", "--attach", "t.db", "--scenario", "s.yaml"])
    assert done.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# --- end to end: tripwire serve in another process ------------------------------------------


async def select(pilot: Pilot[None], tool_id: str) -> None:
    app = pilot.app
    board = app.screen
    assert isinstance(board, BoardScreen)
    if board.query_one(CardGrid).display and board.query_one("#layouts").current == "cards":  # type: ignore[attr-defined]
        await pilot.press("v")  # the table: up and down walk the tools in name order
    for _ in range(20):
        if board.selected_tool == tool_id:
            return
        await pilot.press("down")
    raise AssertionError(f"{tool_id} not on the board")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    with served(tmp_path) as running:
        yield running


@pytest.mark.asyncio
async def test_a_console_attached_to_a_served_engine_trips_its_breaker(
    service: tuple[subprocess.Popen[str], Path],
) -> None:
    process, db = service
    assert process.stdout is not None
    with anyio.fail_after(30):
        line = await anyio.to_thread.run_sync(process.stdout.readline)
    assert line == f"tripwire serve: recording to {db}; attach with: tripwire console --attach {db}\n"

    app = ConsoleApp(AttachedLink(db), actor="operator:whoever-USER-says", traces=db)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: set(DEMO_TOOLS) <= set(app.model.tools), timeout=10)
        await select(pilot, "hotel_search")
        await pilot.press("t")
        assert isinstance(app.screen, ConfirmActionModal)
        await pilot.press("tab", *"vendor maintenance", "enter")  # tab: into the reason field
        acknowledged = "trip applied by the engine: hotel_search now FORCED_OPEN"
        await until(pilot, lambda: any(n.message == acknowledged for n in app._notifications))
        await until(pilot, lambda: app.model.tools["hotel_search"].state is BreakerState.FORCED_OPEN)
        transition = app.model.tools["hotel_search"].history[-1]
        operator = f"operator:{ME.user}@{ME.host}"
        assert (transition.actor, transition.reason) == (operator, "vendor maintenance"), "who the OS says"
        table = app.screen.query_one(BreakerTable)
        row = next(r for r in table.rows if r.tool_id == "hotel_search")
        assert "FORCED_OPEN" in table.render_line(1 + table.rows.index(row)).text
        assert app.link.problem() is None

        # The traces view browses what the engine has recorded so far.
        await pilot.press("5")
        turns = app.screen.query_one("#turns", DataTable)
        await until(pilot, lambda: turns.row_count > 0, timeout=15)
        await pilot.press("1")

        # A second console sees the same state: seeded from the store, and in the recent history.
        second = AttachedLink(db, read_only=True)
        try:
            seeds = {seed.tool_id: seed.state for seed in second.seeds()}
            assert seeds["hotel_search"] is BreakerState.FORCED_OPEN
            history: list[Event] = []
            second.subscribe(history.append)
            await anyio.to_thread.run_sync(
                wait_for,
                lambda: any(isinstance(e, BreakerTripped) and e.tool_id == "hotel_search" for e in history),
            )
        finally:
            second.close()

    process.send_signal(signal.SIGTERM)
    assert await anyio.to_thread.run_sync(process.wait, 10) == 0, "a clean stop"
    with TraceStore(db, readonly=True) as store:
        (tripped,) = [e for e in store.events() if isinstance(e, BreakerTripped)]
        assert (tripped.tool_id, tripped.actor) == ("hotel_search", f"operator:{ME.user}@{ME.host}")
        assert not [e for e in store.events() if isinstance(e, BreakerOpened) and e.tool_id == "hotel_search"]


# --- history, the engine's manifests, its word (issue 13 §2) --------------------------------


@pytest.mark.asyncio
async def test_attaching_folds_history_silently_and_toasts_only_what_happens_after(
    writer: TraceStore, db: Path
) -> None:
    old = f.manifest_rejected("manifests/flight_search.yaml", 90.0, "timeout_msx: unknown field")
    writer.write([old, f.succeeded("flight_search", "c1", 95.0)])
    app = ConsoleApp(AttachedLink(db, poll_s=0.01), traces=db)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until(pilot, lambda: app.model.seen >= 2)
        await pilot.pause()
        assert [c.what for c in app.model.manifest_changes] == ["rejected"], "history: in the events view"
        assert not [n for n in app._notifications if n.title == "Manifest refused"], "not news"

        writer.write([f.manifest_rejected("manifests/hotel_search.yaml", 200.0, "retries: not a number")])
        await until(pilot, lambda: any(n.title == "Manifest refused" for n in app._notifications))
        assert [n.message for n in app._notifications if n.title == "Manifest refused"] == [
            "retries: not a number"
        ]


def test_the_seeds_show_the_manifest_versions_of_the_engine_recording_now(db: Path) -> None:
    """Not v0, file — and the load time of whichever process stored the version first."""
    engine = Engine(ROOT / "manifests")
    for tool_id in engine.manifests.entries:
        engine.register(tool_id, lambda: None)
    entry = engine.manifests.entries["hotel_search"]
    with TraceStore(db) as earlier:  # an earlier process stored the same version a day ago
        content = engine.manifest("hotel_search").model_dump(mode="json")
        earlier.ensure_manifest(entry.digest, "hotel_search", content, at=entry.loaded_at - 86_400)
    with TraceStore(db) as store:
        recorder = TraceRecorder(store, durability="batch").attach(engine)
        try:
            assert recorder.flush()
            link = AttachedLink(db, read_only=True)
            try:
                seeds = {seed.tool_id: seed.manifest for seed in link.seeds()}
            finally:
                link.close()
        finally:
            recorder.close()
            engine.close()
    assert set(engine.manifests.entries) <= set(seeds)
    for tool_id, loaded in engine.manifests.entries.items():
        shown = seeds[tool_id]
        assert shown is not None
        assert (shown.digest, shown.version, shown.path, shown.loaded_at) == (
            loaded.digest, loaded.version, loaded.path, loaded.loaded_at
        ), tool_id  # fmt: skip
    with TraceStore(db, readonly=True) as store:
        started = [e for e in store.events() if isinstance(e, ManifestLoaded)]
    assert {e.tool_id for e in started} == set(engine.manifests.entries), "recorded as loaded, no reload"
    assert all(e.previous_digest is None for e in started)


def test_the_link_hears_the_engine_by_its_heartbeat_never_by_its_events_times(db: Path) -> None:
    now = [f.WALL]
    with TraceStore(db, wall_clock=lambda: now[0]) as engine_side:
        fresh = AttachedLink(db, read_only=True)
        try:
            assert fresh.silence is None and fresh.stale_for == float("inf"), "never heard from"
        finally:
            fresh.close()
        assert engine_side.heartbeat(register=True), "a recorder beats before its first turn"

        gone = AttachedLink(db, read_only=True, wall_clock=lambda: f.WALL + 30)
        try:
            assert gone.stale_for == pytest.approx(30, abs=1), "its last beat was 30 s ago"
            now[0] = f.WALL + 31
            assert engine_side.heartbeat()
            gone.subscribe(lambda event: None)
            wait_for(lambda: gone.stale_for is None, timeout=5)  # a new beat is word
        finally:
            gone.close()

        quiet = AttachedLink(db, read_only=True, wall_clock=lambda: f.WALL + 31 + STALE_AFTER_S / 2)
        try:
            assert quiet.stale_for is None, "a beat within the stale period"
        finally:
            quiet.close()

        # An event's own time is not word: a run on a virtual clock stamps its events ahead.
        engine_side.write([f.succeeded("flight_search", "c1", 500.0)])  # at WALL + 500
        talking = AttachedLink(db, read_only=True, wall_clock=lambda: f.WALL + 501)
        try:
            assert talking.stale_for == pytest.approx(470, abs=1), "its last beat was at WALL + 31"
        finally:
            talking.close()
