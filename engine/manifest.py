"""Tool manifests: one YAML file per tool, plus an optional ``defaults.yaml``.

```yaml
tool:
  id: flight_search
  side_effect: read_only        # required in every tool file
  timeout_ms: 30000
  idle_timeout_ms: 5000         # cut off after 5 s without progress (engine.report_progress)
  retry_policy: {initial_delay_ms: 50, max_attempts: 3}
  circuit_breaker: {failure_threshold: 5, timeout_ms: 30000}
  classification: [{status_code: 503, treat_as: permanent}]
  alternatives: [flight_search_backup]
  secret_fields: [session_id]   # more argument/result fields whose values events never hold
```

Files are read with safe YAML loading and validated by pydantic; every problem is reported
as ``file:line: field.path: message``. ``side_effect`` must be stated in each tool's own file
(``defaults.yaml`` may not supply it): a file cut short is refused rather than read as an
idempotent tool. :class:`ManifestRegistry` applies reloads atomically and keeps the last good
version of a tool when its new file is invalid (``ManifestRejected``) or cannot be read at all
(``ManifestRefused``: not a regular file, too large, a broken symlink); only a file that is
really gone removes its tool (``ManifestRemoved``). ``secret_fields`` extend the engine's redaction
(:mod:`engine.redaction`) for the tool; a tool file's list adds to the one in ``defaults.yaml``.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.config import (
    MAX_CONFIG_BYTES,
    ConfigError,
    ConfigIssue,
    ParsedYaml,
    Unread,
    issues_from,
    parse_yaml,
    read_regular_file,
    read_yaml,
)
from engine.events import (
    Event,
    ManifestLoaded,
    ManifestRefused,
    ManifestRejected,
    ManifestRemoved,
    SharedStrategiesChanged,
)
from engine.policy import TOOL_ID_PATTERN as TOOL_ID_PATTERN
from engine.policy import SideEffect as SideEffect
from engine.policy import ToolManifest as ToolManifest
from engine.policy import ToolPolicy as ToolPolicy
from engine.strategies.base import StrategyOptions
from engine.strategies.registry import shared_sections
from engine.strategies.sections import dump_sections, inheriting, take_sections

DEFAULTS_FILE = "defaults.yaml"
MAX_MANIFEST_BYTES = MAX_CONFIG_BYTES
"""Manifest files larger than this (1 MiB) are refused unread, unless the registry says otherwise."""
SIDE_EFFECT_REQUIRED = (
    "required in every tool file: read_only, idempotent or side_effecting "
    "(it decides whether a failed call may be sent again)"
)
SIDE_EFFECT_NOT_IN_DEFAULTS = "not allowed in defaults: state it in each tool's own file"


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


def _check_tool(parsed: ParsedYaml, defaults: Mapping[str, Any], shown: str) -> ToolManifest | ManifestError:
    """The tool file's manifest under ``defaults``, or every problem with it."""
    body = parsed.raw.get("tool")
    issues: list[ConfigIssue] = []
    if isinstance(body, Mapping) and "side_effect" not in body:
        # No default here: a file cut short must not turn a booking into an idempotent tool.
        issues.append(
            ConfigIssue(shown, parsed.lines.get(("tool",)), "tool.side_effect", SIDE_EFFECT_REQUIRED)
        )
    merged = {**parsed.raw, "tool": _deep_merge(defaults, body) if isinstance(body, Mapping) else body}
    if isinstance(body, Mapping) and isinstance(body.get("secret_fields"), list):
        shared = defaults.get("secret_fields")  # added to, not replaced: a secret must not come back
        if isinstance(shared, list | tuple):
            # The file's own names first: a problem in one is reported at its own line.
            merged["tool"]["secret_fields"] = [*body["secret_fields"], *shared]
    try:
        own = body if isinstance(body, Mapping) else ()
        manifest = inheriting(
            lambda tool: _ToolFile.model_validate({**merged, "tool": tool}).tool, merged["tool"], own
        )
    except ValidationError as exc:
        issues += issues_from(exc, shown, parsed.lines)
    return ManifestError(issues) if issues else manifest


def _check_defaults(
    parsed: ParsedYaml, shown: str
) -> tuple[dict[str, Any], dict[str, StrategyOptions]] | ManifestError:
    """The defaults for every tool, and the engine-wide strategies set beside them (one
    ``retry_budget`` shared by all tools), or every problem with them."""
    defaults = parsed.raw["defaults"]
    issues: list[ConfigIssue] = []
    if isinstance(defaults, Mapping) and "side_effect" in defaults:
        line = parsed.lines.get(("defaults", "side_effect"))
        issues.append(ConfigIssue(shown, line, "defaults.side_effect", SIDE_EFFECT_NOT_IN_DEFAULTS))
    rest, shared, problems = take_sections(parsed.raw, shared_sections())
    if problems:
        issues += issues_from(ValidationError.from_exception_data("defaults", problems), shown, parsed.lines)
    try:
        _DefaultsFile.model_validate(rest)
    except ValidationError as exc:
        issues += issues_from(exc, shown, parsed.lines)
    if issues:
        return ManifestError(issues)
    return (dict(defaults) if isinstance(defaults, Mapping) else {}), shared


def load_manifest(path: str | Path, defaults: Mapping[str, Any] | None = None) -> ToolManifest:
    """Load and validate one tool manifest file."""
    path = Path(path)
    result = _check_tool(read_yaml(path, "tool", ManifestError), defaults or {}, str(path))
    if isinstance(result, ManifestError):
        raise result
    return result


def _content_key(data: bytes | Unread) -> str:
    """What one read found, as one string: equal keys mean the same content (or refusal)."""
    if isinstance(data, Unread):
        return "gone" if data.gone else f"refused: {data.reason}"
    return hashlib.sha256(data).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """One read of a manifest path, ready to apply: the watcher reads off the event loop."""

    path: Path
    digest: str | None = None
    """First 12 hex digits of the content's SHA-256; None when nothing was read."""
    parsed: ParsedYaml | None = None
    problem: ManifestError | None = None
    """Read, but not YAML with the expected top-level key."""
    refused: str | None = None
    """Not read at all, and why (``not a regular file (a FIFO)``, ``symlink loop``…)."""
    checked: tuple[Mapping[str, Any], ToolManifest | ManifestError] | None = None
    """A tool file validated under these defaults: reused while they are still in force."""

    @property
    def gone(self) -> bool:
        """Nothing is at the path: not even a broken symlink."""
        return self.digest is None and self.refused is None

    @property
    def key(self) -> str:
        if self.refused is not None:
            return _content_key(Unread(self.refused))
        return self.digest or "gone"


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
    refused: dict[str, str] = field(default_factory=dict)
    """Files that could not be read, and why (start-up included); the last good version stays."""
    max_bytes: int = MAX_MANIFEST_BYTES
    shared: dict[str, StrategyOptions] = field(default_factory=dict)
    """The engine-wide strategies ``defaults.yaml`` sets beside ``defaults:`` (one shared instance each)."""
    _defaults: dict[str, Any] = field(default_factory=dict)
    _defaults_digest: str | None = None
    _files: dict[Path, _FileState] = field(default_factory=dict)
    _rejected_files: dict[Path, ManifestFile] = field(default_factory=dict)
    """Rejected tool files as read: retried from memory when the defaults change."""
    _seen: dict[Path, str] = field(default_factory=dict)
    _fallbacks: dict[str, ToolManifest] = field(default_factory=dict)
    _fallback_digests: dict[str, str] = field(default_factory=dict)
    """The digests of ``_fallbacks``: they change only with the defaults, and are cleared with them."""

    @classmethod
    def from_directory(
        cls, directory: str | Path, *, at: float = 0.0, max_bytes: int = MAX_MANIFEST_BYTES
    ) -> ManifestRegistry:
        """Load every manifest in ``directory``; raises :class:`ManifestError` listing all invalid
        files. Files that cannot be read (a FIFO, too large, a broken symlink) are skipped and
        listed in :attr:`refused`; :meth:`refusal_events` reports them."""
        registry = cls(Path(directory), max_bytes=max_bytes)
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
        """Every ``*.yaml``/``*.yml`` entry of the directory, whatever its type: a FIFO or a
        broken symlink is listed so that reading it can refuse it out loud."""
        if self.directory is None:
            return []
        try:
            names = list(self.directory.iterdir())
        except OSError:
            return []
        return sorted(p for p in names if p.suffix in {".yaml", ".yml"})

    def known_files(self) -> set[Path]:
        """Every file the registry holds something for (loaded, rejected, refused); no I/O."""
        paths = set(self._files) | {Path(p) for p in (*self.rejected, *self.refused)}
        if self.directory is not None and self._defaults_digest is not None:
            paths.add(self.directory / DEFAULTS_FILE)
        return paths

    def tracked_files(self) -> list[Path]:
        """The directory's manifest files and every file the registry knows of, gone or not."""
        return sorted(set(self.manifest_files()) | self.known_files())

    def get(self, tool_id: str) -> ToolManifest:
        """The manifest in force for ``tool_id``; tools without one run on the defaults."""
        entry = self.entries.get(tool_id)
        if entry is not None:
            return entry.manifest
        fallback = self._fallbacks.get(tool_id)
        if fallback is None:
            fallback = inheriting(ToolManifest.model_validate, {**self._defaults, "id": tool_id}, ())
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
        path = self.canonical(Path(path))
        return path.parent == self.directory and path.suffix in {".yaml", ".yml"}

    def canonical(self, path: Path) -> Path:
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

    # --- reading: safe in a worker thread ------------------------------------------------

    def peek(self, path: Path) -> str:
        """The key of what is at ``path`` now (its digest, ``gone`` or the refusal), unparsed."""
        return _content_key(read_regular_file(path, self.max_bytes))

    def seen(self, path: Path) -> str | None:
        """The key of what the registry last applied for ``path`` (None: never applied)."""
        return self._seen.get(path)

    def read(self, path: Path) -> ManifestFile:
        """Read, parse and (for a tool file) validate ``path``. Touches no registry state, so a
        worker thread may call it while the event loop serves calls."""
        path = self.canonical(Path(path))
        shown = str(path)
        data = read_regular_file(path, self.max_bytes)
        if isinstance(data, Unread):
            return ManifestFile(path, refused=None if data.gone else data.reason)
        is_defaults = self.directory is not None and path == self.directory / DEFAULTS_FILE
        try:
            parsed = parse_yaml(data, shown, "defaults" if is_defaults else "tool", ManifestError)
        except ManifestError as exc:
            return ManifestFile(path, _content_key(data), problem=exc)
        if is_defaults:
            return ManifestFile(path, parsed.digest, parsed)
        defaults = self._defaults  # replaced, never mutated: a consistent snapshot
        return ManifestFile(
            path, parsed.digest, parsed, checked=(defaults, _check_tool(parsed, defaults, shown))
        )

    # --- applying: on the event loop ------------------------------------------------------

    def reload(self, paths: Iterable[Path | ManifestFile], *, at: float, t: float) -> list[Event]:
        """Apply changes to ``paths`` (added, edited, deleted or unreadable); return what happened.

        A :class:`Path` is read now, on the calling thread; a :class:`ManifestFile` was read
        before (by the watcher, in a worker thread)."""
        files: dict[Path, ManifestFile] = {}
        for item in paths:
            if isinstance(item, ManifestFile):
                path = self.canonical(item.path)
                files[path] = item if path == item.path else replace(item, path=path)
            else:
                files[self.canonical(Path(item))] = self.read(Path(item))
        events: list[Event] = []
        defaults_path = self.directory / DEFAULTS_FILE if self.directory else None
        if defaults_path is not None and defaults_path in files:
            events += self._apply_defaults(files.pop(defaults_path), at, t)
        for path in sorted(files):
            events += self._apply_tool(files[path], at, t)
        return events

    def refusal_events(self, *, at: float, t: float) -> list[Event]:
        """A ``ManifestRefused`` for each file refused now (at start-up: the files skipped)."""
        return [
            ManifestRefused(at=at, t=t, path=path, reason=reason, kept_digest=self._kept_digest(Path(path)))
            for path, reason in self.refused.items()
        ]

    # --- internals ---------------------------------------------------------------------

    def _apply_defaults(self, file: ManifestFile, at: float, t: float) -> list[Event]:
        shown = str(file.path)
        self._seen[file.path] = file.key
        if file.refused is not None:
            return [self._refuse(shown, file.refused, self._defaults_digest, at, t)]
        if file.problem is not None:
            return [self._reject(shown, file.problem, self._defaults_digest, at, t)]
        new_defaults: dict[str, Any] = {}
        new_shared: dict[str, StrategyOptions] = {}
        digest = None
        if file.parsed is not None:
            checked = _check_defaults(file.parsed, shown)
            if isinstance(checked, ManifestError):
                return [self._reject(shown, checked, self._defaults_digest, at, t)]
            (new_defaults, new_shared), digest = checked, file.parsed.digest
            if digest == self._defaults_digest and not self._troubled(shown):
                return []
        # Re-validate every tool under the new defaults: all or nothing.
        revalidated: dict[Path, ToolManifest] = {}
        problems: list[ConfigIssue] = []
        for file_path, state in self._files.items():
            result = _check_tool(state.parsed, new_defaults, str(file_path))
            if isinstance(result, ManifestError):
                problems += result.issues
            else:
                revalidated[file_path] = result
        if problems:
            error = ManifestError(
                [ConfigIssue(shown, None, "", f"these defaults break {p}") for p in problems]
            )
            return [self._reject(shown, error, self._defaults_digest, at, t)]
        events: list[Event] = []
        if new_shared != self.shared:
            now_in_force, before = dump_sections(new_shared, "json"), dump_sections(self.shared, "json")
            events.append(
                SharedStrategiesChanged(at=at, t=t, path=shown, strategies=now_in_force, previous=before)
            )
        self._defaults, self._defaults_digest, self.shared = new_defaults, digest, new_shared
        self._fallbacks, self._fallback_digests = {}, {}
        self.rejected.pop(shown, None)
        self.refused.pop(shown, None)
        for file_path, manifest in revalidated.items():
            events += self._install(manifest, file_path, at, t)
        # Files rejected under the old defaults may be valid under the new ones (retried as they
        # were read); those still invalid stay rejected without a second event.
        for retried in list(self._rejected_files.values()):
            events += [e for e in self._apply_tool(retried, at, t) if not isinstance(e, ManifestRejected)]
        return events

    def _apply_tool(self, file: ManifestFile, at: float, t: float) -> list[Event]:
        path, shown = file.path, str(file.path)
        previous = self._files.get(path)
        self._seen[path] = file.key
        if file.gone:
            self._clear_trouble(path)
            if previous is None or previous.tool_id is None:
                self._files.pop(path, None)
                return []
            del self._files[path]
            self.entries = {k: v for k, v in self.entries.items() if k != previous.tool_id}
            self.version += 1
            return [ManifestRemoved(at=at, t=t, tool_id=previous.tool_id, path=shown, version=self.version)]
        kept_digest = self._kept_digest(path)
        if file.refused is not None:
            self._rejected_files.pop(path, None)
            return [self._refuse(shown, file.refused, kept_digest, at, t)]
        was_troubled = self._troubled(shown)
        parsed = file.parsed
        if file.problem is not None or parsed is None:
            self._rejected_files.pop(path, None)  # not YAML: no defaults can make it valid
            return [self._reject(shown, file.problem or ManifestError([]), kept_digest, at, t)]
        if previous is not None and parsed.digest == previous.parsed.digest and not was_troubled:
            return []
        result = self._checked(file, parsed)
        if isinstance(result, ManifestError):
            self._rejected_files[path] = file
            return [self._reject(shown, result, kept_digest, at, t)]
        manifest = result
        events: list[Event] = []
        if previous is not None and previous.tool_id not in (None, manifest.id):
            self.entries = {k: v for k, v in self.entries.items() if k != previous.tool_id}
            self.version += 1
            events.append(
                ManifestRemoved(at=at, t=t, tool_id=str(previous.tool_id), path=shown, version=self.version)
            )
        self._files[path] = _FileState(parsed, manifest.id)
        self._clear_trouble(path)
        installed = self._install(manifest, path, at, t)
        current = self.entries[manifest.id]
        if was_troubled and not installed:
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

    def _checked(self, file: ManifestFile, parsed: ParsedYaml) -> ToolManifest | ManifestError:
        """The file's manifest under the defaults in force, reusing the worker's validation."""
        shown = str(file.path)
        if file.checked is not None and file.checked[0] is self._defaults:
            result = file.checked[1]
        else:
            result = _check_tool(parsed, self._defaults, shown)
        if isinstance(result, ManifestError):
            return result
        owner = next((p for p, s in self._files.items() if s.tool_id == result.id and p != file.path), None)
        if owner is not None:
            line = parsed.lines.get(("tool", "id"))
            return ManifestError(
                [ConfigIssue(shown, line, "tool.id", f"{result.id!r} is already defined in {owner}")]
            )
        return result

    def _install(self, manifest: ToolManifest, path: Path, at: float, t: float) -> list[Event]:
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

    def _kept_digest(self, path: Path) -> str | None:
        """The digest of the version still in force for the tool ``path`` last defined."""
        if self.directory is not None and path == self.directory / DEFAULTS_FILE:
            return self._defaults_digest
        previous = self._files.get(path)
        kept = self.entries.get(previous.tool_id) if previous and previous.tool_id else None
        return kept.digest if kept else None

    def _troubled(self, shown: str) -> bool:
        return shown in self.rejected or shown in self.refused

    def _clear_trouble(self, path: Path) -> None:
        self.rejected.pop(str(path), None)
        self.refused.pop(str(path), None)
        self._rejected_files.pop(path, None)

    def _reject(
        self, shown: str, exc: ManifestError, kept: str | None, at: float, t: float
    ) -> ManifestRejected:
        self.refused.pop(shown, None)
        self.rejected[shown] = exc.issues
        errors = tuple(str(issue) for issue in exc.issues)
        return ManifestRejected(at=at, t=t, path=shown, errors=errors, kept_digest=kept)

    def _refuse(self, shown: str, reason: str, kept: str | None, at: float, t: float) -> ManifestRefused:
        self.rejected.pop(shown, None)
        self.refused[shown] = reason
        return ManifestRefused(at=at, t=t, path=shown, reason=reason, kept_digest=kept)


def _digest_of(manifest: ToolManifest) -> str:
    """Digest of the effective policy (file content plus defaults)."""
    # Without secret_fields when there are none: a manifest's digest did not change when it came.
    unset = {"secret_fields"} if not manifest.secret_fields else set()
    if manifest.idle_timeout_ms is None:  # nor did it when idle windows came
        unset.add("idle_timeout_ms")
    return hashlib.sha256(manifest.model_dump_json(exclude=unset or None).encode()).hexdigest()[:12]
