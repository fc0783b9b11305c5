"""tripwire traces list|show|export|prune and tripwire replay, on a store the demo recorded."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from engine.scenario import load_scenario

ROOT = Path(__file__).parents[2]
MANIFESTS = str(ROOT / "manifests")
DEMO_TURNS = [t.id for t in load_scenario(ROOT / "manifests" / "demo" / "scenario.yaml").spec.turns]
OUTCOMES = {"ok", "degraded", "failed", "timed_out", "canceled", "running"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "traces.db"
    assert main(["demo", "--manifests", MANIFESTS, "--traces", str(path), "--json"]) == 0
    return path


def out_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(list(argv)) == 0
    parsed: dict[str, Any] = json.loads(capsys.readouterr().out)
    return parsed


def turn_ids(capsys: pytest.CaptureFixture[str], store: Path, *extra: str) -> list[str]:
    page = out_json(capsys, "traces", "list", "--traces", str(store), "--json", "--limit", "50", *extra)
    return [t["turn_id"] for t in page["turns"]]


def test_list_shows_the_recorded_turns_newest_first(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = turn_ids(capsys, store)
    assert [i.split("/")[1] for i in ids] == [
        "currency-storm", "activity-storm", "regional-quotes", "recovered", "bad-input", "tight-deadline",
        "while-open", "flights-down", "plan-trip",
    ]  # fmt: skip
    assert len({i.split("/")[0] for i in ids}) == 1, "one run, one namespace"


def test_a_recorded_run_is_stamped_when_it_ran(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The virtual clock starts at the real now when recording: `--since 1h` finds the run,
    # and `prune --older-than 1d` would not remove it.
    assert len(turn_ids(capsys, store, "--since", "1h")) == len(DEMO_TURNS)
    assert turn_ids(capsys, store, "--until", "1h") == []


def test_list_filters_by_outcome_and_tool(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [i.split("/")[1] for i in turn_ids(capsys, store, "--outcome", "timed_out")] == ["tight-deadline"]
    assert {i.split("/")[1] for i in turn_ids(capsys, store, "--tool", "custom_api")} == {
        "flights-down",
        "while-open",
        "regional-quotes",
    }


def test_list_pages_with_a_cursor(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = out_json(capsys, "traces", "list", "--traces", str(store), "--json", "--limit", "5")
    second = out_json(capsys, "traces", "list", "--traces", str(store), "--json", "--limit", "5",
                      "--cursor", first["next_cursor"])  # fmt: skip
    assert len(first["turns"]) == 5 and len(second["turns"]) == len(DEMO_TURNS) - 5
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
    assert len(turn_ids(capsys, path)) == 2 * len(DEMO_TURNS), "a second run is stored beside the first"
    assert main(["traces", "prune", "--keep", "4", "--traces", str(path)]) == 0
    assert f"pruned {2 * len(DEMO_TURNS) - 4} turn(s)" in capsys.readouterr().out
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


# --- export never destroys anything (issue 10, item 6) ------------------------------------------


def export(store: Path, target: Path | str, *extra: str) -> int:
    return main(["traces", "export", "--traces", str(store), "-o", str(target), *extra])


def only_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert "Traceback" not in captured.err
    return line


def another_path_to(store: Path, tmp: Path, kind: str) -> Path:
    """The store, or its write-ahead log, under another name."""
    if kind == "dot-dot":
        return store.parent / ".." / store.parent.name / store.name
    if kind == "symlink":
        (tmp / "link.db").symlink_to(store)
        return tmp / "link.db"
    if kind == "hard-link":
        os.link(store, tmp / "hard.db")
        return tmp / "hard.db"
    if kind == "its-wal":
        return Path(f"{store}-wal")
    return store


@pytest.mark.parametrize("kind", ["itself", "dot-dot", "symlink", "hard-link", "its-wal"])
@pytest.mark.parametrize("force", [False, True])
def test_export_never_writes_onto_the_store_it_reads(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, force: bool
) -> None:
    before = store.read_bytes()
    target = another_path_to(store, tmp_path, kind)
    assert export(store, target, *(["--force"] if force else [])) == 2
    assert "is the trace store being exported" in only_line(capsys)
    assert store.read_bytes() == before, "not a byte changed"
    assert len(turn_ids(capsys, store)) == len(DEMO_TURNS)


def test_export_refuses_an_existing_file_unless_forced(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "mine.jsonl"
    target.write_text("precious\n")
    target.chmod(0o644)
    assert export(store, target) == 2
    assert only_line(capsys) == f"tripwire: -o {target}: already exists; add --force to replace it"
    assert target.read_text() == "precious\n"
    assert export(store, target, "--force") == 0
    assert "events written to" in capsys.readouterr().err
    assert json.loads(target.read_text().splitlines()[0])["event_type"]
    assert target.stat().st_mode & 0o777 == 0o600, "a new file, owner-only"


def test_export_creates_its_file_owner_only_and_leaves_no_temporary_file(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "new.jsonl"
    assert export(store, target) == 0
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.jsonl"]


def test_a_failed_export_leaves_the_target_as_it_was(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "mine.jsonl"
    target.write_text("precious\n")
    assert main(["traces", "export", "nope", "--traces", str(store), "-o", str(target), "--force"]) == 2
    assert "no turn 'nope'" in only_line(capsys)
    assert target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.jsonl"], "no temporary file left"
    assert main(["traces", "export", "nope", "--traces", str(store), "-o", str(tmp_path / "new.jsonl")]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.jsonl"], "no empty file either"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("{tmp}", "tripwire: -o {tmp}: is a directory; name a file to write"),
        ("{tmp}/missing/dir/x.jsonl",
         "tripwire: -o {tmp}/missing/dir/x.jsonl: no such directory: {tmp}/missing/dir"),
        ("/dev/null", "tripwire: -o /dev/null: not a regular file; leave out -o to write to stdout"),
    ],
)  # fmt: skip
def test_export_to_a_directory_or_nowhere_is_one_line(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, expected: str
) -> None:
    assert export(store, target.format(tmp=tmp_path), "--force") == 2
    assert only_line(capsys) == expected.format(tmp=tmp_path)
    assert list(tmp_path.iterdir()) == []


# --- numbers in range, nothing deleted (issue 10, item 10) ---------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["traces", "list", "--limit", "0"], "tripwire: --limit must be from 1 to 10000, got 0"),
        (["traces", "list", "--limit", "-5"], "tripwire: --limit must be from 1 to 10000, got -5"),
        (["traces", "list", "--limit", "99999999999999999999"],
         "tripwire: --limit must be from 1 to 10000, got 99999999999999999999"),
        (["traces", "prune", "--keep", "-1"], "tripwire: --keep must be at least 1, got -1"),
        (["traces", "prune", "--keep", "0"], "tripwire: --keep must be at least 1, got 0"),
        (["traces", "prune", "--keep", "99999999999999999999"], "tripwire: --keep must be at most"),
        (["traces", "prune", "--older-than", "0s"], "tripwire: --older-than must be longer than 0"),
    ],
)  # fmt: skip
def test_numbers_out_of_range_are_one_line_and_delete_nothing(
    tmp_path: Path, store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    copy = tmp_path / "copy.db"
    shutil.copyfile(store, copy)
    before = copy.read_bytes()
    assert main([*argv, "--traces", str(copy)]) == 2
    assert only_line(capsys).startswith(expected)
    assert copy.read_bytes() == before
    assert len(turn_ids(capsys, copy)) == len(DEMO_TURNS)


# --- readable at 80 columns and in a pipe (issue 10, item 10) ------------------------------------


def test_at_80_columns_every_turn_id_is_whole_on_one_line(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = turn_ids(capsys, store)
    monkeypatch.setenv("COLUMNS", "80")  # what a pipe gets too: Rich's width when not a terminal
    assert main(["traces", "list", "--traces", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for turn_id in ids:
        (line,) = [line for line in lines if turn_id in line]
        assert line.split()[2] == turn_id
    assert all(len(line) <= 80 for line in lines[1:]), "the rows fit (the title names a long tmp path)"


def test_a_turn_id_wider_than_the_terminal_stays_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    long_id = "a-turn-whose-id-is-wider-than-an-80-column-terminal-" + "x" * 40
    scenario = tmp_path / "long.yaml"
    scenario.write_text(
        f"scenario:\n  turns:\n    - id: {long_id}\n      calls: [{{id: a, tool: hotel_search}}]\n"
    )
    store = tmp_path / "t.db"
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["run", str(scenario), "--manifests", MANIFESTS, "--traces", str(store)]) == 0
    headings = [line.split() for line in capsys.readouterr().out.splitlines() if long_id in line]
    assert [h[0].endswith(f"/{long_id}") and h[1].startswith("+") for h in headings] == [True]
    assert main(["traces", "list", "--traces", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line for line in lines if long_id in line]
    assert row.split()[2].endswith(f"/{long_id}") and row.split()[3] in OUTCOMES, "one line, whole"
    assert all(len(line) <= 80 for line in lines if line.startswith("    ")), "the summary goes under it"


def test_show_keeps_the_turn_id_whole_even_when_it_is_wider_than_the_terminal(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    turn_id = next(i for i in turn_ids(capsys, store) if i.endswith("/recovered"))  # an ok turn
    monkeypatch.setenv("COLUMNS", str(len(turn_id) - 5))
    assert main(["traces", "show", turn_id, "--traces", str(store)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{turn_id}  ok")


def test_error_texts_are_shown_as_text_never_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool's error may hold brackets: `[/bold]` would crash Rich's markup, `[red]` would vanish."""
    import anyio

    from engine import Engine, ToolCall, Turn
    from engine.store import TraceRecorder, TraceStore

    async def broken() -> None:
        raise ValueError("bad [red]input[/red] and a stray [/bold] tag")

    engine = Engine()
    engine.register("broken", broken)
    path = tmp_path / "traces.db"
    with TraceStore(path) as store, TraceRecorder(store).attach(engine):
        anyio.run(engine.run_turn, Turn([ToolCall("b", "broken")], id="brackets"))
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "400")  # one line per event
    assert main(["traces", "show", "brackets", "--traces", str(path)]) == 0
    assert "bad [red]input[/red] and a stray [/bold] tag" in capsys.readouterr().out
