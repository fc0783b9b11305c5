"""``ConsoleApp``: the Textual operations console.

The engine reaches the console only through :class:`~console.bridge.EventBridge`, a bounded
buffer its sink appends to. About ten times a second the app drains it into the pure
:class:`~console.model.ConsoleModel` and lets the active view redraw what changed, inside one
``batch_update``. Hidden views do no work; paused, the model keeps folding and the views wait.
Operator actions go to the engine through the :class:`~console.host.EngineLink` from a worker
thread, and the board changes only when the engine's own event comes back.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.screen import Screen

from console import render
from console.bridge import DEFAULT_CAPACITY, EventBridge
from console.host import Action, EngineHost, EngineLink
from console.model import Changes, ConsoleModel
from console.player import Player, range_source, turn_source
from console.screens.base import ConsoleScreen, StatusBar, stale_text
from console.screens.board import BoardScreen
from console.screens.confirm import ConfirmActionModal, Confirmed
from console.screens.deps import DependencyScreen
from console.screens.events import EventLogScreen
from console.screens.help import HelpScreen
from console.screens.manifests import ManifestScreen
from console.screens.tool import ToolScreen
from console.screens.traces import TraceBrowserScreen
from engine.liveness import Heard
from engine.store import TraceStore, TraceStoreError
from engine.store.command_auth import command_origin
from engine.strategies.breaker.machine import BreakerState

VIEWS = {
    "board": "Board",
    "deps": "Dependencies",
    "manifests": "Manifests",
    "events": "Events",
    "traces": "Traces",
}
_VIEWS = Binding.Group("Views")
_STEP = Binding.Group("Step")
_SPEED = Binding.Group("Speed")
"""1 2 3 4 share one footer entry: the footer must show every key and still fit 120 columns."""
_COUNTED = (BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.FORCED_OPEN, BreakerState.DISABLED)
"""The breaker states the status bar counts."""
MAX_DRAIN = 50_000
"""Events folded per flush at most: a flood is absorbed over several flushes, never one long one."""


class ConsoleApp(App[None]):
    TITLE = "tripwire"
    MODES: ClassVar[dict[str, type[Screen[None]]]] = {  # type: ignore[assignment]
        "board": BoardScreen,
        "deps": DependencyScreen,
        "manifests": ManifestScreen,
        "events": EventLogScreen,
        "traces": TraceBrowserScreen,
    }
    DEFAULT_MODE = "board"
    ESCAPE_TO_MINIMIZE = False  # esc means back here
    CSS = """
    /* No word from an attached engine: what the board shows is its last known state. */
    ConsoleApp.-stale CardGrid, ConsoleApp.-stale BreakerTable { tint: $background 55%; }
    /* Toasts take rows of their own above the footer: they never cover the line under a cursor. */
    ToastRack { layer: default; max-height: 9; }
    Toast { padding: 0 1; margin-top: 0; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "view('board')", "Board", id="view.board", tooltip="The breaker board", group=_VIEWS),
        Binding(
            "2", "view('deps')", "Deps", id="view.deps", tooltip="The turn's dependency graph", group=_VIEWS
        ),
        Binding(
            "3", "view('manifests')", "Manifests", id="view.manifests", tooltip="Manifests", group=_VIEWS
        ),
        Binding("4", "view('events')", "Events", id="view.events", tooltip="The event stream", group=_VIEWS),
        Binding("5", "view('traces')", "Traces", id="view.traces", tooltip="Stored turns", group=_VIEWS),
        Binding(
            "space",
            "replay_toggle",
            "Play",
            id="replay.toggle",
            tooltip="Play or pause the replay",
            key_display="␣",
        ),
        Binding("left_square_bracket", "replay_step(-1)", "Back", group=_STEP, tooltip="One event back"),
        Binding("right_square_bracket", "replay_step(1)", "Fwd", group=_STEP, tooltip="One event forward"),
        Binding("minus", "replay_speed(-1)", "Slower", group=_SPEED, tooltip="Slower (×0.5 at least)"),
        Binding(
            "plus,equals_sign", "replay_speed(1)", "Faster", group=_SPEED, tooltip="Faster (×20 at most)"
        ),
        Binding("x", "replay_stop", "Exit replay", id="replay.stop", tooltip="Back to the live engine"),
        Binding("p", "pause", "Pause", id="pause", tooltip="Freeze the display; events keep being collected"),
        Binding("t", "act('trip')", "Trip", id="trip", tooltip="Force the selected breaker(s) open"),
        Binding("r", "act('reset')", "Reset", id="reset", tooltip="Close the selected breaker(s)"),
        Binding("d", "act('disable')", "Disable", id="disable", tooltip="Admit every call, keep counting"),
        Binding("question_mark,f1", "help", "Help", id="help", tooltip="Keys of this view", key_display="?"),
        Binding("ctrl+s", "screenshot", "Screenshot", id="screenshot", show=False),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        link: EngineLink,
        *,
        refresh_hz: float = 10.0,
        bridge_capacity: int = DEFAULT_CAPACITY,
        actor: str | None = None,
        live: bool = True,
        freeze_gc: bool = False,
        traces: Path | None = None,
    ) -> None:
        super().__init__()
        self.link = link
        self.bridge = EventBridge(bridge_capacity)
        self.live = ConsoleModel()
        """What the engine's events say now (kept up to date during a replay too)."""
        self.replay: Player | None = None
        """A recorded turn or time range being played through the views, if any."""
        self.traces = traces
        self.replay_turn: str | None = None
        """A stored turn to start in the replay of (``tripwire console --replay``)."""
        self.refresh_hz = max(1.0, min(30.0, refresh_hz))
        self.actor = actor or f"operator:{command_origin().user}"  # the OS user, not $USER
        self.paused = False
        self.pending_while_paused = 0
        self._live_now = 0.0
        self._live = live
        self._freeze_gc = freeze_gc
        self._replay_wall = 0.0
        self._pending = Changes()
        self._unsubscribe: Callable[[], None] | None = None
        self._manifest_changes_seen = 0
        self._problem_shown: str | None = None
        self._rate = (0.0, 0, 0.0)  # (engine time, events received, events/s)

    # --- lifecycle -------------------------------------------------------------------------

    def on_load(self) -> None:
        # Before any screen: the views and the footer start with every tool (t, r, d included).
        # Subscribe first: an event between the two is folded onto the seed, never lost.
        self._unsubscribe = self.link.subscribe(self.bridge)
        self.live = ConsoleModel(self.link.seeds(), self.link.shared_strategies())

    def on_mount(self) -> None:
        self._manifest_changes_seen = self.live.manifest_change_count
        self._live_now = self.link.now()
        self._rate = (self._live_now, 0, 0.0)
        if self._live:
            self.set_interval(1 / self.refresh_hz, self.flush, name="flush")
        self.flush()
        if why := self.read_only_reason:
            self.notify(why, title="Read-only: no trip, reset or disable", severity="warning", timeout=15)
        if self.replay_turn is not None:
            self.start_replay(turn_id=self.replay_turn)
        if self._freeze_gc:
            # What exists once the UI is up lives as long as the app: out of the collector's
            # way, a full collection scans only what the flood of events keeps (~3× shorter).
            self.call_after_refresh(gc.freeze)

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.link.close()

    # --- the flush -------------------------------------------------------------------------

    def flush(self) -> None:
        """Fold what the engine sent since the last flush; redraw the active view."""
        events = self.bridge.drain(MAX_DRAIN)
        now = self._live_now = self.link.now()
        changes = self.live.apply(events) if events else Changes()
        changes.merge(self.live.expire(now))
        self._measure_rate(now)
        self._show_staleness()
        if self.paused:
            self.pending_while_paused += changes.events
        else:
            self._announce()
        if self.replay is not None:  # the views show the replay; the live model keeps up
            wall = time.perf_counter()
            changes = self.replay.advance(wall - self._replay_wall)
            self._replay_wall = wall
            now = self.replay.now
        self._pending.merge(changes)
        if self._exit or not self.screen_stack:  # starting up or shutting down
            return
        screen = self.screen
        if screen._closing or not screen.is_mounted:
            return
        if self.paused or not isinstance(screen, ConsoleScreen):  # paused, or a dialog is up
            self._status(screen)
            return
        pending, self._pending = self._pending, Changes()
        with self.batch_update():
            screen.show(pending, now)
            self._status(screen)

    @property
    def model(self) -> ConsoleModel:
        """What the views show: the replay's model during a replay, else the live one."""
        return self.replay.model if self.replay is not None else self.live

    @property
    def now(self) -> float:
        """The views' clock: engine time, live or replayed. Every countdown reads it."""
        return self.replay.now if self.replay is not None else self._live_now

    @property
    def read_only_reason(self) -> str | None:
        """Why a console that was not asked to be read-only is (an attached one without the
        store's command key); only some links can say."""
        why = getattr(self.link, "read_only_reason", None)
        return why if isinstance(why, str) else None

    @property
    def stale_for(self) -> float | None:
        """How long an attached engine has said nothing, once it counts as gone (``inf``: it never
        said anything); None while it is heard from, or when the link cannot tell."""
        value = getattr(self.link, "stale_for", None)
        return value if isinstance(value, float) else None

    @property
    def history_until(self) -> float | None:
        """Wall-clock time up to which the link's events are history (an attached console's
        recent past): folded, shown in the events view, never toasted."""
        value = getattr(self.link, "history_until", None)
        return value if isinstance(value, float) else None

    def _show_staleness(self) -> None:
        """Grey the views while the engine says nothing: what they show is its last known state."""
        stale = self.replay is None and self.stale_for is not None
        if self.has_class("-stale") != stale:
            self.set_class(stale, "-stale")

    def _measure_rate(self, now: float) -> None:
        since, received, _ = self._rate
        if now - since >= 1.0:
            self._rate = (now, self.bridge.received, (self.bridge.received - received) / (now - since))

    def _status(self, screen: Screen[Any]) -> None:
        for bar in screen.query(StatusBar):
            bar.show(self.status_text())

    def status_text(self) -> Content:
        states = [v.state for v in self.model.tools.values()]
        parts: list[str | tuple[str, str]] = []
        replay = self.replay
        if replay is not None:
            glyph = "▶" if replay.playing else "❚❚"
            parts += [
                (f"{glyph} REPLAY ×{replay.speed:g}", "bold reverse $accent"),
                f"  {replay.source.label} · event {replay.position}/{len(replay.events)}"
                f" · +{replay.clock - replay.start:.1f}s of {replay.end - replay.start:.1f}s",
                ("  operator actions off · x ends", "$foreground-muted"),
            ]
            return Content.assemble(*parts)
        stale = self.stale_for
        if stale is not None:
            heard = getattr(self.link, "heard", None)  # an attached link says why: stale, gone, stopped
            status = heard.status if isinstance(heard, Heard) else "stale"
            parts += [
                (stale_text(stale, status), "bold reverse $error"),
                ("  last known:", "$foreground-muted"),
            ]
        if self.paused:
            parts.append((f"❚❚ PAUSED · {self.pending_while_paused:,} new events", "bold reverse $warning"))
        elif stale is None:
            parts.append(("● LIVE", "bold $success"))
        # What is lost comes first: at 80 columns the end of the line is cut (with …).
        if self.bridge.dropped:
            parts.append((f" · dropped {self.bridge.dropped:,}", "bold $error"))
        if isinstance(self.link, EngineHost) and (unsaved := self.link.not_persisted()):
            parts.append((f" · {unsaved:,} turns not persisted", "bold $error"))
        parts.append(f"{' ' if stale is not None and not self.paused else '  '}{len(states)} tools")
        for state in _COUNTED:
            n = states.count(state)
            parts += ["  ", (f"{n} {state}", render.STATE_STYLE[state] if n else "$foreground-muted")]
        version = self.model.manifest_version  # 0: unknown (an attached engine announced no reload yet)
        parts.append(f"  · manifests v{version} · " if version else "  · ")
        parts.append(f"{self._rate[2]:,.0f} ev/s")
        if self.link.read_only:
            parts.append((" · read-only", "$accent"))
            if why := self.read_only_reason:
                parts.append((f": {why}", "$accent"))
        if self.link.description:
            parts.append((f" · {self.link.description}", "$foreground-muted"))
        return Content.assemble(*parts)

    def _announce(self) -> None:
        """Toasts for what an operator must not miss: manifest reloads and refusals, a dead workload."""
        model = self.live
        new = model.manifest_change_count - self._manifest_changes_seen
        if new > 0:
            history_until = self.history_until
            for change in list(model.manifest_changes)[-min(new, len(model.manifest_changes)) :]:
                if history_until is not None and change.at <= history_until:
                    continue  # from before attaching: in the events view, not news
                if change.what == "rejected":
                    self.notify(change.errors[0] if change.errors else change.path, title="Manifest refused",
                                severity="error", timeout=8)  # fmt: skip
                elif change.what == "reloaded":
                    self.notify(f"{change.tool_id} v{change.version}", title="Manifest reloaded", timeout=4)
            self._manifest_changes_seen = model.manifest_change_count
        problem = self.link.problem()
        if problem is not None and problem != self._problem_shown:
            self._problem_shown = problem
            self.notify(problem, title="Engine", severity="error", timeout=15)

    # --- views -----------------------------------------------------------------------------

    def action_view(self, mode: str) -> None:
        self.switch_mode(mode)

    def open_tool(self, tool_id: str) -> None:
        if self.current_mode != "board":
            self.switch_mode("board")
        self.push_screen(ToolScreen(tool_id))

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:
            self.pending_while_paused = 0
        else:
            self.flush()
        self._status(self.screen)
        self.refresh_bindings()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
        else:
            self.push_screen(HelpScreen.of(self.screen))

    # --- replay ------------------------------------------------------------------------------

    def start_replay(self, *, turn_id: str | None = None, since: float | None = None,
                     until: float | None = None) -> None:  # fmt: skip
        """Load a stored turn (or the turns of a time range) and play it through the views."""
        if self.traces is None:
            self.notify("no trace store to replay from", severity="error")
            return
        self._load_replay(self.traces, turn_id, since, until)

    @work(thread=True, exclusive=True, group="replay-load", exit_on_error=False)
    def _load_replay(self, path: Path, turn_id: str | None, since: float | None, until: float | None) -> None:
        try:
            with TraceStore(path, readonly=True, verify=False) as store:
                if turn_id is not None:
                    source = turn_source(store, store.load_turn(turn_id))
                else:
                    label = f"{datetime.fromtimestamp(since or 0):%H:%M:%S}–" + (
                        f"{datetime.fromtimestamp(until):%H:%M:%S}" if until is not None else "now"
                    )
                    source = range_source(store, since=since, until=until, label=label)
            player = Player(source)
        except (TraceStoreError, ValueError) as exc:
            self.call_from_thread(self.notify, str(exc), title="Replay", severity="error")
            return
        self.call_from_thread(self._begin_replay, player)

    def _begin_replay(self, player: Player) -> None:
        self.replay = player
        self._replay_wall = time.perf_counter()
        player.playing = True
        self._to_board()

    def _to_board(self) -> None:
        """The board of whatever the views now show (the replay, or live again), drawn afresh."""
        if self.current_mode != "board":
            self.switch_mode("board")
        while len(self.screen_stack) > 1:  # a tool detail pushed over the board
            self.pop_screen()
        self.refresh_bindings()
        self.call_after_refresh(self._redraw)

    def _redraw(self) -> None:
        screen = self.screen
        if isinstance(screen, ConsoleScreen):
            screen.redraw()

    def action_replay_toggle(self) -> None:
        if self.replay is not None:
            self.replay.toggle()
            self._replay_wall = time.perf_counter()
            self._status(self.screen)

    def action_replay_step(self, delta: int) -> None:
        if self.replay is not None:
            self._pending.merge(self.replay.step(delta))
            self._redraw()

    def action_replay_speed(self, steps: int) -> None:
        if self.replay is not None:
            self.replay.faster(steps)
            self._status(self.screen)

    def action_replay_stop(self) -> None:
        if self.replay is not None:
            self.replay = None
            self._to_board()

    # --- operator actions ------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        replaying = self.replay is not None
        if action.startswith("replay_"):
            return replaying  # the replay's keys exist only during a replay
        if action == "pause":
            return not replaying
        if action == "act":
            if self.link.read_only or replaying:
                return False  # hidden: this console may not act, or the views show the past
            screen = self.screen  # views without tools to act on do not offer it
            if isinstance(screen, ConsoleScreen) and screen.selected_tools():
                return True
            # The board before its first draw (or filtered to nothing): shown, greyed, so the
            # footer does not change under the operator's eyes.
            return None if isinstance(screen, BoardScreen) and self.model.tools else False
        return True

    def action_act(self, action: Action) -> None:
        screen = self.screen
        self.confirm_action(action, screen.selected_tools() if isinstance(screen, ConsoleScreen) else [])

    def confirm_action(self, action: Action, tools: list[str]) -> None:
        """Ask, then act: the dialog names the tools, their states and the effect."""
        if self.link.read_only or not tools:
            return
        states = {
            t: self.model.tools[t].state if t in self.model.tools else BreakerState.CLOSED for t in tools
        }

        def confirmed(answer: Confirmed | None) -> None:
            if answer is not None:
                self._carry_out(action, tools, answer.reason)

        self.push_screen(ConfirmActionModal(action, states), confirmed)

    @work(thread=True, exit_on_error=False, group="operator")
    def _carry_out(self, action: Action, tools: list[str], reason: str) -> None:
        """On a worker thread: the engine may take a moment, the UI must not wait for it."""
        done, applied, failed = [], [], []
        for tool_id in tools:
            try:
                state = self.link.act(action, tool_id, actor=self.actor, reason=reason)
            except Exception as exc:
                failed.append(f"{tool_id}: {exc}")
                continue
            if state is None:  # no acknowledgement: the engine's own event will show it
                done.append(tool_id)
            else:
                applied.append(f"{tool_id} now {state}")
        if done:
            self.call_from_thread(
                self.notify, f"{action} sent for {', '.join(done)}", title="Operator action"
            )
        if applied:
            self.call_from_thread(
                self.notify, f"{action} applied by the engine: {', '.join(applied)}", title="Operator action"
            )
        for problem in failed:
            self.call_from_thread(self.notify, problem, title=f"{action} failed", severity="error")

    # --- the command palette ---------------------------------------------------------------

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, title in VIEWS.items():
            yield SystemCommand(
                f"Go to {title}", f"The {title.lower()} view", lambda m=mode: self.switch_mode(m)
            )
        for tool_id in sorted(self.model.tools):
            yield SystemCommand(
                f"Open {tool_id}", "Its detail: history, timeline, policy",
                lambda t=tool_id: self.open_tool(t), discover=False,
            )  # fmt: skip
            if not self.link.read_only:
                actions: tuple[Action, ...] = ("trip", "reset", "disable")
                for action in actions:
                    yield SystemCommand(
                        f"{action.capitalize()} {tool_id}", f"{action.capitalize()} the breaker of {tool_id}",
                        lambda a=action, t=tool_id: self.confirm_action(a, [t]), discover=False,
                    )  # fmt: skip
