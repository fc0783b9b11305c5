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

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.breaker import BreakerConfig
from engine.classify import ClassificationOverride
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


@dataclass(frozen=True, slots=True)
class ManifestIssue:
    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        what = f"{self.field}: {self.message}" if self.field else self.message
        return _one_line(f"{where}: {what}")


def _one_line(text: str) -> str:
    """Keys and YAML messages may hold line breaks; an issue is always shown on one line."""
    return "\\n".join(text.splitlines())


class ManifestError(Exception):
    """One or more problems in manifest files; ``str()`` is the first, on one line."""

    def __init__(self, issues: Iterable[ManifestIssue]) -> None:
        self.issues = tuple(issues)
        first = str(self.issues[0]) if self.issues else "invalid manifest"
        more = f" (and {len(self.issues) - 1} more)" if len(self.issues) > 1 else ""
        super().__init__(first + more)


# --- YAML with line numbers ---------------------------------------------------------------

Path_ = tuple[str | int, ...]


_MAX_FLOW_DEPTH = 100
"""``[[[[…`` deeper than this is an error: PyYAML's scanner slows to ~1 s on thousands."""


class _SafeLoader(yaml.SafeLoader):
    """A ``SafeLoader`` that reports bad values (``!!int abc``, month 13) as YAML errors."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= _MAX_FLOW_DEPTH:
            raise yaml.scanner.ScannerError(
                None, None, f"nested deeper than {_MAX_FLOW_DEPTH} levels", self.get_mark()
            )
        super().fetch_flow_collection_start(TokenClass)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"invalid {node.tag.rsplit(':', 1)[-1]} value: {exc}", node.start_mark
            ) from None


def _load_yaml(text: str, path: str) -> tuple[Any, dict[Path_, int]]:
    """Parse ``text`` safely; return the data and the line of every key and item."""
    loader: _SafeLoader | None = None
    try:
        loader = _SafeLoader(text)  # checks for unprintable characters already
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: dict[Path_, int] = {}
        _index_lines(node, (), lines, path, set())
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ManifestError([ManifestIssue(path, line, "", f"YAML syntax error: {problem}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        raise ManifestError([ManifestIssue(path, line, "", f"YAML error: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([ManifestIssue(path, None, "", f"YAML error: {exc}")]) from None
    except RecursionError:
        issue = ManifestIssue(path, None, "", "YAML error: nested too deeply")
        raise ManifestError([issue]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _index_lines(
    node: yaml.Node, at: Path_, lines: dict[Path_, int], path: str, seen_nodes: set[int]
) -> None:
    lines.setdefault(at, node.start_mark.line + 1)
    if id(node) in seen_nodes:
        return  # an alias: indexed where its anchor is (recursive or "billion laughs" YAML)
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                field_path = ".".join(str(p) for p in (*at, key))
                raise ManifestError(
                    [ManifestIssue(path, line, field_path, f"duplicate key (first on line {seen[key]})")]
                )
            seen[key] = line
            lines[(*at, key)] = line
            _index_lines(value_node, (*at, key), lines, path, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, (*at, i), lines, path, seen_nodes)


def _issues_from(exc: ValidationError, path: str, lines: Mapping[Path_, int]) -> list[ManifestIssue]:
    issues = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        line = None
        for depth in range(len(loc), -1, -1):
            if (line := lines.get(loc[:depth])) is not None:
                break
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "missing":
            message = "required"
        issues.append(ManifestIssue(path, line, ".".join(str(p) for p in loc), message))
    return issues


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# --- parsing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Parsed:
    raw: dict[str, Any]
    lines: dict[Path_, int]
    digest: str


def _read(path: Path, top_key: str) -> _Parsed:
    shown = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError([ManifestIssue(shown, None, "", f"cannot read: {exc.strerror}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        issue = ManifestIssue(shown, line, "", f"not UTF-8 text (byte 0x{data[exc.start]:02x})")
        raise ManifestError([issue]) from None
    raw, lines = _load_yaml(text, shown)
    if not isinstance(raw, dict) or top_key not in raw:
        found = f"found {sorted(map(str, raw))}" if isinstance(raw, dict) else "found no mapping"
        raise ManifestError(
            [ManifestIssue(shown, 1, "", f"expected a top-level '{top_key}:' mapping ({found})")]
        )
    return _Parsed(raw, lines, hashlib.sha256(data).hexdigest()[:12])


def _validate_tool(parsed: _Parsed, defaults: Mapping[str, Any], shown: str) -> ToolManifest:
    body = parsed.raw.get("tool")
    merged = {**parsed.raw, "tool": _deep_merge(defaults, body) if isinstance(body, Mapping) else body}
    try:
        return _ToolFile.model_validate(merged).tool
    except ValidationError as exc:
        raise ManifestError(_issues_from(exc, shown, parsed.lines)) from None


def _validate_defaults(parsed: _Parsed, shown: str) -> dict[str, Any]:
    try:
        _DefaultsFile.model_validate(parsed.raw)
    except ValidationError as exc:
        raise ManifestError(_issues_from(exc, shown, parsed.lines)) from None
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
    parsed: _Parsed
    tool_id: str | None = None


@dataclass(slots=True)
class ManifestRegistry:
    """The manifests in force. Readers get immutable objects; reloads swap them atomically."""

    directory: Path | None = None
    version: int = 0
    entries: dict[str, LoadedManifest] = field(default_factory=dict)
    rejected: dict[str, tuple[ManifestIssue, ...]] = field(default_factory=dict)
    """Current validation problems, by file; the last good version stays in force."""
    _defaults: dict[str, Any] = field(default_factory=dict)
    _defaults_digest: str | None = None
    _files: dict[Path, _FileState] = field(default_factory=dict)
    _fallbacks: dict[str, ToolManifest] = field(default_factory=dict)

    @classmethod
    def from_directory(cls, directory: str | Path, *, at: float = 0.0) -> ManifestRegistry:
        """Load every manifest in ``directory``; raises :class:`ManifestError` listing all problems."""
        registry = cls(Path(directory))
        if not registry.directory or not registry.directory.is_dir():
            raise ManifestError([ManifestIssue(str(directory), None, "", "not a directory")])
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
        problems: list[ManifestIssue] = []
        for file_path, state in self._files.items():
            try:
                revalidated[file_path] = _validate_tool(state.parsed, new_defaults, str(file_path))
            except ManifestError as exc:
                problems += exc.issues
        if problems:
            error = ManifestError(
                [ManifestIssue(shown, None, "", f"these defaults break {p}") for p in problems]
            )
            return [self._reject(shown, error, self._defaults_digest, at, t)]
        self._defaults, self._defaults_digest = new_defaults, digest
        self._fallbacks = {}
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
                    [ManifestIssue(shown, line, "tool.id", f"{manifest.id!r} is already defined in {owner}")]
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
