"""Internal: manifests coming into force, refused or removed. Import them from
:mod:`engine.events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.event import Event


@dataclass(slots=True, kw_only=True)
class ManifestLoaded(Event):
    """A valid manifest came into force (at start-up or on hot reload)."""

    tool_id: str
    path: str
    version: int
    digest: str
    previous_digest: str | None = None
    manifest: dict[str, Any] | None = None
    """The manifest now in force, as data (every default filled in): what a console shows."""

    def describe(self) -> str:
        verb = "reloaded" if self.previous_digest else "loaded"
        return f"manifest for {self.tool_id} {verb} from {self.path} (v{self.version}, {self.digest})"


@dataclass(slots=True, kw_only=True)
class SharedStrategiesChanged(Event):
    """The engine-wide strategies of defaults.yaml (a retry budget every tool shares) changed.

    They are the sections ``defaults.yaml`` sets beside ``defaults:``; ``strategies`` is every
    such section now in force, as data."""

    path: str
    strategies: dict[str, Any]
    """By section, the options now in force (empty: none any more)."""
    previous: dict[str, Any]

    def describe(self) -> str:
        now = ", ".join(self.strategies) or "none"
        return f"engine-wide strategies from {self.path}: {now} (were: {', '.join(self.previous) or 'none'})"


@dataclass(slots=True, kw_only=True)
class ManifestRejected(Event):
    """An invalid manifest file was refused; the last good version stays in force."""

    path: str
    errors: tuple[str, ...]
    kept_digest: str | None
    """Digest of the last good version still in force, if there is one."""

    def describe(self) -> str:
        kept = f"; keeping {self.kept_digest}" if self.kept_digest else ""
        more = f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        return f"manifest rejected: {self.errors[0] if self.errors else self.path}{more}{kept}"


@dataclass(slots=True, kw_only=True)
class ManifestRefused(Event):
    """A manifest file was refused unread (a FIFO, too large, a broken symlink); the last good version stays.

    ``path`` is the manifest directory itself when it is gone: watching resumes when it is back.
    """

    path: str
    reason: str
    kept_digest: str | None = None
    """Digest of the last good version still in force, if there is one."""

    def describe(self) -> str:
        kept = f"; keeping {self.kept_digest}" if self.kept_digest else ""
        return f"manifest refused: {self.path}: {self.reason}{kept}"


@dataclass(slots=True, kw_only=True)
class ManifestRemoved(Event):
    """A manifest file was deleted; its tool falls back to the defaults."""

    tool_id: str
    path: str
    version: int

    def describe(self) -> str:
        return f"manifest for {self.tool_id} removed ({self.path}); the tool falls back to defaults"
