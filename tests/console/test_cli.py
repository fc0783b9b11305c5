"""The tripwire command: headless runs, the bundled demo scenario, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from console.cli import main

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "manifests" / "demo" / "scenario.yaml"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json", "--no-record"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_the_demo_scenario_reaches_every_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "run", str(DEMO), "--manifests", str(ROOT / "manifests"))
    labels = {o["label"] for turn in report["turns"] for o in turn["outcomes"].values()}
    every = {
        "succeeded",
        "failed",
        "skipped",
        "escalated",
        "defaulted",
        "alternative used",
        "timed out",
        "partial",
    }
    assert labels >= every
    turns = {t["turn_id"]: t for t in report["turns"]}
    assert turns["plan-trip"]["outcomes"]["flights"]["attempts"] == 3, "retried until it succeeded"
    assert "not re-sent" in turns["flights-down"]["outcomes"]["book"]["reason"]
    assert turns["tight-deadline"]["timed_out"]
    assert report["metrics"]["flight_search"]["life"]["circuit_breaker_opens"] == 1
    assert report["metrics"]["flight_search"]["life"]["rejections"] >= 1
    assert set(report["faults"]) >= {"connection_reset", "http_error", "timeout", "partial_response"}


def test_runs_are_identical_on_the_virtual_clock(capsys: pytest.CaptureFixture[str]) -> None:
    first = run_json(capsys, "demo", "--manifests", str(ROOT / "manifests"))
    second = run_json(capsys, "demo", "--manifests", str(ROOT / "manifests"))
    assert first == second
    # Byte-identical too: the fault counters in a fixed order, whichever fault fired first.
    assert list(first["faults"]) == sorted(first["faults"])
    texts = []
    for _ in range(3):
        assert main(["demo", "--manifests", str(ROOT / "manifests"), "--json", "--no-record"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] == texts[2]


def test_the_human_report_has_summaries_and_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--manifests", str(ROOT / "manifests"), "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "Completed hotel search, but activity search and create itinerary timed out." in " ".join(
        out.split()
    )
    assert "per-tool metrics" in out
    assert "injected faults:" in out


def test_a_tool_a_model_made_up_is_one_unknown_row_of_the_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "scenario:\n  turns:\n    - id: ask\n      model: true\n      calls:\n"
        "        - {id: call_1, tool: hotel_search, args: {city: Rome}}\n"
        "        - {id: call_2, tool: made_up_by_model}\n"
    )
    report = run_json(capsys, "run", str(path), "--manifests", str(ROOT / "manifests"))
    unknown = report["metrics"]["(unknown)"]["life"]
    assert (unknown["calls"], unknown["failures"]) == (1, 1)
    assert "made_up_by_model" not in report["metrics"]
    assert main(["run", str(path), "--manifests", str(ROOT / "manifests"), "--no-record"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("(unknown)")]
    assert rows[0].split()[1:4] == ["1", "0", "1"]  # calls, ok, failed (the first of the tables that fit)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read: No such file or directory"),
        ("scenario:\n  turns:\n    - id: x\n      calls:\n        - {id: a, tool: nope}\n",
         ":3: scenario.turns.0: turn x: call 'a' uses unknown tool 'nope'"),
        ("scenario:\n  turns:\n    - id: x\n      calls: [{id: a, tool: hotel_search}]\n      bogus: 1\n",
         ":5: scenario.turns.0.bogus: unknown key"),
        ("scenario:\n  faults: missing.yaml\n  turns: [{id: x, calls: [{id: a, tool: hotel_search}]}]\n",
         ":2: scenario.faults: no such file: missing.yaml"),
        ("scenario: [\n", "YAML syntax error"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_on_stderr_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = tmp_path / "scenario.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["run", str(path), "--manifests", str(ROOT / "manifests"), "--no-record"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"tripwire: {path}")
    assert expected in line


def test_a_broken_manifest_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.yaml").write_text("tool:\n  id: x\n  timeout_ms: fast\n  side_effect: read_only\n")
    assert main(["run", str(DEMO), "--manifests", str(tmp_path), "--no-record"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    problem = "tool.timeout_ms: Input should be a valid number, unable to parse string as a number"
    assert line == f"tripwire: {tmp_path / 'x.yaml'}:3: {problem}"


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "run" in out and "demo" in out


def test_the_report_is_readable_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # a pipe's width too
    report = run_json(capsys, "demo", "--manifests", str(ROOT / "manifests"))
    assert main(["demo", "--manifests", str(ROOT / "manifests"), "--no-record"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert not any("…" in line for line in lines), "no header or value cut short"
    for turn in report["turns"]:
        assert any(line.startswith(f"{turn['turn_id']}  +") for line in lines)
        for call_id, outcome in turn["outcomes"].items():
            assert any(line.split()[:2] == [call_id, outcome["tool"]] for line in lines)
    for tool in report["metrics"]:
        assert sum(line.split()[:1] == [tool] for line in lines) >= 2, "each metrics table names the tool"


def test_a_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["traces", "list", "--limit", "many"])
    assert done.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "tripwire: argument --limit: invalid int value: 'many' (see `tripwire traces list --help`)"


def test_manifest_files_skipped_at_start_up_are_said_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", manifests)
    os.mkfifo(manifests / "pipe.yaml")
    assert main(["run", str(DEMO), "--manifests", str(manifests), "--no-record", "--json"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"tripwire: warning: {manifests / 'pipe.yaml'}: not a regular file (a FIFO); skipped"
    ]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--attach", "t.db"], "--forget-overrides is for an engine of the console's own"),
        (["--no-record"], "--forget-overrides drops those kept in the trace store: it cannot be used with"),
    ],
)
def test_forget_overrides_needs_an_engine_that_records(
    capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    assert main(["console", "--forget-overrides", *argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tripwire: {problem}")
