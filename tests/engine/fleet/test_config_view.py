"""The fleet URL and the reader's folding: pure, no Redis."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.fleet import FleetConfig, FleetConfigError, FleetKeys, Secret, fold_fleet, parse_fleet_url


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


def test_a_record_nobody_of_ours_wrote_is_no_opinion() -> None:
    view = fold_fleet(
        "p", 1000.0, {"x": 900.0}, {"x": {"breakers": "not json", "pid": "?"}}, {}, stale_s=5, gone_s=30
    )
    assert view.member("x").breakers == {} and view.member("x").pid == 0 and view.tools == {}
