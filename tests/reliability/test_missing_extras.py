"""Every command and option that can need an optional extra, run without it: one line saying which
extra and how to install it, exit 2, never a traceback (issue 22 §6).

Each case runs the ``tripwire`` command (``python -m console``) in a real process whose imports of
the extra's modules fail as if it were not installed: a finder first on ``sys.meta_path`` refuses
them, installed by a ``-c`` wrapper before the command starts. The processes all start together.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.extras import EXTRA_MODULES, needs_extra
from tests.polling import finished

ROOT = Path(__file__).parents[2]
TIMEOUT_S = 30.0
"""A command that starts when it should have refused runs until killed here."""

WITHOUT = textwrap.dedent(
    """
    import runpy, sys

    BLOCKED = frozenset(sys.argv.pop(1).split(","))

    class NotInstalled:
        '''Refuses the blocked modules as an environment without them would.'''

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    runpy.run_module("console", run_name="__main__", alter_sys=True)
    """
)
"""``python -c WITHOUT module,module… ARGS``: ``tripwire ARGS`` with those modules missing."""

FLEET_URL = "redis://127.0.0.1:1/0?namespace=x"
A_FLEET = "--attach redis://…: a fleet"
SERVE = ("serve", "--traces", "{tmp}/served.db", "--manifests", str(ROOT / "manifests"))

WORKLOADS = {
    "mcp": "engine.adapters.mcp",
    "openai-agents": "engine.adapters.openai_agents",
    "pydantic-ai": "engine.adapters.pydantic_ai",
    "langgraph": "engine.adapters.langgraph",
    "otel": "engine.exporters.otel",
}
"""A workload of the user's that uses an adapter or exporter: the extra it needs, and the module."""


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    """``{tmp}`` is the case's own empty directory."""
    extra: str
    what: str
    """What needs the extra, as the line names it."""


CASES = {
    "console --attach redis://": Case(("console", "--attach", FLEET_URL, "--read-only"), "fleet", A_FLEET),
    "breaker list --attach redis://": Case(("breaker", "list", "--attach", FLEET_URL), "fleet", A_FLEET),
    "breaker trip --attach redis://": Case(
        ("breaker", "trip", "search", "--attach", FLEET_URL, "--reason", "maintenance"), "fleet", A_FLEET
    ),
    "serve --fleet": Case((*SERVE, "--fleet", FLEET_URL), "fleet", "--fleet"),
    "serve --metrics-port": Case((*SERVE, "--metrics-port", "0"), "prometheus", "--metrics-port"),
    **{
        f"serve --workload using {extra}": Case(
            (*SERVE, "--workload", "{tmp}/agent.py:run"),
            extra,
            "--workload '{tmp}/agent.py:run': {tmp}/agent.py",
        )
        for extra in WORKLOADS
    },
}


@dataclass
class Outcome:
    case: Case
    tmp: Path
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every case's process, all started together, each waited for up to ``TIMEOUT_S``."""
    running: dict[str, subprocess.Popen[str]] = {}
    results: dict[str, Outcome] = {}
    try:
        for name, case in CASES.items():
            tmp = tmp_path_factory.mktemp("case")
            if case.extra in WORKLOADS:
                (tmp / "agent.py").write_text(
                    f"import {WORKLOADS[case.extra]}\n\n\nasync def run(engine):\n    pass\n"
                )
            argv = [a.format(tmp=tmp) for a in case.argv]
            blocked = ",".join(EXTRA_MODULES[case.extra])
            results[name] = Outcome(case, tmp)
            running[name] = subprocess.Popen(
                [sys.executable, "-c", WITHOUT, blocked, *argv], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp,
            )  # fmt: skip
        for name, (returncode, out, err) in finished(running, TIMEOUT_S).items():
            outcome = results[name]
            outcome.returncode, outcome.stdout, outcome.stderr = returncode, out, err
        yield results
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize("name", CASES)
def test_without_its_extra_a_command_says_which_on_one_line(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    case = outcome.case
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.returncode == 2, outcome.stderr
    what = case.what.format(tmp=outcome.tmp)
    expected = f"tripwire: {needs_extra(what, case.extra)}"
    assert outcome.stderr.splitlines() == [expected]
    assert expected.endswith(f"needs the {case.extra} extra: pip install 'tripwire[{case.extra}]'")
    assert outcome.stdout == ""
    assert not (outcome.tmp / "served.db").exists(), "refused before anything was opened"


def test_every_extra_of_the_project_is_known_and_needed_by_a_case() -> None:
    """The extras named are pyproject.toml's, and each one a command can need is tried above."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    aggregates = {"test", "bench", "dev", "integrations"}
    assert set(EXTRA_MODULES) == set(declared) - aggregates
    assert {case.extra for case in CASES.values()} == set(EXTRA_MODULES)
