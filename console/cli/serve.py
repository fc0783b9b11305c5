"""``tripwire serve``: the engine headless, recording to its trace store and applying the operator
commands of attached consoles, until a signal stops it; with ``--metrics-port``, serving its
Prometheus metrics (:mod:`engine.exporters.prometheus`) for as long; with ``--fleet``, a process
of a fleet (:mod:`engine.fleet`): breaker decisions, operator commands and live events shared
through Redis, the trace store still its own."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio import CancelScope
from anyio.abc import TaskStatus

from console.cli.run import warn_refused
from console.cli.stuck_calls import leave_stuck_calls
from console.extras import requires_extra
from console.host import Workload, driven_engine
from console.usage import UsageError
from engine.engine import Engine
from engine.errors import one_line
from engine.locations import bundled_manifests
from engine.store import OverridePolicy, RetentionPolicy, TraceRecorder, TraceStore, serve_operator_commands

if TYPE_CHECKING:
    from engine.fleet import Fleet, FleetConfig


def serve_command(args: argparse.Namespace, retention: RetentionPolicy) -> int:
    """The service, until stopped; its exit status (1 when the workload died)."""
    manifests: Path = args.manifests
    metrics_port: int | None = getattr(args, "metrics_port", None)
    metrics_addr = _metrics_addr(metrics_port, getattr(args, "metrics_addr", None))
    fleet_url: str | None = getattr(args, "fleet", None)
    fleet = _fleet_config(fleet_url) if fleet_url is not None else None  # refused before anything runs
    scenario = args.scenario or bundled_manifests() / "demo" / "live.yaml"
    engine, workload, _ = driven_engine(manifests, scenario=scenario, workload=args.workload, record=True)
    assert workload is not None  # a scenario, when not a workload of yours
    warn_refused(engine)
    try:
        with _served_metrics(engine, metrics_port, metrics_addr), TraceStore(args.traces) as store:
            # The command key (made beside the store if there is none): a key others may read is
            # refused here, on one line, before anything runs.
            key = None if args.no_commands else store.command_key()
            store.set_taking_commands(key is not None)  # what attached consoles are told
            # Batches: the engine never waits for the disk; attached consoles read what is committed.
            # An operator's trip or disable stands until reset, across restarts (unless forgotten).
            overrides: OverridePolicy = "forget" if args.forget_overrides else "keep"
            recorder = TraceRecorder(store, durability="batch", retention=retention, overrides=overrides)
            recorder.attach(engine)
            try:
                recorder.flush()  # the manifests in force are stored before anyone is told to attach
                service = partial(
                    _run_service, engine, store, workload, args.traces, args.poll_ms / 1000, key,
                    _fleet(engine, *fleet, commands=not args.no_commands) if fleet is not None else None,
                    recorder.flush,
                )  # fmt: skip
                status = anyio.run(service, backend="asyncio")
            finally:
                recorder.close()
    finally:
        engine.close()
    # Everything written: calls still running in worker threads are named and left behind.
    leave_stuck_calls(engine, status, who="tripwire serve")
    return status


METRICS_ADDR_DEFAULT = "127.0.0.1"


def _metrics_addr(port: int | None, addr: str | None) -> str:
    """Where the metrics endpoint listens; a one-line refusal, before anything starts, when
    ``--metrics-addr`` comes without a port or the prometheus extra is not installed."""
    if port is None:
        if addr is not None:
            raise UsageError("--metrics-addr needs --metrics-port: the port to serve the metrics on")
        return METRICS_ADDR_DEFAULT
    with requires_extra("--metrics-port", "prometheus"):
        import prometheus_client  # noqa: F401 - start-up: loaded only when metrics are served
    return addr if addr is not None else METRICS_ADDR_DEFAULT


@contextmanager
def _served_metrics(engine: Engine, port: int | None, addr: str) -> Iterator[None]:
    """The engine's Prometheus metrics on the global registry (with the process's own metrics),
    served at ``http://addr:port/metrics`` for the block; nothing when ``port`` is None."""
    if port is None:
        yield
        return
    # Start-up: prometheus_client is loaded only by a serve with --metrics-port.
    from engine.exporters.prometheus import PrometheusMetrics, start_metrics_server

    with PrometheusMetrics(engine) as metrics:
        try:
            server = start_metrics_server(metrics, port, addr)
        except OSError as exc:
            problem = exc.strerror or str(exc)
            raise UsageError(f"--metrics-port {port}: cannot listen on {addr}: {problem}") from None
        with server:
            print(f"tripwire serve: Prometheus metrics at {server.url}", flush=True)
            yield


def _fleet_config(url: str) -> tuple[FleetConfig, bytes | None]:
    """``--fleet URL``'s config and operator-command key; a one-line refusal, before anything
    starts, for a bad URL, a key file that cannot be used or no redis-py. Never the password."""
    with requires_extra("--fleet", "fleet"):
        # Start-up: redis-py is loaded only by a serve with --fleet (and is an extra).
        from engine.fleet import KEY_FILE_ENV, FleetConfigError, load_fleet_key, parse_fleet_url
    try:
        config = parse_fleet_url(url)
    except FleetConfigError as exc:
        raise UsageError(f"--fleet: {one_line(str(exc))}") from None
    path = config.key_path()
    if path is not None and not path.exists():
        raise UsageError(
            f"--fleet: the fleet's command key {path} does not exist (key_file= or ${KEY_FILE_ENV})"
        )
    return config, load_fleet_key(config)


def _fleet(engine: Engine, config: FleetConfig, key: bytes | None, *, commands: bool) -> tuple[Fleet, bool]:
    """The engine's membership of the fleet, and whether it takes the fleet's operator commands
    (with ``--no-commands`` it takes none, as from an attached console)."""
    from engine.fleet import Fleet  # start-up: loaded with --fleet only, after its import worked

    return Fleet(engine, config, key=key, commands=commands), commands and key is not None


async def _run_service(
    engine: Engine, store: TraceStore, workload: Workload, traces: Path, poll_s: float, key: bytes | None,
    fleet: tuple[Fleet, bool] | None = None, flush: Callable[[float], bool] | None = None,
) -> int:  # fmt: skip
    """The engine, its workload, (given the command key) the operator commands and (given one)
    its fleet membership, in one task group until a signal."""
    status = 0
    async with engine, anyio.create_task_group() as group:
        await group.start(_cancel_on_signal, group.cancel_scope)
        if key is not None:
            # Acknowledged once the transition is committed: "applied" survives a kill at once.
            commands = partial(serve_operator_commands, engine, store, key=key, poll_s=poll_s, flush=flush)
            await group.start(commands)
        if fleet is not None:  # started after one round trip; Redis away, it goes on by its policy
            await group.start(fleet[0].run)
        where = shlex.quote(str(traces))
        taking = "" if key is not None else ", taking no operator commands"
        print(
            f"tripwire serve: recording to {where}{taking}; attach with: tripwire console --attach {where}",
            flush=True,
        )
        if fleet is not None:
            print(f"tripwire serve: {_fleet_line(*fleet)}", flush=True)
        try:
            await workload(engine)
        except Exception as exc:  # a service whose workload died stops, saying why, on one line
            problem = one_line(f"{type(exc).__name__}: {exc}")
            print(f"tripwire: workload failed: {problem}", file=sys.stderr)
            status = 1
            group.cancel_scope.cancel()
        # A workload that returns leaves the engine serving commands and timers until stopped.
    return status


def _fleet_line(fleet: Fleet, taking: bool) -> str:
    """The fleet joined, by its safe URL (never the password), and whether it takes commands; the
    console command to attach names the key file too, so that it can act."""
    url = shlex.quote(fleet.config.safe_url)
    state = "" if fleet.available else f" (Redis unreachable: running {fleet.config.on_unavailable})"
    commands = "" if taking else ", taking no fleet commands (no key_file= nor $TRIPWIRE_FLEET_KEY_FILE)"
    where = f"member {fleet.member.id} of fleet {url}{state}{commands}"
    return f"{where}; attach with: tripwire console --attach {shlex.quote(fleet.config.attach_url)}"


async def _cancel_on_signal(scope: CancelScope, *, task_status: TaskStatus[None]) -> None:
    """Ctrl-C or SIGTERM: a clean stop, everything recorded (exit status 0)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            scope.cancel()
            return
