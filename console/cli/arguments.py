"""The ``tripwire`` command's arguments: every command, option and help text, in one parser."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from console.cli.doctor import version
from console.extras import pip_install
from engine.errors import one_line

TRACES_DEFAULT = "./traces/traces.db in a project with a traces/ directory, else your data directory"
MANIFESTS_DEFAULT = "./manifests if there is one, else the bundled demo manifests"
LIMIT_MAX = 10_000
"""Turns per page of ``traces list``."""
POLL_MS_MAX = 60_000.0
WAIT_S_MAX = 3600.0
"""The longest ``breaker trip --wait``: the engine refuses a command valid for longer."""
WAIT_S_DEFAULT = 5.0
PORT_MAX = 65_535
FLEET_SCHEMES = ("redis://", "rediss://")
"""An ``--attach`` starting so names a fleet's Redis, not a trace store."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line like every other: ``tripwire: <problem> (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tripwire: {one_line(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tripwire",
        description="Tool-call resilience engine and operations console for AI agents.",
    )
    parser.add_argument("--version", action="version", version=f"tripwire {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a scenario of turns against the bundled tools and print a report",
        description="Run a scenario (YAML turns, optionally with a fault plan) against the manifests "
        "with the bundled travel-agent tools, on a virtual clock unless --real-time, and print each "
        "turn's outcome and the per-tool metrics. Turns are recorded in the trace store.",
    )
    run.add_argument("scenario", type=Path, help="scenario file, e.g. scenario.yaml (after tripwire init)")
    _run_options(run)

    init = commands.add_parser(
        "init",
        help="write a starter project: manifests/, a first scenario, traces/",
        description="Write a starter project into DIR (default: here): manifests/ with defaults.yaml "
        "and one commented example tool, scenario.yaml with its fault plan, and traces/ for the trace "
        "store. Never overwrites: if any of those files exists, nothing is written.",
    )
    init.add_argument("directory", nargs="?", type=Path, default=Path("."), metavar="DIR")

    commands.add_parser(
        "doctor",
        help="check the installation: versions, packages, default paths, the terminal",
        description="Say which tripwire this is, whether its engine and console packages are its own "
        "(PyPI has an unrelated package named console), and which manifests and trace store it uses "
        "by default here. Exits 2 when something is wrong.",
    )

    live = commands.add_parser(
        "console",
        help="the operations console (the default command)",
        description="Open the operations console on a live engine: the bundled demo (the "
        "travel-agent tools through a looping outage), a scenario of yours with --scenario, or "
        "your own workload with --workload. Hot-reloads the manifests; records turns in the "
        "trace store. With --attach DB it runs no engine: it watches the one recording into DB "
        "(tripwire serve) and sends it the operator actions. With --attach redis://HOST:PORT/DB?"
        "namespace=NAME it watches a fleet: every process sharing that Redis namespace, and its "
        "operator actions go to all of them (signed with the fleet key: key_file= in the URL or "
        "$TRIPWIRE_FLEET_KEY_FILE; without one it is read-only).",
    )
    _engine_options(live)
    source = _workload_options(live)
    source.add_argument(
        "--attach",
        metavar="DB|URL",
        help="watch the engine recording into this trace store (tripwire serve) instead of running one;"
        " a redis:// or rediss:// URL watches the fleet in that Redis namespace",
    )
    _retention_options(live)
    _override_options(live)
    live.add_argument("--read-only", action="store_true", help="watch only: no trip, reset or disable")
    live.add_argument(
        "--refresh-hz", type=float, default=10.0, help="redraws per second (1 to 30, default 10)"
    )
    live.add_argument(
        "--replay",
        metavar="TURN_ID",
        help="start in the replay player on this stored turn (from --traces, or the --attach store);"
        " x returns to the live board",
    )

    demo = commands.add_parser(
        "demo",
        help="run the bundled demo scenario (manifests/demo/scenario.yaml)",
        description="Run the bundled demo: the travel-agent tools through a scripted outage that "
        "reaches every outcome (retries, timeouts, cascades, alternatives, breakers).",
    )
    _run_options(demo)

    serve = commands.add_parser(
        "serve",
        help="run the engine headless, as an agent service a console can attach to",
        description="Run an engine in real time without a screen, as an agent service would: the bundled "
        "demo (manifests/demo/live.yaml in a loop), your scenario in a loop, or your own workload. Every "
        "event is recorded in the trace store, and the operator commands of consoles attached to it "
        "(tripwire console --attach DB) are applied when signed with the store's command key, DB.key "
        "(made owner-only if there is none; --no-commands: none are taken). With "
        "--metrics-port it also serves Prometheus metrics at /metrics. With --fleet redis://… it joins a "
        "fleet of processes sharing breaker decisions, operator commands and live events through Redis "
        "(the trace store stays its own). Runs until Ctrl-C or SIGTERM.",
    )
    _engine_options(serve, recording="record in and take operator commands from", optional=False)
    _workload_options(serve)
    _retention_options(serve)
    _override_options(serve)
    serve.add_argument(
        "--poll-ms",
        type=float,
        default=200.0,
        help=f"ms between looks for operator commands (above 0, up to {POLL_MS_MAX:,.0f}; default 200)",
    )
    serve.add_argument(
        "--no-commands", action="store_true", help="take none: attached consoles are read-only"
    )
    serve.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics at http://ADDR:PORT/metrics while it runs (0: a free port, printed;"
        f" needs the prometheus extra: {pip_install('prometheus')})",
    )
    serve.add_argument(
        "--metrics-addr",
        metavar="ADDR",
        help="the address the metrics endpoint listens on (default 127.0.0.1: this host only;"
        " 0.0.0.0: every interface)",
    )
    serve.add_argument(
        "--fleet",
        metavar="URL",
        help="join the fleet at redis://[user:password@]host:port/db?namespace=NAME (rediss:// for TLS;"
        " quorum=, window_s=, on_unavailable=local|fail_closed, key_file= for operator commands, …;"
        f" needs the fleet extra: {pip_install('fleet')}). The password is never printed",
    )

    _breaker_commands(commands)

    traces = commands.add_parser(
        "traces", help="browse, export and prune stored turns; audit the operator commands; check the store"
    )
    actions = traces.add_subparsers(dest="action", metavar="ACTION", required=True)
    where = actions.add_parser("where", help="which trace store the commands here use, and why")
    _traces_option(where)
    where.add_argument("--json", action="store_true", help="print JSON")
    listing = actions.add_parser("list", help="list stored turns, newest first")
    _traces_option(listing)
    listing.add_argument(
        "--outcome", choices=("ok", "degraded", "failed", "timed_out", "canceled", "interrupted", "running")
    )
    listing.add_argument("--tool", help="only turns that called this tool")
    listing.add_argument("--since", help="started at or after: 2h, 30m, 7d ago, or an ISO time")
    listing.add_argument("--until", help="started before: 2h, 30m, 7d ago, or an ISO time")
    listing.add_argument(
        "--limit", type=int, default=20, help=f"turns per page (1 to {LIMIT_MAX:,}, default 20)"
    )
    listing.add_argument("--cursor", help="the next page, as printed after a page")
    listing.add_argument("--json", action="store_true", help="print JSON")
    show = actions.add_parser("show", help="one turn with every event")
    show.add_argument("turn_id")
    _traces_option(show)
    show.add_argument("--json", action="store_true", help="print JSON")
    export = actions.add_parser(
        "export",
        help="a turn or a time range as JSON Lines",
        description="Write events as JSON Lines, one event per line. A time range holds the turns that"
        " started in it, each whole, and the events outside turns (operator actions, breaker timers,"
        " manifest loads) that happened in it. A file (-o) is written whole or not at all, owner-only;"
        " an existing one is replaced only with --force, and the trace store itself never.",
    )
    export.add_argument("turn_id", nargs="?", help="one turn (default: every event in the range)")
    _traces_option(export)
    export.add_argument("--since", help="from: 2h, 30m, 7d ago, or an ISO time")
    export.add_argument("--until", help="to (excluded): 2h, 30m, 7d ago, or an ISO time")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    export.add_argument("--force", action="store_true", help="replace the -o file if it exists")
    audit = actions.add_parser(
        "audit",
        help="operator commands, newest first: who (user@host, pid), what, when, why, and what became"
        " of each (applied, failed, or refused and why)",
    )
    _traces_option(audit)
    audit.add_argument("--since", help="answered at or after: 2h, 30m, 7d ago, or an ISO time")
    audit.add_argument("--until", help="answered before: 2h, 30m, 7d ago, or an ISO time")
    audit.add_argument(
        "--limit", type=int, default=50, help=f"commands to list (1 to {LIMIT_MAX:,}, default 50)"
    )
    audit.add_argument("--json", action="store_true", help="print JSON")
    check = actions.add_parser(
        "check",
        help="check the store's integrity (SQLite's quick_check): exit 0 when sound, 1 when corrupt",
        description="Read the whole trace store and check its integrity with SQLite's quick_check"
        " (--full: integrity_check, which also compares every index with its table). Opening a store"
        " checks it only when a writer stopped without closing it, or when it is small. Exits 0 when"
        " nothing is wrong, 1 when the store is corrupt (the problem on one line), 2 when it cannot"
        " be opened at all. Changes nothing.",
    )
    _traces_option(check)
    check.add_argument("--full", action="store_true", help="integrity_check: slower, more thorough")
    check.add_argument("--json", action="store_true", help="print JSON")
    prune = actions.add_parser("prune", help="remove old turns")
    _traces_option(prune)
    prune.add_argument("--older-than", help="remove turns started longer ago than this (e.g. 7d)")
    prune.add_argument("--keep", type=int, metavar="N", help="keep only the newest N turns (N at least 1)")
    prune.add_argument("--json", action="store_true", help="print JSON")

    replay = commands.add_parser(
        "replay",
        help="replay a stored turn on virtual time and check every decision",
        description="Re-run a recorded turn with the recorded outcomes in place of the tools, on a "
        "virtual clock, and report whether every engine decision matches the recording. Exits 0 "
        "when all match, 1 when something differs.",
    )
    replay.add_argument("turn_id")
    _traces_option(replay)
    replay.add_argument(
        "--tolerance-ms",
        type=float,
        default=50.0,
        metavar="MS",
        help="how far a replayed time may be from the recorded one (0 to 60,000; default 50)",
    )
    replay.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _breaker_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """``tripwire breaker``: what the console's board and its t/r/d keys do, from a shell."""
    breaker = commands.add_parser(
        "breaker",
        help="list the breakers of a served engine or fleet, or trip, reset or disable one from a shell",
        description="The board and the operator actions of an attached console, for runbooks and"
        " scripts: list reads the engine's trace store; trip, reset and disable send the engine a"
        " command signed with the store's key (as the console does), wait for its acknowledgement"
        " and exit 0 when it was applied, 1 when it was refused or not answered, 2 on bad input."
        " With --attach redis://… the same on a fleet (tripwire serve --fleet): list sums each tool"
        " over the processes and shows each process's state; a command, signed with the fleet's key,"
        " goes to every process and exits 0 only when every live process applied it.",
    )
    actions = breaker.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="each tool's breaker: state, consecutive failures, half-open due, last transition",
        description="Each tool's breaker as the engine recording into DB last stored it: its state,"
        " consecutive failures, when an OPEN breaker half-opens, and its last transition (when, who,"
        " why); and whether the engine is heard from. On a fleet (--attach redis://…): per tool how"
        " many processes see each state, the probe lease's holder, calls and errors summed, and each"
        " process's state; and each process's host, pid and heartbeat (live, stale or gone).",
    )
    _attach_option(listing)
    listing.add_argument("--json", action="store_true", help="print JSON")
    effects = {
        "trip": "force the breaker OPEN until reset: every call is rejected at once",
        "reset": "close the breaker and clear its counts",
        "disable": "admit every call while still counting failures",
    }
    for action, effect in effects.items():
        description = (
            f"{action.capitalize()} TOOL's breaker: {effect}. Prints the state it left; on a fleet"
            " (--attach redis://…), every process's acknowledgement."
        )
        command = actions.add_parser(action, help=effect, description=description)
        command.add_argument("tool", metavar="TOOL")
        _attach_option(command)
        command.add_argument(
            "--reason", required=True, metavar="TEXT", help="why: recorded with the transition and the audit"
        )
        command.add_argument(
            "--wait",
            type=float,
            default=WAIT_S_DEFAULT,
            metavar="S",
            help=f"seconds to wait for the engine's acknowledgement (on a fleet: every live process's);"
            f" not applied by then, the command expires unapplied (above 0, up to {WAIT_S_MAX:,.0f};"
            f" default {WAIT_S_DEFAULT:g})",
        )
        command.add_argument("--json", action="store_true", help="print JSON")


def _port(text: str) -> int:
    """A TCP port number, 0 (the system picks one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"a port is from 0 to {PORT_MAX}, got {port}")
    return port


def _attach_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attach",
        type=_store_or_fleet,
        required=True,
        metavar="DB|URL",
        help="the trace store of the engine (tripwire serve --traces DB), or the fleet's"
        " redis://…?namespace=NAME (tripwire serve --fleet URL)",
    )


def _store_or_fleet(text: str) -> Path | str:
    """A fleet's URL as given (a Path would fold its ``//``), anything else a trace store's path."""
    return text if text.startswith(FLEET_SCHEMES) else Path(text)


def _run_options(parser: argparse.ArgumentParser) -> None:
    _engine_options(parser)
    parser.add_argument("--real-time", action="store_true", help="wait out the real delays instead")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _engine_options(
    parser: argparse.ArgumentParser, *, recording: str = "record in", optional: bool = True
) -> None:
    """--manifests and --traces, and --no-record unless recording is not ``optional``."""
    parser.add_argument(
        "--manifests", type=Path, default=None, help=f"manifest directory (default: {MANIFESTS_DEFAULT})"
    )
    parser.add_argument("--traces", type=Path, help=f"trace store to {recording} (default: {TRACES_DEFAULT})")
    if optional:
        parser.add_argument("--no-record", action="store_true", help="do not record the turns")


def _retention_options(parser: argparse.ArgumentParser) -> None:
    """What a long-running recorder keeps: old turns are removed in the background, a few at a time."""
    parser.add_argument(
        "--retention-age",
        metavar="AGE",
        help="remove turns older than this, e.g. 7d or 12h, or off (default 7d)",
    )
    parser.add_argument(
        "--retention-size",
        metavar="SIZE",
        help="keep the store's data under this, e.g. 1GiB or 500MB, or off (default 1GiB)",
    )


def _override_options(parser: argparse.ArgumentParser) -> None:
    """An engine that records keeps the operators' trips and disables across restarts, unless told."""
    parser.add_argument(
        "--forget-overrides",
        action="store_true",
        help="drop the operators' standing trips and disables kept in the trace store (recorded as"
        " OverridesForgotten); by default they are put back as the engine starts",
    )


def _workload_options(parser: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """--scenario or --workload: what drives a live engine."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--scenario", type=Path, help="play this scenario in a loop (default: the bundled demo/live.yaml)"
    )
    source.add_argument(
        "--workload", metavar="MODULE:FUNCTION", help="drive the engine with your async def fn(engine)"
    )
    return source


def _traces_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", type=Path, help=f"trace store (default: {TRACES_DEFAULT})")
