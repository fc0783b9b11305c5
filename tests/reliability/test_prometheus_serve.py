"""``tripwire serve --metrics-port``: a real service's ``/metrics``, scraped over HTTP and read back
with prometheus-client's parser; the endpoint lives and stops with the service (SIGTERM: exit 0).

Misuse is refused on one line before anything starts: ``--metrics-port`` without the prometheus
extra (it names the extra), ``--metrics-addr`` without a port, a port out of range or taken.
"""

from __future__ import annotations

import select
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.cli import main
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXTRA = "pip install 'tripwire[prometheus]'"

WORKLOAD = """
from engine.turn import ToolCall, Turn

failures = [ConnectionResetError("reset by peer")]

async def flaky_api(**args):
    if failures:
        raise failures.pop()
    return "ok"

async def locked_api(**args):
    raise PermissionError("no access")

async def run(engine):
    engine.register("flaky_api", flaky_api)
    engine.register("locked_api", locked_api)
    calls = [ToolCall("call-a1", "flaky_api"), ToolCall("call-b2", "locked_api")]
    await engine.run_turn(Turn(calls, id="turn-x9"))
"""


@contextmanager
def serving(tmp_path: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """``tripwire serve`` on the workload above with no manifests (the defaults); stderr to a log."""
    (tmp_path / "agent.py").write_text(textwrap.dedent(WORKLOAD))
    (tmp_path / "manifests").mkdir()
    command = [sys.executable, "-m", "console", "serve", "--traces", str(tmp_path / "traces.db"),
               "--manifests", str(tmp_path / "manifests"), "--workload", f"{tmp_path / 'agent.py'}:run",
               *extra]  # fmt: skip
    with open(tmp_path / "serve.log", "w") as log:
        process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()


def first_line(process: subprocess.Popen[str], timeout: float = 20.0) -> str:
    """The service's first line on stdout, within ``timeout`` seconds (it has died if it is empty)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"nothing printed within {timeout:g}s"
    return process.stdout.readline()


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        page = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_exposes_the_engines_metrics_and_stops_with_the_service(tmp_path: Path) -> None:
    with serving(tmp_path, "--metrics-port", "0") as process:
        line = first_line(process)
        assert line.startswith("tripwire serve: Prometheus metrics at http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].strip()
        assert url.endswith("/metrics")
        turn_done = key("tripwire_turns_total", outcome="degraded")
        wait_for(lambda: scrape(url).get(turn_done) == 1, "the workload's turn counted", timeout=15)

        samples = scrape(url)
        assert samples[key("tripwire_calls_total", tool="flaky_api", outcome="ok")] == 1
        assert samples[key("tripwire_calls_total", tool="locked_api", outcome="failed")] == 1
        assert samples[key("tripwire_attempts_total", tool="flaky_api")] == 2
        assert samples[key("tripwire_retries_total", tool="flaky_api")] == 1
        errors = "tripwire_errors_total"
        assert samples[key(errors, tool="flaky_api", kind="connection_reset", **{"class": "transient"})] == 1
        assert samples[key(errors, tool="locked_api", kind="auth_error", **{"class": "permanent"})] == 1
        assert samples[key("tripwire_attempt_duration_seconds_count", tool="flaky_api")] == 2
        assert samples[key("tripwire_breaker_state", tool="flaky_api", state="CLOSED")] == 1
        assert samples[key("tripwire_breaker_state", tool="locked_api", state="OPEN")] == 0
        assert any(name.startswith("process_") for name, _ in samples), (
            "the global registry: process metrics too"
        )
        values = {value for name, labels in samples if name.startswith("tripwire_") for _, value in labels}
        assert not values & {"call-a1", "call-b2", "turn-x9"}

        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
    with pytest.raises(urllib.error.URLError):  # the endpoint stopped with the service
        scrape(url)


def test_metrics_port_without_the_extra_says_which_extra_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "engine.exporters.prometheus", raising=False)
    traces = tmp_path / "traces.db"

    status = main(["serve", "--metrics-port", "9464", "--traces", str(traces), "--manifests", str(tmp_path)])

    assert status == 2
    err = capsys.readouterr().err
    assert err == f"tripwire: --metrics-port needs the prometheus extra: {EXTRA}\n"
    assert not traces.exists(), "refused before anything was opened"


def test_metrics_addr_without_a_port_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = tmp_path / "traces.db"
    status = main(
        ["serve", "--metrics-addr", "0.0.0.0", "--traces", str(traces), "--manifests", str(tmp_path)]
    )
    assert status == 2
    assert (
        capsys.readouterr().err
        == "tripwire: --metrics-addr needs --metrics-port: the port to serve the metrics on\n"
    )
    assert not traces.exists()


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_refused_by_the_parser(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", f"--metrics-port={port}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tripwire: argument --metrics-port: ") and err.count("\n") == 1


def test_a_port_already_taken_is_one_line_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "traces.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(
            ["serve", "--metrics-port", str(port), "--traces", str(traces), "--manifests", str(tmp_path)]
        )
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tripwire: --metrics-port {port}: cannot listen on 127.0.0.1: ")
    assert err.count("\n") == 1
    assert not traces.exists(), "the metrics endpoint comes up before the trace store is opened"
