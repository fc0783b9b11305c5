"""Hot reload at the engine: policies swap atomically, breakers keep their state, bad files are
rejected with an event and never break calls.

Most tests run on trio's MockClock and call ``engine.reload_manifests`` directly, so the
moment of the reload is exact. One test runs the real watchfiles watcher on asyncio.
"""

from __future__ import annotations

import logging
import os
import random
import textwrap
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio import current_time

from engine.engine import Engine
from engine.events import (
    AttemptFailed,
    AttemptStarted,
    Event,
    ManifestLoaded,
    ManifestRefused,
    ManifestRejected,
    ManifestRemoved,
)
from engine.kinds import ErrorKind
from engine.manifest import DEFAULTS_FILE, ManifestRegistry, SideEffect
from engine.strategies.breaker.machine import BreakerConfig, BreakerState
from engine.watch import SettleTracker

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

DEFAULTS = """
defaults:
  timeout_ms: 30000
  retry_policy:
    initial_delay_ms: 100
    max_delay_ms: 800
    jitter_percent: 0
    max_attempts: 5
    max_total_time_ms: 10000
  circuit_breaker:
    failure_threshold: 100
    timeout_ms: 30000
"""


def flaky_manifest(
    *,
    max_attempts: int = 3,
    initial_delay_ms: int = 100,
    timeout_ms: int = 20000,
    failure_threshold: int = 100,
    breaker_timeout_ms: int = 30000,
) -> str:
    return textwrap.dedent(f"""\
        tool:
          id: flaky
          timeout_ms: {timeout_ms}
          retry_policy:
            initial_delay_ms: {initial_delay_ms}
            max_attempts: {max_attempts}
          circuit_breaker:
            failure_threshold: {failure_threshold}
            timeout_ms: {breaker_timeout_ms}
          side_effect: idempotent
        """)


def replace_file(path: Path, text: str | bytes) -> None:
    """Write atomically, as editors do: a watcher never sees a half-written file."""
    staging = path.parent.parent / f".{path.name}.staging"
    if isinstance(text, bytes):
        staging.write_bytes(text)
    else:
        staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)


@pytest.fixture
def manifest_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / DEFAULTS_FILE).write_text(DEFAULTS, encoding="utf-8")
    (directory / "flaky.yaml").write_text(flaky_manifest(), encoding="utf-8")
    return directory


class Flaky:
    """A tool that fails with a transient error, optionally hanging in one attempt."""

    def __init__(self) -> None:
        self.attempts: list[float] = []
        self.fail = True
        self.hang_on_attempt: int | None = None
        self.hanging = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, fail: bool | None = None) -> str:
        self.attempts.append(current_time())
        if len(self.attempts) == self.hang_on_attempt:
            self.hanging.set()
            await self.release.wait()
        if self.fail if fail is None else fail:
            raise ConnectionError("connection reset by peer")
        return "ok"


def make_engine(directory: Path, **kwargs: Any) -> tuple[Engine, Flaky, list[Event]]:
    engine = Engine(directory, rng=random.Random(0), wall_clock=lambda: 1_000.0, **kwargs)
    tool = Flaky()
    engine.register("flaky", tool)
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)
    return engine, tool, events


def of_call(events: list[Event], kind: type[Event], call_id: str) -> list[Any]:
    return [e for e in events if isinstance(e, kind) and getattr(e, "call_id", None) == call_id]


# --- atomic swap --------------------------------------------------------------------------


async def test_in_flight_call_keeps_the_policy_it_started_with(manifest_dir: Path) -> None:
    engine, tool, events = make_engine(manifest_dir)
    tool.hang_on_attempt = 2  # fail once, then hang inside the second attempt
    path = manifest_dir / "flaky.yaml"
    results = []

    async def in_flight() -> None:
        results.append(await engine.try_call("flaky"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(in_flight)
        await tool.hanging.wait()
        path.write_text(flaky_manifest(max_attempts=5, initial_delay_ms=10, timeout_ms=9000))
        reloaded = engine.reload_manifests([path])
        assert [type(e) for e in reloaded] == [ManifestLoaded]
        assert engine.manifest("flaky").retry_policy.max_attempts == 5
        tool.release.set()

    (old,) = results
    assert not old.ok
    assert old.attempts == 3
    assert len(tool.attempts) == 3
    assert old.error is not None
    assert old.error.kind is ErrorKind.NETWORK_ERROR
    # the whole call ran on the old policy: 3 attempts, 100/200 ms backoff, 20 s timeouts
    assert [e.delay_ms for e in of_call(events, AttemptFailed, "c1")] == [100.0, 200.0, None]
    assert {e.timeout_ms for e in of_call(events, AttemptStarted, "c1")} == {20000}
    assert "max attempts (3) reached" in of_call(events, AttemptFailed, "c1")[-1].decision_reason

    tool.attempts.clear()
    new = await engine.try_call("flaky")

    assert new.attempts == 5
    assert len(tool.attempts) == 5
    assert [e.delay_ms for e in of_call(events, AttemptFailed, "c2")] == [10, 20, 40, 80, None]
    assert {e.timeout_ms for e in of_call(events, AttemptStarted, "c2")} == {9000}
    gaps = [b - a for a, b in zip(tool.attempts, tool.attempts[1:], strict=False)]
    assert gaps == pytest.approx([0.01, 0.02, 0.04, 0.08])


async def test_breaker_state_survives_a_reload_and_takes_the_new_thresholds(
    manifest_dir: Path,
) -> None:
    path = manifest_dir / "flaky.yaml"
    path.write_text(flaky_manifest(max_attempts=1, failure_threshold=2, breaker_timeout_ms=10000))
    engine, _, _ = make_engine(manifest_dir)
    breaker = engine.breaker("flaky")
    for _ in range(2):
        assert not (await engine.try_call("flaky")).ok
    assert breaker.state is BreakerState.OPEN
    opened_at, half_open_at, opens = breaker.opened_at, breaker.half_open_at, breaker.opens
    assert half_open_at == pytest.approx(opened_at + 10.0)

    path.write_text(flaky_manifest(max_attempts=1, failure_threshold=4, breaker_timeout_ms=60000))
    (loaded,) = engine.reload_manifests([path])

    assert isinstance(loaded, ManifestLoaded)
    assert engine.breaker("flaky") is breaker
    assert breaker.state is BreakerState.OPEN
    assert (breaker.opened_at, breaker.half_open_at, breaker.opens) == (
        opened_at,
        half_open_at,
        opens,
    )
    assert breaker.config == BreakerConfig(failure_threshold=4, timeout_ms=60000)
    assert breaker.consecutive_failures == 2
    rejected = await engine.try_call("flaky")
    assert rejected.attempts == 0
    assert rejected.error is not None
    assert rejected.error.kind is ErrorKind.CIRCUIT_OPEN

    # the running timer stands; the next opening uses the new 60 s timeout
    assert half_open_at is not None
    await anyio.sleep_until(half_open_at)
    probe = await engine.try_call("flaky")
    assert probe.attempts == 1
    assert breaker.state is BreakerState.OPEN
    assert breaker.half_open_at == pytest.approx(current_time() + 60.0)

    # and the new failure threshold: 3 failures keep it closed, the 4th opens it
    engine.reset("flaky")
    for _ in range(3):
        await engine.try_call("flaky")
    assert breaker.state is BreakerState.CLOSED
    await engine.try_call("flaky")
    assert breaker.state is BreakerState.OPEN


async def test_invalid_edit_is_rejected_and_calls_keep_the_last_good_policy(
    manifest_dir: Path,
) -> None:
    engine, tool, events = make_engine(manifest_dir)
    path = manifest_dir / "flaky.yaml"
    path.write_text(flaky_manifest(max_attempts=4))
    engine.reload_manifests([path])
    good = engine.manifests.entries["flaky"]
    events.clear()

    path.write_text(flaky_manifest(max_attempts=4).replace("max_attempts: 4", "max_attempts: 0"))
    returned = engine.reload_manifests([path])

    (event,) = events
    assert returned == [event]
    assert isinstance(event, ManifestRejected)
    assert event.path == str(path)
    assert event.errors == (
        f"{path}:6: tool.retry_policy.max_attempts: Input should be greater than or equal to 1",
    )
    assert event.kept_digest == good.digest
    assert engine.manifests.entries["flaky"] is good
    assert str(path) in engine.manifests.rejected

    failed = await engine.try_call("flaky")
    assert failed.attempts == 4
    tool.fail = False
    assert await engine.call("flaky") == "ok"
    assert engine.breaker("flaky").config.failure_threshold == 100

    # an edit that is not even YAML is rejected the same way
    path.write_bytes(b"tool:\n  id: flaky\n  timeout_ms: [\x00\n")
    (event,) = engine.reload_manifests([path])
    assert isinstance(event, ManifestRejected)
    assert event.errors[0].startswith(f"{path}:3: ")
    assert await engine.call("flaky") == "ok"
    assert engine.manifests.entries["flaky"] is good


GARBAGE = [
    pytest.param(b"\xff\xfe\x00garbage", id="binary"),
    pytest.param(b"tool: [" * 5000, id="deep-flow"),
    pytest.param(b"- " * 5000 + b"x", id="deep-block"),
    pytest.param(b"tool: &t\n  id: flaky\n  retry_policy: *t\n", id="recursive-alias"),
    pytest.param(b"tool:\n  id: flaky\n  timeout_ms: !!float nope\n", id="bad-tag"),
    pytest.param(b"tool:\n  id: other_tool\n  id: flaky\n", id="duplicate-key"),
    pytest.param(b"", id="empty"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_reload_never_raises_on_garbage(manifest_dir: Path, garbage: bytes) -> None:
    engine, tool, _ = make_engine(manifest_dir)
    tool.fail = False
    good = engine.manifests.entries["flaky"]
    path = manifest_dir / "flaky.yaml"
    path.write_bytes(garbage)
    defaults = manifest_dir / DEFAULTS_FILE
    defaults.write_bytes(garbage)

    returned = engine.reload_manifests([path, defaults])

    assert [type(e) for e in returned] == [ManifestRejected, ManifestRejected]
    assert {e.path for e in returned} == {str(path), str(defaults)}
    for event in returned:
        assert len(event.errors[0].splitlines()) == 1
    assert engine.reload_manifests() == returned  # re-reading everything: same verdicts
    assert engine.manifests.entries["flaky"] is good
    assert await engine.call("flaky") == "ok"


async def test_reload_never_raises_on_odd_paths(manifest_dir: Path) -> None:
    engine, tool, _ = make_engine(manifest_dir)
    tool.fail = False
    (manifest_dir / "folder.yaml").mkdir()
    odd = [
        manifest_dir / "folder.yaml",
        manifest_dir / "never_existed.yaml",
        manifest_dir.parent / "outside.yaml",
        manifest_dir / "notes.txt",
    ]

    returned = engine.reload_manifests(odd)

    assert [(e.path, e.reason) for e in returned if isinstance(e, ManifestRefused)] == [
        (str(odd[0]), "not a regular file (a directory)")
    ]
    assert len(returned) == 1
    assert await engine.call("flaky") == "ok"


async def test_reload_survives_a_registry_bug(
    manifest_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine, tool, _ = make_engine(manifest_dir)
    tool.fail = False

    def broken(*args: object, **kwargs: object) -> list[Event]:
        raise RuntimeError("registry bug")

    monkeypatch.setattr(ManifestRegistry, "reload", broken)
    with caplog.at_level(logging.ERROR, logger="tripwire.engine"):
        assert engine.reload_manifests([manifest_dir / "flaky.yaml"]) == []

    assert "manifest reload failed" in caplog.text
    assert await engine.call("flaky") == "ok"


async def test_deleted_manifest_puts_the_breaker_on_the_defaults(manifest_dir: Path) -> None:
    path = manifest_dir / "flaky.yaml"
    path.write_text(flaky_manifest(failure_threshold=3, breaker_timeout_ms=5000))
    engine, _, _ = make_engine(manifest_dir)
    assert engine.breaker("flaky").config.failure_threshold == 3
    path.unlink()

    (event,) = engine.reload_manifests([path])

    assert isinstance(event, ManifestRemoved)
    assert engine.breaker("flaky").config == BreakerConfig(failure_threshold=100, timeout_ms=30000)
    assert engine.manifest("flaky").retry_policy.max_attempts == 5
    assert (await engine.try_call("flaky")).attempts == 5


async def test_defaults_change_reaches_breakers_of_tools_without_a_manifest(
    manifest_dir: Path,
) -> None:
    engine, _, _ = make_engine(manifest_dir)
    engine.register("no_manifest", Flaky())
    defaults = manifest_dir / DEFAULTS_FILE
    defaults.write_text(DEFAULTS.replace("failure_threshold: 100", "failure_threshold: 7"))

    engine.reload_manifests([defaults])

    assert engine.manifest("no_manifest").circuit_breaker.failure_threshold == 7
    assert engine.breaker("no_manifest").config.failure_threshold == 7


# --- the real watcher ---------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_watched_directory_reloads_on_disk_edits_while_calls_run(
    manifest_dir: Path,
) -> None:
    path = manifest_dir / "flaky.yaml"
    path.write_text(flaky_manifest(max_attempts=2, initial_delay_ms=1, failure_threshold=50))
    engine, _, events = make_engine(manifest_dir, watch=True, watch_debounce_ms=20)
    seen = {ManifestLoaded: anyio.Event(), ManifestRejected: anyio.Event()}

    def on_event(event: Event) -> None:
        if isinstance(event, ManifestLoaded | ManifestRejected) and event.path == str(path):
            seen[type(event)].set()

    engine.subscribe(on_event, direct=True)
    background: list[str] = []
    stop = anyio.Event()

    async def keep_calling() -> None:
        while not stop.is_set():
            background.append(await engine.call("flaky", fail=False))
            await anyio.sleep(0.002)  # pacing only; nothing is checked by sleeping

    async with engine, anyio.create_task_group() as tg:
        tg.start_soon(keep_calling)

        replace_file(path, flaky_manifest(max_attempts=4, initial_delay_ms=1, failure_threshold=60))
        with anyio.fail_after(10):
            await seen[ManifestLoaded].wait()

        assert engine.manifest("flaky").retry_policy.max_attempts == 4
        assert engine.breaker("flaky").config.failure_threshold == 60
        assert (await engine.try_call("flaky", fail=True)).attempts == 4

        replace_file(
            path, b"tool:\n  id: flaky\n  retry_policy:\n    max_attempts: 0\n  side_effect: idempotent\n"
        )
        with anyio.fail_after(10):
            await seen[ManifestRejected].wait()

        # a watcher may report one replace twice; every verdict on this content is the same
        rejected = {e.errors for e in events if isinstance(e, ManifestRejected)}
        assert rejected == {
            (f"{path}:4: tool.retry_policy.max_attempts: Input should be greater than or equal to 1",)
        }
        assert engine.manifest("flaky").retry_policy.max_attempts == 4
        assert engine.breaker("flaky").config.failure_threshold == 60
        assert (await engine.try_call("flaky", fail=True)).attempts == 4
        assert await engine.call("flaky", fail=False) == "ok"
        stop.set()

    assert len(background) > 0
    assert set(background) == {"ok"}  # no background call failed across both reloads
    loaded = [e for e in events if isinstance(e, ManifestLoaded)]
    assert [e.tool_id for e in loaded] == ["flaky"]


# --- unreadable and half-written files never weaken a tool --------------------------------


def make_dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.yaml")


def make_loop(path: Path) -> None:
    path.symlink_to(path.name)


@pytest.mark.parametrize("make_link", [make_dangling, make_loop], ids=["dangling", "loop"])
async def test_a_broken_symlink_keeps_the_last_good_policy(manifest_dir: Path, make_link: Any) -> None:
    """Both used to count as a deleted file: the tool dropped to the defaults (read_only became
    idempotent, 2 attempts became 5)."""
    path = manifest_dir / "flaky.yaml"
    path.write_text(flaky_manifest(max_attempts=2).replace("idempotent", "read_only"))
    engine, _, events = make_engine(manifest_dir)
    good = engine.manifests.entries["flaky"]
    path.unlink()
    make_link(path)

    returned = engine.reload_manifests([path])

    assert events == returned
    (event,) = returned
    assert isinstance(event, ManifestRefused)
    assert (event.path, event.kept_digest) == (str(path), good.digest)
    assert engine.manifest("flaky").side_effect is SideEffect.READ_ONLY
    assert (await engine.try_call("flaky")).attempts == 2
    (again,) = engine.reload_manifests()  # re-reading everything: the same verdict
    assert (again.path, again.reason) == (event.path, event.reason)


async def test_a_truncated_rewrite_never_re_sends_a_booking(manifest_dir: Path) -> None:
    """A booking's file cut before ``side_effect`` used to load as idempotent: one reset booking
    was sent 4 times."""
    path = manifest_dir / "book.yaml"
    whole = "tool:\n  id: book\n  retry_policy: {max_attempts: 4}\n  side_effect: side_effecting\n"
    path.write_text(whole)
    engine, _, _ = make_engine(manifest_dir)
    sent: list[float] = []

    async def book() -> None:
        sent.append(current_time())
        raise ConnectionResetError("connection reset by peer")

    engine.register("book", book)
    path.write_text(whole[: whole.index("  side_effect")])

    (event,) = engine.reload_manifests([path])

    assert isinstance(event, ManifestRejected)
    assert event.errors[0].startswith(f"{path}:1: tool.side_effect: required")
    assert engine.manifest("book").side_effect is SideEffect.SIDE_EFFECTING
    result = await engine.try_call("book")
    assert (result.attempts, len(sent)) == (1, 1)


async def test_what_the_watcher_read_off_the_loop_is_applied_like_a_path(manifest_dir: Path) -> None:
    engine, _, events = make_engine(manifest_dir)
    path = manifest_dir / "flaky.yaml"
    path.write_text(flaky_manifest(max_attempts=4))
    read = engine.manifests.read(path)
    fifo = manifest_dir / "x.yaml"
    os.mkfifo(fifo)
    refused = engine.manifests.read(fifo)  # never blocks: the FIFO is not opened for a read

    returned = engine.reload_manifests([read, refused])

    assert [type(e) for e in returned] == [ManifestLoaded, ManifestRefused]
    assert returned[1].reason == "not a regular file (a FIFO)"
    assert engine.manifest("flaky").retry_policy.max_attempts == 4
    assert events == returned


# --- the settle period, without files or clocks -------------------------------------------

P = PurePath("manifests/flaky.yaml")


def test_a_change_applies_once_it_has_been_stable_for_the_settle_period() -> None:
    tracker = SettleTracker(settle_s=0.5)
    tracker.observe(P, "new", 10.0, in_force="old")
    assert tracker.due(10.4) == []
    assert tracker.due(10.5) == [P]
    assert tracker.confirm(P, "new", 10.5)
    assert tracker.pending == {}


def test_a_second_chunk_restarts_the_settle_period() -> None:
    tracker = SettleTracker(settle_s=0.5)
    tracker.observe(P, "first-half", 10.0, in_force="old")
    tracker.observe(P, "whole", 10.2, in_force="old")
    assert tracker.due(10.6) == []
    assert tracker.due(10.7) == [P]
    assert tracker.confirm(P, "whole", 10.7)


def test_a_file_that_changed_again_when_re_read_waits_again() -> None:
    tracker = SettleTracker(settle_s=0.5)
    tracker.observe(P, "first-half", 10.0, in_force="old")
    assert not tracker.confirm(P, "whole", 10.5)  # the re-read found more: not applied
    assert tracker.due(10.9) == []
    assert tracker.due(11.0) == [P]
    assert tracker.confirm(P, "whole", 11.0)


def test_the_same_content_again_is_not_a_change() -> None:
    tracker = SettleTracker(settle_s=0.5)
    tracker.observe(P, "old", 10.0, in_force="old")
    tracker.observe(P, "gone", 10.0, in_force=None)  # never seen and not there: nothing to do
    assert tracker.pending == {}
    tracker.observe(P, "edited", 10.0, in_force="old")
    tracker.observe(P, "old", 10.1, in_force="old")  # reverted before it settled
    assert tracker.pending == {}
    assert not tracker.confirm(P, "old", 11.0)
