"""A rate-limit cooldown as the fleet shares it: one signed record per tool (``cooldown:<tool>``).

Its end is the Redis server's wall-clock time in ms (``until_ms``), absolute: each process turns
it into its own engine time when it reads it (``engine_now + (until_ms - server_now) / 1000``),
never into a fresh duration, and the key expires at that end. The record is signed with the
fleet's key (HMAC-SHA256, as operator commands are): one written by anyone without the key is
ignored, so Redis write access alone cannot pause a tool fleet-wide.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any

from engine.store.command_auth import sign

_DOMAIN = "tripwire-fleet-cooldown-v1"
"""Part of every signed record: a MAC made for anything else (a command) never matches one."""
_FIELDS = ("until_ms", "member", "host", "pid", "call", "started_ms", "retry_after_s")


@dataclass(frozen=True, slots=True)
class CooldownRecord:
    """Tool ``tool`` pauses fleet-wide until ``until_ms`` (server ms), started by ``member``."""

    tool: str
    until_ms: int
    member: str
    """The fleet member (``host:pid:random``) whose call's error started it."""
    host: str
    pid: int
    call: str
    """That call's id ("" when unknown)."""
    started_ms: int
    """When it started (server ms)."""
    retry_after_s: float | None
    """What the error asked for; None: the manifest's ``cooldown_ms``."""

    def _content(self) -> bytes:
        content = {"domain": _DOMAIN, "tool": self.tool, **{name: self._value(name) for name in _FIELDS}}
        return json.dumps(content, sort_keys=True, separators=(",", ":")).encode()

    def _value(self, name: str) -> str:
        value = getattr(self, name)
        if name == "retry_after_s":
            return "" if value is None else repr(float(value))
        return str(value)

    def fields(self, key: bytes) -> list[str]:
        """The hash's field, value pairs, flat, with the MAC under ``key``."""
        flat = [item for name in _FIELDS for item in (name, self._value(name))]
        return [*flat, "mac", sign(key, self._content())]

    @property
    def identity(self) -> tuple[int, str, int]:
        """What tells one cooldown from another (the same record read twice is the same)."""
        return (self.until_ms, self.member, self.started_ms)


def read_record(tool: str, raw: Any, key: bytes) -> CooldownRecord | str | None:
    """The record Redis holds for ``tool`` (``HGETALL``'s reply): None when there is none, the
    record when its MAC under ``key`` matches, else why not (one line)."""
    items = list(raw.items()) if isinstance(raw, dict) else list(zip(raw[::2], raw[1::2], strict=False))
    if not items:
        return None
    fields = {str(k): str(v) for k, v in items}
    try:
        retry = fields.get("retry_after_s", "")
        record = CooldownRecord(
            tool=tool, until_ms=int(fields["until_ms"]), member=fields["member"], host=fields["host"],
            pid=int(fields["pid"]), call=fields["call"],
            started_ms=int(fields["started_ms"]), retry_after_s=float(retry) if retry else None,
        )  # fmt: skip
    except (KeyError, ValueError):
        return "unreadable: not a record a fleet member wrote"
    expected = sign(key, record._content())
    if not hmac.compare_digest(expected.encode(), fields.get("mac", "").encode(errors="replace")):
        return "forged or altered: its MAC does not match under the fleet's key"
    return record


__all__ = ["CooldownRecord", "read_record"]
