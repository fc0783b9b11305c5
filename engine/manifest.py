"""Tool manifests: one YAML file per tool, plus an optional ``defaults.yaml``.

```yaml
tool:
  id: flight_search
  timeout_ms: 30000
  retry_policy: {initial_delay_ms: 50, max_attempts: 3}
  circuit_breaker: {failure_threshold: 5, timeout_ms: 30000}
  classification: [{status_code: 503, treat_as: permanent}]
  alternatives: [flight_search_backup]
```

Files are read with safe YAML loading and validated by pydantic; every problem is reported
as ``file:line: field.path: message``. :class:`ManifestRegistry` applies reloads atomically
and keeps the last good version of a tool when its new file is invalid.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.breaker import BreakerConfig
from engine.classify import ClassificationOverride
from engine.config import ConfigError, ConfigIssue, ParsedYaml, issues_from, read_yaml
from engine.events import Event, ManifestLoaded, ManifestRejected, ManifestRemoved
from engine.retry import RetryPolicy

DEFAULTS_FILE = "defaults.yaml"
TOOL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


class SideEffect(StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    SIDE_EFFECTING = "side_effecting"


class ToolPolicy(BaseModel):
    """Everything a manifest can set besides identity; ``defaults.yaml`` holds one of these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_ms: float = Field(default=30_000.0, gt=0)
    retry_policy: RetryPolicy = RetryPolicy()
    circuit_breaker: BreakerConfig = BreakerConfig()
    classification: tuple[ClassificationOverride, ...] = ()
    alternatives: tuple[str, ...] = ()
    side_effect: SideEffect = SideEffect.IDEMPOTENT
    retry_ambiguous: bool = False
    """Allow retrying a side-effecting call after an ambiguous failure (timeout, reset)."""


class ToolManifest(ToolPolicy):
    id: str = Field(pattern=TOOL_ID_PATTERN)
    description: str = ""

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0


class _ToolFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: ToolManifest


class _DefaultsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: ToolPolicy


# --- errors -------------------------------------------------------------------------------


class ManifestError(ConfigError):
    """One or more problems in manifest files; ``str()`` is the first, on one line."""

    what = "manifest"


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# --- parsing ------------------------------------------------------------------------------


def _read(path: Path, top_key: str) -> ParsedYaml:
    return read_yaml(path, top_key, ManifestError)


def _validate_tool(parsed: ParsedYaml, defaults: Mapping[str, Any], shown: str) -> ToolManifest:
    body = parsed.raw.get("tool")
    merged = {**parsed.raw, "tool": _deep_merge(defaults, body) if isinstance(body, Mapping) else body}
    try:
        return _ToolFile.model_validate(merged).tool
    except ValidationError as exc:
        raise ManifestError(issues_from(exc, shown, parsed.lines)) from None


def _validate_defaults(parsed: ParsedYaml, shown: str) -> dict[str, Any]:
    try:
        _DefaultsFile.model_validate(parsed.raw)
    except ValidationError as exc:
        raise ManifestError(issues_from(exc, shown, parsed.lines)) from None
    defaults = parsed.raw["defaults"]
    return dict(defaults) if isinstance(defaults, Mapping) else {}


def load_manifest(path: str | Path, defaults: Mapping[str, Any] | None = None) -> ToolManifest:
    """Load and validate one tool manifest file."""
    path = Path(path)
    return _validate_tool(_read(path, "tool"), defaults or {}, str(path))


# --- the registry -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedManifest:
    manifest: ToolManifest
    path: str
    digest: str
    version: int
    """The registry version at which this manifest came into force."""
    loaded_at: float


@dataclass(slots=True)
class _FileState:
    parsed: ParsedYaml
    tool_id: str | None = None


@dataclass(slots=True)
class ManifestRegistry:
    """The manifests in force. Readers get immutable objects; reloads swap them atomically."""

    directory: Path | None = None
    version: int = 0
    entries: dict[str, LoadedManifest] = field(default_factory=dict)
    rejected: dict[str, tuple[ConfigIssue, ...]] = field(default_factory=dict)
    """Current validation problems, by file; the last good version stays in force."""
    _defaults: dict[str, Any] = field(default_factory=dict)
    _defaults_digest: str | None = None
    _files: dict[Path, _FileState] = field(default_factory=dict)
    _fallbacks: dict[str, ToolManifest] = field(default_factory=dict)
    _fallback_digests: dict[str, str] = field(default_factory=dict)
    """The digests of ``_fallbacks``: they change only with the defaults, and are cleared with them."""

    @classmethod
    def from_directory(cls, directory: str | Path, *, at: float = 0.0) -> ManifestRegistry:
        """Load every manifest in ``directory``; raises :class:`ManifestError` listing all problems."""
        registry = cls(Path(directory))
        if not registry.directory or not registry.directory.is_dir():
            raise ManifestError([ConfigIssue(str(directory), None, "", "not a directory")])
        registry.reload(registry.manifest_files(), at=at, t=0.0)
        if registry.rejected:
            raise ManifestError(issue for issues in registry.rejected.values() for issue in issues)
        return registry

    @classmethod
    def from_manifests(cls, manifests: Iterable[ToolManifest], *, at: float = 0.0) -> ManifestRegistry:
        registry = cls()
        for manifest in manifests:
            registry.version += 1
            registry.entries[manifest.id] = LoadedManifest(
                manifest, "<code>", _digest_of(manifest), registry.version, at
            )
        return registry

    def manifest_files(self) -> list[Path]:
        if self.directory is None:
            return []
        return sorted(p for p in self.directory.iterdir() if p.suffix in {".yaml", ".yml"} and p.is_file())

    def get(self, tool_id: str) -> ToolManifest:
        """The manifest in force for ``tool_id``; tools without one run on the defaults."""
        entry = self.entries.get(tool_id)
        if entry is not None:
            return entry.manifest
        fallback = self._fallbacks.get(tool_id)
        if fallback is None:
            fallback = ToolManifest.model_validate({**self._defaults, "id": tool_id})
            self._fallbacks[tool_id] = fallback
        return fallback

    def digest(self, tool_id: str) -> str:
        """The digest of the policy in force for ``tool_id`` (defaults-only tools included)."""
        entry = self.entries.get(tool_id)
        if entry is not None:
            return entry.digest
        digest = self._fallback_digests.get(tool_id)
        if digest is None:
            digest = self._fallback_digests[tool_id] = _digest_of(self.get(tool_id))
        return digest

    def is_manifest_file(self, path: Path) -> bool:
        path = self._canonical(Path(path))
        return path.parent == self.directory and path.suffix in {".yaml", ".yml"}

    def _canonical(self, path: Path) -> Path:
        """``path`` as this registry names it: watchers report absolute or resolved paths."""
        directory = self.directory
        if directory is None or path.parent == directory:
            return path
        try:
            if path.parent.resolve() == directory.resolve():
                return directory / path.name
        except (OSError, RuntimeError):
            pass
        return path

    def reload(self, paths: Iterable[Path], *, at: float, t: float) -> list[Event]:
        """Apply changes to ``paths`` (added, edited or deleted); return what happened."""
        events: list[Event] = []
        paths = sorted({self._canonical(Path(p)) for p in paths})
        defaults_path = self.directory / DEFAULTS_FILE if self.directory else None
        tool_paths = [p for p in paths if p != defaults_path]
        if defaults_path is not None and defaults_path in paths:
            events += self._reload_defaults(defaults_path, at, t)
        for path in tool_paths:
            events += self._reload_tool(path, at, t)
        return events

    # --- internals ---------------------------------------------------------------------

    def _reload_defaults(self, path: Path, at: float, t: float) -> list[Event]:
        shown = str(path)
        if not path.exists():
            new_defaults: dict[str, Any] = {}
            digest = None
        else:
            try:
                parsed = _read(path, "defaults")
                new_defaults = _validate_defaults(parsed, shown)
                digest = parsed.digest
            except ManifestError as exc:
                return [self._reject(shown, exc, self._defaults_digest, at, t)]
            if digest == self._defaults_digest and shown not in self.rejected:
                return []
        # Re-validate every tool under the new defaults: all or nothing.
        revalidated: dict[Path, ToolManifest] = {}
        problems: list[ConfigIssue] = []
        for file_path, state in self._files.items():
            try:
                revalidated[file_path] = _validate_tool(state.parsed, new_defaults, str(file_path))
            except ManifestError as exc:
                problems += exc.issues
        if problems:
            error = ManifestError(
                [ConfigIssue(shown, None, "", f"these defaults break {p}") for p in problems]
            )
            return [self._reject(shown, error, self._defaults_digest, at, t)]
        self._defaults, self._defaults_digest = new_defaults, digest
        self._fallbacks, self._fallback_digests = {}, {}
        self.rejected.pop(shown, None)
        events: list[Event] = []
        for file_path, manifest in revalidated.items():
            events += self._install(manifest, file_path, self._files[file_path].parsed.digest, at, t)
        # Files rejected under the old defaults may be valid under the new ones; those still
        # invalid stay rejected without a second event.
        for rejected_path in [p for p in self.rejected if p != shown]:
            retried = self._reload_tool(Path(rejected_path), at, t)
            events += [e for e in retried if not isinstance(e, ManifestRejected)]
        return events

    def _reload_tool(self, path: Path, at: float, t: float) -> list[Event]:
        shown = str(path)
        previous = self._files.get(path)
        if not path.exists():
            self.rejected.pop(shown, None)
            if previous is None or previous.tool_id is None:
                self._files.pop(path, None)
                return []
            del self._files[path]
            self.entries = {k: v for k, v in self.entries.items() if k != previous.tool_id}
            self.version += 1
            return [ManifestRemoved(at=at, t=t, tool_id=previous.tool_id, path=shown, version=self.version)]
        kept = self.entries.get(previous.tool_id) if previous and previous.tool_id else None
        kept_digest = kept.digest if kept else None
        was_rejected = shown in self.rejected
        try:
            parsed = _read(path, "tool")
            unchanged = previous is not None and parsed.digest == previous.parsed.digest
            if unchanged and not was_rejected:
                return []
            manifest = _validate_tool(parsed, self._defaults, shown)
            owner = next((p for p, s in self._files.items() if s.tool_id == manifest.id and p != path), None)
            if owner is not None:
                line = parsed.lines.get(("tool", "id"))
                raise ManifestError(
                    [ConfigIssue(shown, line, "tool.id", f"{manifest.id!r} is already defined in {owner}")]
                )
        except ManifestError as exc:
            return [self._reject(shown, exc, kept_digest, at, t)]
        events: list[Event] = []
        if previous is not None and previous.tool_id not in (None, manifest.id):
            self.entries = {k: v for k, v in self.entries.items() if k != previous.tool_id}
            self.version += 1
            events.append(
                ManifestRemoved(at=at, t=t, tool_id=str(previous.tool_id), path=shown, version=self.version)
            )
        self._files[path] = _FileState(parsed, manifest.id)
        self.rejected.pop(shown, None)
        installed = self._install(manifest, path, parsed.digest, at, t)
        current = self.entries[manifest.id]
        if was_rejected and not installed:
            # Fixed back to the policy already in force: nothing changes, but say the file is good.
            installed = [
                ManifestLoaded(
                    at=at,
                    t=t,
                    tool_id=manifest.id,
                    path=shown,
                    version=current.version,
                    digest=current.digest,
                    previous_digest=current.digest,
                    manifest=current.manifest.model_dump(mode="json"),
                )
            ]
        return events + installed

    def _install(
        self, manifest: ToolManifest, path: Path, file_digest: str, at: float, t: float
    ) -> list[Event]:
        current = self.entries.get(manifest.id)
        digest = _digest_of(manifest)
        if current is not None and current.digest == digest:
            return []
        self.version += 1
        self.entries = {
            **self.entries,
            manifest.id: LoadedManifest(manifest, str(path), digest, self.version, at),
        }
        return [
            ManifestLoaded(
                at=at,
                t=t,
                tool_id=manifest.id,
                path=str(path),
                version=self.version,
                digest=digest,
                previous_digest=current.digest if current else None,
                manifest=manifest.model_dump(mode="json"),
            )
        ]

    def _reject(
        self, shown: str, exc: ManifestError, kept: str | None, at: float, t: float
    ) -> ManifestRejected:
        self.rejected[shown] = exc.issues
        errors = tuple(str(issue) for issue in exc.issues)
        return ManifestRejected(at=at, t=t, path=shown, errors=errors, kept_digest=kept)


def _digest_of(manifest: ToolManifest) -> str:
    """Digest of the effective policy (file content plus defaults)."""
    return hashlib.sha256(manifest.model_dump_json().encode()).hexdigest()[:12]
