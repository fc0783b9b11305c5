"""The fleet URL and the reader's folding: pure, no Redis."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from urllib.parse import quote

import pytest

from engine.errors import one_line
from engine.fleet import (
    FleetBudget,
    FleetBulkhead,
    FleetConfig,
    FleetConfigError,
    FleetCooldown,
    FleetKeys,
    Secret,
    fold_fleet,
    parse_fleet_url,
)
from engine.fleet import config as config_module
from engine.fleet.config import with_settings


def test_a_fleet_url_parses_and_never_shows_its_password() -> None:
    config = parse_fleet_url(
        "rediss://ops:hunter2%21@redis.internal:6380/3?namespace=prod&quorum=3&window_s=60"
        "&on_unavailable=fail_closed&fail_closed_tools=pay,ship&ca_file=/etc/ca.pem"
    )
    assert (config.host, config.port, config.db, config.username, config.tls) == (
        "redis.internal",
        6380,
        3,
        "ops",
        True,
    )
    assert config.password == Secret("hunter2!") and config.password.reveal() == "hunter2!"
    assert (config.namespace, config.quorum, config.window_s) == ("prod", 3, 60.0)
    assert config.forced_when_unavailable(["pay", "search", "ship"]) == ["pay", "ship"]
    for shown in (repr(config), str(config), config.safe_url, config.server, repr(config.password)):
        assert "hunter2" not in shown
    assert config.safe_url == "rediss://ops:***@redis.internal:6380/3?namespace=prod"
    assert FleetConfig().forced_when_unavailable(["a"]) == []  # local: nothing forced


def test_the_attach_url_names_the_key_and_ca_files_and_parses_back_to_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TRIPWIRE_FLEET_KEY_FILE", raising=False)
    config = parse_fleet_url(
        "rediss://ops:hunter2!@redis.internal:6380/3?namespace=prod&quorum=3"
        "&key_file=/etc/tripwire/fleet key&ca_file=/etc/ssl/ca.pem"
    )
    shown = config.attach_url
    assert "hunter2" not in shown
    back = parse_fleet_url(shown.replace(":***", ""))  # as an operator pastes it, with no password
    assert (back.key_file, back.ca_file) == ("/etc/tripwire/fleet key", "/etc/ssl/ca.pem")
    assert back.namespace == "prod"
    assert parse_fleet_url("redis://h/0?namespace=n").attach_url == "redis://h:6379/0?namespace=n"
    monkeypatch.chdir(tmp_path)  # a key named by the environment, relative: made absolute
    monkeypatch.setenv("TRIPWIRE_FLEET_KEY_FILE", "keys/fleet.key")
    shown = parse_fleet_url("redis://h/0?namespace=n").attach_url
    assert shown == f"redis://h:6379/0?namespace=n&key_file={tmp_path}/keys/fleet.key"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://x", "redis:// or rediss://"),
        ("redis://:pw-secret@x/0?quorum=0", "quorum must be at least 1"),
        ("redis://:pw-secret@x/0?namespace=a b", "namespace"),
        ("redis://:pw-secret@x/0?on_unavailable=panic", "local or fail_closed"),
        ("redis://:pw-secret@x/0?window_s=nan", "window_s must be finite"),
        ("redis://:pw-secret@x/0?colour=blue", "unknown fleet URL parameter 'colour'"),
        ("redis://:pw-secret@x/0?stale_s=40", "stale_s (40) must be less than gone_s (30)"),
    ],
)
def test_a_bad_fleet_url_is_refused_without_its_password(url: str, message: str) -> None:
    with pytest.raises(FleetConfigError) as caught:
        parse_fleet_url(url)
    assert message in str(caught.value) and "pw-secret" not in str(caught.value)


def test_keys_are_namespaced_and_a_tool_id_ends_every_key() -> None:
    keys = FleetKeys("prod")
    assert keys.lease("a:b") == "tripwire:{prod}:lease:a:b"
    assert keys.tool("a:opens") != keys.opens("a")


def test_the_view_folds_live_stale_and_gone_processes() -> None:
    now = 100_000.0
    beats = {"live": now - 500, "stale": now - 8_000, "gone": now - 40_000, "expired": now - 1_000}
    breakers = '{"search": {"state": "%s", "calls": %d, "errors": %d}}'
    records = {
        "live": {"beat": str(now - 500), "host": "h1", "pid": "11", "breakers": breakers % ("OPEN", 10, 4)},
        "stale": {
            "beat": str(now - 8_000),
            "host": "h2",
            "pid": "12",
            "breakers": breakers % ("CLOSED", 5, 0),
        },
        "gone": {"beat": str(now - 40_000), "breakers": breakers % ("CLOSED", 7, 7)},
        "expired": {},
    }
    view = fold_fleet("prod", now, beats, records, {"search": "live"}, stale_s=5.0, gone_s=30.0)
    assert {m.id: m.status for m in view.members} == {
        "live": "live", "stale": "stale", "gone": "gone", "expired": "gone",
    }  # fmt: skip
    search = view.tools["search"]
    assert search.states == {"CLOSED": 1, "OPEN": 1} and search.processes == 2
    assert (search.calls, search.errors, search.lease_holder) == (15, 4, "live")
    assert view.member("live").breakers == {"search": "OPEN"} and view.member("live").pid == 11
    assert view.member("stale").age_s == 8.0


def test_strategies_sum_over_the_processes_reporting_them_an_older_member_adding_nothing() -> None:
    now = 100_000.0
    breakers = '{"search": {"state": "CLOSED", "calls": 4}, "lookup": {"state": "CLOSED"}}'
    bulkhead = {"in_flight": 2, "max_concurrent": 4, "queued": 1, "max_queued": 5, "rejected": 3}
    records = {
        "new": {
            "beat": str(now), "breakers": breakers,
            "strategies": json.dumps({"search": {**bulkhead, "budget_refused": 2}}),
            "shared_budget": json.dumps({"calls": 10, "retries": 1, "allowed": 2, "refused": 4}),
        },
        "newer": {
            "beat": str(now), "breakers": breakers, "strategies": json.dumps({"search": bulkhead}),
            "shared_budget": "null",
        },
        "old": {"beat": str(now), "breakers": breakers},  # an older version: no strategy figures at all
    }  # fmt: skip
    beats = dict.fromkeys(records, now)
    view = fold_fleet("prod", now, beats, records, {}, stale_s=5.0, gone_s=30.0)
    search = view.tools["search"]
    assert search.processes == 3 and search.calls == 12
    assert search.bulkhead == FleetBulkhead(4, 8, 2, 10, 6, processes=2)
    assert search.budget == FleetBudget(refused=2, processes=1)
    assert view.tools["lookup"].bulkhead is None and view.tools["lookup"].budget is None
    assert view.shared_budget == FleetBudget(refused=4, processes=1, calls=10, retries=1, allowed=2)
    assert view.member("old").strategies == {} and view.member("old").shared_budget is None
    assert view.member("newer").shared_budget is None

    only_old = fold_fleet("prod", now, {"old": now}, {"old": records["old"]}, {}, stale_s=5.0, gone_s=30.0)
    assert only_old.tools["search"].bulkhead is None and only_old.tools["search"].budget is None
    assert only_old.shared_budget is None  # absent, not zero


def test_a_record_nobody_of_ours_wrote_is_no_opinion() -> None:
    view = fold_fleet(
        "p",
        1000.0,
        {"x": 900.0},
        {"x": {"breakers": "not json", "pid": "?", "strategies": "[1]", "shared_budget": "{"}},
        {},
        stale_s=5,
        gone_s=30,
    )
    assert view.member("x").breakers == {} and view.member("x").pid == 0 and view.tools == {}
    assert view.member("x").strategies == {} and view.shared_budget is None


def test_the_password_comes_from_an_owner_only_file_or_the_environment_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIPWIRE_FLEET_PASSWORD", raising=False)
    secret = tmp_path / "redis password"
    secret.write_text("hunter2!\n")
    secret.chmod(0o600)
    config = parse_fleet_url(f"redis://ops@h:1/0?namespace=n&password_file={secret}")
    assert config.password == Secret("hunter2!") and config.password_source == "file"
    assert config.safe_url == "redis://ops:***@h:1/0?namespace=n"
    assert config.attach_url == f"redis://ops@h:1/0?namespace=n&password_file={quote(str(secret))}"
    assert parse_fleet_url(config.attach_url).password == Secret("hunter2!")  # the command works
    assert with_settings(config, quorum=3).password == Secret("hunter2!")

    monkeypatch.setenv("TRIPWIRE_FLEET_PASSWORD", "from-env")
    from_env = parse_fleet_url("redis://h:1/0?namespace=n")
    assert from_env.password == Secret("from-env") and from_env.password_source == "environment"
    assert "from-env" not in from_env.attach_url + repr(from_env)
    assert parse_fleet_url(f"redis://h/0?password_file={secret}").password == Secret("hunter2!")  # file first

    secret.chmod(0o640)
    for url, problem in (
        (f"redis://h/0?password_file={secret}", f"password_file {secret} is open to others (mode 0640)"),
        (f"redis://:pw@h/0?password_file={secret}", "the password is given twice"),
        (f"redis://h/0?password_file={tmp_path}/none", f"password_file {tmp_path}/none does not exist"),
    ):
        with pytest.raises(FleetConfigError) as refused:
            parse_fleet_url(url)
        assert str(refused.value).startswith(problem) and "hunter2" not in str(refused.value)


def test_a_password_in_the_url_is_warned_about_once_per_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(config_module, "_warned", False)
    caplog.set_level(logging.WARNING, logger="tripwire.fleet")
    parse_fleet_url("redis://h/0?namespace=n")
    assert caplog.records == []
    for _ in range(3):
        parse_fleet_url("redis://:hunter2@h/0?namespace=n")
    (warning,) = caplog.records
    assert warning.getMessage().startswith(
        "tripwire: the fleet URL holds Redis's password: on a command line"
    )
    assert "password_file=PATH" in warning.getMessage() and "hunter2" not in warning.getMessage()


def test_a_value_from_outside_is_shown_on_one_line_its_control_characters_escaped() -> None:
    assert one_line("a\nb\r\nc\rd") == "a\\nb\\nc\\nd"
    assert (
        one_line("cursor up\x1b[1A, bell\x07, nul\x00, c1\x9b")
        == "cursor up\\x1b[1A, bell\\x07, nul\\x00, c1\\x9b"
    )
    assert one_line("tab\tstays") == "tab\tstays"


def test_a_fleet_wide_cooldown_and_each_process_rate_limit_are_in_the_view() -> None:
    now = 1_000_000.0
    rate = {"api": {"scope": "fleet", "cooldown_until_ms": 1_030_000, "cooldown_by": "h:1:a", "tokens": 2,
                    "mode": "lease", "last_lease": 3, "share_per_s": 20.0, "members": 2}}  # fmt: skip
    records = {
        "h:1:a": {"beat": str(now), "breakers": json.dumps({"api": {"state": "CLOSED"}}),
                  "rate_limits": json.dumps(rate)},
        "h:2:b": {"beat": str(now), "breakers": json.dumps({"api": {"state": "CLOSED"}, "old": {}})},
    }  # fmt: skip
    cooldowns = {
        "api": {"until_ms": "1030000", "member": "h:1:a", "host": "h", "mac": "…"},
        "old": {"until_ms": "999000", "member": "h:1:a"},  # over: no cooldown shown
    }
    beats = {"h:1:a": now, "h:2:b": now}
    view = fold_fleet("prod", now, beats, records, {}, stale_s=5.0, gone_s=30.0, cooldowns=cooldowns)
    cooldown = view.tools["api"].cooldown
    assert cooldown == FleetCooldown(until=1030.0, started_by="h:1:a", host="h", remaining_s=30.0)
    assert view.tools["old"].cooldown is None
    assert view.member("h:1:a").rate_limits == rate
    assert view.member("h:2:b").rate_limits == {}, "an older member reports none"
    unreadable = {"api": {"until_ms": "soon", "member": "x"}}
    view = fold_fleet("prod", now, beats, records, {}, stale_s=5.0, gone_s=30.0, cooldowns=unreadable)
    assert view.tools["api"].cooldown is None, "a record nobody of ours wrote: no opinion"
