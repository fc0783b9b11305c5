"""The console's frame (issue 13): the footer at any width, STALE in the status bar, and
``tripwire console --replay TURN_ID`` starting in the replay player.

The footer's choice of keys is a pure function, tested without Textual; the rest through Pilot on
a scripted link, and the command line on a real trace store.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets._footer import FooterKey

from console.app import ConsoleApp
from console.cli import main
from console.model import ToolSeed
from console.screens.base import (
    ConsoleFooter,
    FooterEntry,
    FooterKeySpec,
    StatusBar,
    fit_footer,
    footer_entries,
    stale_text,
)
from engine.store import TraceStore
from engine.strategies.breaker.machine import BreakerState
from tests.console.demo_feed import demo_store
from tests.console.fakes import FakeLink, manifest
from tests.polling import until

ESSENTIAL = ["? Help", "q Quit", "t Trip", "r Reset"]


def seeds() -> list[ToolSeed]:
    return [
        ToolSeed("flight_search", BreakerState.OPEN, 5, 130.0, manifest=manifest("flight_search")),
        ToolSeed("hotel_search", manifest=manifest("hotel_search")),
    ]


def footer_line(app: ConsoleApp) -> str:
    """The footer as the terminal shows it: the screen's last line."""
    return app.screen._compositor.render_strips()[-1].text


def footer_keys(app: ConsoleApp) -> list[str]:
    return [key.key for key in app.screen.query_one(ConsoleFooter).query(FooterKey)]


# --- the footer: pure --------------------------------------------------------------------------


def entry(display: str, description: str, rank: int = 9) -> FooterEntry:
    return FooterEntry((FooterKeySpec(display, display, display, True, ""),), description, rank)


def test_the_footer_keeps_the_essential_keys_first_and_only_what_fits_whole() -> None:
    entries = [entry("s", "Sort"), entry("v", "Layout"), entry("?", "Help", 0), entry("q", "Quit", 1)]
    assert [e.description for e in fit_footer(entries, 80)] == ["Help", "Quit", "Sort", "Layout"]
    assert [e.description for e in fit_footer(entries, 21)] == ["Help", "Quit", "Sort"], "6+1 each"
    assert [e.description for e in fit_footer(entries, 20)] == ["Help", "Quit"], "Layout never cut"
    assert fit_footer(entries, 6) == [], "nothing shown is half a key"


def test_footer_entries_are_one_per_action_and_groups_share_a_word() -> None:
    views = Binding.Group("Views")
    bindings = [
        (Binding("1", "view('a')", "A", group=views), True, ""),
        (Binding("2", "view('b')", "B", group=views), True, ""),
        (Binding("t", "act('trip')", "Trip", id="trip"), False, "tip"),
        (Binding("T", "act('trip')", "Trip again"), True, ""),  # the same action: its first key only
        (Binding("question_mark", "help", "Help", id="help", key_display="?"), True, ""),
    ]
    entries = footer_entries(bindings, lambda b: b.key_display or b.key)
    assert [(tuple(k.display for k in e.keys), e.description, e.rank) for e in entries] == [
        (("1", "2"), "Views", 7),
        (("t",), "Trip", 2),
        (("?",), "Help", 0),
    ]
    assert entries[0].width == len("1 2 Views") and not entries[1].keys[0].enabled


# --- the footer: on screen ------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("width", [80, 100, 160])
async def test_at_any_width_the_footer_shows_help_quit_trip_reset_whole_and_nothing_stray(width: int) -> None:
    app = ConsoleApp(FakeLink(seeds()), actor="operator:test", live=False)
    async with app.run_test(size=(width, 24)) as pilot:
        # The footer lays its keys out once the screen has its size: wait for that, not one pause.
        await until(
            pilot, lambda: footer_line(app).rstrip().endswith("palette"), seen=lambda: footer_line(app)
        )
        line = footer_line(app)
        shown, _, palette = line.rpartition("▏")
        assert palette == "^p palette", "the palette key ends the line: no stray character after it"
        assert shown.startswith(" ".join(ESSENTIAL) + " ")
        keys = [
            k
            for k in app.screen.query_one(ConsoleFooter).query(FooterKey)
            if "-command-palette" not in k.classes
        ]
        texts = [f"{k.key_display} {k.description}".strip() for k in keys]
        assert shown.rstrip() == " ".join(texts), "every key shown is whole"
        assert len(line) == width


@pytest.mark.asyncio
async def test_the_footer_never_lacks_trip_reset_disable_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    composed: list[list[str]] = []
    compose = ConsoleFooter.compose

    def recorded(footer: ConsoleFooter) -> ComposeResult:
        keys = list(compose(footer))
        composed.append([k.key for k in keys if isinstance(k, FooterKey)])
        yield from keys

    monkeypatch.setattr(ConsoleFooter, "compose", recorded)
    app = ConsoleApp(FakeLink(seeds()), actor="operator:test")
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.3)  # a few flushes: the board's first draws
    shown = [keys for keys in composed if keys]  # Textual composes it empty until its bindings are known
    assert len(shown) >= 2 and all({"t", "r", "d"} <= set(keys) for keys in shown), composed


# --- STALE -------------------------------------------------------------------------------------------


@dataclass
class SilentLink(FakeLink):
    """A link that can say how long its engine has said nothing (as an attached one does)."""

    stale_for: float | None = None


def test_stale_text() -> None:
    assert stale_text(12.4) == "STALE — no word from the engine for 12 s"
    assert stale_text(600) == "STALE — no word from the engine for 10 min"
    assert stale_text(float("inf")) == "STALE — no word from the engine yet"
    assert stale_text(12.4, "gone") == "GONE — the engine's process ended; last heartbeat 12 s ago"
    assert stale_text(180, "stopped") == "STOPPED — the engine closed the store 3 min ago"


@pytest.mark.asyncio
async def test_a_silent_engine_turns_live_into_stale_and_greys_the_board_until_it_speaks() -> None:
    link = SilentLink(seeds())
    app = ConsoleApp(link, actor="operator:test", live=False)
    async with app.run_test(size=(120, 30)) as pilot:
        app.flush()
        await pilot.pause()
        bar = app.screen.query_one(StatusBar)
        assert str(bar.content).startswith("● LIVE") and not app.has_class("-stale")

        link.stale_for = 12.0
        app.flush()
        await pilot.pause()
        assert str(bar.content).startswith("STALE — no word from the engine for 12 s  last known: 2 tools")
        assert "LIVE" not in str(bar.content)
        assert app.has_class("-stale")

        link.stale_for = None
        app.flush()
        await pilot.pause()
        assert str(bar.content).startswith("● LIVE") and not app.has_class("-stale")


# --- tripwire console --replay -------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return demo_store(tmp_path / "traces.db")


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ConsoleApp]]:
    """The apps the command line builds, not run (as if in a terminal)."""
    apps: list[ConsoleApp] = []
    monkeypatch.setattr(ConsoleApp, "run", lambda app, *args, **kwargs: apps.append(app))
    monkeypatch.setattr("console.cli.terminal_problem", lambda: None)
    yield apps
    for app in apps:
        app.link.close()


def a_turn(store: Path) -> str:
    with TraceStore(store, readonly=True) as opened:
        return opened.list_turns(limit=1).rows[0].turn_id


@pytest.mark.asyncio
async def test_console_replay_starts_straight_in_the_replay_player(
    store: Path, built: list[ConsoleApp]
) -> None:
    turn_id = a_turn(store)
    assert main(["console", "--attach", str(store), "--read-only", "--replay", turn_id]) == 0
    (app,) = built
    assert app.replay_turn == turn_id
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.replay is not None)
        app.flush()
        await pilot.pause()
        assert app.replay is not None and app.replay.source.label.endswith(turn_id.rsplit("/", 1)[-1])
        # Playing, or already paused at its end: a 0.5 s turn replays in real time, and a loaded
        # machine can take that long to get here.
        assert str(app.screen.query_one(StatusBar).content).startswith(("▶ REPLAY", "❚❚ REPLAY"))
        await pilot.press("x")
        assert app.replay is None, "x returns to the live board"


def test_console_replay_of_the_live_engine_reads_its_trace_store(
    store: Path, built: list[ConsoleApp]
) -> None:
    turn_id = a_turn(store)
    assert main(["console", "--traces", str(store), "--replay", turn_id]) == 0
    (app,) = built
    assert app.replay_turn == turn_id and app.traces == store


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (["--replay", "no-such-turn"], "no turn 'no-such-turn'"),
        (
            ["--replay", "x", "--no-record"],
            "--replay plays a turn of the trace store: it cannot be used with",
        ),
    ],
)
def test_console_replay_of_a_turn_it_cannot_play_is_one_line_and_exit_2(
    store: Path, built: list[ConsoleApp], capsys: pytest.CaptureFixture[str], extra: list[str], problem: str
) -> None:
    assert main(["console", "--traces", str(store), *extra]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tripwire: ") and problem in line
    assert built == [], "no screen, no engine"
