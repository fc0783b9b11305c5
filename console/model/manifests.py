"""The manifests as the console knows them: the one in force per tool, and every change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ManifestView:
    digest: str
    version: int
    path: str
    loaded_at: float
    content: Mapping[str, Any]

    @property
    def failure_threshold(self) -> int | None:
        breaker = self.content.get("circuit_breaker")
        return int(breaker["failure_threshold"]) if isinstance(breaker, Mapping) else None


@dataclass(frozen=True, slots=True)
class ManifestChange:
    at: float
    what: str
    """loaded, reloaded, removed, rejected or refused."""
    tool_id: str | None
    path: str
    version: int | None
    digest: str | None
    errors: tuple[str, ...] = ()
