"""The ``tripwire`` command: its entry point, the checks every command shares, and the dispatch to
each command's module (``console.cli.traces``, ``console.cli.breaker``, …).

Each command's module is imported only when that command runs: ``tripwire traces list`` must not
pay for Textual, anyio or the engine, nor ``--help`` for the trace store.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from console.cli.arguments import FLEET_SCHEMES, LIMIT_MAX, POLL_MS_MAX, WAIT_S_MAX, build_parser
from console.cli.doctor import report, startup_problem
from console.extras import fleet_target, requires_extra
from console.usage import UsageError
from engine.errors import TraceStoreError, one_line
from engine.locations import bundled_manifests, default_manifests, default_trace_store

if TYPE_CHECKING:
    from engine.store import RetentionPolicy

PIPE_CLOSED = 141
"""Exit status when the reader of stdout has gone (``tripwire traces list | head -1``): 128 + SIGPIPE,
what a shell reports for git or cat there; nothing is printed about it."""
KEEP_MAX = 1_000_000_000
TOLERANCE_MS_MAX = 60_000.0
REFRESH_HZ = (1.0, 30.0)


class _PipeConsole(Console):
    """Rich exits with status 1 when stdout's reader has gone; raising lets main() end every command alike."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of stdout has gone")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``tripwire`` command; its exit status: 0, 1 for a replay that differs, 2 for bad input,
    130 on Ctrl-C, ``PIPE_CLOSED`` when the reader of stdout has gone."""
    try:
        try:
            return _main(argv)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # a reader that has gone is found here, not at the interpreter's exit
    except BrokenPipeError:
        return _stdout_gone()
    except BaseExceptionGroup as group:  # printed from inside a task group (a turn's report)
        if not _only_broken_pipes(group):
            raise
        return _stdout_gone()


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    console = _PipeConsole()
    command = args.command or "console"
    if command == "doctor":
        lines, healthy = report(terminal_problem())
        print("\n".join(lines))
        return 0 if healthy else 2
    if (problem := startup_problem()) is not None:
        print(f"tripwire: {problem}", file=sys.stderr)
        return 2
    try:
        _check_numbers(args)
        _resolve_defaults(command, args)
        return _dispatch(command, args, console)
    except KeyboardInterrupt:
        return 130
    except TraceStoreError as error:
        print(f"tripwire: {error}", file=sys.stderr)
        return 2
    except _config_errors() as error:
        print(f"tripwire: {error}", file=sys.stderr)  # one line, never wrapped
        return 2
    except _usage_errors() as error:
        print(f"tripwire: {one_line(str(error))}", file=sys.stderr)
        return 2


def _only_broken_pipes(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_only_broken_pipes(e) for e in error.exceptions)
    return isinstance(error, BrokenPipeError)


def _stdout_gone() -> int:
    """Quietly, as ``git log | head`` does: what is still buffered goes to /dev/null, not to a traceback."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return PIPE_CLOSED


def _check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option in its range, before anything is opened or started."""
    limit: int | None = getattr(args, "limit", None)
    if limit is not None and not 1 <= limit <= LIMIT_MAX:
        raise UsageError(f"--limit must be from 1 to {LIMIT_MAX}, got {limit}")
    keep: int | None = getattr(args, "keep", None)
    if keep is not None and keep < 1:
        raise UsageError(
            f"--keep must be at least 1, got {keep}: it is how many of the newest turns stay"
            " (to remove every turn, delete the store file)"
        )
    if keep is not None and keep > KEEP_MAX:
        raise UsageError(f"--keep must be at most {KEEP_MAX}, got {keep}")
    low, high = REFRESH_HZ
    refresh_hz: float | None = getattr(args, "refresh_hz", None)
    if refresh_hz is not None and not low <= refresh_hz <= high:
        raise UsageError(f"--refresh-hz must be from {low:g} to {high:g}, got {refresh_hz:g}")
    if getattr(args, "retention_age", None) is not None or getattr(args, "retention_size", None) is not None:
        _retention(args)  # a bad age or size is refused before anything is opened (start-up: only if given)
    tolerance_ms: float | None = getattr(args, "tolerance_ms", None)
    if tolerance_ms is not None and not 0 <= tolerance_ms <= TOLERANCE_MS_MAX:
        raise UsageError(f"--tolerance-ms must be from 0 to {TOLERANCE_MS_MAX:g}, got {tolerance_ms:g}")
    wait: float | None = getattr(args, "wait", None)
    if wait is not None and not 0 < wait <= WAIT_S_MAX:
        raise UsageError(f"--wait must be above 0 and at most {WAIT_S_MAX:g}, got {wait:g}")
    poll_ms: float | None = getattr(args, "poll_ms", None)
    if poll_ms is not None and not poll_ms > 0:
        raise UsageError(f"--poll-ms must be positive, got {poll_ms:g}")
    if poll_ms is not None and not poll_ms <= POLL_MS_MAX:
        raise UsageError(f"--poll-ms must be at most {POLL_MS_MAX:g}, got {poll_ms:g}")


def _resolve_defaults(command: str, args: argparse.Namespace) -> None:
    """Fill in the paths nobody gave (see :mod:`engine.locations`), noting why each was chosen;
    an attached console takes none."""
    if getattr(args, "attach", None) is not None:
        return
    if command in ("console", "serve", "run", "demo") and getattr(args, "manifests", None) is None:
        args.manifests = default_manifests().path
    if command in ("init", "doctor"):
        return
    if getattr(args, "traces", None) is None:
        store = default_trace_store()
        args.traces, args.traces_why = store.path, store.why
    else:
        args.traces_why = "given with --traces"


def terminal_problem() -> str | None:
    """Why the full-screen console cannot run here, or None: it reads keys and draws a screen."""
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr)):
        try:
            if stream is None or not stream.isatty():
                return f"{name} is not a TTY"
        except ValueError:  # closed
            return f"{name} is closed"
    if os.environ.get("TERM") == "dumb":
        return "TERM=dumb"
    return None


def _need_terminal() -> None:
    """Without a terminal the screen would go to a file or nowhere, for as long as the console ran."""
    if (problem := terminal_problem()) is not None:
        raise UsageError(f"the console needs a terminal ({problem}); try `tripwire demo` or `tripwire serve`")


def _config_errors() -> tuple[type[Exception], ...]:
    """``ConfigError``, if its module was loaded: nothing else can raise it. (Start-up: engine.config
    brings pydantic and PyYAML, 60–90 ms that ``--help`` and ``traces`` do not need.)"""
    config = sys.modules.get("engine.config")
    return (config.ConfigError,) if config is not None else ()


def _usage_errors() -> tuple[type[Exception], ...]:
    """``UsageError``, and ``WorkloadError`` if its module was loaded (start-up: console.host brings
    the engine and anyio)."""
    host = sys.modules.get("console.host")
    return (UsageError, host.WorkloadError) if host is not None else (UsageError,)


def _retention(args: argparse.Namespace) -> RetentionPolicy:
    """The retention policy the flags ask for (the defaults when they ask for nothing)."""
    from engine.store import RetentionPolicy  # start-up: the trace store is not loaded for --help

    try:
        return RetentionPolicy.parse(
            getattr(args, "retention_age", None), getattr(args, "retention_size", None)
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _console(args: argparse.Namespace) -> int:
    attach: str | None = getattr(args, "attach", None)
    if attach is not None and getattr(args, "forget_overrides", False):
        raise UsageError(
            "--forget-overrides is for an engine of the console's own: the attached engine keeps its"
            " own (tripwire serve --forget-overrides)"
        )
    if attach is not None and attach.startswith(FLEET_SCHEMES):
        return _fleet_console(args, attach)
    if attach is not None:
        return _attached_console(args, Path(attach))
    from console.live import LiveOptions, build_live_app  # start-up: Textual, for this command only

    manifests: Path = args.manifests
    workload = getattr(args, "workload", None)
    scenario = getattr(args, "scenario", None)
    if scenario is None and workload is None:
        scenario = bundled_manifests() / "demo" / "live.yaml"
    if getattr(args, "no_record", False) and getattr(args, "forget_overrides", False):
        raise UsageError(
            "--forget-overrides drops those kept in the trace store: it cannot be used with --no-record"
        )
    _need_terminal()  # before the engine starts and the store is created
    no_record = getattr(args, "no_record", False)
    replay: str | None = getattr(args, "replay", None)
    if replay is not None:
        if no_record:
            raise UsageError("--replay plays a turn of the trace store: it cannot be used with --no-record")
        _check_replayable(args.traces, replay)
    options = LiveOptions(
        manifests=manifests,
        traces=None if no_record else args.traces,
        scenario=scenario,
        workload=workload,
        read_only=getattr(args, "read_only", False),
        refresh_hz=getattr(args, "refresh_hz", 10.0),
        retention=_retention(args),
        forget_overrides=getattr(args, "forget_overrides", False),
    )
    app = build_live_app(options)
    app.replay_turn = replay
    app.run()
    return 0


def _check_replayable(store_path: Path, turn_id: str) -> None:
    """``--replay``: the turn is in the store, or one line says why not (before any screen)."""
    from engine.store import TraceStore  # start-up: the trace store is not loaded for --help

    with TraceStore(store_path, readonly=True, verify=False, create=False) as store:
        store.load_turn(turn_id)


def _attach_conflicts(args: argparse.Namespace) -> list[str]:
    """The flags an attached console cannot take: it records nothing and runs no manifests."""
    return [
        flag
        for flag, value in (
            ("--traces", args.traces),
            ("--manifests", args.manifests),
            ("--retention-age", args.retention_age),
            ("--retention-size", args.retention_size),
        )
        if value is not None
    ] + (["--no-record"] if args.no_record else [])


def _fleet_console(args: argparse.Namespace, url: str) -> int:
    """``--attach redis://…``: the console over the fleet in that Redis namespace."""
    with requires_extra(fleet_target(url), "fleet"):
        from console.fleet_app import build_fleet_app  # start-up: Textual and redis, for this command only
        from engine.fleet import FleetConfigError, parse_fleet_url  # start-up: likewise

    try:
        config = parse_fleet_url(url)
    except FleetConfigError as exc:
        raise UsageError(f"--attach: {exc}") from None  # its message never holds the password
    given = _attach_conflicts(args) + (["--replay"] if args.replay is not None else [])
    if given:
        raise UsageError(
            f"--attach {config.safe_url}: {' and '.join(given)} cannot be used with it: a fleet console"
            " records nothing, replays nothing, and each process reads its own manifests"
        )
    _need_terminal()
    app = build_fleet_app(config, read_only=args.read_only, refresh_hz=args.refresh_hz)
    app.run()
    return 0


def _attached_console(args: argparse.Namespace, attach: Path) -> int:
    from console.attach import build_attached_app  # start-up: Textual, for this command only

    given = _attach_conflicts(args)
    if given:
        raise UsageError(
            f"--attach {attach}: {' and '.join(given)} cannot be used with it: an attached console records"
            " nothing and the engine reads its own manifests"
        )
    if args.replay is not None:
        _check_replayable(attach, args.replay)
    # Opening the store (read-only, nothing started) first: a wrong path is the problem to report.
    app = build_attached_app(
        attach, read_only=args.read_only, refresh_hz=args.refresh_hz, replay_turn=args.replay
    )
    try:
        _need_terminal()
    except BaseException:
        app.link.close()
        raise
    app.run()
    return 0


def _dispatch(command: str, args: argparse.Namespace, console: Console) -> int:
    # Each branch imports its command's module: start-up pays only for the command that runs.
    if command == "console":
        return _console(args)
    if command == "init":
        return _init(args.directory)
    if command == "serve":
        from console.cli.serve import serve_command  # start-up: anyio and the engine, for serve only

        return serve_command(args, _retention(args))
    if command in ("run", "demo"):
        from console.cli.run import run_command  # start-up: anyio and the engine, for run and demo only

        manifests: Path = args.manifests
        scenario = args.scenario if command == "run" else bundled_manifests() / "demo" / "scenario.yaml"
        record = None if args.no_record else args.traces
        return run_command(
            scenario,
            manifests,
            real_time=getattr(args, "real_time", False),
            as_json=getattr(args, "json", False),
            console=console,
            traces=record,
        )
    if command == "breaker":
        from console.cli import breaker  # start-up: the attached link, for breaker only

        if args.action == "list":
            return breaker.list_command(args.attach, console, as_json=args.json)
        return breaker.act_command(
            args.attach, args.action, args.tool, reason=args.reason, wait_s=args.wait, as_json=args.json
        )
    if command == "replay":
        from console.cli.replay import replay_command  # start-up: the trace store, for replay only

        tolerance_s = args.tolerance_ms / 1000.0
        return replay_command(args.traces, args.turn_id, console, as_json=args.json, tolerance_s=tolerance_s)
    from console.cli import traces as t  # start-up: the trace store, for traces only

    if args.action == "where":
        return t.where_command(args.traces, args.traces_why, console, as_json=args.json)
    if args.action == "list":
        return t.list_command(
            args.traces, console, limit=args.limit, cursor=args.cursor, outcome=args.outcome, tool=args.tool,
            since=args.since, until=args.until, as_json=args.json,
        )  # fmt: skip
    if args.action == "show":
        return t.show_command(args.traces, args.turn_id, console, as_json=args.json)
    if args.action == "audit":
        return t.audit_command(
            args.traces, console, since=args.since, until=args.until, limit=args.limit, as_json=args.json
        )
    if args.action == "check":
        return t.check_command(args.traces, console, full=args.full, as_json=args.json)
    if args.action == "export":
        return t.export_command(
            args.traces, args.turn_id, args.output, since=args.since, until=args.until, force=args.force
        )
    return t.prune_command(
        args.traces, console, older_than=args.older_than, keep=args.keep, as_json=args.json
    )


def _init(directory: Path) -> int:
    """``tripwire init``: the starter project, then what to do next."""
    from console.cli.init import ProjectExists, init_project  # start-up: for init only

    try:
        written = init_project(directory)
    except ProjectExists as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    here = "" if directory.resolve() == Path.cwd().resolve() else f"cd {shlex.quote(str(directory))} && "
    print(f"next: {here}tripwire run scenario.yaml && tripwire traces list")
    return 0
