"""Where tripwire looks when nobody says: the project's files, else the bundled or the user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.locations import bundled_manifests, data_directory, default_manifests, default_trace_store
from engine.manifest import ManifestRegistry
from engine.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]


def test_the_bundled_manifests_are_the_repositorys_in_a_checkout() -> None:
    bundled = bundled_manifests()
    assert bundled.resolve() == (ROOT / "manifests").resolve()
    assert set(ManifestRegistry.from_directory(bundled).entries) >= {"flight_search", "hotel_search"}
    assert (bundled / "demo" / "scenario.yaml").is_file() and (
        bundled / "starter" / "scenario.yaml"
    ).is_file()


def test_a_project_with_manifests_uses_its_own(tmp_path: Path) -> None:
    assert default_manifests(tmp_path).path == bundled_manifests()
    (tmp_path / "manifests").mkdir()
    chosen = default_manifests(tmp_path)
    assert (chosen.path, chosen.why) == (tmp_path / "manifests", "this project's manifests/")


def test_the_trace_store_is_the_projects_or_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    elsewhere = default_trace_store(tmp_path)
    assert elsewhere.path == tmp_path / "data" / "tripwire" / "traces.db"
    assert elsewhere.why == "your data directory (no traces/ here)"
    (tmp_path / "traces").mkdir()
    assert default_trace_store(tmp_path).path == tmp_path / "traces" / "traces.db"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_DATA_HOME": "/srv/data", "HOME": "/home/ana"}, "/srv/data/tripwire"),
        ({"XDG_DATA_HOME": "", "HOME": "/home/ana"}, "/home/ana/.local/share/tripwire"),
        ({"XDG_DATA_HOME": "relative/ignored", "HOME": "/home/ana"}, "/home/ana/.local/share/tripwire"),
    ],
)
def test_the_data_directory_follows_the_xdg_rule(environ: dict[str, str], expected: str) -> None:
    assert data_directory(environ) == Path(expected)


def test_a_store_without_a_path_goes_where_the_rule_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with TraceStore() as store:
        assert store.path == tmp_path / "data" / "tripwire" / "traces.db"
    assert (tmp_path / "data" / "tripwire").stat().st_mode & 0o777 == 0o700
