"""Start-up: wall time of fresh processes importing the engine or running short ``tripwire`` commands.

    python bench/startup.py [--runs 9] [--compare /path/to/other/checkout] [--json]

Each command runs in a new interpreter (``python -c …``, or the ``tripwire`` script next to
this interpreter, else ``python -m console``), ``--runs`` times, the commands taking turns so
that the machine's noise hits them alike; the table gives the median and the spread (min–max).
``traces list`` reads an empty trace store made once beforehand by the same tree.

- ``import engine``, and ``from engine import Engine, ToolCallExecutor`` — what a program embedding
  the engine pays;
- ``tripwire --help`` and ``tripwire traces list`` on an empty store.

"This tree" is the checkout whose ``engine`` the interpreter finds (set ``PYTHONPATH``). With
``--compare DIR`` every command also runs with ``PYTHONPATH=DIR`` (e.g. a checkout before a
change), interleaved with this tree's runs, and the table adds that tree's figures and the ratio.

Then ``-X importtime`` of each command in this tree: the top-level packages that cost the most
(their modules' own import time, summed), and whether pydantic, asyncio, trio.testing, pytest and
textual were imported at all.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def this_tree() -> Path:
    """The checkout whose ``engine`` this interpreter finds (PYTHONPATH first), without importing it."""
    spec = importlib.util.find_spec("engine")
    if spec is None or spec.origin is None:
        raise SystemExit("engine is not importable here: run with PYTHONPATH=<checkout>")
    return Path(spec.origin).resolve().parents[1]


WATCHED = ("pydantic", "asyncio", "trio", "trio.testing", "pytest", "textual", "rich", "sqlite_utils", "yaml")
"""Modules whose presence the report notes: the heavy ones a short command should not need."""


def tripwire() -> list[str]:
    script = Path(sys.executable).parent / "tripwire"
    return [sys.executable, str(script)] if script.exists() else [sys.executable, "-m", "console"]


def commands(store: Path) -> dict[str, list[str]]:
    return {
        "import engine": [sys.executable, "-c", "import engine"],
        "from engine import Engine, ToolCallExecutor": [
            sys.executable, "-c", "from engine import Engine, ToolCallExecutor",
        ],
        "tripwire --help": [*tripwire(), "--help"],
        "tripwire traces list (empty store)": [*tripwire(), "traces", "list", "--traces", str(store)],
    }  # fmt: skip


def environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONSTARTUP", None)
    return env


def make_store(tree: Path, directory: Path) -> Path:
    """An empty trace store, made by ``tree``'s own engine (schemas may differ between trees)."""
    path = directory / f"empty-{abs(hash(str(tree)))}.db"
    code = f"from engine.store import TraceStore\nwith TraceStore({str(path)!r}):\n    pass\n"
    subprocess.run([sys.executable, "-c", code], env=environment(tree), check=True, cwd=directory)
    return path


def wall_ms(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def import_profile(argv: list[str], env: dict[str, str], cwd: Path, top: int) -> dict[str, Any]:
    """``-X importtime``: own import time summed by top-level package, and which watched modules loaded."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    by_package: Counter[str] = Counter()
    loaded: set[str] = set()
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line)
        if m is None:
            continue
        name = m.group(3)
        loaded.add(name)
        by_package[name.split(".")[0]] += int(m.group(1))
    return {
        "total_ms": sum(by_package.values()) / 1000,
        "top": [(name, us / 1000) for name, us in by_package.most_common(top)],
        "loaded": [name for name in WATCHED if name in loaded],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (median and spread)")
    parser.add_argument("--compare", type=Path, help="another tree to time side by side (PYTHONPATH)")
    parser.add_argument("--top", type=int, default=8, help="packages listed per command by import time")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args()
    trees = {"this": this_tree()} | ({"compare": args.compare.resolve()} if args.compare else {})
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)  # no project around: the defaults point nowhere that exists
        runs: dict[tuple[str, str], list[float]] = {}
        plans = {label: (commands(make_store(tree, cwd)), environment(tree)) for label, tree in trees.items()}
        for _ in range(args.runs):
            for label, (cmds, env) in plans.items():
                for name, argv in cmds.items():
                    runs.setdefault((label, name), []).append(wall_ms(argv, env, cwd))
        cmds, env = plans["this"]
        profiles = {name: import_profile(argv, env, cwd, args.top) for name, argv in cmds.items()}
    results: dict[str, Any] = {}
    for name in cmds:
        row: dict[str, Any] = {}
        for label in trees:
            times = runs[(label, name)]
            row[label] = {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}
        if "compare" in trees:
            row["ratio"] = row["this"]["median_ms"] / row["compare"]["median_ms"]
        results[name] = row
    if args.json:
        print(json.dumps({"runs": args.runs, "results": results, "importtime": profiles}, indent=2))
        return
    print(f"Python {sys.version.split()[0]}; {args.runs} runs of each command, interleaved; wall ms")
    header = "| command | this tree: median (min–max) |"
    if "compare" in trees:
        header += f" {args.compare}: median (min–max) | ratio |"
    print(header)
    print("| --- " * (header.count("|") - 1) + "|")
    for name, row in results.items():
        cells = [
            f"{r['median_ms']:.0f} ({r['min_ms']:.0f}–{r['max_ms']:.0f})" for r in (row[t] for t in trees)
        ]
        ratio = [f"{row['ratio']:.2f}"] if "ratio" in row else []
        print(f"| {name} | " + " | ".join([*cells, *ratio]) + " |")
    print("\n-X importtime, this tree (own import time by top-level package, ms):")
    for name, profile in profiles.items():
        top = ", ".join(f"{package} {ms:.1f}" for package, ms in profile["top"])
        print(f"- {name}: {profile['total_ms']:.0f} in all; {top}")
        print(f"  loaded: {', '.join(profile['loaded']) or 'none of ' + ', '.join(WATCHED)}")
    print("\ntargets: import engine ≤ 120 ms, tripwire --help ≤ 150 ms; no trio.testing or pytest")


if __name__ == "__main__":
    main()
