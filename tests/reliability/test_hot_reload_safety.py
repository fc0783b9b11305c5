"""Hot reload is safe (issue 10 §7), on a real directory with the real watcher.

A FIFO named like a manifest, a file over the size cap, broken symlinks, a deleted and
recreated directory and files written in two chunks: calls keep their timeouts, the last good
version stays in force, and a half-written file never goes live.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.engine import Engine
from engine.events import Event, ManifestLoaded, ManifestRefused, ManifestRejected, ManifestRemoved
from engine.manifest import SideEffect
from engine.watch import DIRECTORY_GONE

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SETTLE_S = 0.3
TIMEOUT_S = 0.3
"""search's timeout: a blocked event loop would make it fire late."""
LATE_S = 0.25
"""How late a timeout may fire on a busy CI machine (it fired 5.2 s late before the fix)."""

SEARCH = """\
tool:
  id: search
  side_effect: read_only
  timeout_ms: 300
  retry_policy: {max_attempts: 1}
"""
BOOK = """\
tool:
  id: book
  side_effect: side_effecting
  timeout_ms: 5000
  retry_policy: {max_attempts: 4}
"""


@pytest.fixture
def anyio_backend() -> str:
    # watchfiles reports real file-system events from an OS thread: on virtual time the
    # engine would race past them. Real time on a normal asyncio loop; waits are bounded.
    return "asyncio"


@pytest.fixture
def manifest_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "search.yaml").write_text(SEARCH)
    (directory / "book.yaml").write_text(BOOK)
    return directory


async def hang() -> None:
    await anyio.sleep(3600)


@asynccontextmanager
async def watching(directory: Path) -> AsyncIterator[tuple[Engine, list[Event]]]:
    engine = Engine(
        directory, watch=True, watch_settle_ms=SETTLE_S * 1000, watch_debounce_ms=20, rng=random.Random(0)
    )
    engine.register("search", hang)
    engine.register("book", hang)
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)
    async with engine:
        yield engine, events


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Poll for what the watcher thread does, up to ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


def of_path(events: list[Event], kind: type[Any], path: Path) -> list[Any]:
    return [e for e in events if isinstance(e, kind) and e.path == str(path)]


async def timed_search(engine: Engine) -> float:
    """Run search (it hangs) until its 300 ms timeout; return how long that took."""
    started = anyio.current_time()
    result = await engine.try_call("search")
    assert result.error is not None and "timeout" in result.error.kind.value, result
    return anyio.current_time() - started


async def keep_timing(engine: Engine, durations: list[float], stop: anyio.Event) -> None:
    while not stop.is_set():
        durations.append(await timed_search(engine))


# --- special files ----------------------------------------------------------------------------


async def test_a_fifo_named_like_a_manifest_is_refused_and_timeouts_still_fire_on_time(
    manifest_dir: Path,
) -> None:
    """A FIFO named x.yaml used to hang the engine for good: reading it blocked the event loop."""
    fifo = manifest_dir / "x.yaml"
    async with watching(manifest_dir) as (engine, events):
        durations: list[float] = []
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_timing, engine, durations, stop)
            os.mkfifo(fifo)
            await until(lambda: of_path(events, ManifestRefused, fifo))
            await until(lambda: len(durations) >= 3)  # calls go on after the refusal too
            stop.set()

        (refused,) = of_path(events, ManifestRefused, fifo)
        assert refused.reason == "not a regular file (a FIFO)"
        assert max(durations) < TIMEOUT_S + LATE_S, durations
        assert engine.manifest("search").timeout_ms == 300


async def test_a_manifest_over_the_size_cap_is_refused_unparsed_and_timeouts_are_unaffected(
    manifest_dir: Path,
) -> None:
    """Parsing a 1.6 MB manifest on the event loop made a 300 ms timeout fire after 5.5 s."""
    big = manifest_dir / "big.yaml"
    content = b"tool:\n  id: big\n  side_effect: read_only\n  alternatives:\n" + b"    - x\n" * 210_000
    assert len(content) > 1.6 * 1024 * 1024
    async with watching(manifest_dir) as (engine, events):
        durations: list[float] = []
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_timing, engine, durations, stop)
            big.write_bytes(content)
            await until(lambda: [e for e in events if getattr(e, "path", None) == str(big)], timeout=15)
            await until(lambda: len(durations) >= 3)
            stop.set()

        assert max(durations) < TIMEOUT_S + LATE_S, durations
        (refused,) = of_path(events, ManifestRefused, big)
        assert refused.reason == "larger than 1 MiB (1.6 MiB)"
        assert "big" not in engine.manifests.entries


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("nowhere.yaml", "dangling symlink (its target does not exist)"),
        ("search.yaml", "symlink loop"),  # search.yaml -> search.yaml
    ],
    ids=["dangling-symlink", "symlink-loop"],
)
async def test_a_broken_symlink_in_place_of_a_manifest_keeps_the_last_good_version(
    manifest_dir: Path, target: str, reason: str
) -> None:
    """Both used to drop the tool to the defaults: read_only became idempotent."""
    path = manifest_dir / "search.yaml"
    async with watching(manifest_dir) as (engine, events):
        good = engine.manifests.entries["search"]
        staged = manifest_dir / "search.link"  # not a manifest name: swapped in atomically
        staged.symlink_to(target)
        os.replace(staged, path)

        await until(lambda: of_path(events, ManifestRefused, path))

        (refused,) = of_path(events, ManifestRefused, path)
        assert (refused.reason, refused.kept_digest) == (reason, good.digest)
        assert not of_path(events, ManifestRemoved, path)
        assert engine.manifest("search").side_effect is SideEffect.READ_ONLY
        assert engine.manifests.entries["search"] is good


async def test_files_skipped_at_start_up_are_reported_when_the_engine_starts(manifest_dir: Path) -> None:
    os.mkfifo(manifest_dir / "x.yaml")
    (manifest_dir / "gone.yaml").symlink_to(manifest_dir / "nowhere.yaml")
    async with watching(manifest_dir) as (engine, events):
        refused = {(e.path, e.reason) for e in events if isinstance(e, ManifestRefused)}
        assert refused == {
            (str(manifest_dir / "x.yaml"), "not a regular file (a FIFO)"),
            (str(manifest_dir / "gone.yaml"), "dangling symlink (its target does not exist)"),
        }
        assert set(engine.manifests.entries) == {"search", "book"}


# --- the directory itself -------------------------------------------------------------------


async def test_watching_resumes_when_the_directory_is_deleted_and_recreated(manifest_dir: Path) -> None:
    async with watching(manifest_dir) as (engine, events):
        shutil.rmtree(manifest_dir)

        await until(lambda: of_path(events, ManifestRefused, manifest_dir))

        (gone,) = of_path(events, ManifestRefused, manifest_dir)
        assert gone.reason == DIRECTORY_GONE
        assert engine.manifest("search").side_effect is SideEffect.READ_ONLY  # kept meanwhile
        assert engine.manifest("book").side_effect is SideEffect.SIDE_EFFECTING
        assert not [e for e in events if isinstance(e, ManifestRemoved)]

        staging = manifest_dir.parent / "staging"  # a deploy: the new directory swapped in whole
        staging.mkdir()
        (staging / "search.yaml").write_text(SEARCH.replace("timeout_ms: 300", "timeout_ms: 400"))
        staging.rename(manifest_dir)

        await until(lambda: engine.manifest("search").timeout_ms == 400)
        await until(lambda: of_path(events, ManifestRemoved, manifest_dir / "book.yaml"))  # really gone

        # and it keeps watching the new directory
        (manifest_dir / "search.yaml").write_text(SEARCH.replace("timeout_ms: 300", "timeout_ms: 500"))
        await until(lambda: engine.manifest("search").timeout_ms == 500)


# --- half-written files -----------------------------------------------------------------------


async def write_in_two_chunks(path: Path, first: str, second: str, pause_s: float) -> float:
    """Rewrite ``path`` in place as editors without atomic saves do; return when it was whole."""
    with path.open("w", encoding="utf-8") as file:
        file.write(first)
        file.flush()
        os.fsync(file.fileno())
        await anyio.sleep(pause_s)
        file.write(second)
    return anyio.current_time()


async def test_a_file_written_in_two_chunks_goes_live_only_whole(manifest_dir: Path) -> None:
    """In 8 of 10 such rewrites the first half used to go live (``timeout_ms: 3``)."""
    path = manifest_dir / "search.yaml"
    whole = SEARCH.replace("timeout_ms: 300", "timeout_ms: 3500")
    cut = whole.index("3500") + 1  # the first chunk ends in "timeout_ms: 3"
    async with watching(manifest_dir) as (engine, events):
        seen: set[float] = set()
        stop = anyio.Event()

        async def watch_policy() -> None:
            while not stop.is_set():
                seen.add(engine.manifest("search").timeout_ms)
                await anyio.sleep(0.002)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_policy)
            for timeout_ms in (3500, 3510, 3520):  # the race was not every time: a few rewrites
                text = whole.replace("3500", str(timeout_ms))
                done = await write_in_two_chunks(path, text[:cut], text[cut:], pause_s=0.12)
                await until(lambda t=timeout_ms: engine.manifest("search").timeout_ms == t)
                assert anyio.current_time() - done >= SETTLE_S * 0.9, "applied before it settled"
            stop.set()

        assert 3.0 not in seen  # the half-written "timeout_ms: 3" never went live
        loaded = [e.manifest["timeout_ms"] for e in of_path(events, ManifestLoaded, path) if e.manifest]
        assert loaded == [3500.0, 3510.0, 3520.0]
        assert not of_path(events, ManifestRejected, path)


async def test_a_truncated_file_that_stays_truncated_is_refused_and_the_booking_stays_safe(
    manifest_dir: Path,
) -> None:
    """A pause longer than the settle period: the cut file is read, but without ``side_effect``
    it is rejected, and the booking stays side-effecting (it was re-sent 4 times before)."""
    path = manifest_dir / "book.yaml"
    whole = BOOK.replace("timeout_ms: 5000", "timeout_ms: 6000")
    cut = whole.index("  side_effect")
    async with watching(manifest_dir) as (engine, events):
        async with anyio.create_task_group() as tg:

            async def write() -> None:
                await write_in_two_chunks(path, whole[:cut], whole[cut:], pause_s=SETTLE_S * 4)

            tg.start_soon(write)
            await until(lambda: of_path(events, ManifestRejected, path))
            (rejected,) = of_path(events, ManifestRejected, path)
            assert rejected.errors[0].startswith(f"{path}:1: tool.side_effect: required")
            assert engine.manifest("book").side_effect is SideEffect.SIDE_EFFECTING
            assert engine.manifest("book").timeout_ms == 5000

        await until(lambda: engine.manifest("book").timeout_ms == 6000)
        assert engine.manifest("book").side_effect is SideEffect.SIDE_EFFECTING
