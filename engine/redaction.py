"""Redaction: secrets out of every event, applied once where the event is made.

One :class:`RedactionPolicy` per engine decides what a secret is; the engine applies it when it
makes an event, so the trace store, exports, the console, logs and the text sent to a model all
see the same redacted value. Two rules:

* **Secret fields.** A mapping key is secret when — lower-cased, with ``_``, ``-``, ``.`` and
  spaces removed — it is or ends with one of the policy's field names, at any depth:
  ``api_key``, ``X-Api-Key``, ``db_password`` and ``githubToken`` all are; ``max_tokens`` is not.
  The field's whole value is replaced (a dict or list under a secret key too). The default names
  (:data:`DEFAULT_SECRET_FIELDS`) are extended per engine (``RedactionPolicy(extra_fields=...)``)
  and per tool manifest (``secret_fields: [...]``).
* **Credential shapes in free text** (error messages, strings inside values): ``Bearer``/``Basic``
  credentials, ``sk-…``/``sk-ant-…`` keys, GitHub tokens, AWS access key ids, JWTs,
  ``name=value`` / ``"name": "value"`` pairs for the secret field names, the password of a
  ``scheme://user:password@host`` URL, and — in a call's own error text — the values of that
  call's secret arguments wherever they appear (4 characters or longer).

The shape: a secret becomes ``[REDACTED:1a2b3c4d]``, after the part that says what it was, which is
kept: ``Bearer [REDACTED:…]``, ``sk-[REDACTED:…]``, ``sk-ant-[REDACTED:…]``, ``AKIA[REDACTED:…]``,
``eyJ[REDACTED:…]`` (a JWT), ``password=[REDACTED:…]``, ``https://bob:[REDACTED:…]@host``. The 8 hex
digits are a keyed hash (BLAKE2b with a random 32-byte key made with the policy, never stored), so
equal secrets read the same — one key correlates across turns, calls and fields — while a stored
hash cannot be reversed by trying candidates, as a plain SHA-256 prefix of a short password could
be. Hashes are stable for one policy's life (one engine); pass ``key=`` for hashes stable across
restarts. Redacting is idempotent: a redacted value is left as it is. Upper case, so that Rich and
Textual markup never take the marker for a style tag and drop it from a console line.

Turning redaction off is :meth:`RedactionPolicy.off`, an explicit choice that the engine logs.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

DEFAULT_SECRET_FIELDS: Final = frozenset(
    {
        "api_key", "apikey", "password", "passwd", "secret", "token", "access_token", "refresh_token",
        "authorization", "cookie", "set-cookie", "x-api-key", "private_key", "client_secret",
        "secret_key", "secret_access_key",
    }
)  # fmt: skip
"""Field names whose values are secret (matched as described in the module docstring)."""

MARKER: Final = re.compile(r"\[REDACTED:[0-9a-f]{8}\]")
"""What a redacted secret reads as (after its kept prefix, if any)."""
MIN_LITERAL_CHARS: Final = 4
"""Secret argument values shorter than this are not searched for in free text: replacing every
``"42"`` in a message would destroy it while hiding nothing."""

_CACHE_LIMIT = 4096
_REMEMBERED_CHARS = 1000
_TEXT, _MAPPING, _SEQUENCE, _OTHER = range(4)
_LEAVES: Final = frozenset({int, float, bool, type(None)})
_SHAPES: dict[type, int] = {str: _TEXT, dict: _MAPPING, list: _SEQUENCE, tuple: _SEQUENCE}
_SHAPES.update(dict.fromkeys((int, float, bool, type(None)), _OTHER))


def _shape(value: object) -> int:
    """Text, mapping, list/tuple or anything else: by exact type first (isinstance on ABCs is slow)."""
    kind = type(value)
    shape = _SHAPES.get(kind)
    if shape is None:
        if isinstance(value, str):
            shape = _TEXT
        elif isinstance(value, Mapping):
            shape = _MAPPING
        else:
            shape = _SEQUENCE if isinstance(value, list | tuple) else _OTHER
        if len(_SHAPES) < 256:
            _SHAPES[kind] = shape
    return shape


_SEPARATORS = str.maketrans("", "", "_-. ")
_ALREADY = re.compile(r"(?:[A-Za-z][A-Za-z0-9_-]{0,11} ?)?\[REDACTED:[0-9a-f]{8}\]")
"""A value that is already redacted (``[REDACTED:…]`` after a kept prefix): left as it is."""
_SCHEME_VALUE = re.compile(r"((?i:bearer|basic)\s+)(\S+)")
_PREFIXES: Final = (
    "sk-ant-", "sk-", "github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "AKIA", "ASIA", "eyJ",
)  # fmt: skip
"""Credential prefixes kept in front of the redaction marker."""

# Each credential shape, and what a text must contain for it to be searched for at all: most
# texts (error messages, arguments) contain none of them and cost a few substring tests.
_SCHEME = re.compile(r"\b((?i:bearer|basic)\s+)([A-Za-z0-9._~+/=-]{8,})")
_PREFIXED = (
    ("sk-", re.compile(r"(?<![A-Za-z0-9_-])sk-(?:ant-)?[A-Za-z0-9_-]{16,}")),
    ("eyJ", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")),
    ("AKIA", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("ASIA", re.compile(r"\bASIA[0-9A-Z]{16}\b")),
    ("gh", re.compile(r"\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,}")),
)
_URL = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"']*:)([^\s/@\"']+)(?=@)")
_KV_TAIL = (
    # ``name=value``, ``name: value``, ``"name": "value"`` (also JSON-escaped); a Bearer/Basic value
    # is left to the scheme rule, which keeps the scheme.
    r"(?:\\?[\"'])?\s*[:=]\s*(?!(?:bearer|basic)\s)"
    r"(?:(?P<q>\\?[\"'])(?P<quoted>.*?)(?P=q)|(?P<bare>[^\s\"'&,;)}\]\\]+))"
)


@dataclass(frozen=True, slots=True)
class _Pairs:
    """The ``name=value`` rule for one set of secret field names."""

    lower: re.Pattern[str]
    """For lower-cased text (the common case: fast literal names)."""
    any_case: re.Pattern[str]
    """For text whose lower-cased form has another length (a few non-ASCII letters)."""
    probes: tuple[str, ...]
    """The last word of every name: a text containing none of them has no pair."""


_PAIRS: dict[frozenset[str], _Pairs] = {}


def field_key(name: object) -> str:
    """A field name as secret names are compared: lower case, without ``_``, ``-``, ``.``, spaces."""
    return str(name).lower().translate(_SEPARATORS)


def _pairs(names: frozenset[str]) -> _Pairs:
    pairs = _PAIRS.get(names)
    if pairs is None:
        # Longest first, and ``_``/``-`` optional between words: ``api_key`` matches ``apiKey`` too.
        alternatives = "|".join(
            re.escape(n).replace("_", "[_-]?") for n in sorted(names, key=lambda n: (-len(n), n))
        )
        words = {n.rsplit("_", 1)[-1] for n in names}
        probes = tuple(sorted(w for w in words if not any(o != w and o in w for o in words)))
        pairs = _PAIRS[names] = _Pairs(
            re.compile(f"(?:{alternatives}){_KV_TAIL}"),
            re.compile(f"(?i:(?:{alternatives}){_KV_TAIL})"),
            probes,
        )
    return pairs


@dataclass(frozen=True, slots=True, eq=False)
class RedactionPolicy:
    """What counts as a secret, and how it is replaced; see the module docstring.

    ``extra_fields`` extend :data:`DEFAULT_SECRET_FIELDS`; ``key`` keys the hash in the marker
    (random by default: hashes are stable for this policy's life); :meth:`off` turns redaction off.
    """

    extra_fields: Collection[str] = frozenset()
    key: bytes = field(default=b"", repr=False)
    enabled: bool = True
    fields: frozenset[str] = field(init=False)
    """Every secret field name (defaults and extras), lower case with ``-`` as ``_``."""
    _keys: frozenset[str] = field(init=False, repr=False)
    _pairs: _Pairs = field(init=False, repr=False)
    _is_secret: dict[str, bool] = field(init=False, repr=False)
    _markers: dict[str, str] = field(init=False, repr=False)
    _masks: dict[str, str] = field(init=False, repr=False)
    _texts: dict[str, str] = field(init=False, repr=False)
    _extended: dict[tuple[str, ...], RedactionPolicy] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        extra = frozenset(str(n).strip() for n in self.extra_fields)
        if any(not n for n in extra):
            raise ValueError("secret field names must not be empty")
        set_(self, "extra_fields", extra)
        if not self.key:
            set_(self, "key", os.urandom(32))
        elif len(self.key) > 64:
            raise ValueError(f"a redaction key is at most 64 bytes, not {len(self.key)}")
        names = frozenset(n.lower().replace("-", "_") for n in DEFAULT_SECRET_FIELDS | extra)
        set_(self, "fields", names)
        set_(self, "_keys", frozenset(field_key(n) for n in names))
        set_(self, "_pairs", _pairs(names))
        set_(self, "_is_secret", {})
        set_(self, "_markers", {})
        set_(self, "_masks", {})
        set_(self, "_texts", {})
        set_(self, "_extended", {})

    @classmethod
    def off(cls) -> RedactionPolicy:
        """No redaction at all: secrets are recorded in plain text. An engine logs that it is off."""
        return cls(enabled=False)

    def with_fields(self, names: Iterable[str]) -> RedactionPolicy:
        """This policy with more secret field names (same key, so the same hashes); cached."""
        wanted = tuple(names)
        if not wanted:
            return self
        policy = self._extended.get(wanted)
        if policy is None:
            if len(self._extended) >= _CACHE_LIMIT:
                self._extended.clear()
            if {n.strip().lower().replace("-", "_") for n in wanted} <= self.fields:
                policy = self  # nothing new
            else:
                policy = RedactionPolicy(
                    frozenset(self.extra_fields) | frozenset(wanted), key=self.key, enabled=self.enabled
                )
                object.__setattr__(policy, "_markers", self._markers)  # one key: the same markers
                object.__setattr__(policy, "_masks", self._masks)
            self._extended[wanted] = policy
        return policy

    # --- fields ---------------------------------------------------------------------------

    def is_secret_field(self, name: object) -> bool:
        """Is a value under this mapping key secret? (Normalised and remembered per name.)"""
        known = self._is_secret.get(name) if type(name) is str else None
        if known is not None:
            return known
        key = field_key(name)
        secret = any(key.endswith(k) for k in self._keys)
        if type(name) is str:
            if len(self._is_secret) >= _CACHE_LIMIT:
                self._is_secret.clear()
            self._is_secret[name] = secret
        return secret

    def secrets_in(self, value: Any) -> tuple[str, ...]:
        """The values of secret fields anywhere in ``value``, as texts to look for, longest first.

        Values shorter than :data:`MIN_LITERAL_CHARS` are left out; a ``Bearer …`` value adds its
        credential alone too; a JSON-escaped form is added when it differs.
        """
        if not self.enabled or _shape(value) in (_TEXT, _OTHER):
            return ()
        found: list[Any] = []
        self._collect(value, found)
        return _literals(found) if found else ()

    def _collect(self, v: Any, found: list[Any]) -> None:
        kind = _shape(v)
        if kind is _MAPPING:
            for key, item in v.items():
                if self.is_secret_field(key):
                    found.append(item)
                else:
                    self._collect(item, found)
        elif kind is _SEQUENCE:
            for item in v:
                self._collect(item, found)

    # --- values ---------------------------------------------------------------------------

    def value(self, value: Any, secrets: Iterable[str] = ()) -> Any:
        """``value`` with secret fields replaced and credentials in its strings redacted.

        Dicts, lists and tuples at any depth; a copy only where something changed (the same
        object when nothing did). Texts in ``secrets`` (e.g. :meth:`secrets_in` of the call's
        arguments) and the values of ``value``'s own secret fields are redacted wherever they occur.
        """
        if not self.enabled:
            return value
        given = tuple(secrets)
        kind = _shape(value)
        if kind is _TEXT:
            return self._text(value, given) if value else value
        if kind is _OTHER:
            return value
        found: list[Any] = []
        out = self._walk(value, given, found)
        if found:  # a secret field's value may show elsewhere too ("your key is …"): a second pass
            own = [s for s in _literals(found) if s not in given]
            if own:
                out = self._walk(out, tuple(sorted((*given, *own), key=len, reverse=True)), None)
        return out

    def _walk(self, v: Any, secrets: tuple[str, ...], found: list[Any] | None) -> Any:
        """``v`` redacted: secret fields masked (their values added to ``found``), ``secrets`` and
        credential shapes in its strings. With ``found`` None, a second pass: ``v`` is redacted
        already, and only ``secrets`` are left to replace in its strings."""
        kind = _shape(v)
        if kind is _TEXT:
            if not v:
                return v
            return self._text(v, secrets) if found is not None else _replace_literals(v, secrets, self)
        if kind is _MAPPING:
            out: dict[Any, Any] | None = None
            known = self._is_secret
            for key, item in v.items():
                secret = known.get(key) if type(key) is str else None
                if secret is None:
                    secret = self.is_secret_field(key)
                if secret:
                    if found is None:
                        continue  # masked in the first pass
                    found.append(item)
                    new = self.mask(item)
                elif type(item) is str:  # most values: no call for them
                    if not item:
                        continue
                    new = (
                        self._text(item, secrets)
                        if found is not None
                        else _replace_literals(item, secrets, self)
                    )
                elif type(item) in _LEAVES:
                    continue  # a number, a boolean, None: nothing to redact
                else:
                    new = self._walk(item, secrets, found)
                if new is not item:
                    if out is None:
                        out = dict(v)
                    out[key] = new
            return v if out is None else out
        if kind is _SEQUENCE:
            items: list[Any] | None = None
            for i, item in enumerate(v):
                if type(item) in _LEAVES:
                    continue
                new = self._walk(item, secrets, found)
                if new is not item:
                    if items is None:
                        items = list(v)
                    items[i] = new
            return v if items is None else type(v)(items)
        return v

    def mask(self, value: Any) -> Any:
        """What a secret field's value becomes: ``[REDACTED:…]`` keeping a credential's prefix.

        None and booleans stay (they hide nothing); anything else is hashed as its JSON text.
        """
        if value is None or isinstance(value, bool) or not self.enabled:
            return value
        if isinstance(value, str):
            return self._mask_text(value)
        try:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
        except (TypeError, ValueError, RecursionError):
            text = repr(value)
        return self.marker(text)

    def _mask_text(self, text: str) -> str:
        masked = self._masks.get(text)
        if masked is None:
            masked = self._masks[text] = self._mask_anew(text)
            if len(self._masks) >= _CACHE_LIMIT:  # credentials recur: most are found here
                self._masks.clear()
        return masked

    def _mask_anew(self, text: str) -> str:
        if not text or ("[REDACTED:" in text and _ALREADY.fullmatch(text)):
            return text
        if text[0] in "bB" and (scheme := _SCHEME_VALUE.fullmatch(text)) is not None:
            return scheme.group(1) + self.marker(scheme.group(2))
        if text.startswith(_PREFIXES):
            prefix = next(p for p in _PREFIXES if text.startswith(p))
            if len(text) > len(prefix) + 8:
                return prefix + self.marker(text)
        return self.marker(text)

    def marker(self, secret: str) -> str:
        """``[REDACTED:<8 hex>]``: the keyed hash of ``secret`` (equal secrets, equal markers)."""
        marker = self._markers.get(secret)
        if marker is None:
            digest = hashlib.blake2b(secret.encode("utf-8", "surrogatepass"), key=self.key, digest_size=4)
            marker = f"[REDACTED:{digest.hexdigest()}]"
            if len(self._markers) >= _CACHE_LIMIT:
                self._markers.clear()
            self._markers[secret] = marker
        return marker

    # --- free text ------------------------------------------------------------------------

    def text(self, text: str, secrets: Iterable[str] = ()) -> str:
        """Free text with ``secrets`` (texts, e.g. :meth:`secrets_in` of the call's arguments) and
        every credential shape redacted."""
        if not self.enabled or not text:
            return text
        return self._text(text, tuple(secrets))

    def _text(self, text: str, secrets: tuple[str, ...]) -> str:
        if secrets or len(text) > _REMEMBERED_CHARS:
            return self._scan(text, secrets)
        done = self._texts.get(text)
        if done is None:  # the same error message comes back attempt after attempt: scanned once
            done = self._texts[text] = self._scan(text, ())
            if len(self._texts) >= _CACHE_LIMIT:
                self._texts.clear()
        return done

    def _scan(self, text: str, secrets: tuple[str, ...]) -> str:
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, self._mask_text(secret))
        lowered = text.lower()
        if ("=" in text or ":" in text) and any(p in lowered for p in self._pairs.probes):
            text = self._redact_pairs(text, lowered)
        for trigger, pattern in _PREFIXED:
            if trigger in text and (trigger != "gh" or "_" in text):
                text = pattern.sub(self._mask_match, text)
        if "://" in text and "@" in text:
            text = _URL.sub(self._mask_url, text)
        if "bearer" in lowered or "basic" in lowered:
            text = _SCHEME.sub(self._mask_scheme, text)
        return text

    def _redact_pairs(self, text: str, lowered: str) -> str:
        """``name=value`` pairs: found in the lower-cased text, replaced in the text itself."""
        pairs = self._pairs
        subject, pattern = (lowered, pairs.lower) if len(lowered) == len(text) else (text, pairs.any_case)
        out: list[str] = []
        last = 0
        for m in pattern.finditer(subject):
            group = "bare" if m.start("bare") >= 0 else "quoted"
            start, end = m.span(group)
            secret = text[start:end]
            if not secret or "[REDACTED:" in secret:  # empty, or redacted already (maybe after a prefix)
                continue
            out += (text[last:start], self._mask_text(secret))
            last = end
        if not out:
            return text
        out.append(text[last:])
        return "".join(out)

    def _mask_match(self, m: re.Match[str]) -> str:
        return self._mask_text(m.group(0))

    def _mask_url(self, m: re.Match[str]) -> str:
        secret = m.group(2)
        return m.group(0) if "[REDACTED:" in secret else m.group(1) + self.marker(secret)

    def _mask_scheme(self, m: re.Match[str]) -> str:
        credential = m.group(2)
        if credential.isalpha() and credential[1:].islower():  # a word: "Basic authentication failed"
            return m.group(0)
        return m.group(1) + self.marker(credential)


def _replace_literals(text: str, secrets: tuple[str, ...], policy: RedactionPolicy) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, policy._mask_text(secret))
    return text


def _literals(values: list[Any]) -> tuple[str, ...]:
    """The texts of secret values (their leaves, nested or not) worth looking for, longest first."""
    found: set[str] = set()
    stack = list(values)
    while stack:
        v = stack.pop()
        kind = _shape(v)
        if kind is _MAPPING:
            stack.extend(v.values())
        elif kind is _SEQUENCE or isinstance(v, set | frozenset):
            stack.extend(v)
        elif v is not None and type(v) is not bool:
            text = v if kind is _TEXT else str(v)
            parts = _PARTS.get(text)
            if parts is None:
                parts = _PARTS[text] = _parts(text)
                if len(_PARTS) >= _CACHE_LIMIT:
                    _PARTS.clear()
            found.update(parts)
    return tuple(sorted(found, key=len, reverse=True))


_PARTS: dict[str, tuple[str, ...]] = {}
"""A secret value's texts to look for, by value: the same credentials come back call after call."""


def _parts(text: str) -> tuple[str, ...]:
    """``text`` (and a Bearer value's credential alone), as written and as JSON escapes it."""
    scheme = _SCHEME_VALUE.fullmatch(text) if text[:1] in ("b", "B") else None
    parts: list[str] = []
    for part in (text, scheme.group(2)) if scheme is not None else (text,):
        if len(part) < MIN_LITERAL_CHARS or ("[REDACTED:" in part and _ALREADY.fullmatch(part)):
            continue
        parts.append(part)
        if not (part.isascii() and part.isprintable()) or '"' in part or "\\" in part:
            escaped = json.dumps(part, ensure_ascii=False)[1:-1]  # as it shows inside JSON text
            if escaped != part:
                parts.append(escaped)
    return tuple(parts)


__all__ = ["DEFAULT_SECRET_FIELDS", "MARKER", "MIN_LITERAL_CHARS", "RedactionPolicy", "field_key"]
