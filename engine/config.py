"""YAML configuration files (manifests, fault plans, scenarios) with one-line errors.

Files are parsed with a hardened ``SafeLoader`` while recording the line of every key and
list item, so a pydantic error at ``tool.retry_policy.max_attempts`` is reported as
``manifests/x.yaml:7: tool.retry_policy.max_attempts: Input should be …`` — file, line,
field — on one line.

Only regular files up to a size cap are read (:func:`read_regular_file`): a FIFO or a device
named ``x.yaml`` never blocks a reader, and a huge file is refused before it is parsed.
Numbers in configuration are numbers (:data:`NOT_BOOL`: ``true`` is not 1) and finite.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError

if TYPE_CHECKING:
    import yaml

from engine.errors import TripwireError, one_line

FieldPath = tuple[str | int, ...]
Model = TypeVar("Model", bound=BaseModel)

MIB = 1024 * 1024
MAX_CONFIG_BYTES = MIB
"""Files larger than this are refused unread: parsing 1.6 MB of YAML took 5.5 s."""
DAY_MS = 86_400_000.0
"""The upper bound of every duration in milliseconds (timeouts, delays, budgets): 24 h."""


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic's lax mode reads true as 1
        raise ValueError("Input should be a number, not a boolean")
    return value


NOT_BOOL = BeforeValidator(_not_bool)
"""``Annotated[float, NOT_BOOL]``: a number field that refuses ``true``/``false``."""


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a configuration file, by file, line and field; ``str()`` is one line."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        what = f"{self.field}: {self.message}" if self.field else self.message
        return one_line(f"{where}: {what}")


class ConfigError(TripwireError):
    """One or more problems in a configuration file; ``str()`` is the first, on one line."""

    what = "configuration"

    def __init__(self, issues: Iterable[ConfigIssue]) -> None:
        self.issues = tuple(issues)
        first = str(self.issues[0]) if self.issues else f"invalid {self.what}"
        more = f" (and {len(self.issues) - 1} more)" if len(self.issues) > 1 else ""
        super().__init__(first + more)


_MAX_FLOW_DEPTH = 100
"""``[[[[…`` deeper than this is an error: PyYAML's scanner slows to ~1 s on thousands."""


@cache
def _safe_loader() -> type[yaml.SafeLoader]:
    """The loader class, made on first use: PyYAML is imported only when a file is read (start-up:
    10 ms at `import engine` and in every `tripwire` command otherwise)."""
    import yaml  # start-up: see above

    class SafeLoader(yaml.SafeLoader):
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

    return SafeLoader


def load_yaml(
    text: str, path: str, error: type[ConfigError] = ConfigError
) -> tuple[Any, dict[FieldPath, int]]:
    """Parse ``text`` safely; return the data and the line of every key and item."""
    import yaml  # start-up: PyYAML only when a file is read (see _safe_loader)

    loader: yaml.SafeLoader | None = None
    try:
        loader = _safe_loader()(text)  # checks for unprintable characters already
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: dict[FieldPath, int] = {}
        _index_lines(node, (), lines, path, set(), error)
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise error([ConfigIssue(path, line, "", f"YAML syntax error: {problem}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        raise error([ConfigIssue(path, line, "", f"YAML error: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise error([ConfigIssue(path, None, "", f"YAML error: {exc}")]) from None
    except RecursionError:
        raise error([ConfigIssue(path, None, "", "YAML error: nested too deeply")]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _index_lines(
    node: yaml.Node,
    at: FieldPath,
    lines: dict[FieldPath, int],
    path: str,
    seen_nodes: set[int],
    error: type[ConfigError],
) -> None:
    import yaml  # start-up: PyYAML only when a file is read (see _safe_loader)

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
                raise error(
                    [ConfigIssue(path, line, field_path, f"duplicate key (first on line {seen[key]})")]
                )
            seen[key] = line
            lines[(*at, key)] = line
            _index_lines(value_node, (*at, key), lines, path, seen_nodes, error)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, (*at, i), lines, path, seen_nodes, error)


def nearest_line(loc: FieldPath, lines: Mapping[FieldPath, int]) -> int | None:
    """The line of the field at ``loc``, or of its nearest enclosing field that has one."""
    for depth in range(len(loc), -1, -1):
        if (line := lines.get(loc[:depth])) is not None:
            return line
    return None


def issues_from(exc: ValidationError, path: str, lines: Mapping[FieldPath, int]) -> list[ConfigIssue]:
    """pydantic's errors as one-line issues, each at the line of the nearest field that exists."""
    issues = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        line = nearest_line(loc, lines)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "missing":
            message = "required"
        issues.append(ConfigIssue(path, line, ".".join(str(p) for p in loc), message))
    return issues


@dataclass(frozen=True, slots=True)
class ParsedYaml:
    raw: dict[str, Any]
    lines: dict[FieldPath, int]
    digest: str
    """First 12 hex digits of the file's SHA-256."""
    path: str

    def validate(self, model: type[Model], error: type[ConfigError] = ConfigError) -> Model:
        try:
            return model.model_validate(self.raw)
        except ValidationError as exc:
            raise error(issues_from(exc, self.path, self.lines)) from None


def read_yaml(
    path: Path, top_key: str, error: type[ConfigError] = ConfigError, *, max_bytes: int = MAX_CONFIG_BYTES
) -> ParsedYaml:
    """Read a UTF-8 YAML file whose top level must be a mapping with ``top_key``."""
    data = read_regular_file(path, max_bytes)
    if isinstance(data, Unread):
        raise error([ConfigIssue(str(path), None, "", data.reason)])
    return parse_yaml(data, str(path), top_key, error)


@dataclass(frozen=True, slots=True)
class Unread:
    """Why a file was not read."""

    reason: str
    """``not a regular file (a FIFO)``, ``larger than 1 MiB (1.6 MiB)``, ``dangling symlink``…"""
    gone: bool = False
    """Nothing is at the path at all (not even a broken symlink)."""


def read_regular_file(path: Path, max_bytes: int = MAX_CONFIG_BYTES) -> bytes | Unread:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``.

    Never blocks: the type is checked before opening, and the file is opened non-blocking and
    checked again, so a FIFO swapped in between cannot hang the reader either.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        return _unread(path, exc)
    if not stat.S_ISREG(info.st_mode):
        return Unread(f"not a regular file ({_file_kind(info.st_mode)})")
    if info.st_size > max_bytes:
        return Unread(_too_large(max_bytes, info.st_size))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return _unread(path, exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Unread(f"not a regular file ({_file_kind(info.st_mode)})")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, max(max_bytes + 1 - size, 1)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:  # grew since it was measured
                return Unread(_too_large(max_bytes, max(size, os.fstat(fd).st_size)))
        return b"".join(chunks)
    except OSError as exc:
        return Unread(f"cannot read: {exc.strerror or exc}")
    finally:
        os.close(fd)


def _unread(path: Path, exc: OSError) -> Unread:
    if exc.errno == errno.ELOOP:
        return Unread("symlink loop")
    if exc.errno == errno.ENOENT:
        if os.path.lexists(path):
            return Unread("dangling symlink (its target does not exist)")
        return Unread(f"cannot read: {exc.strerror}", gone=True)
    return Unread(f"cannot read: {exc.strerror or exc}")


def _file_kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
    }
    return next((name for test, name in kinds.items() if test(mode)), "an unusual file type")


def _too_large(cap: int, size: int) -> str:
    shown_cap, shown_size = _size(cap), _size(size)
    if shown_cap == shown_size:
        shown_cap, shown_size = f"{cap:,} bytes", f"{size:,} bytes"
    return f"larger than {shown_cap} ({shown_size})"


def _size(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.3g} MiB"
    if n >= 1024:
        return f"{n / 1024:.3g} KiB"
    return f"{n} bytes"


def parse_yaml(data: bytes, shown: str, top_key: str, error: type[ConfigError] = ConfigError) -> ParsedYaml:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            [ConfigIssue(shown, line, "", f"not UTF-8 text (byte 0x{data[exc.start]:02x})")]
        ) from None
    raw, lines = load_yaml(text, shown, error)
    if not isinstance(raw, dict) or top_key not in raw:
        found = f"found {sorted(map(str, raw))}" if isinstance(raw, dict) else "found no mapping"
        raise error([ConfigIssue(shown, 1, "", f"expected a top-level '{top_key}:' mapping ({found})")])
    return ParsedYaml(raw, lines, hashlib.sha256(data).hexdigest()[:12], shown)
