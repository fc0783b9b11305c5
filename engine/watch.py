"""Manifest hot reload: watch the directory, read off the event loop, apply what has settled.

A changed file is applied only once its content has stayed the same for the settle period, so
the first half of a file written in two chunks never goes live. Reading, parsing and
validating run in a worker thread (a 1 MiB file, a FIFO or a broken symlink never stalls the
calls in flight); the registry applies the result on the event loop. If the directory is
deleted, the manifests in force stay, a ``ManifestRefused`` names the directory, and watching
resumes when it is back.

Internal: ``Engine(watch=True)`` is its API.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Collection
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.abc

from engine.events import Event, ManifestRefused
from engine.manifest import ManifestFile, ManifestRegistry

log = logging.getLogger("tripwire.engine")
T = TypeVar("T")

DEFAULT_SETTLE_MS = 500
"""How long a changed file's content must stay the same before it is applied."""
DIRECTORY_GONE = "the directory is gone: the manifests in force stay; watching resumes when it is back"


@dataclass(slots=True)
class _Pending:
    key: str
    since: float


@dataclass(slots=True)
class SettleTracker:
    """Which changed paths have kept the same content for ``settle_s``; pure, no clock or I/O.

    A key is what one read found (a digest, ``gone`` or a refusal, see
    :meth:`ManifestRegistry.peek`); ``now`` is engine time.
    """

    settle_s: float
    pending: dict[Path, _Pending] = field(default_factory=dict)

    def observe(self, path: Path, key: str, now: float, *, in_force: str | None) -> None:
        """A read of ``path`` found ``key``; ``in_force`` is the key the registry last applied."""
        if key == (in_force or "gone"):  # back to what is in force (or never there): nothing to do
            self.pending.pop(path, None)
            return
        entry = self.pending.get(path)
        if entry is None or entry.key != key:
            self.pending[path] = _Pending(key, now)  # changed again: the period starts over

    def due(self, now: float) -> list[Path]:
        """Paths unchanged for the settle period: re-read them and :meth:`confirm`."""
        return sorted(p for p, e in self.pending.items() if now - e.since >= self.settle_s)

    def confirm(self, path: Path, key: str, now: float) -> bool:
        """A re-read of a due path found ``key``: True if it is still what was seen a settle
        period ago, to be applied now; otherwise the file is still changing and waits again."""
        entry = self.pending.get(path)
        if entry is None:
            return False
        if entry.key != key:
            self.pending[path] = _Pending(key, now)
            return False
        del self.pending[path]
        return True


class ManifestWatcher:
    """Watches ``registry.directory`` and hands settled reads to ``apply`` on the event loop.

    ``apply`` is :meth:`Engine.reload_manifests`; ``publish`` sends the watcher's own events
    (the directory gone).
    """

    def __init__(
        self,
        registry: ManifestRegistry,
        apply: Callable[[list[ManifestFile]], object],
        publish: Callable[[Event], None],
        *,
        wall_clock: Callable[[], float],
        settle_ms: float = DEFAULT_SETTLE_MS,
        debounce_ms: int = 100,
        directory_poll_ms: float = 200,
    ) -> None:
        if registry.directory is None:
            raise ValueError("the registry has no directory to watch")
        self.registry = registry
        self.directory = registry.directory
        self.apply = apply
        self.publish = publish
        self.wall_clock = wall_clock
        self.tracker = SettleTracker(settle_ms / 1000.0)
        self.debounce_ms = debounce_ms
        # The watcher wakes at least this often, so a settled file is applied on time.
        self.tick_ms = int(min(100.0, max(settle_ms / 2.0, 10.0)))
        self.directory_poll_s = directory_poll_ms / 1000.0

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled; ``task_status.started()`` once the watch is in place."""
        if _identity(self.directory) is None:
            raise FileNotFoundError(errno.ENOENT, "manifest directory not found", str(self.directory))
        status: anyio.abc.TaskStatus[None] | None = task_status
        failed = False
        while True:
            try:
                await self._watch(status)
                failed = False
            except Exception as exc:
                if status is not None:
                    raise  # not started yet: the engine fails to start and says why
                if _identity(self.directory) is not None:  # the watch itself failed, not the directory
                    log.exception("watching manifests failed")
                    if not failed:
                        self._announce(f"watching stopped ({type(exc).__name__}: {exc}); retrying")
                    failed = True
                    await anyio.sleep(1.0)
            status = None
            if _identity(self.directory) is None:
                self._announce(DIRECTORY_GONE)
                await self._directory_back()
                log.info("manifest directory %s is back: watching it again", self.directory)

    async def _watch(self, status: anyio.abc.TaskStatus[None] | None) -> None:
        """Watch until the directory is gone or replaced by another one."""
        # start-up: watchfiles (and the multiprocessing it brings) only for an engine that watches:
        # 5 ms at `import engine` otherwise.
        import watchfiles

        identity = _identity(self.directory)
        rescan = True  # at (re)start, compare every file with what is in force
        watch = watchfiles.awatch(
            self.directory,
            debounce=self.debounce_ms,
            step=20,
            rust_timeout=self.tick_ms,
            yield_on_timeout=True,
            recursive=False,
        )
        async with aclosing(watch) as changes_seen:
            async for changes in changes_seen:
                if status is not None:
                    status.started()
                    status = None
                if _identity(self.directory) != identity:
                    return
                paths: set[Path] = set()
                for _, raw in changes:
                    if self.registry.is_manifest_file(Path(raw)):
                        paths.add(self.registry.canonical(Path(raw)))
                    else:  # the directory, or a symlink swap (a Kubernetes ConfigMap's ..data)
                        rescan = True
                try:
                    if rescan:
                        rescan = False
                        paths |= self.registry.known_files()  # on the loop: reloads change it
                        paths.update(await _in_thread(self.registry.manifest_files))
                    await self._observe(paths)
                    await self._apply_settled()
                except Exception:  # a bug here must not stop the engine or the watch
                    log.exception("manifest reload failed")

    async def _observe(self, paths: Collection[Path]) -> None:
        if not paths:
            return
        registry = self.registry
        keys = await _in_thread(lambda: [(p, registry.peek(p)) for p in sorted(paths)])
        now = anyio.current_time()
        for path, key in keys:
            self.tracker.observe(path, key, now, in_force=registry.seen(path))

    async def _apply_settled(self) -> None:
        due = self.tracker.due(anyio.current_time())
        if not due:
            return
        registry = self.registry
        files = await _in_thread(lambda: [registry.read(p) for p in due])
        now = anyio.current_time()
        ready = [f for f in files if self.tracker.confirm(f.path, f.key, now)]
        if ready:
            self.apply(ready)

    async def _directory_back(self) -> None:
        """Return once the directory exists again; no watcher can see it come back, so poll."""
        while True:
            await anyio.sleep(self.directory_poll_s)
            if _identity(self.directory) is not None:
                return

    def _announce(self, reason: str) -> None:
        at, t = self.wall_clock(), anyio.current_time()
        self.publish(ManifestRefused(at=at, t=t, path=str(self.directory), reason=reason))


async def _in_thread(fn: Callable[[], T]) -> T:
    """Run blocking file work in a worker thread; a cancelled engine does not wait for it."""
    return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)


def _identity(directory: Path) -> tuple[int, int] | None:
    """The directory's device and inode, or None if it is gone (or no longer a directory)."""
    try:
        info = os.stat(directory)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


__all__ = ["DEFAULT_SETTLE_MS", "ManifestWatcher", "SettleTracker"]
