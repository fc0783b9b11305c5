"""A fleet of four real ``tripwire serve --fleet`` processes on a real ``redis-server`` (issue 17).

Each process records into its own trace store and runs tests/reliability/fleet_workload.py: a
turn of one call to ``backend``, a local HTTP service this test runs and controls (up, down, slow)
and which sees every request that reaches it, by process. Two processes call every 50 ms, two
every second: the story below shows, in order,

* an outage opens ``backend`` on the two fast processes (a quorum) and then, through the fleet,
  on the two slow ones before they failed enough to open it on their own;
* at half-open exactly one probe, from one process, reaches the service while it is slow; its
  success closes the tool everywhere;
* an operator trip from ``tripwire breaker trip --attach redis://…`` is applied and acknowledged
  by all four (then a reset likewise);
* a SIGKILLed process is named as not answering a trip sent at once (exit 1), then shown stale
  (a reset no longer waits for it), then gone;
* with ``redis-server`` killed the processes go on alone (``FleetUnavailable`` in their stores,
  ``tripwire breaker list --attach redis://…`` fails on one line), and they rejoin when it is back
  (``FleetRestored``);
* nothing in the local stores is lost: every turn each workload finished is in its store, and
  ``tripwire traces check`` passes on every store, the SIGKILLed one's too.

Redis has a password, which no output, log or store holds. Timings are small (URL and manifest)
and every wait is a bounded poll.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from console.cli import main
from console.cli.breaker import FleetOutcome, fleet_answer
from console.fleet_app import FleetConsoleApp
from console.fleet_source import FleetLink
from console.widgets.item_table import ItemTable
from engine.events import BreakerOpened, Event, FleetRestored, FleetUnavailable
from engine.fleet import FleetAck, FleetView, parse_fleet_url, read_fleet
from engine.store import TraceStore
from tests.polling import wait_for
from tests.redis_server import RedisServer, running_redis
from tests.reliability import fleet_workload as workload

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "fl33t-Pa55word"
FAST = {"sync_ms": 50, "heartbeat_s": 0.2, "stale_s": 1, "gone_s": 2.5, "window_s": 10, "timeout_ms": 300}
OPEN_MS = 1500
MANIFEST = f"""
tool:
  id: backend
  side_effect: read_only
  timeout_ms: 3000
  retry_policy: {{max_attempts: 1}}
  circuit_breaker: {{failure_threshold: 2, timeout_ms: {OPEN_MS}}}
"""
PAUSES = (0.05, 0.05, 1.0, 1.0)
"""Seconds between turns: two fast processes, two slow ones."""
PROBE_S = 0.4


@dataclass
class Request:
    pid: int
    arrived: float
    answered: float = float("inf")
    ok: bool = True


@dataclass
class Service:
    """The shared backend: ``up`` or down (503), answering after ``delay_s``; every request noted."""

    up: bool = True
    delay_s: float = 0.0
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                request = Request(int(self.headers.get(workload.PID_HEADER, "0")), time.monotonic())
                with service.lock:
                    service.requests.append(request)
                    up, delay_s = service.up, service.delay_s
                time.sleep(delay_s)  # the backend being slow (a probe that lasts), not a timing check
                request.ok = up
                self.send_response(200 if up else 503)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
                request.answered = time.monotonic()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def since(self, index: int) -> list[Request]:
        with self.lock:
            return list(self.requests[index:])


@dataclass
class Member:
    """One ``tripwire serve --fleet`` process."""

    process: subprocess.Popen[str]
    directory: Path
    lines: list[str]

    def started(self) -> bool:
        """Both start-up lines printed: recording, and the fleet joined."""
        return len(self.lines) >= 2

    @property
    def store(self) -> Path:
        return self.directory / "traces.db"

    def events(self, kind: type[Event]) -> list[Any]:
        with TraceStore(self.store, readonly=True, verify=False, create=False) as store:
            return [e for e in store.events() if isinstance(e, kind)]

    def turns_run(self) -> list[str]:
        return (self.directory / "turns.txt").read_text().split()

    def turns_stored(self) -> set[str]:
        with TraceStore(self.store, readonly=True, verify=False, create=False) as store:
            return {row.turn_id for row in store.list_turns(limit=10_000).rows}


def serve(directory: Path, url: str, backend: str, pause_s: float, manifests: Path) -> Member:
    directory.mkdir()
    env = os.environ | {
        workload.BACKEND_ENV: backend, workload.TURNS_ENV: str(directory / "turns.txt"),
        workload.PAUSE_ENV: str(pause_s),
    }  # fmt: skip
    command = [
        sys.executable, "-m", "console", "serve", "--manifests", str(manifests),
        "--traces", str(directory / "traces.db"), "--workload", f"{workload.__file__}:run", "--fleet", url,
    ]  # fmt: skip
    with open(directory / "serve.log", "w") as log:
        process = subprocess.Popen(
            command, cwd=directory, stdout=subprocess.PIPE, stderr=log, text=True, env=env
        )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        lines.extend(process.stdout)

    threading.Thread(target=read, daemon=True).start()
    return Member(process, directory, lines)


def fleet_view(url: str) -> FleetView:
    return anyio.run(read_fleet, url)


def breaker(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["breaker", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def states(url: str) -> dict[str, int]:
    view = fleet_view(url)
    return view.tools["backend"].states if "backend" in view.tools else {}


def console_sees(url: str, row: tuple[str, str, str], status: str) -> None:
    """An attached console (the real app, headless at 80×24) shows ``row`` — tool, fleet state,
    processes per state — on its fleet board and ``status`` in its status bar, within 10 s."""

    async def look() -> None:
        app = FleetConsoleApp(FleetLink(parse_fleet_url(url), poll_s=0.05), actor="operator:test")
        async with app.run_test(size=(80, 24)) as pilot:
            deadline = time.monotonic() + 10

            def shown() -> bool:
                table = app.screen.query_one("#fleet-tools", ItemTable)
                rows = [tuple(str(c) for c in cells) for _, cells in table.items]
                return (row in [(r[0], r[1], r[5]) for r in rows]) and status in str(app.status_text())

            while not shown():
                assert time.monotonic() < deadline, f"the console never showed {row} and {status!r}"
                await pilot.pause(0.05)

    anyio.run(look)


RUNNING: list[Member] = []
"""The processes that must be running while the test waits: one that died fails the wait at once."""


def until(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    def holds() -> object:
        for member in RUNNING:
            if member.process.poll() is not None:
                log = (member.directory / "serve.log").read_text()
                pytest.fail(f"{what}: {member.directory.name} exited {member.process.returncode}: {log}")
        return condition()

    wait_for(holds, what, timeout)


@pytest.fixture
def http_service() -> Iterator[tuple[Service, str]]:
    service = Service()
    server = ThreadingHTTPServer(("127.0.0.1", 0), service.handler())
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service, f"http://127.0.0.1:{server.server_address[1]}/answer"
    finally:
        server.shutdown()
        server.server_close()


def test_four_served_processes_share_outages_probes_commands_and_survive_redis(
    tmp_path: Path, http_service: tuple[Service, str], capsys: pytest.CaptureFixture[str]
) -> None:
    service, backend = http_service
    key_file = tmp_path / "fleet.key"
    key_file.write_bytes(os.urandom(32))
    key_file.chmod(0o600)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "backend.yaml").write_text(MANIFEST)
    with ExitStack() as stack:
        (tmp_path / "redis").mkdir()
        redis: RedisServer = stack.enter_context(running_redis(tmp_path / "redis", PASSWORD))
        url = redis.url("procs", key_file=key_file, **FAST)
        members = [
            serve(tmp_path / f"p{n}", url, backend, pause, manifests) for n, pause in enumerate(PAUSES)
        ]
        stack.callback(_kill_all, members)
        RUNNING[:] = members
        fast, slow = members[:2], members[2:]
        pid_of = {m.process.pid: m for m in members}

        # Joined: four live processes, each with backend CLOSED; the start-up line names the fleet
        # by its safe URL, and the console command to attach with its key file.
        until(lambda: states(url) == {"CLOSED": 4}, "four processes with backend CLOSED", timeout=20)
        for member in members:
            until(member.started, "the start-up lines")
            assert "of fleet 'redis://default:***@127.0.0.1:" in member.lines[1], member.lines
            assert "?namespace=procs" in member.lines[1]
            assert member.lines[1].rstrip().endswith(f"procs&key_file={key_file}'"), member.lines  # can act

        # 1. An outage: the fast two open on their own (a quorum), the slow two through the fleet.
        service.up = False
        until(lambda: states(url) == {"OPEN": 4}, "backend OPEN in all four")
        down_requests = service.since(0)
        for member in slow:
            until(partial(member.events, BreakerOpened), "the slow process's open recorded")
            (opened,) = member.events(BreakerOpened)
            assert opened.reason == "fleet: 2 processes opened it within 10s (quorum 2)"
            failed = [r for r in down_requests if not r.ok and r.pid == member.process.pid]
            assert len(failed) < 2, "opened by the fleet before its own failures could open it"
        for member in fast:
            until(partial(member.events, BreakerOpened), "the fast process's open recorded")
            assert not member.events(BreakerOpened)[0].reason.startswith("fleet:"), "opened on its own"

        # 2. Half-open: the service is back but slow; exactly one probe reaches it, then all close.
        with service.lock:
            service.up, service.delay_s = True, PROBE_S
            mark = len(service.requests)
        until(lambda: states(url) == {"CLOSED": 4}, "backend CLOSED in all four after the probe")
        probe, *later = service.since(mark)
        assert probe.ok and probe.pid in pid_of
        during = [r for r in later if r.arrived < probe.answered]
        assert during == [], f"one probe across the fleet, but {len(during)} more arrived while it ran"
        service.delay_s = 0.0

        # 3. An operator trip from the command line reaches all four, each acknowledging it.
        status, out, err = breaker(
            capsys, "trip", "backend", "--attach", url, "--reason", "vendor maintenance", "--json"
        )
        assert (status, err) == (0, ""), out
        answer = json.loads(out)
        assert answer["status"] == "applied" and len(answer["processes"]) == 4
        assert {(p["status"], p["state"]) for p in answer["processes"]} == {("applied", "FORCED_OPEN")}
        assert {int(p["member"].split(":")[1]) for p in answer["processes"]} == set(pid_of)
        until(lambda: states(url) == {"FORCED_OPEN": 4}, "FORCED_OPEN everywhere")
        console_sees(url, ("backend", "FORCED_OPEN", "4 forced"), "4 live")
        status, out, err = breaker(capsys, "reset", "backend", "--attach", url, "--reason", "done")
        assert (status, err) == (0, "")
        assert out.startswith("backend: reset applied by 4 of 4 live processes (command ")
        assert out.count(" CLOSED (applied; was FORCED_OPEN)") == 4

        # 4. A process killed outright: a trip sent before it is seen stale names it unanswered
        # (exit 1); then it is shown stale (a reset no longer waits for it), then gone.
        killed = slow[1]
        killed_id = next(m.id for m in fleet_view(url).members if m.pid == killed.process.pid)
        RUNNING.remove(killed)
        killed.process.send_signal(signal.SIGKILL)
        killed.process.wait(10)
        status, out, err = breaker(
            capsys, "trip", "backend", "--attach", url, "--reason", "again", "--wait", "0.5"
        )
        assert status == 1 and out.startswith("backend: trip applied by 3 of 4 live processes")
        assert err == (
            f"tripwire: trip backend: unanswered: 1 of 4 live processes did not apply it:"
            f" {killed_id} unanswered\n"
        )

        def status_of_killed() -> str:
            return fleet_view(url).member(killed_id).status  # gone: its record has expired

        until(lambda: status_of_killed() == "stale", "the killed process stale")
        status, out, err = breaker(capsys, "reset", "backend", "--attach", url, "--reason", "done")
        assert (status, err) == (0, "")
        assert out.startswith("backend: reset applied by 3 of 3 live processes")
        assert out.endswith(f"  not waited for, stale: {killed_id}\n")
        until(lambda: status_of_killed() == "gone", "the killed process gone")
        status, out, _ = breaker(capsys, "list", "--attach", url, "--json")
        listing = json.loads(out)
        assert status == 0 and listing["tools"][0]["states"] == {"CLOSED": 3}
        assert sorted(p["status"] for p in listing["processes"]) == ["gone", "live", "live", "live"]

        # 5. Redis killed mid-run: the others go on alone, saying so, and rejoin when it is back.
        alive = [*fast, slow[0]]
        redis.kill()
        for member in alive:
            until(partial(member.events, FleetUnavailable), "FleetUnavailable recorded")
        status, out, err = breaker(capsys, "list", "--attach", url)
        assert status == 2 and out == ""
        assert err.startswith(
            f"tripwire: the fleet's Redis default@127.0.0.1:{redis.port}/0 cannot be reached"
        )
        assert err.count("\n") == 1
        ran = len(fast[0].turns_run())
        until(lambda: len(fast[0].turns_run()) >= ran + 5, "turns go on without Redis")
        redis.start()
        for member in alive:
            until(partial(member.events, FleetRestored), "FleetRestored recorded")
        until(lambda: states(url) == {"CLOSED": 3}, "the three rejoined")

        # 6. Nothing in the local stores is lost.
        RUNNING.clear()
        for member in alive:
            member.process.send_signal(signal.SIGTERM)
        for member in alive:
            assert member.process.wait(15) == 0
    for member in members:
        if member is not killed:
            run = member.turns_run()
            missing = set(run) - member.turns_stored()
            assert run and not missing, f"{len(missing)} of {len(run)} turns not in {member.store}"
        assert main(["traces", "check", "--traces", str(member.store)]) == 0
        capsys.readouterr()
        log = (member.directory / "serve.log").read_text()
        assert "Traceback" not in log
        for text in (log, "".join(member.lines), member.store.read_bytes().decode("latin-1")):
            assert PASSWORD not in text


def _kill_all(members: list[Member]) -> None:
    for member in members:
        if member.process.poll() is None:
            member.process.kill()
        member.process.wait(10)


def test_serve_refuses_a_bad_fleet_url_on_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "traces.db"
    for url, problem in (
        ("http://h:1/0?namespace=x", "a fleet URL starts with redis:// or rediss://, not http://"),
        ("redis://u:hunter2@h:1/0?namespace=x&colour=red", "unknown fleet URL parameter 'colour'"),
        ("redis://u:hunter2@h:1/0?namespace=a%20b", "namespace 'a b' must match"),
        (
            f"redis://h:1/0?key_file={tmp_path}/none",
            f"the fleet's command key {tmp_path}/none does not exist",
        ),
    ):
        status = main(["serve", "--fleet", url, "--traces", str(traces), "--manifests", str(tmp_path)])
        out, err = capsys.readouterr()
        assert (status, out) == (2, "")
        assert err.startswith(f"tripwire: --fleet: {problem}") and err.count("\n") == 1, err
        assert "hunter2" not in err
    assert not traces.exists(), "refused before anything was opened"


def test_breaker_on_a_fleet_refuses_bad_input_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIPWIRE_FLEET_KEY_FILE", raising=False)
    status, _, err = breaker(capsys, "list", "--attach", "redis://u:hunter2@h:1/0?quorum=0")
    assert status == 2 and err == "tripwire: --attach: quorum must be at least 1, got 0\n"
    status, _, err = breaker(capsys, "trip", "t", "--attach", "redis://127.0.0.1:1/0", "--reason", "r")
    assert status == 2
    assert err.startswith("tripwire: read-only: no fleet command key to sign with: key_file=PATH")


def test_a_fleet_action_refused_by_one_process_exits_1_naming_it_and_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    acks = {
        "h:1:a": FleetAck("h:1:a", "applied", "FORCED_OPEN", 0.0),
        "h:2:b": FleetAck("h:2:b", "refused", "this process has no fleet command key", 0.0),
    }
    outcome = FleetOutcome(7, ["h:1:a", "h:2:b"], {"h:1:a": "CLOSED", "h:2:b": "CLOSED"}, acks, [])

    assert fleet_answer("trip", "search", "maintenance", 5.0, outcome, as_json=False) == 1

    out, err = capsys.readouterr()
    assert out == (
        "search: trip applied by 1 of 2 live processes (command 7)\n"
        "  h:1:a FORCED_OPEN (applied; was CLOSED)\n"
        "  h:2:b (refused: this process has no fleet command key)\n"
    )
    assert err == "tripwire: trip search: refused: 1 of 2 live processes did not apply it: h:2:b refused\n"


def test_without_the_fleet_extra_serve_and_breaker_name_it_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "engine.fleet" or m.startswith("engine.fleet.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "redis", None)  # as if redis-py were not installed
    url = "redis://127.0.0.1:1/0?namespace=x"
    traces = tmp_path / "traces.db"

    status = main(["serve", "--fleet", url, "--traces", str(traces), "--manifests", str(tmp_path)])
    assert (status, capsys.readouterr().err) == (
        2, "tripwire: --fleet needs the fleet extra: pip install 'tripwire[fleet]'\n"
    )  # fmt: skip
    assert not traces.exists()
    status, _, err = breaker(capsys, "list", "--attach", url)
    assert (status, err) == (
        2, "tripwire: --attach redis://…: a fleet needs the fleet extra: pip install 'tripwire[fleet]'\n"
    )  # fmt: skip
