"""Redaction (issue 12, item 1): one policy, applied where each event is made.

The policy itself (field names at any depth, credential shapes, the redacted shape, off), then
every event that carries free text or values, made by a real engine: the events hold no secret,
while what the caller gets back stays the caller's own. Secrets at rest in a real SQLite store,
an export and the console: tests/reliability/test_secrets_at_rest.py.
"""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine import (
    CallStatus,
    Decision,
    Engine,
    FailureContext,
    HandlerDecision,
    ManifestError,
    ManifestRegistry,
    RetryPolicy,
    ToolCall,
    ToolError,
    ToolManifest,
    Turn,
)
from engine.events import (
    AlternativeUsed,
    AttemptFailed,
    CallFailed,
    CallSucceeded,
    Event,
    HandlerFailed,
    StreamEnded,
    ToolResultSent,
    TurnStarted,
)
from engine.llm import LLMToolCall, ToolCallExecutor
from engine.redaction import DEFAULT_SECRET_FIELDS, MARKER, RedactionPolicy
from engine.replay import Recording, replay
from tests.engine.conftest import Scripted, new_engine, recorded

pytestmark = pytest.mark.anyio

NO_WAIT = RetryPolicy(initial_delay_ms=0, max_delay_ms=0, jitter_percent=0, max_attempts=3)


def dumped(events: list[Event]) -> str:
    """Everything the events hold, as consumers see it: every field and every ``describe()``."""
    return json.dumps([e.to_dict() for e in events], ensure_ascii=False, default=str)


def assert_absent(secrets: list[str], text: str) -> None:
    shown = [s for s in secrets if s in text]
    assert not shown, f"secrets in plain text: {shown}"


# --- the policy -------------------------------------------------------------------------------


def test_the_default_field_names_are_the_issues_list() -> None:
    issue = {
        "api_key", "apikey", "password", "passwd", "secret", "token", "access_token", "refresh_token",
        "authorization", "cookie", "set-cookie", "x-api-key", "private_key", "client_secret",
    }  # fmt: skip
    assert issue <= DEFAULT_SECRET_FIELDS


def test_secret_fields_match_at_any_depth_whatever_their_case_or_separators() -> None:
    policy = RedactionPolicy()
    value = {
        "query": "hotels in Paris",
        "API_KEY": "k-0123456789",
        "headers": {"Authorization": "Bearer abcdefgh12345678", "X-Api-Key": "xk-0123456789",
                    "Set-Cookie": "sid=0123456789", "Accept": "application/json"},
        "items": [{"Password": "hunter2hunter2"}, {"nested": [{"auth": {"token": "nested-token-123"}}]}],
        "db_password": "pg-secret-999", "githubToken": "ght-0123456789", "max_tokens": 512,
        "passwordless": True, "refresh-token": None,
    }  # fmt: skip
    out = policy.value(value)
    assert out["query"] == "hotels in Paris" and out["max_tokens"] == 512 and out["passwordless"] is True
    assert out["headers"]["Accept"] == "application/json"
    assert out["refresh-token"] is None, "None hides nothing"
    assert out["headers"]["Authorization"].startswith("Bearer [REDACTED:"), "the scheme is kept"
    for secret in ("k-0123456789", "xk-0123456789", "sid=0123456789", "hunter2hunter2", "nested-token-123",
                   "pg-secret-999", "ght-0123456789", "abcdefgh12345678"):  # fmt: skip
        assert secret not in json.dumps(out)
    assert value["API_KEY"] == "k-0123456789", "the caller's value is not touched"
    assert policy.value(out) == out, "redacting twice changes nothing"
    plain = {"query": "x", "page": [1, {"city": "Lyon"}]}
    assert policy.value(plain) is plain, "nothing to redact: the same object, no copy"


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (
            "upstream refused Authorization: Bearer eyQ1a2b3c4d5e6f7g8",
            "eyQ1a2b3c4d5e6f7g8",
            "Bearer [REDACTED:",
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "Basic [REDACTED:"),
        ("key sk-proj-AbCdEf0123456789xyz rejected", "sk-proj-AbCdEf0123456789xyz", "sk-[REDACTED:"),
        ("bad key sk-ant-api03-AbCdEf0123456789xyzXYZ", "AbCdEf0123456789xyzXYZ", "sk-ant-[REDACTED:"),
        ("aws AKIAIOSFODNN7EXAMPLE denied", "IOSFODNN7EXAMPLE", "AKIA[REDACTED:"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl expired",
            "c2lnbmF0dXJl",
            "eyJ[REDACTED:",
        ),
        ("login failed: password=hunter2!x&user=bob", "hunter2!x", "password=[REDACTED:"),
        ("GET /v1?token=tok_abc123&q=1 failed", "tok_abc123", "token=[REDACTED:"),
        ('body {"client_secret": "cs 12 34"}', "cs 12 34", '"client_secret": "[REDACTED:'),
        ('escaped {\\"api_key\\": \\"k9k9k9\\"}', "k9k9k9", '\\"api_key\\": \\"[REDACTED:'),
        ("cannot reach postgres://bob:pg-pass-77@db:5432/app", "pg-pass-77", "postgres://bob:[REDACTED:"),
        (
            "token ghp_abcdefghijklmnopqrstuvwxyz0123 revoked",
            "ghp_abcdefghijklmnopqrstuvwxyz0123",
            "ghp_[REDACTED:",
        ),
    ],
)
def test_each_credential_shape_in_free_text_is_redacted_keeping_what_it_was(
    text: str, secret: str, kept: str
) -> None:
    policy = RedactionPolicy()
    out = policy.text(text)
    assert secret not in out and kept in out, out
    assert policy.text(out) == out, "idempotent"


def test_ordinary_text_is_left_alone() -> None:
    policy = RedactionPolicy()
    for text in (
        "Connection reset by peer",
        "HTTP 503: Service Unavailable",
        "Basic authentication failed",
        "the task-abcdefghijklmnopqrstu ran",
        "max_tokens: 512 exceeded",
        "tokens=5 secretary=ann",
    ):
        assert policy.text(text) == text


def test_equal_secrets_read_the_same_and_hashes_are_keyed() -> None:
    policy = RedactionPolicy()
    one, two = policy.mask("hunter2hunter2"), policy.mask("hunter2hunter2")
    assert one == two and MARKER.fullmatch(one), "equal secrets can be correlated"
    assert policy.mask("hunter3hunter3") != one
    assert RedactionPolicy().mask("hunter2hunter2") != one, "a fresh key: nothing to try candidates against"
    keyed = RedactionPolicy(key=b"k" * 32)
    assert keyed.mask("pw") == RedactionPolicy(key=b"k" * 32).mask("pw"), (
        "a given key: stable across restarts"
    )
    # The same secret as a field and inside text reads the same, its credential shape kept.
    assert policy.text(f"retry with {'sk-' + 'a' * 20}") == f"retry with {policy.mask('sk-' + 'a' * 20)}"
    # A secret argument's value is found in the call's own texts, wherever it shows.
    args = {"user": "bob", "auth": {"password": "correct horse"}}
    assert policy.text("bob said correct horse", policy.secrets_in(args)) == (
        f"bob said {policy.mask('correct horse')}"
    )


def test_policies_extend_and_turn_off() -> None:
    policy = RedactionPolicy(extra_fields={"session_id"})
    assert policy.value({"Session-ID": "s-123456"}) != {"Session-ID": "s-123456"}
    assert policy.text("session_id=s-123456") == f"session_id={policy.mask('s-123456')}"
    wider = policy.with_fields(["tenant_key"])
    assert policy.with_fields(["tenant_key"]) is wider, "cached"
    assert wider.with_fields(["tenant_key", "Session-Id"]) is wider, "nothing new: the same policy"
    assert wider.mask("x-1234") == policy.mask("x-1234"), "the same key: the same hashes"
    assert wider.is_secret_field("tenant_key") and not policy.is_secret_field("tenant_key")
    off = RedactionPolicy.off()
    secret = {"password": "hunter2hunter2", "note": "Bearer abcdefgh12345678"}
    assert off.value(secret) is secret and off.text("password=x") == "password=x"
    with pytest.raises(ValueError, match="must not be empty"):
        RedactionPolicy(extra_fields={" "})


def test_turning_redaction_off_is_logged_and_never_the_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tripwire.engine"):
        assert Engine().redaction.enabled
        assert not caplog.records, "on by default, nothing to say"
        engine = Engine(redaction=RedactionPolicy.off())
    assert not engine.redaction.enabled
    (record,) = caplog.records
    assert record.getMessage() == (
        "redaction is off: secrets in arguments, errors and results are recorded in plain text"
    )


# --- manifests ----------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def test_a_manifest_names_more_secret_fields_adding_to_its_defaults(tmp_path: Path) -> None:
    write(tmp_path / "defaults.yaml", "defaults:\n  secret_fields: [tenant_key]\n")
    write(
        tmp_path / "crm.yaml", "tool:\n  id: crm\n  side_effect: read_only\n  secret_fields: [session_id]\n"
    )
    write(tmp_path / "plain.yaml", "tool:\n  id: plain\n  side_effect: read_only\n")
    registry = ManifestRegistry.from_directory(tmp_path)
    assert registry.get("crm").secret_fields == ("session_id", "tenant_key"), "added to, not replaced"
    assert registry.get("plain").secret_fields == ("tenant_key",)


@pytest.mark.parametrize(
    ("setting", "field"), [("secret_fields: session_id", "tool.secret_fields"),
                           ('secret_fields: [ok, ""]', "tool.secret_fields.1")],
)  # fmt: skip
def test_bad_secret_fields_are_refused_naming_file_line_and_field(
    tmp_path: Path, setting: str, field: str
) -> None:
    path = write(tmp_path / "crm.yaml", f"tool:\n  id: crm\n  side_effect: read_only\n  {setting}\n")
    with pytest.raises(ManifestError) as info:
        ManifestRegistry.from_directory(tmp_path)
    assert str(info.value).startswith(f"{path}:4: {field}: "), str(info.value)


# --- events made by the engine ----------------------------------------------------------------

API_KEY = "planted-api-key-0001"
PASSWORD = "planted-password-0002"
BEARER = "plantedBearerToken0003"
SK_KEY = "sk-planted0key0000000004"
SESSION = "planted-session-0005"
RETURNED = "planted-returned-token-0006"


async def test_a_turns_events_hold_no_secret_while_the_caller_gets_its_own_values() -> None:
    crm = ToolManifest(id="crm", retry_policy=NO_WAIT, secret_fields=("session_id",))
    engine = await new_engine(crm, ToolManifest(id="echo"), record=True)
    events = recorded(engine)
    engine.register(
        "crm",
        Scripted(
            ConnectionResetError(f"upstream refused Authorization: Bearer {BEARER}"),
            ConnectionResetError(f"key {SK_KEY} rejected for {API_KEY}"),
            {"user": "bob", "session": {"access_token": RETURNED}},
        ),
    )
    engine.register("echo", Scripted(PermissionError(f"login failed: password={PASSWORD}")))
    turn = Turn(
        [
            ToolCall("c", "crm", {"api_key": API_KEY, "session_id": SESSION, "q": "bob"}),
            ToolCall("e", "echo", {"credentials": {"password": PASSWORD}, "session_id": "not-secret-here"}),
        ],
        id="t1",
    )
    result = await engine.run_turn(turn)

    secrets = [API_KEY, PASSWORD, BEARER, SK_KEY, SESSION, RETURNED]
    assert_absent(secrets, dumped(events))
    assert_absent(secrets, " ".join(e.describe() for e in events))
    (started,) = [e for e in events if isinstance(e, TurnStarted)]
    crm_args, echo_args = (c["args"] for c in started.spec["calls"])  # type: ignore[index]
    assert crm_args["q"] == "bob" and MARKER.fullmatch(crm_args["session_id"]), "the manifest's own field"
    assert echo_args["session_id"] == "not-secret-here", "crm's secret field is crm's only"
    failures = [e.error for e in events if isinstance(e, AttemptFailed)]
    assert failures[0] == f"upstream refused Authorization: Bearer {engine.redaction.marker(BEARER)}"
    assert (
        failures[1] == f"key {engine.redaction.mask(SK_KEY)} rejected for {engine.redaction.mask(API_KEY)}"
    ), "the call's own secret argument, found in its error text"
    (succeeded,) = [e for e in events if isinstance(e, CallSucceeded)]
    assert succeeded.value["user"] == "bob" and MARKER.fullmatch(succeeded.value["session"]["access_token"])
    (failed,) = [e for e in events if isinstance(e, CallFailed)]
    assert failed.error == f"login failed: password={engine.redaction.mask(PASSWORD)}"

    # Not at rest: what the caller gets back is its own.
    assert result.outcomes["c"].value == {"user": "bob", "session": {"access_token": RETURNED}}
    error = result.outcomes["e"].error
    assert error is not None and PASSWORD in error.message
    assert turn.spec["calls"][0]["args"]["api_key"] == API_KEY, "the turn itself is not touched"


async def test_a_turn_run_again_is_redacted_once_under_the_policy_in_force() -> None:
    engine = await new_engine(ToolManifest(id="t"), ToolManifest(id="dep"))
    events = recorded(engine)
    engine.register("t", Scripted(ConnectionRefusedError("down")))
    engine.register("dep", Scripted("ok"))
    turn = Turn(
        [
            ToolCall("a", "t", {"api_key": API_KEY}),
            ToolCall("b", "dep", depends_on=["a"], default={"session": {"token": SESSION}}),
        ]
    )
    await engine.run_turn(turn)
    await engine.run_turn(turn)
    first, second = (e.spec for e in events if isinstance(e, TurnStarted))
    assert first is second, "the same turn: its spec redacted once"
    assert first is not None and first["calls"][1]["default"]["session"]["token"] == engine.redaction.mask(
        SESSION
    )
    assert_absent([API_KEY, SESSION], dumped(events))
    other = await new_engine(ToolManifest(id="t"), ToolManifest(id="dep"))
    seen = recorded(other)
    other.register("t", Scripted(1))
    other.register("dep", Scripted(2))
    await other.run_turn(turn)
    (third,) = (e.spec for e in seen if isinstance(e, TurnStarted))
    assert third is not None and third["calls"][0]["args"]["api_key"] == other.redaction.mask(API_KEY), (
        "another engine, its own key"
    )
    assert third != first


async def test_a_guarded_call_outside_a_turn_and_its_error_raised_to_the_caller() -> None:
    engine = await new_engine(ToolManifest(id="login", retry_policy=NO_WAIT))
    events = recorded(engine)
    engine.register("login", Scripted(PermissionError(f"bad password={PASSWORD} for key {API_KEY}")))
    with pytest.raises(ToolError) as raised:
        await engine.call("login", api_key=API_KEY)
    assert PASSWORD in raised.value.message and raised.value.tool_input == {"api_key": API_KEY}
    assert_absent([PASSWORD, API_KEY], dumped(events))


async def test_the_success_path_does_no_redaction_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """AttemptStarted and CallSucceeded carry no free text: a call that succeeds never asks the policy."""

    def untouchable(*_: Any, **__: Any) -> Any:
        raise AssertionError("the success path redacted something")

    for name in ("text", "value", "secrets_in", "mask", "with_fields"):
        monkeypatch.setattr(RedactionPolicy, name, untouchable)
    engine = await new_engine(ToolManifest(id="t"))
    engine.register("t", Scripted(1))
    events = recorded(engine)
    assert await engine.call("t", api_key=API_KEY) == 1
    assert [e.event_type for e in events] == ["AttemptStarted", "CallSucceeded"]
    assert events[1].value is None, "not recording: no value, nothing to redact"


async def test_handler_texts_are_redacted_and_so_is_the_log(caplog: pytest.LogCaptureFixture) -> None:
    def broken(failure: FailureContext) -> HandlerDecision:
        raise RuntimeError(f"cannot decide: token={RETURNED}")

    engine = await new_engine(ToolManifest(id="t", retry_policy=NO_WAIT), handler=broken)
    events = recorded(engine)
    engine.register("t", Scripted(ConnectionResetError("reset")))
    with caplog.at_level(logging.WARNING, logger="tripwire.engine"):
        await engine.try_call("t")
    handler_failed = next(e for e in events if isinstance(e, HandlerFailed))
    assert handler_failed.error.startswith("RuntimeError: cannot decide: token=[REDACTED:")
    assert_absent([RETURNED], dumped(events) + caplog.text)

    def routing(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(Decision.ALTERNATIVE, f"use the backup, Bearer {BEARER}", alternative="backup")

    engine = await new_engine(ToolManifest(id="t", alternatives=("backup",), retry_policy=NO_WAIT))
    events = recorded(engine)
    engine.register("t", Scripted(PermissionError("no")))
    engine.register("backup", Scripted("ok"))
    assert (await engine.runtime.execute("t", {}, handler=routing)).value == "ok"
    (used,) = [e for e in events if isinstance(e, AlternativeUsed)]
    assert used.reason.startswith("use the backup, Bearer [REDACTED:")
    assert_absent([BEARER], dumped(events))


async def test_a_truncated_streams_error_is_redacted() -> None:
    async def feed(api_key: str) -> AsyncIterator[str]:
        yield "first"
        raise ConnectionResetError(f"stream lost, key {api_key}")

    engine = await new_engine(ToolManifest(id="feed"))
    events = recorded(engine)
    engine.register("feed", feed)

    async def consume() -> None:
        async with engine.stream("feed", api_key=API_KEY) as chunks:
            async for _ in chunks:
                pass

    with pytest.raises(ToolError) as raised:
        await consume()
    assert API_KEY in raised.value.message, "the caller's own error"
    (ended,) = [e for e in events if isinstance(e, StreamEnded)]
    assert ended.outcome == "truncated" and ended.error == (
        f"ConnectionResetError: stream lost, key {engine.redaction.mask(API_KEY)}"
    )


async def test_an_engine_extends_the_policy_and_can_turn_it_off() -> None:
    engine = await new_engine(
        ToolManifest(id="t", retry_policy=NO_WAIT), redaction=RedactionPolicy(extra_fields={"pin"})
    )
    events = recorded(engine)
    engine.register("t", Scripted(PermissionError("wrong pin=48151623")))
    await engine.run_turn(Turn([ToolCall("c", "t", {"pin": "48151623"})]))
    assert_absent(["48151623"], dumped(events))

    engine = await new_engine(ToolManifest(id="t", retry_policy=NO_WAIT), redaction=RedactionPolicy.off())
    events = recorded(engine)
    engine.register("t", Scripted(PermissionError(f"password={PASSWORD}")))
    await engine.run_turn(Turn([ToolCall("c", "t", {"api_key": API_KEY})]))
    assert API_KEY in dumped(events) and PASSWORD in dumped(events), "off is off"


# --- the model's text and the trace agree ------------------------------------------------------


async def test_the_model_and_the_trace_see_the_same_redacted_text() -> None:
    engine = await new_engine(ToolManifest(id="fetch", retry_policy=NO_WAIT, secret_fields=("session_id",)))
    events = recorded(engine)

    async def fetch(url: str, api_key: str, session_id: str = "") -> Any:
        if url == "ok":
            return {"data": [1, 2], "refresh_token": RETURNED, "note": f"session {session_id}"}
        raise PermissionError(f"key {api_key} refused; session={session_id}")

    engine.register("fetch", fetch)
    executor = ToolCallExecutor(engine)
    batch = await executor.run(
        [
            LLMToolCall("1", "fetch", {"url": "x", "api_key": API_KEY, "session_id": SESSION}),
            LLMToolCall("2", "fetch", {"url": "ok", "api_key": API_KEY, "session_id": SESSION}),
        ]
    )
    failed, succeeded = batch.items
    assert_absent([API_KEY, SESSION], failed.content)
    (stored_error,) = [e.error for e in events if isinstance(e, AttemptFailed)]
    assert stored_error in failed.content, "the same redacted value in the model's text and the trace"
    assert RETURNED in succeeded.content, "the model gets the tool's own result"
    sent = [e for e in events if isinstance(e, ToolResultSent)]
    assert sent[0].content == failed.content
    assert_absent([API_KEY, SESSION, RETURNED], dumped(events))


# --- replay ---------------------------------------------------------------------------------


async def test_a_turn_whose_tool_returned_a_secret_replays_as_matching() -> None:
    login = ToolManifest(id="login", retry_policy=NO_WAIT)
    engine = await new_engine(login, ToolManifest(id="profile"), record=True)
    engine.register("login", Scripted(ConnectionResetError(f"Bearer {BEARER}"), {"access_token": RETURNED}))
    engine.register("profile", Scripted({"name": "bob"}))
    turn = Turn(
        [
            ToolCall("login", "login", {"password": PASSWORD}),
            ToolCall("me", "profile", depends_on=["login"], inputs={"session": "login"}),
        ],
        id="t-secret",
    )
    result = await engine.run_turn(turn)
    assert result.outcomes["me"].status is CallStatus.SUCCEEDED
    assert_absent([RETURNED, PASSWORD, BEARER], dumped(result.trace.events))

    contents = {engine.manifests.digest(t): engine.manifest(t).model_dump(mode="json") for t in engine.tools}
    recording = Recording.from_events(result.trace.events, contents.get)
    report = await replay(recording)
    assert report.matches, (report.mismatches, report.unmatched, report.unused)
    assert report.decisions >= 4
    assert (
        report.result is not None
        and report.result.outcomes["login"].value == recording.attempts[("login", "login", 2)].value
    ), "the replay plays back the redacted value: decisions, not secrets, are compared"
