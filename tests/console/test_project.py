"""tripwire init, doctor, traces where and --version: a project of one's own, and a healthy install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.cli.init import starter_files
from engine.manifest import ManifestRegistry

ROOT = Path(__file__).resolve().parents[2]


def test_init_writes_a_starter_project_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {
        "manifests/defaults.yaml", "manifests/flight_search.yaml", "scenario.yaml", "faults.yaml",
        "traces/.gitignore",
    }  # fmt: skip
    assert (tmp_path / "traces").stat().st_mode & 0o777 == 0o700
    capsys.readouterr()
    assert main(["run", "scenario.yaml", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["turns"][0]["outcomes"]["flights"]["attempts"] == 3, "the starter fault plan: a retry"
    assert (tmp_path / "traces" / "traces.db").is_file(), "recorded in the project's own store"


def test_init_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "defaults.yaml").write_text("mine\n")
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tripwire: {tmp_path / 'manifests' / 'defaults.yaml'}: already there")
    assert (tmp_path / "manifests" / "defaults.yaml").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["defaults.yaml", "manifests"], "nothing written"


def test_the_starter_files_come_from_the_bundled_manifests() -> None:
    targets = {f.target.as_posix() for f in starter_files()}
    assert "manifests/flight_search.yaml" in targets
    source = (ROOT / "manifests" / "starter" / "manifests" / "flight_search.yaml").read_bytes()
    assert next(f.content for f in starter_files() if f.target.name == "flight_search.yaml") == source


def uncommented(text: str, *sections: str) -> str:
    """``text`` with the commented-out blocks of ``sections`` (``# bulkhead:`` and the lines
    indented under it) made live, as a user uncommenting them would."""
    lines, live, indent = [], False, ""
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip(" ")
        if stripped.startswith("# "):
            body = stripped[2:]
            key = body.split(":", 1)[0]
            if not body.startswith(" "):
                live, indent = key in sections, line[: len(line) - len(stripped)]
            if live:
                line = indent + body
        else:
            live = False
        lines.append(line)
    return "".join(lines)


def test_the_starters_commented_strategy_sections_load_as_written(tmp_path: Path) -> None:
    """What init's comments show for the bulkhead and the retry budget is valid as it stands."""
    source = ROOT / "manifests" / "starter" / "manifests"
    tool = (source / "flight_search.yaml").read_text()
    defaults = (source / "defaults.yaml").read_text()
    assert ManifestRegistry.from_directory(source).get("flight_search").strategies == {}, "commented out"
    (tmp_path / "flight_search.yaml").write_text(uncommented(tool, "bulkhead", "retry_budget"))
    (tmp_path / "defaults.yaml").write_text(uncommented(defaults, "retry_budget"))
    registry = ManifestRegistry.from_directory(tmp_path)
    sections = registry.get("flight_search").model_dump()
    assert sections["bulkhead"] == {"max_concurrent": 4, "max_queued": 8, "queue_timeout_ms": 1000.0}
    assert sections["retry_budget"] == {"budget_percent": 20.0, "min_retries_per_s": 3.0, "window_s": 10.0}
    assert registry.shared["retry_budget"].model_dump() == sections["retry_budget"], (
        "the one every tool shares"
    )
    assert registry.get("flight_search").classification == (), "the other commented blocks stay so"


def test_version_and_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("tripwire ")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert main(["traces", "where", "--json"]) == 0
    where = json.loads(capsys.readouterr().out)
    assert where == {
        "path": str(tmp_path / "data" / "tripwire" / "traces.db"),
        "why": "your data directory (no traces/ here)",
        "exists": False,
    }
    assert main(["traces", "where", "--traces", "x.db"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        str(tmp_path / "x.db"),
        "given with --traces; nothing recorded there yet",
    ]


def test_doctor_says_what_it_found(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tripwire ")
    assert "engine:" in out and "(tripwire)" in out and "NOT tripwire" not in out


def test_a_foreign_console_package_is_named_plainly(tmp_path: Path) -> None:
    """PyPI's `console` installed over ours replaces console/__init__.py: said in one line, exit 2."""
    shadow = tmp_path / "site"
    shutil.copytree(ROOT / "console", shadow / "console", ignore=shutil.ignore_patterns("__pycache__"))
    (shadow / "console" / "__init__.py").write_text('"""Another project\'s console package."""\n')
    for argv in (["traces", "list"], ["doctor"]):
        done = subprocess.run(
            [sys.executable, "-m", "console", *argv], cwd=tmp_path, capture_output=True, text=True,
            timeout=60, env={"PYTHONPATH": str(shadow), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        text = done.stderr if argv[0] == "traces" else done.stdout
        assert "the `console` module at" in text and "is not tripwire's" in text
        assert "pipx install tripwire" in text
