"""The ``tripwire`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from engine import ManifestError

DEFAULT_MANIFESTS = Path("manifests")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tripwire",
        description="Tool-call resilience engine and operations console for AI agents.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run the bundled travel tools through a scripted outage (headless)",
        description="Run the engine against the bundled travel-agent tools through a scripted "
        "outage: retries, a permanent error, a manifest override, a breaker opening, half-opening "
        "and closing, and a tool timeout. Runs on a virtual clock unless --real-time.",
    )
    demo.add_argument(
        "--manifests", type=Path, default=DEFAULT_MANIFESTS, help="manifest directory (default: manifests)"
    )
    demo.add_argument("--real-time", action="store_true", help="wait out the real delays (about a minute)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    command = args.command or "demo"
    try:
        if command == "demo":
            from console.demo import run_demo  # keeps --help fast

            manifests = getattr(args, "manifests", DEFAULT_MANIFESTS)
            run_demo(manifests, real_time=getattr(args, "real_time", False), console=console)
    except ManifestError as error:
        err.print(f"[red]tripwire:[/] {error}", highlight=False, markup=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
