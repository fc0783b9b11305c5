"""tripwire traces list|show|export|prune and tripwire replay, on a store the demo recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main

ROOT = Path(__file__).parents[2]
MANIFESTS = str(ROOT / "manifests")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "traces.db"
    assert main(["demo", "--manifests", MANIFESTS, "--traces", str(path), "--json"]) == 0
    return path


def out_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def turn_ids(capsys: pytest.CaptureFixture[str], store: Path, *extra: str) -> list[str]:
    page = out_json(capsys, "traces", "list", "--traces", str(store), "--json", "--limit", "50", *extra)
    return [t["turn_id"] for t in page["turns"]]


def test_list_shows_the_recorded_turns_newest_first(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = turn_ids(capsys, store)
    assert [i.split("/")[1] for i in ids] == [
        "recovered", "bad-input", "tight-deadline", "while-open", "flights-down", "plan-trip",
    ]  # fmt: skip
    assert len({i.split("/")[0] for i in ids}) == 1, "one run, one namespace"


def test_a_recorded_run_is_stamped_when_it_ran(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The virtual clock starts at the real now when recording: `--since 1h` finds the run,
    # and `prune --older-than 1d` would not remove it.
    assert len(turn_ids(capsys, store, "--since", "1h")) == 6
    assert turn_ids(capsys, store, "--until", "1h") == []


def test_list_filters_by_outcome_and_tool(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [i.split("/")[1] for i in turn_ids(capsys, store, "--outcome", "timed_out")] == ["tight-deadline"]
    assert {i.split("/")[1] for i in turn_ids(capsys, store, "--tool", "custom_api")} == {
        "flights-down",
        "while-open",
    }


def test_list_pages_with_a_cursor(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = out_json(capsys, "traces", "list", "--traces", str(store), "--json", "--limit", "4")
    second = out_json(capsys, "traces", "list", "--traces", str(store), "--json", "--limit", "4",
                      "--cursor", first["next_cursor"])  # fmt: skip
    assert len(first["turns"]) == 4 and len(second["turns"]) == 2
    assert second["next_cursor"] is None
    assert {t["turn_id"] for t in first["turns"]}.isdisjoint(t["turn_id"] for t in second["turns"])


def test_show_has_every_event_of_the_turn(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    turn_id = turn_ids(capsys, store, "--outcome", "timed_out")[0]
    shown = out_json(capsys, "traces", "show", turn_id, "--traces", str(store), "--json")
    types = [e["event_type"] for e in shown["events"]]
    assert types[0] == "TurnStarted" and types[-1] == "TurnFinished"
    assert "TurnDeadlineExceeded" in types
    assert main(["traces", "show", turn_id, "--traces", str(store)]) == 0
    assert "deadline" in capsys.readouterr().out


def test_export_writes_json_lines(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    turn_id = turn_ids(capsys, store)[-1]
    target = tmp_path / "turn.jsonl"
    assert main(["traces", "export", turn_id, "--traces", str(store), "-o", str(target)]) == 0
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines[0]["event_type"] == "TurnStarted"
    assert all(line.get("turn_id") == turn_id for line in lines)
    assert main(["traces", "export", "--traces", str(store)]) == 0
    everything = capsys.readouterr().out.splitlines()
    assert len(everything) > len(lines)


def test_replay_matches_every_recorded_turn(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for turn_id in turn_ids(capsys, store):
        report = out_json(capsys, "replay", turn_id, "--traces", str(store), "--json")
        assert report["matches"], report
        assert report["decisions"] >= 3
    assert main(["replay", turn_ids(capsys, store)[0], "--traces", str(store)]) == 0
    assert "matches" in capsys.readouterr().out


def test_prune_keeps_the_newest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.db"
    assert main(["demo", "--manifests", MANIFESTS, "--traces", str(path), "--json"]) == 0
    assert main(["demo", "--manifests", MANIFESTS, "--traces", str(path), "--json"]) == 0
    capsys.readouterr()
    assert len(turn_ids(capsys, path)) == 12, "a second run is stored beside the first"
    assert main(["traces", "prune", "--keep", "4", "--traces", str(path)]) == 0
    assert "pruned 8 turn(s)" in capsys.readouterr().out
    assert out_json(capsys, "traces", "prune", "--keep", "2", "--traces", str(path), "--json") == {
        "pruned": 2, "turns_left": 2
    }  # fmt: skip
    assert len(turn_ids(capsys, path)) == 2


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["traces", "list", "--traces", "{missing}"], "no trace store here"),
        (["traces", "show", "nope", "--traces", "{store}"], "no turn 'nope'"),
        (["replay", "nope", "--traces", "{store}"], "no turn 'nope'"),
        (["traces", "prune", "--traces", "{store}"], "say what to prune"),
        (["traces", "list", "--since", "yesterday", "--traces", "{store}"], "cannot read time 'yesterday'"),
        (["traces", "list", "--traces", "{garbage}"], "not a SQLite database"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], expected: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    paths = {"{missing}": str(tmp_path / "none.db"), "{store}": str(store), "{garbage}": str(garbage)}
    assert main([paths.get(a, a) for a in argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tripwire: ") and expected in line
    assert garbage.read_bytes() == b"not a database at all" * 100, "never overwritten"
