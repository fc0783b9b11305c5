"""Secrets at rest (issue 12, item 1): planted secrets never reach a trace store, an export or the console.

A real engine (recording, so return values are stored) runs real turns — guarded calls and an
LLM batch — into a real SQLite file through a real TraceRecorder. The nine secrets the issue
planted: argument values named ``api_key``, ``password`` and ``Authorization``, a nested
``token``; error texts with ``Bearer …``, ``sk-…`` and ``password=…``; a recorded return value;
and an argument's secret echoed by the tool in its error text. None of them may appear in the
raw bytes of the ``.db``, ``-wal`` and ``-shm`` files (read while the store is open, before any
checkpoint, and again after it closed), in ``tripwire traces export``/``show`` run as a real
process, in any event's ``describe()``, or in the console's rendered event log.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio.testing
from rich.console import Console

from console.app import ConsoleApp
from console.model import ToolSeed
from console.screens.events import EventLogScreen
from console.widgets.event_list import EventList, event_text
from engine import Engine, RetryPolicy, ToolCall, ToolManifest, Turn
from engine.events import Event
from engine.llm import LLMToolCall, ToolCallExecutor
from engine.store import TraceRecorder, TraceStore
from tests.console.fakes import FakeLink

ROOT = Path(__file__).resolve().parents[2]

SECRETS = {
    "argument api_key": "PLANTEDapikey1111",
    "argument password": "PLANTEDpassword2222",
    "argument Authorization": "PLANTEDauthorization3333",
    "nested argument token": "PLANTEDnestedtoken4444",
    "error text Bearer": "PLANTEDbearer5555",
    "error text sk- key": "sk-PLANTEDskkey66666666666",
    "error text password=": "PLANTEDerrorpassword7777",
    "recorded return value": "PLANTEDreturned8888",
    "argument echoed in an error": "PLANTEDechoed9999",
}
VISIBLE = "hotels-in-lyon-visible"
"""Not a secret: it must be found where the secrets are looked for, or the search proves nothing."""
NO_WAIT = RetryPolicy(initial_delay_ms=0, max_delay_ms=0, jitter_percent=0, max_attempts=3)
TOOLS = ("login", "search", "book", "verify")


def leaked(data: bytes | str) -> list[str]:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    return [name for name, secret in SECRETS.items() if secret in text]


def build_engine() -> Engine:
    manifests = [ToolManifest(id=tool, retry_policy=NO_WAIT) for tool in TOOLS]
    engine = Engine(manifests, record=True)
    attempts = {"search": 0}

    async def login(api_key: str, password: str, headers: dict[str, str]) -> dict[str, Any]:
        return {"user": "bob", "session": {"access_token": SECRETS["recorded return value"]}}

    async def search(query: str, auth: dict[str, Any]) -> list[str]:
        attempts["search"] += 1
        if attempts["search"] % 3 == 1:
            raise ConnectionResetError(f"proxy said: Authorization: Bearer {SECRETS['error text Bearer']}")
        if attempts["search"] % 3 == 2:
            raise ConnectionResetError(f"upstream rejected key {SECRETS['error text sk- key']}")
        return [f"results for {query}"]

    async def book(hotel: str) -> str:
        raise PermissionError(f"login failed: password={SECRETS['error text password=']}")

    async def verify(client_secret: str) -> str:
        raise PermissionError(f"the secret {client_secret} was not accepted")

    for name, fn in (("login", login), ("search", search), ("book", book), ("verify", verify)):
        engine.register(name, fn)
    return engine


LOGIN_ARGS = {
    "api_key": SECRETS["argument api_key"],
    "password": SECRETS["argument password"],
    "headers": {"Authorization": f"Bearer {SECRETS['argument Authorization']}", "Accept": "text/json"},
}
SEARCH_ARGS = {
    "query": VISIBLE,
    "auth": {"scheme": "custom", "credentials": [{"token": SECRETS["nested argument token"]}]},
}
VERIFY_ARGS = {"client_secret": SECRETS["argument echoed in an error"]}


async def run_turns(engine: Engine) -> None:
    async with engine:
        await engine.run_turn(
            Turn(
                [
                    ToolCall("login", "login", LOGIN_ARGS),
                    ToolCall("search", "search", SEARCH_ARGS),
                    ToolCall("book", "book", {"hotel": "h1"}, depends_on=["search"], inputs={}),
                    ToolCall("verify", "verify", VERIFY_ARGS),
                ],
                id="planted",
            )
        )
        await ToolCallExecutor(engine).run(
            [
                LLMToolCall("m1", "login", LOGIN_ARGS),
                LLMToolCall("m2", "search", SEARCH_ARGS),
                LLMToolCall("m3", "verify", VERIFY_ARGS),
            ],
            turn_id="planted-llm",
        )


def store_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()}


@dataclass
class Recorded:
    path: Path
    while_open: dict[str, bytes]
    """The store's files while it was still open: the WAL not checkpointed yet."""
    after_close: dict[str, bytes]
    emitted: list[Event]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    path = tmp_path_factory.mktemp("secrets") / "traces.db"
    engine = build_engine()
    emitted: list[Event] = []
    engine.subscribe(emitted.append, direct=True)
    store = TraceStore(path)
    recorder = TraceRecorder(store).attach(engine)
    clock = trio.testing.MockClock(autojump_threshold=0)
    anyio.run(run_turns, engine, backend="trio", backend_options={"clock": clock})
    assert recorder.flush(30), "everything written"
    while_open = store_files(path)
    recorder.close()
    store.close()
    engine.close()
    return Recorded(path, while_open, store_files(path), emitted)


def test_no_planted_secret_is_in_the_store_files_before_or_after_a_checkpoint(recorded: Recorded) -> None:
    wal = recorded.while_open.get("traces.db-wal", b"")
    assert VISIBLE.encode() in wal, "the turns were in the WAL, not checkpointed yet: the search is real"
    for when, files in (("while open", recorded.while_open), ("after close", recorded.after_close)):
        for name, data in files.items():
            assert not leaked(data), f"{name} {when} holds {leaked(data)}"
    assert VISIBLE.encode() in recorded.after_close["traces.db"]


def test_every_event_and_its_description_is_free_of_secrets(recorded: Recorded) -> None:
    with TraceStore(recorded.path, readonly=True) as store:
        stored = [e for turn in ("planted", "planted-llm") for e in store.load_turn(turn).events]
    assert len(stored) > 20
    for events in (recorded.emitted, stored):
        described = "\n".join(e.describe() for e in events)
        assert "[REDACTED:" in described and not leaked(described)
        assert not leaked(json.dumps([e.to_dict() for e in events], default=str))
    assert all(name in json.dumps([e.to_dict() for e in stored]) for name in TOOLS)


def cli(*argv: str) -> str:
    """A real ``tripwire`` process, its output wide enough that no line is folded inside a secret."""
    done = subprocess.run(
        [sys.executable, "-m", "console", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=False, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_traces_export_and_show_print_no_secret(recorded: Recorded) -> None:
    exported = cli("traces", "export", "--traces", str(recorded.path))
    lines = [json.loads(line) for line in exported.splitlines()]
    assert {line.get("turn_id") for line in lines} >= {"planted", "planted-llm"}
    assert VISIBLE in exported and "[REDACTED:" in exported
    assert not leaked(exported), leaked(exported)
    for turn in ("planted", "planted-llm"):
        shown = cli("traces", "show", turn, "--traces", str(recorded.path))
        assert "[REDACTED:" in shown and not leaked(shown), leaked(shown)


@pytest.mark.asyncio
async def test_the_consoles_event_log_shows_no_secret(recorded: Recorded) -> None:
    with TraceStore(recorded.path, readonly=True) as store:
        events = list(store.events())
    link = FakeLink([ToolSeed(tool) for tool in TOOLS])
    app = ConsoleApp(link, actor="operator:test", live=False)
    async with app.run_test(size=(400, 60)) as pilot:
        await pilot.press("4")
        assert isinstance(app.screen, EventLogScreen)
        link.emit(*events)
        app.flush()
        await pilot.pause()
        on_screen = "\n".join(event_text(line).plain for line in app.screen.query_one(EventList).lines)
        total, rows = app.model.newest_event_rows("", since=0, limit=len(events))
    assert on_screen.count("\n") + 1 == total == len(rows) == len(events) > 20
    assert "[REDACTED" in on_screen, "the redacted errors are on screen"
    assert not leaked(on_screen), leaked(on_screen)
    # The log's lines as the screen makes them, at full length (the screen may cut them short).
    wide = Console(width=2000, file=io.StringIO(), color_system=None)
    for row in rows:
        wide.print(event_text(row))
    rendered = wide.file.getvalue()  # type: ignore[attr-defined]
    assert rendered.count("[REDACTED:") >= 10
    assert not leaked(rendered), leaked(rendered)
