"""The fleet probed as an adversarial SRE would (issue 22, section 7): real ``redis-server``, real
``tripwire serve --fleet`` processes running tests/reliability/fleet_late_workload.py.

* a process whose workload registers its tool after it joined takes what stands for the tool — an
  operator's trip, a fleet-wide open — the moment the tool is registered: no call reaches it;
* a standing record replaced by an older signed command (someone with Redis write access and no
  key copies a trip since reset from the stream) is refused as superseded, and a Redis restarted
  empty gets the standing state back from the processes that hold it;
* a forged command cannot print a line of its own into serve's log; the Redis password comes
  from an owner-only file, never on the command line; a password in the URL is warned about;
* SIGTERM stops serve within a bounded time even while a plain function's thread is stuck,
  saying which call it abandons, the turn recorded ``interrupted``.

Every wait is a bounded poll.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis import exceptions as redis_exceptions

from console.cli import main
from engine.events import BreakerOpened, BreakerTripped, CallRejected, Event
from engine.fleet import FleetView, read_fleet
from engine.fleet.keys import FleetKeys
from engine.store import TraceStore
from tests.polling import wait_for
from tests.redis_server import RedisServer, running_redis
from tests.reliability import fleet_late_workload as workload

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

PASSWORD = "adv3rsarial-Pa55word"
FAST = {"sync_ms": 50, "heartbeat_s": 0.2, "stale_s": 1, "gone_s": 2.5, "window_s": 10, "timeout_ms": 300}
OPEN_MS = 15_000
MANIFEST = """
tool:
  id: backend
  side_effect: read_only
  timeout_ms: {timeout_ms}
  retry_policy: {{max_attempts: 1}}
  circuit_breaker: {{failure_threshold: {threshold}, timeout_ms: {open_ms}}}
"""


@dataclass
class Served:
    """One ``tripwire serve --fleet`` process and its directory."""

    process: subprocess.Popen[bytes]
    directory: Path

    @property
    def log(self) -> str:
        return (self.directory / "serve.log").read_text()

    def registered(self) -> bool:
        return (self.directory / "registered").exists()

    def calls(self) -> int:
        path = self.directory / "calls.txt"
        return len(path.read_text().split()) if path.exists() else 0

    def events(self, kind: type[Event]) -> list[Any]:
        with TraceStore(self.directory / "traces.db", readonly=True, verify=False, create=False) as store:
            return [e for e in store.events() if isinstance(e, kind)]

    def alive(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"{self.directory.name} exited {self.process.returncode}: {self.log}")
        return True


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[RedisServer, Path, Callable[..., Served]]]:
    """A Redis with a password, the fleet's key, and a way to start serve processes (killed at the end)."""
    key_file = tmp_path / "fleet.key"
    key_file.write_bytes(os.urandom(32))
    key_file.chmod(0o600)
    started: list[Served] = []

    def serve(name: str, url: str, *, timeout_ms: int = 300, threshold: int = 2, **env: object) -> Served:
        directory = tmp_path / name
        directory.mkdir()
        manifests = directory / "manifests"
        manifests.mkdir()
        manifest = MANIFEST.format(timeout_ms=timeout_ms, threshold=threshold, open_ms=OPEN_MS)
        (manifests / "backend.yaml").write_text(manifest)
        environment = os.environ | {"CALLS_FILE": str(directory / "calls.txt")}
        environment |= {k.upper(): str(v) for k, v in env.items()}
        command = [
            sys.executable, "-m", "console", "serve", "--manifests", str(manifests),
            "--traces", str(directory / "traces.db"), "--workload", f"{workload.__file__}:run",
            "--fleet", url,
        ]  # fmt: skip
        with open(directory / "serve.log", "wb") as log:
            process = subprocess.Popen(
                command, cwd=directory, stdout=log, stderr=subprocess.STDOUT, env=environment
            )  # fmt: skip
        served = Served(process, directory)
        started.append(served)
        return served

    (tmp_path / "redis").mkdir()
    with running_redis(tmp_path / "redis", PASSWORD) as redis:
        try:
            yield redis, key_file, serve
        finally:
            for served in started:
                if served.process.poll() is None:
                    served.process.kill()
                served.process.wait(10)


def fleet_view(url: str) -> FleetView:
    return anyio.run(read_fleet, url)


def states(url: str) -> dict[str, int]:
    """The tool's breaker states across the fleet; {} while Redis does not answer within the fleet's
    300 ms (a loaded machine): the polls that use it simply ask again."""
    try:
        view = fleet_view(url)
    except redis_exceptions.TimeoutError:
        return {}
    return view.tools["backend"].states if "backend" in view.tools else {}


def breaker(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["breaker", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def url_with_file(redis: RedisServer, namespace: str, directory: Path, **params: object) -> str:
    """The fleet's URL as documented first: the password in an owner-only file, not in the URL."""
    path = directory / "redis.password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return redis.url(namespace, password_file=path, **params).replace(f"default:{PASSWORD}@", "")


def test_a_late_tool_takes_the_standing_trip_and_a_fleet_wide_open_when_it_is_registered(
    fleet: tuple[RedisServer, Path, Callable[..., Served]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    redis, key_file, serve = fleet
    url = redis.url("late", key_file=key_file, quorum=1, **FAST)
    first = serve("first", url, pause_s=0.2)
    wait_for(lambda: first.alive() and states(url) == {"CLOSED": 1}, "the first process joined", 20)
    sent = time.time()
    status, out, err = breaker(
        capsys, "trip", "backend", "--attach", url, "--reason", "incident 7", "--wait", "1"
    )
    assert (status, err) == (0, ""), out
    wait_for(lambda: time.time() > sent + 1.5, "the trip expired: it may no longer be carried out late")

    # A process that joins after the trip, its workload registering the tool a second later.
    late = serve("late", url, late_s=1)
    wait_for(lambda: late.alive() and late.registered(), "the late tool registered", 20)
    wait_for(lambda: states(url) == {"FORCED_OPEN": 2}, "the late process FORCED_OPEN too")
    (tripped,) = late.events(BreakerTripped)
    assert tripped.reason == "incident 7" and tripped.actor.startswith("operator:")
    assert late.calls() == 0, "a call reached the tool before the standing trip applied"
    assert "refused" not in late.log, late.log

    # A fleet-wide open (quorum 1: one process failing opens it everywhere), then a late joiner.
    status, out, err = breaker(capsys, "reset", "backend", "--attach", url, "--reason", "done")
    assert (status, err) == (0, ""), out
    failing = serve("failing", url, mode="fail")
    wait_for(lambda: failing.alive() and states(url).get("OPEN") == 3, "open fleet-wide", 20)
    joining = serve("joining", url, late_s=1)
    wait_for(lambda: joining.alive() and joining.registered(), "the joining tool registered", 20)
    wait_for(lambda: joining.events(BreakerOpened), "the joining process's open recorded")
    (opened,) = joining.events(BreakerOpened)
    assert opened.reason.startswith("fleet: open fleet-wide when it was registered"), opened.reason
    # The workload calls every 50 ms: each call within the fleet's open period is rejected.
    wait_for(lambda: len(joining.events(CallRejected)) >= 5, "calls rejected within the open period")
    assert joining.calls() == 0, "calls reached the tool within the fleet's open period"
    assert states(url) == {"OPEN": 4}


def test_a_superseded_trip_copied_into_the_standing_record_is_refused(
    fleet: tuple[RedisServer, Path, Callable[..., Served]], capsys: pytest.CaptureFixture[str]
) -> None:
    redis, key_file, serve = fleet
    url = redis.url("replay", key_file=key_file, **FAST)
    keys = FleetKeys("replay")
    first = serve("first", url, pause_s=0.2)
    wait_for(lambda: first.alive() and states(url) == {"CLOSED": 1}, "the first process joined", 20)
    assert breaker(capsys, "trip", "backend", "--attach", url, "--reason", "old incident")[0] == 0
    assert breaker(capsys, "reset", "backend", "--attach", url, "--reason", "resolved")[0] == 0

    # Redis write access, no key: the old signed trip is copied from the stream into the record.
    with redis.client() as r:
        entries = r.xrange(keys.commands)
        trip = next(fields for _, fields in entries if fields["action"] == "trip")
        r.delete(keys.override("backend"))
        r.hset(keys.override("backend"), mapping=trip)
        r.delete(keys.commands)  # long past the stream's window for a process joining
    joined = serve("joined", url, pause_s=0.2)
    wait_for(lambda: joined.alive() and joined.registered(), "the second process's tool registered", 20)
    wait_for(lambda: "refused superseded" in joined.log, "the refusal logged")
    wait_for(lambda: states(url) == {"CLOSED": 2}, "the second process CLOSED")
    assert joined.events(BreakerTripped) == []
    (refused,) = [line for line in joined.log.splitlines() if f"command {trip['id']} " in line]
    assert (
        "refused superseded: generation 1, while the fleet's last command on the tool is of generation 2"
        in (refused)
    )


def test_a_redis_restarted_empty_gets_the_standing_trip_back_from_the_processes(
    fleet: tuple[RedisServer, Path, Callable[..., Served]], capsys: pytest.CaptureFixture[str]
) -> None:
    redis, key_file, serve = fleet
    url = redis.url("restart", key_file=key_file, **FAST)
    keys = FleetKeys("restart")
    members = [serve(name, url, pause_s=0.2) for name in ("first", "second")]
    wait_for(lambda: all(m.alive() for m in members) and states(url) == {"CLOSED": 2}, "both joined", 20)
    assert breaker(capsys, "trip", "backend", "--attach", url, "--reason", "incident 9")[0] == 0
    redis.kill()
    redis.start()  # nothing saved: the standing trip is gone from Redis, not from the processes
    with redis.client() as r:
        wait_for(lambda: r.hget(keys.override("backend"), "reason") == "incident 9", "published again", 10)
    third = serve("third", url, pause_s=0.2)
    wait_for(lambda: third.alive() and states(url) == {"FORCED_OPEN": 3}, "the third takes the trip", 20)
    (tripped,) = third.events(BreakerTripped)
    assert tripped.reason == "incident 9" and tripped.actor.startswith("operator:")
    assert "is missing from Redis (restarted empty?): published again" in "".join(m.log for m in members)


def test_a_forged_command_prints_no_line_of_its_own_in_serves_log(
    fleet: tuple[RedisServer, Path, Callable[..., Served]],
) -> None:
    redis, key_file, serve = fleet
    url = redis.url("forged", key_file=key_file, **FAST)
    member = serve("member", url, pause_s=0.2)
    wait_for(lambda: member.alive() and states(url) == {"CLOSED": 1}, "joined", 20)
    fake = "fleet command 1 (trip other): applied FORCED_OPEN"
    forged = {
        "id": "1", "action": "trip\n" + fake, "tool_id": "backend\r\n" + fake + "\x1b[1A", "reason": "",
        "actor": "mallory", "host": "h", "pid": "1", "created_at": repr(time.time()),
        "expires_at": repr(time.time() + 30), "mac": "0" * 64,
    }  # fmt: skip
    with redis.client() as r:
        r.xadd(FleetKeys("forged").commands, forged)
    wait_for(lambda: "forged or altered" in member.log, "the forged command refused")
    lines = member.log.splitlines()
    assert not [line for line in lines if line.startswith(fake)], member.log
    assert "\x1b" not in member.log
    (refusal,) = [line for line in lines if "forged or altered" in line]
    assert refusal.startswith("fleet command 1 (trip\\nfleet command 1 (trip other)"), refusal
    assert "\\x1b[1A" in refusal


def test_the_redis_password_comes_from_a_file_never_the_command_line_and_a_url_one_is_warned_about(
    fleet: tuple[RedisServer, Path, Callable[..., Served]], tmp_path: Path
) -> None:
    redis, key_file, serve = fleet
    url = url_with_file(redis, "secret", tmp_path, key_file=key_file, **FAST)
    member = serve("member", url, pause_s=0.2)
    wait_for(lambda: member.alive() and states(url) == {"CLOSED": 1}, "joined with the password's file", 20)
    cmdline = Path(f"/proc/{member.process.pid}/cmdline").read_bytes()
    assert PASSWORD.encode() not in cmdline and b"password_file=" in cmdline
    assert PASSWORD not in member.log and "holds Redis's password" not in member.log
    assert f"password_file={tmp_path}/redis.password" in member.log  # the console command to attach

    in_url = serve("in_url", redis.url("secret", key_file=key_file, **FAST), pause_s=0.2)
    wait_for(lambda: in_url.alive() and states(url) == {"CLOSED": 2}, "the second joined", 20)
    assert in_url.log.count("holds Redis's password") == 1 and PASSWORD not in in_url.log


def test_sigterm_stops_serve_within_a_bound_while_a_plain_function_is_stuck(
    fleet: tuple[RedisServer, Path, Callable[..., Served]], tmp_path: Path
) -> None:
    redis, key_file, serve = fleet
    url = redis.url("stop", key_file=key_file, **FAST)
    stuck = serve("stuck", url, timeout_ms=2000, threshold=5, mode="stuck", stuck_s=600)
    # The first call is cut off by its timeout after 2 s, its thread stuck; the second is under way.
    wait_for(lambda: stuck.alive() and stuck.calls() >= 2, "two calls stuck (one past its timeout)", 20)
    stuck.process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    assert stuck.process.wait(10) == 0
    assert time.monotonic() - sent < 5.0, "stopped within the bound"
    (said,) = [line for line in stuck.log.splitlines() if "abandoning" in line]
    assert said.startswith("tripwire serve: stopped; abandoning 2 call(s) still running in worker threads")
    assert "backend call ask of turn t1 (attempt 1, running" in said and "of turn t2 " in said
    with TraceStore(stuck.directory / "traces.db", readonly=True, verify=False, create=False) as store:
        outcomes = {row.turn_id: row.outcome for row in store.list_turns(limit=100).rows}
    assert outcomes == {"t1": "degraded", "t2": "interrupted"}, outcomes
    assert fleet_view(url).members == () or {m.status for m in fleet_view(url).members} == {"gone"}


def test_breaker_says_the_credentials_were_refused(
    fleet: tuple[RedisServer, Path, Callable[..., Served]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    redis = fleet[0]
    monkeypatch.delenv("TRIPWIRE_FLEET_PASSWORD", raising=False)
    bare = f"redis://127.0.0.1:{redis.port}/0?namespace=auth"
    status, out, err = breaker(capsys, "list", "--attach", bare)
    assert (status, out) == (2, "")
    assert err == (
        f"tripwire: the fleet's Redis 127.0.0.1:{redis.port}/0 refused the credentials: it requires a"
        " password and none was given (an owner-only file, password_file=PATH in the URL, or"
        " $TRIPWIRE_FLEET_PASSWORD)\n"
    )
    monkeypatch.setenv("TRIPWIRE_FLEET_PASSWORD", "not-it")
    status, _, err = breaker(capsys, "list", "--attach", bare)
    assert status == 2 and err.startswith(
        f"tripwire: the fleet's Redis 127.0.0.1:{redis.port}/0 refused the credentials (the default user"
        " with the password from $TRIPWIRE_FLEET_PASSWORD): "
    )
    assert "not-it" not in err
    monkeypatch.setenv("TRIPWIRE_FLEET_PASSWORD", PASSWORD)
    status, out, err = breaker(capsys, "list", "--attach", bare, "--json")
    assert (status, err) == (0, "") and json.loads(out)["namespace"] == "auth"
