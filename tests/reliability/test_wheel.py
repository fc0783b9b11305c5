"""A user with only the wheel gets the same first five minutes as one with the repository.

Builds the sdist and the wheel (from the sdist, as a package index would), installs the wheel
into a fresh virtual environment, and from an empty directory — no manifests/, no traces/, a
home of its own — runs what README's quick start runs. Everything must exit 0.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADLESS_CONSOLE = textwrap.dedent(
    """
    import asyncio

    from console.live import LiveOptions, build_live_app
    from engine.locations import bundled_manifests, default_manifests, default_trace_store


    async def main() -> None:
        options = LiveOptions(
            manifests=default_manifests().path, traces=default_trace_store().path,
            scenario=bundled_manifests() / "demo" / "live.yaml",
        )
        app = build_live_app(options)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(3)
            assert len(app.model.tools) == 8, sorted(app.model.tools)
            await pilot.press("q")
        print("console ran", len(app.model.tools), "tools")


    asyncio.run(main())
    """
)


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} → {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.timeout(600)
def test_the_wheel_works_from_an_empty_directory(tmp_path: Path) -> None:
    dist, venv, home, empty = (tmp_path / name for name in ("dist", "venv", "home", "empty"))
    home.mkdir()
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "XDG_DATA_HOME")}
    env |= {"HOME": str(home), "COLUMNS": "100"}
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], tmp_path, env, timeout=300)
    (wheel,) = dist.glob("tripwire-*.whl")
    (sdist,) = dist.glob("tripwire-*.tar.gz")
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("manifests/demo/scenario.yaml") for n in archive.getnames())

    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    run([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], tmp_path, env, timeout=300)
    tripwire = str(venv / "bin" / "tripwire")

    assert run([tripwire, "--version"], empty, env).startswith("tripwire ")
    assert "browse: tripwire traces list" in run([tripwire, "demo"], empty, env)
    store = home / ".local" / "share" / "tripwire" / "traces.db"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    assert str(store) in run([tripwire, "traces", "where"], empty, env)
    assert "recovered" in run([tripwire, "traces", "list"], empty, env)

    project = empty / "project"
    assert "next: cd project && tripwire run scenario.yaml" in run([tripwire, "init", "project"], empty, env)
    report = run([tripwire, "run", "scenario.yaml"], project, env)
    assert "recorded in traces/traces.db" in report
    assert "plan-trip" in run([tripwire, "traces", "list"], project, env)
    assert "console ran 8 tools" in run([str(venv / "bin" / "python"), "-c", HEADLESS_CONSOLE], empty, env)
    assert sorted(p.name for p in empty.iterdir()) == ["project"], "nothing written outside the project"
