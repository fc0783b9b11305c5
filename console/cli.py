"""The ``tripwire`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from engine.config import ConfigError

PACKAGE = Path(__file__).resolve().parent


def bundled_manifests() -> Path:
    """``manifests/`` here, else the repository's (editable install), else the wheel's copy."""
    for candidate in (Path("manifests"), PACKAGE.parent / "manifests", PACKAGE / "demo_manifests"):
        if candidate.is_dir():
            return candidate
    return Path("manifests")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tripwire",
        description="Tool-call resilience engine and operations console for AI agents.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a scenario of turns against the bundled tools and print a report",
        description="Run a scenario (YAML turns, optionally with a fault plan) against the manifests "
        "with the bundled travel-agent tools, on a virtual clock unless --real-time, and print each "
        "turn's outcome and the per-tool metrics.",
    )
    run.add_argument("scenario", type=Path, help="scenario file, e.g. manifests/demo/scenario.yaml")
    _run_options(run)

    demo = commands.add_parser(
        "demo",
        help="run the bundled demo scenario (manifests/demo/scenario.yaml)",
        description="Run the bundled demo: the travel-agent tools through a scripted outage that "
        "reaches every outcome (retries, timeouts, cascades, alternatives, breakers).",
    )
    _run_options(demo)
    return parser


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--manifests", type=Path, default=None, help="manifest directory (default: the bundled manifests/)"
    )
    parser.add_argument("--real-time", action="store_true", help="wait out the real delays instead")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    command = args.command or "demo"
    manifests = getattr(args, "manifests", None) or bundled_manifests()
    try:
        from console.run import run_command  # keeps --help fast

        scenario = args.scenario if command == "run" else manifests / "demo" / "scenario.yaml"
        return run_command(
            scenario,
            manifests,
            real_time=getattr(args, "real_time", False),
            as_json=getattr(args, "json", False),
            console=console,
        )
    except ConfigError as error:
        print(f"tripwire: {error}", file=sys.stderr)  # one line, never wrapped
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
