"""Where a fleet's Redis is and how the fleet behaves: :class:`FleetConfig`, parsed from one URL.

``redis://[user:password@]host:port/db?namespace=NAME&quorum=2&window_s=30&on_unavailable=local``
(``rediss://`` for TLS, ``ca_file=`` for a private CA). Every other knob is a query parameter of
the same name as the field. The password comes from a file (``password_file=PATH``: its owner's
alone, like the command key), else from ``$TRIPWIRE_FLEET_PASSWORD``, else from the URL — where it
is on the command line of the process that takes the URL, which every local user may read, so
that is warned about once per process. It is held by :class:`Secret`: it is in no ``repr``, no
``str``, no log line, no event and no trace store; :attr:`FleetConfig.server` and
:attr:`FleetConfig.safe_url` are what may be shown.

The operator-command key (32 bytes, an owner-only file, the same format as a trace store's
``.key``) comes from ``key_file=PATH`` or the ``TRIPWIRE_FLEET_KEY_FILE`` environment variable;
without one the fleet shares everything but operator commands, which it refuses.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from engine.errors import TripwireError, one_line
from engine.files import read_private_file

log = logging.getLogger("tripwire.fleet")

KEY_FILE_ENV = "TRIPWIRE_FLEET_KEY_FILE"
"""The environment variable naming the operator-command key's file when the URL names none."""
PASSWORD_ENV = "TRIPWIRE_FLEET_PASSWORD"
"""The environment variable holding Redis's password when the URL names no password file."""
PASSWORD_MAX_BYTES = 4096
PasswordSource = Literal["", "url", "file", "environment"]
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

OnUnavailable = Literal["local", "fail_closed"]


class FleetConfigError(TripwireError, ValueError):
    """A fleet URL or setting that cannot be used; the message never holds the password."""


class Secret:
    """A password: ``repr`` and ``str`` hide it; :meth:`reveal` is the one way to read it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """One fleet: its Redis, its namespace and its policies (see the module docstring)."""

    host: str = "localhost"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: Secret | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None
    namespace: str = "default"
    """Keys are ``tripwire:{namespace}:…``: one Redis can hold many fleets (and, with the braces a
    Redis Cluster hash tag, one fleet's keys share a slot, so its scripts run on a cluster)."""
    quorum: int = 2
    """How many processes must open a tool within ``window_s`` for it to open fleet-wide."""
    window_s: float = 30.0
    on_unavailable: OnUnavailable = "local"
    fail_closed_tools: tuple[str, ...] = ()
    """With ``on_unavailable=fail_closed``: the tools forced open while Redis is away (none named: all)."""
    key_file: str | None = None
    password_file: str | None = None
    """The file holding Redis's password (owner-only; one trailing line break is not part of it)."""
    password_source: PasswordSource = field(default="", compare=False)
    """Where :attr:`password` came from ("": none)."""
    sync_ms: float = 100.0
    """How often a process reads the fleet's shared state (commands, quorum opens, probe results)
    and flushes its events: an operator's trip reaches every process within about this long."""
    heartbeat_s: float = 1.0
    stale_s: float = 5.0
    """A process that has not beaten for this long is shown stale..."""
    gone_s: float = 30.0
    """...and gone after this long (its record's TTL)."""
    lease_ms: float = 10_000.0
    """How long the half-open probe lease lasts without renewal: it is renewed every ``sync_ms``
    while the probe runs, so a probe may last longer; a holder that dies frees it after this."""
    stream_maxlen: int = 10_000
    """Batches of events kept in the fleet's event stream (``XADD MAXLEN ~``)."""
    buffer_events: int = 10_000
    """Events a process holds for the stream at most (while Redis is away the oldest go first)."""
    timeout_ms: float = 1_000.0
    """Every Redis request's connect and read timeout."""

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> FleetConfig:
        """Parse ``url`` (see the module docstring); ``overrides`` replace fields after it."""
        return parse_fleet_url(url, **overrides)

    @property
    def server(self) -> str:
        """``host:port/db``, with the user when there is one: never the password."""
        user = f"{self.username}@" if self.username else ""
        return f"{user}{self.host}:{self.port}/{self.db}"

    @property
    def safe_url(self) -> str:
        """The URL to show: the password replaced by ``***``."""
        scheme = "rediss" if self.tls else "redis"
        credentials = ""
        if self.username or self.password is not None:
            credentials = f"{self.username or ''}{':***' if self.password is not None else ''}@"
        return f"{scheme}://{credentials}{self.host}:{self.port}/{self.db}?namespace={self.namespace}"

    @property
    def attach_url(self) -> str:
        """:attr:`safe_url` with what a console needs besides: the key file to act with (from the
        URL or ``$TRIPWIRE_FLEET_KEY_FILE``), the CA file to trust and the password's file — paths,
        not secrets, made absolute so that the command works from any directory. A password from
        a file or the environment is not shown as ``***``: the command finds it there again."""
        key = self.key_path()
        password_file = Path(self.password_file) if self.password_file else None
        files = (
            ("key_file", key), ("ca_file", Path(self.ca_file) if self.ca_file else None),
            ("password_file", password_file),
        )  # fmt: skip
        url = self.safe_url
        if self.password_source in ("file", "environment"):
            url = url.replace(":***@", "@", 1).replace("://@", "://", 1)
        return url + "".join(
            f"&{name}={quote(str(path.absolute()), safe='/')}" for name, path in files if path is not None
        )

    def key_path(self) -> Path | None:
        """The operator-command key's file: ``key_file``, else ``$TRIPWIRE_FLEET_KEY_FILE``, else None."""
        path = self.key_file or os.environ.get(KEY_FILE_ENV)
        return Path(path) if path else None

    def forced_when_unavailable(self, tools: list[str]) -> list[str]:
        """Which of ``tools`` are forced open while Redis is away."""
        if self.on_unavailable != "fail_closed":
            return []
        if not self.fail_closed_tools:
            return list(tools)
        return [t for t in tools if t in self.fail_closed_tools]

    def __str__(self) -> str:
        return self.safe_url


_INTS = {"port", "db", "quorum", "stream_maxlen", "buffer_events"}
_FLOATS = {"window_s", "sync_ms", "heartbeat_s", "stale_s", "gone_s", "lease_ms", "timeout_ms"}
_STRINGS = {"namespace", "key_file", "ca_file", "on_unavailable", "password_file"}
_QUERY = _INTS | _FLOATS | _STRINGS | {"fail_closed_tools"}


def parse_fleet_url(url: str, **overrides: Any) -> FleetConfig:
    """A :class:`FleetConfig` from ``redis://`` or ``rediss://`` URL; raises :class:`FleetConfigError`."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise FleetConfigError(
            f"a fleet URL starts with redis:// or rediss://, not {parts.scheme or '(none)'}://"
        )
    values: dict[str, Any] = {"tls": parts.scheme == "rediss", "host": parts.hostname or "localhost"}
    try:
        port = parts.port
    except ValueError:
        raise FleetConfigError("the fleet URL's port is not a number from 0 to 65535") from None
    if port is not None:
        values["port"] = port
    if parts.username:
        values["username"] = unquote(parts.username)
    if parts.password is not None:
        values["password"] = Secret(unquote(parts.password))
        values["password_source"] = "url"
    path = parts.path.strip("/")
    if path:
        values["db"] = path
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _QUERY:
            known = ", ".join(sorted(_QUERY))
            raise FleetConfigError(f"unknown fleet URL parameter {name!r}; known: {known}")
        values[name] = value
    values.update(overrides)
    config = _checked(values)
    if parts.password is not None:
        _warn_password_in_url()
    return config


_warned = False


def _warn_password_in_url() -> None:
    """Once per process: a password in a URL is on a command line, which every local user may read."""
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "tripwire: the fleet URL holds Redis's password: on a command line every local user may read it"
            f" (ps, /proc/PID/cmdline); give it in an owner-only file (password_file=PATH) or ${PASSWORD_ENV}"
        )


def _checked(values: dict[str, Any]) -> FleetConfig:
    known = {f.name for f in fields(FleetConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise FleetConfigError(f"unknown fleet setting(s): {', '.join(unknown)}")
    for name in _INTS & set(values):
        values[name] = _number(name, values[name], int)
    for name in _FLOATS & set(values):
        values[name] = _number(name, values[name], float)
    tools = values.get("fail_closed_tools")
    if isinstance(tools, str):
        values["fail_closed_tools"] = tuple(t for t in tools.split(",") if t)
    elif tools is not None:
        values["fail_closed_tools"] = tuple(tools)
    password = values.get("password")
    if isinstance(password, str):
        values["password"] = Secret(password)
    _resolve_password(values)
    config = FleetConfig(**values)
    problems = []
    if not NAMESPACE_PATTERN.match(config.namespace):
        problems.append(f"namespace {config.namespace!r} must match {NAMESPACE_PATTERN.pattern}")
    if config.on_unavailable not in ("local", "fail_closed"):
        problems.append(f"on_unavailable is local or fail_closed, not {config.on_unavailable!r}")
    if config.quorum < 1:
        problems.append(f"quorum must be at least 1, got {config.quorum}")
    if not 0 <= config.port <= 65535 or config.db < 0:
        problems.append("port must be 0 to 65535 and db at least 0")
    for name in sorted(_FLOATS):
        if not getattr(config, name) > 0:
            problems.append(f"{name} must be positive, got {getattr(config, name):g}")
    if config.stale_s >= config.gone_s:
        problems.append(f"stale_s ({config.stale_s:g}) must be less than gone_s ({config.gone_s:g})")
    if config.stream_maxlen < 1 or config.buffer_events < 1:
        problems.append("stream_maxlen and buffer_events must be at least 1")
    if problems:
        raise FleetConfigError("; ".join(problems))
    return config


def _resolve_password(values: dict[str, Any]) -> None:
    """The password from ``password_file``, else ``$TRIPWIRE_FLEET_PASSWORD``, unless one is given."""
    path = values.get("password_file")
    if values.get("password") is not None:
        if values.get("password_source") in ("file", "environment"):
            return  # found there already (a config checked again)
        if path:
            raise FleetConfigError("the password is given twice: in the URL and by password_file; give one")
        values["password_source"] = "url"
        return
    if path:
        data = read_private_file(Path(path), PASSWORD_MAX_BYTES)
        if isinstance(data, str):
            raise FleetConfigError(f"password_file {one_line(data)}")
        try:
            secret = data.decode().removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise FleetConfigError(f"password_file {path} is not UTF-8 text") from None
        if not secret:
            raise FleetConfigError(f"password_file {path} is empty")
        values["password"], values["password_source"] = Secret(secret), "file"
        return
    from_environment = os.environ.get(PASSWORD_ENV)
    if from_environment:
        values["password"], values["password_source"] = Secret(from_environment), "environment"
    else:
        values["password_source"] = ""


def _number(name: str, value: Any, kind: type[int] | type[float]) -> int | float:
    if isinstance(value, bool):
        raise FleetConfigError(f"{name} must be a number, not a boolean")
    try:
        number = kind(value)  # a str from the URL or a number: the conversion decides
    except (TypeError, ValueError):
        raise FleetConfigError(f"{name} must be {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(number):
        raise FleetConfigError(f"{name} must be finite")
    return number


def with_settings(config: FleetConfig, **changes: Any) -> FleetConfig:
    """``config`` with ``changes`` applied and checked again."""
    return _checked({f.name: getattr(config, f.name) for f in fields(FleetConfig)} | changes)


def as_config(config: FleetConfig | str) -> FleetConfig:
    """A :class:`FleetConfig` as given, or parsed from a URL."""
    return config if isinstance(config, FleetConfig) else parse_fleet_url(config)


__all__ = [
    "KEY_FILE_ENV",
    "PASSWORD_ENV",
    "FleetConfig",
    "FleetConfigError",
    "OnUnavailable",
    "Secret",
    "as_config",
    "parse_fleet_url",
    "with_settings",
]
