"""Manifests: loading, one-line errors that name file, field and line, and registry reloads.

Everything here is synchronous and pure: files live in ``tmp_path`` and reloads are applied
with explicit ``at``/``t`` stamps, so no clock and no watcher is involved.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.classify import ClassificationOverride
from engine.engine import Engine
from engine.events import Event, ManifestLoaded, ManifestRefused, ManifestRejected, ManifestRemoved
from engine.kinds import ErrorClass
from engine.manifest import (
    DEFAULTS_FILE,
    SIDE_EFFECT_REQUIRED,
    ConfigIssue,
    ManifestError,
    ManifestRegistry,
    SideEffect,
    ToolManifest,
    load_manifest,
)
from engine.strategies.retry.policy import RetryPolicy

BUNDLED = Path(__file__).resolve().parents[2] / "manifests"
BUNDLED_TOOLS = {
    "activity_search",
    "compare_prices",
    "create_itinerary",
    "custom_api",
    "exchange_rates",
    "flight_search",
    "flight_search_backup",
    "hotel_search",
}


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load_error(path: Path, **kwargs: Any) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        load_manifest(path, **kwargs)
    return info.value


def assert_one_line(text: str) -> None:
    assert text.strip()
    assert len(text.splitlines()) == 1, text


def reload(registry: ManifestRegistry, *paths: Path) -> list[Any]:
    return registry.reload(paths, at=1_000.0, t=5.0)


@pytest.fixture
def bundled(tmp_path: Path) -> Path:
    """A private copy of the bundled manifests/ directory, free to edit."""
    return Path(shutil.copytree(BUNDLED, tmp_path / "manifests"))


# --- the bundled manifests ----------------------------------------------------------------


def test_bundled_directory_loads_every_demo_tool_with_defaults_applied() -> None:
    registry = ManifestRegistry.from_directory(BUNDLED)

    assert set(registry.entries) == BUNDLED_TOOLS
    assert registry.rejected == {}
    for tool_id, entry in registry.entries.items():
        assert entry.manifest.id == tool_id
        assert entry.path == str(BUNDLED / f"{tool_id}.yaml")
        # every alternative names a tool that has a manifest
        assert set(entry.manifest.alternatives) <= BUNDLED_TOOLS

    custom = registry.get("custom_api")
    assert custom.timeout_ms == 5000
    assert custom.timeout_s == 5.0
    (override,) = custom.classification
    assert override == ClassificationOverride(
        status_code=503,
        treat_as=ErrorClass.PERMANENT,
        reason="custom_api answers 503 for unsupported regions",
    )
    retry = custom.retry_policy
    assert (retry.initial_delay_ms, retry.max_delay_ms, retry.max_attempts) == (50, 2000, 3)
    # the rest of the retry policy and the breaker come from defaults.yaml
    assert retry.strategy == "exponential_backoff"
    assert retry.multiplier == 2.0
    assert retry.jitter_percent == 10
    assert retry.max_total_time_ms == 2000
    assert custom.circuit_breaker.failure_threshold == 5
    assert custom.circuit_breaker.timeout_ms == 30_000

    itinerary = registry.get("create_itinerary")
    assert itinerary.side_effect is SideEffect.SIDE_EFFECTING
    assert itinerary.retry_ambiguous is False
    assert itinerary.retry_policy.max_attempts == 2
    assert itinerary.retry_policy.initial_delay_ms == 100

    assert registry.get("flight_search").alternatives == ("flight_search_backup",)
    assert registry.get("hotel_search").side_effect is SideEffect.READ_ONLY


def test_each_bundled_tool_file_loads_on_its_own() -> None:
    for tool_id in BUNDLED_TOOLS:
        assert load_manifest(BUNDLED / f"{tool_id}.yaml").id == tool_id


# --- one-line errors that name file, field and line ---------------------------------------

TOOL_ERRORS = [
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          timeout_ms: 1000
          retry_policy:
            initial_dely_ms: 5
        """,
        6,
        "tool.retry_policy.initial_dely_ms",
        "unknown key",
        id="unknown-nested-key",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          timout_ms: 1000
        """,
        4,
        "tool.timout_ms",
        "unknown key",
        id="unknown-tool-key",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
        owner: me
        """,
        4,
        "owner",
        "unknown key",
        id="unknown-top-level-key",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          retry_policy:
            max_attempts: 0
        """,
        5,
        "tool.retry_policy.max_attempts",
        "greater than or equal to 1",
        id="max-attempts-0",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          circuit_breaker:
            timeout_ms: 100
            failure_threshold: -1
        """,
        6,
        "tool.circuit_breaker.failure_threshold",
        "greater than or equal to 1",
        id="failure-threshold-negative",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          timeout_ms: "fast"
        """,
        4,
        "tool.timeout_ms",
        "valid number",
        id="timeout-not-a-number",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          timeout_ms: 0
        """,
        4,
        "tool.timeout_ms",
        "greater than 0",
        id="timeout-zero",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          retry_policy:
            strategy: linear
        """,
        5,
        "tool.retry_policy.strategy",
        "exponential_backoff",
        id="bad-strategy",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: maybe
        """,
        3,
        "tool.side_effect",
        "read_only",
        id="bad-side-effect",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          timeout_ms: 1000

          idle_timeout_ms: 1000
        """,
        6,
        "tool.idle_timeout_ms",
        "must be less than timeout_ms (1000), the hard cap",
        id="idle-timeout-not-below-timeout",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          timeout_ms: 1000
          side_effect: read_only
          timeout_ms: 2000
        """,
        5,
        "tool.timeout_ms",
        "duplicate key (first on line 3)",
        id="duplicate-key",
    ),
    pytest.param(
        """
        tool:
          description: no id here
          side_effect: read_only
          timeout_ms: 1000
        """,
        1,
        "tool.id",
        "required",
        id="missing-id",
    ),
    pytest.param(
        """
        tool:
          id: "flight search"
          side_effect: read_only
        """,
        2,
        "tool.id",
        "pattern",
        id="id-with-space",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          classification:
            - status_code: 404
              treat_as: transient
            - status_code: 503
              kind: timeout
              treat_as: permanent
        """,
        7,
        "tool.classification.1",
        "exactly one of status_code, kind or exception",
        id="override-two-matchers",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          classification:
            - treat_as: permanent
              reason: nothing selects the errors
        """,
        5,
        "tool.classification.0",
        "exactly one of status_code, kind or exception",
        id="override-no-matcher",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          classification:
            - status_code: 503
              treat_as: sometimes
        """,
        6,
        "tool.classification.0.treat_as",
        "Input should be",
        id="override-bad-class",
    ),
    pytest.param(
        """
        tool:
          id: flaky
          side_effect: read_only
          classification:
            - status_code: 700
              treat_as: permanent
        """,
        5,
        "tool.classification.0.status_code",
        "less than or equal to 599",
        id="override-bad-status",
    ),
    pytest.param(
        """
        tool: flaky
        """,
        1,
        "tool",
        "valid dictionary",
        id="tool-not-a-mapping",
    ),
    # side_effect has no default in a file: a file cut short must not become idempotent
    pytest.param(
        """
        tool:
          id: create_itinerary
          timeout_ms: 20000
        """,
        1,
        "tool.side_effect",
        "required in every tool file: read_only, idempotent or side_effecting",
        id="side-effect-missing",
    ),
]


@pytest.mark.parametrize(("text", "line", "field", "fragment"), TOOL_ERRORS)
def test_invalid_tool_file_error_names_file_field_and_line(
    tmp_path: Path, text: str, line: int, field: str, fragment: str
) -> None:
    path = write(tmp_path / "flaky.yaml", text)

    error = load_error(path)

    message = str(error)
    assert_one_line(message)
    assert message.startswith(f"{path}:{line}: {field}: "), message
    assert fragment in message
    assert error.issues[0] == ConfigIssue(str(path), line, field, error.issues[0].message)


# Numbers at the edges: booleans are not numbers; numbers are finite and bounded (24 h, 100, 10).
EDGE_NUMBERS = [
    ("timeout_ms: true", "tool.timeout_ms", "not a boolean"),
    ("timeout_ms: .inf", "tool.timeout_ms", "finite number"),
    ("timeout_ms: .nan", "tool.timeout_ms", "finite number"),
    ("timeout_ms: 1e308", "tool.timeout_ms", "less than or equal to 86400000"),
    ("timeout_ms: 86400001", "tool.timeout_ms", "less than or equal to 86400000"),
    ("retry_policy: {max_attempts: true}", "tool.retry_policy.max_attempts", "not a boolean"),
    ("retry_policy: {max_attempts: 1000000000000000000000}", "tool.retry_policy.max_attempts", "to 100"),
    ("retry_policy: {max_attempts: 101}", "tool.retry_policy.max_attempts", "less than or equal to 100"),
    ("retry_policy: {multiplier: 1.0e+300}", "tool.retry_policy.multiplier", "less than or equal to 10"),
    ("retry_policy: {multiplier: yes}", "tool.retry_policy.multiplier", "not a boolean"),
    ("retry_policy: {initial_delay_ms: .inf}", "tool.retry_policy.initial_delay_ms", "finite number"),
    ("retry_policy: {max_total_time_ms: 1.0e+9}", "tool.retry_policy.max_total_time_ms", "to 86400000"),
    ("retry_policy: {jitter_percent: .nan}", "tool.retry_policy.jitter_percent", "finite number"),
    ("circuit_breaker: {timeout_ms: .inf}", "tool.circuit_breaker.timeout_ms", "finite number"),
    ("circuit_breaker: {failure_threshold: true}", "tool.circuit_breaker.failure_threshold", "not a boolean"),
    ("circuit_breaker: {success_threshold: 1.0e+12}", "tool.circuit_breaker.success_threshold", "1000000"),
]


@pytest.mark.parametrize(("setting", "field", "fragment"), EDGE_NUMBERS, ids=[c[0] for c in EDGE_NUMBERS])
def test_numbers_at_the_edges_are_refused_on_one_line(
    tmp_path: Path, setting: str, field: str, fragment: str
) -> None:
    path = write(tmp_path / "flaky.yaml", f"tool:\n  id: flaky\n  side_effect: read_only\n  {setting}\n")

    message = str(load_error(path))

    assert_one_line(message)
    assert message.startswith(f"{path}:4: {field}: "), message
    assert fragment in message


FILE_ERRORS = [
    pytest.param(
        "tool:\n  id: flaky\n  timeout_ms: [1, 2\n",
        4, "YAML syntax error",
        id="yaml-syntax-error",
    ),
    pytest.param(
        "tool:\n  id: flaky\n\tretry_policy: {}\n",
        3, "YAML syntax error",
        id="tab-indent",
    ),
    pytest.param("tol:\n  id: flaky\n", 1, "expected a top-level 'tool:' mapping", id="no-tool"),
    pytest.param("- tool\n- id\n", 1, "expected a top-level 'tool:' mapping", id="top-list"),
    pytest.param("", 1, "expected a top-level 'tool:' mapping (found no mapping)", id="empty"),
    pytest.param("# only a comment\n", 1, "found no mapping", id="comment-only"),
    pytest.param("1: a\nb: c\n", 1, "found ['1', 'b']", id="mixed-key-types"),
    pytest.param(
        "tool: {id: a}\n---\ntool: {id: b}\n", 2, "another document", id="two-documents"
    ),
    pytest.param("tool:\n  id: fla\x00ky\n", 2, "unacceptable character #x0000", id="nul"),
    pytest.param(
        "tool:\n  id: flaky\n  timeout_ms: !!int fast\n", 3, "invalid int value", id="bad-int-tag"
    ),
    pytest.param(
        "tool:\n  id: flaky\n  description: !!timestamp 2025-13-45\n",
        3, "invalid timestamp value",
        id="bad-timestamp",
    ),
    pytest.param(
        "tool:\n  id: flaky\n  x: !!python/object:os.system {}\n",
        3, "could not determine a constructor",
        id="unsafe-tag",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "fragment"), FILE_ERRORS)
def test_unparseable_file_error_names_file_and_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = tmp_path / "flaky.yaml"
    path.write_text(text, encoding="utf-8")

    message = str(load_error(path))

    assert_one_line(message)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message


def test_non_utf8_file_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "flaky.yaml"
    path.write_bytes(b"tool:\n  id: flaky\n  description: caf\xe9\n")

    message = str(load_error(path))

    assert_one_line(message)
    assert message.startswith(f"{path}:3: not UTF-8 text"), message


def test_unreadable_path_is_a_manifest_error(tmp_path: Path) -> None:
    message = str(load_error(tmp_path / "missing.yaml"))
    assert_one_line(message)
    assert message.startswith(f"{tmp_path / 'missing.yaml'}: cannot read")


def test_hostile_yaml_is_rejected_quickly(tmp_path: Path) -> None:
    """Recursive aliases and alias bombs used to recurse forever or expand exponentially."""
    recursive = write(
        tmp_path / "recursive.yaml", "tool: &t\n  id: loop\n  side_effect: read_only\n  retry_policy: *t\n"
    )
    bomb = "".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 10 if prev else ['1'] * 10)}]\n"
        for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh", strict=True)
    )
    bombed = write(tmp_path / "bomb.yaml", bomb + "tool:\n  id: boom\n  alternatives: *h\n")
    deep = write(tmp_path / "deep.yaml", "tool: " + "[" * 5000 + "]" * 5000 + "\n")

    for path in (recursive, bombed, deep):
        message = str(load_error(path))
        assert_one_line(message)
        assert message.startswith(str(path))
    assert str(load_error(recursive)).startswith(f"{recursive}:4: tool.retry_policy.id: unknown key")
    assert str(load_error(deep)) == f"{deep}:1: YAML syntax error: nested deeper than 100 levels"
    block = write(tmp_path / "block.yaml", "- " * 5000 + "x\n")
    assert str(load_error(block)) == f"{block}: YAML error: nested too deeply"
    ok = write(
        tmp_path / "ok.yaml",
        "tool:\n  id: ok\n  side_effect: read_only\n  description: " + "[" * 50 + "]" * 50 + "\n",
    )
    assert "valid string" in str(load_error(ok))  # moderately nested YAML still parses


def test_error_str_is_one_line_and_counts_the_rest(tmp_path: Path) -> None:
    path = write(
        tmp_path / "flaky.yaml",
        """
        tool:
          id: flaky
          side_effect: read_only
          timeout_ms: fast
          retry_policy:
            max_attempts: 0
          circuit_breaker:
            failure_threshold: -1
        """,
    )

    error = load_error(path)

    assert len(error.issues) == 3
    assert str(error) == f"{error.issues[0]} (and 2 more)"
    assert_one_line(str(error))
    assert [(i.line, i.field) for i in error.issues] == [
        (4, "tool.timeout_ms"),
        (6, "tool.retry_policy.max_attempts"),
        (8, "tool.circuit_breaker.failure_threshold"),
    ]
    assert all(issue.path == str(path) for issue in error.issues)


def test_single_issue_has_no_more_suffix(tmp_path: Path) -> None:
    path = write(
        tmp_path / "flaky.yaml", "tool:\n  id: flaky\n  timeout_ms: fast\n  side_effect: read_only\n"
    )
    assert "more)" not in str(load_error(path))


def test_line_breaks_in_keys_never_break_the_one_line_error(tmp_path: Path) -> None:
    path = write(tmp_path / "flaky.yaml", 'tool:\n  id: flaky\n  "time\\nout": 1\n  side_effect: read_only\n')
    message = str(load_error(path))
    assert_one_line(message)
    assert message.startswith(f"{path}:3: tool.time\\nout: unknown key")


def test_manifest_issue_without_line_or_field() -> None:
    assert str(ConfigIssue("a.yaml", None, "", "not UTF-8 text")) == "a.yaml: not UTF-8 text"
    assert str(ConfigIssue("a.yaml", 2, "tool.id", "required")) == "a.yaml:2: tool.id: required"
    assert str(ManifestError([])) == "invalid manifest"


def test_duplicate_tool_id_across_files_names_both(tmp_path: Path) -> None:
    first = write(tmp_path / "a_search.yaml", "tool:\n  id: search\n  side_effect: read_only\n")
    second = write(
        tmp_path / "b_search.yaml", "tool:\n  description: copy\n  id: search\n  side_effect: read_only\n"
    )

    with pytest.raises(ManifestError) as info:
        ManifestRegistry.from_directory(tmp_path)

    message = str(info.value)
    assert_one_line(message)
    assert message == f"{second}:3: tool.id: 'search' is already defined in {first}"


def test_directory_load_reports_every_bad_file(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", "tool:\n  id: good\n  side_effect: read_only\n")
    bad_a = write(tmp_path / "bad_a.yaml", "tool:\n  id: a\n  timeout_ms: -1\n  side_effect: read_only\n")
    bad_b = write(
        tmp_path / "bad_b.yaml",
        "tool:\n  id: b\n  retry_policy: {max_attempts: 0}\n  side_effect: read_only\n",
    )

    with pytest.raises(ManifestError) as info:
        ManifestRegistry.from_directory(tmp_path)

    assert [issue.path for issue in info.value.issues] == [str(bad_a), str(bad_b)]
    assert str(info.value).endswith("(and 1 more)")
    assert_one_line(str(info.value))


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not a directory"):
        ManifestRegistry.from_directory(tmp_path / "nowhere")


# --- defaults -----------------------------------------------------------------------------

DEFAULTS = """
defaults:
  timeout_ms: 12000
  retry_policy:
    initial_delay_ms: 40
    max_delay_ms: 400
    max_attempts: 4
    jitter_percent: 0
  circuit_breaker:
    failure_threshold: 7
    timeout_ms: 9000
  classification:
    - status_code: 429
      treat_as: transient
"""


def test_defaults_merge_key_by_key(tmp_path: Path) -> None:
    write(tmp_path / DEFAULTS_FILE, DEFAULTS)
    write(
        tmp_path / "search.yaml",
        """
        tool:
          id: search
          side_effect: read_only
          retry_policy:
            max_attempts: 2
          circuit_breaker:
            timeout_ms: 1000
          classification:
            - status_code: 503
              treat_as: permanent
        """,
    )
    write(tmp_path / "plain.yaml", "tool:\n  id: plain\n  side_effect: read_only\n")

    registry = ManifestRegistry.from_directory(tmp_path)

    search = registry.get("search")
    assert search.timeout_ms == 12000  # inherited
    assert search.retry_policy == RetryPolicy(
        initial_delay_ms=40, max_delay_ms=400, max_attempts=2, jitter_percent=0
    )
    assert search.circuit_breaker.failure_threshold == 7  # inherited
    assert search.circuit_breaker.timeout_ms == 1000  # overridden
    # lists are replaced, not merged
    assert [o.status_code for o in search.classification] == [503]

    plain = registry.get("plain")
    assert plain.retry_policy.max_attempts == 4
    assert [o.status_code for o in plain.classification] == [429]

    # load_manifest takes the same defaults as a mapping
    direct = load_manifest(tmp_path / "search.yaml", yaml.safe_load(DEFAULTS)["defaults"])
    assert direct == search


def test_a_tool_can_break_a_defaults_constraint(tmp_path: Path) -> None:
    """Validation runs on the merged policy: the idle window from the file, the timeout from defaults."""
    write(tmp_path / DEFAULTS_FILE, DEFAULTS)
    path = write(
        tmp_path / "slow.yaml",
        "tool:\n  id: slow\n  idle_timeout_ms: 15000\n  side_effect: read_only\n",
    )

    with pytest.raises(ManifestError) as info:
        ManifestRegistry.from_directory(tmp_path)

    assert str(info.value) == (
        f"{path}:3: tool.idle_timeout_ms: must be less than timeout_ms (12000), the hard cap"
    )


def test_a_first_delay_past_the_defaults_cap_is_capped_and_a_fixed_one_is_kept(bundled: Path) -> None:
    """Under the bundled defaults (a cap of 800 ms) a tool asks for a 1 s first delay: it was refused
    (``initial_delay_ms (1000) exceeds max_delay_ms (800)``). Now exponential backoff caps it, like
    every later delay, and a fixed delay is whatever the tool says."""
    for name, strategy in (("steady", "fixed"), ("growing", "exponential_backoff")):
        write(
            bundled / f"{name}.yaml",
            f"tool:\n  id: {name}\n  side_effect: read_only\n  retry_policy:\n"
            f"    strategy: {strategy}\n    initial_delay_ms: 1000\n",
        )

    registry = ManifestRegistry.from_directory(bundled)

    steady, growing = registry.get("steady").retry_policy, registry.get("growing").retry_policy
    assert steady.max_delay_ms == growing.max_delay_ms == 800  # from defaults.yaml
    assert [steady.base_delay_ms(r) for r in (1, 2, 3)] == [1000, 1000, 1000]
    assert [growing.base_delay_ms(r) for r in (1, 2, 3)] == [800, 800, 800]


DEFAULTS_ERRORS = [
    ("defaults:\n  retry_policy:\n    max_attempts: 0\n", 3, "defaults.retry_policy.max_attempts"),
    ("defaults:\n  id: everyone\n", 2, "defaults.id"),
    ("defaults:\n  timeout_ms: 1\n  timeout_ms: 2\n", 3, "defaults.timeout_ms"),
    ("tool:\n  id: defaults\n", 1, ""),
    ("defaults: [\n", 2, ""),
    ("defaults:\n  timeout_ms: 1000\n  side_effect: idempotent\n", 3, "defaults.side_effect"),
    ("defaults:\n  timeout_ms: true\n", 2, "defaults.timeout_ms"),
]
DEFAULTS_FRAGMENTS = [
    "greater than or equal to 1",
    "unknown key",
    "duplicate key (first on line 2)",
    "expected a top-level 'defaults:' mapping",
    "YAML syntax error",
    "not allowed in defaults: state it in each tool's own file",
    "not a boolean",
]


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [(*case, fragment) for case, fragment in zip(DEFAULTS_ERRORS, DEFAULTS_FRAGMENTS, strict=True)],
)
def test_invalid_defaults_reported_with_their_own_file_and_line(
    tmp_path: Path, text: str, line: int, field: str, fragment: str
) -> None:
    defaults = tmp_path / DEFAULTS_FILE
    defaults.write_text(text, encoding="utf-8")
    write(tmp_path / "search.yaml", "tool:\n  id: search\n  side_effect: read_only\n")

    with pytest.raises(ManifestError) as info:
        ManifestRegistry.from_directory(tmp_path)

    message = str(info.value)
    assert_one_line(message)
    prefix = f"{defaults}:{line}: {field}: " if field else f"{defaults}:{line}: "
    assert message.startswith(prefix), message
    assert fragment in message


# --- registry reloads ---------------------------------------------------------------------


def test_valid_edit_loads_a_new_version(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    before = registry.entries["custom_api"]
    path = bundled / "custom_api.yaml"
    path.write_text(path.read_text().replace("max_attempts: 3", "max_attempts: 4"))

    events = reload(registry, path)

    (event,) = events
    assert isinstance(event, ManifestLoaded)
    assert event.tool_id == "custom_api"
    assert event.path == str(path)
    assert event.version == registry.version > before.version
    assert event.previous_digest == before.digest
    assert event.digest != before.digest
    assert (event.at, event.t) == (1_000.0, 5.0)
    assert "reloaded" in event.describe()
    after = registry.entries["custom_api"]
    assert (after.version, after.digest, after.loaded_at) == (event.version, event.digest, 1_000.0)
    assert registry.get("custom_api").retry_policy.max_attempts == 4
    # the other tools are untouched
    assert registry.get("flight_search").retry_policy.max_attempts == 5


def test_touch_without_change_emits_nothing(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    version = registry.version
    path = bundled / "custom_api.yaml"
    os.utime(path, (1, 1))
    path.write_bytes(path.read_bytes())

    assert reload(registry, path) == []
    assert registry.version == version


def test_invalid_edit_is_rejected_and_last_good_stays(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    good = registry.entries["custom_api"]
    version = registry.version
    path = bundled / "custom_api.yaml"
    path.write_text(path.read_text().replace("max_attempts: 3", "max_attempts: 0"))

    events = reload(registry, path)

    (event,) = events
    assert isinstance(event, ManifestRejected)
    assert event.path == str(path)
    assert event.kept_digest == good.digest
    assert event.errors == (
        f"{path}:11: tool.retry_policy.max_attempts: Input should be greater than or equal to 1",
    )
    assert good.digest in event.describe()
    assert registry.get("custom_api") is good.manifest
    assert registry.entries["custom_api"] is good
    assert registry.version == version
    assert [str(i) for i in registry.rejected[str(path)]] == list(event.errors)

    # the same bad content again is rejected again, still keeping the good version
    (again,) = reload(registry, path)
    assert isinstance(again, ManifestRejected)
    assert registry.get("custom_api") is good.manifest


def test_fixing_a_rejected_file_loads_it_and_clears_the_rejection(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    good = registry.entries["custom_api"]
    path = bundled / "custom_api.yaml"
    original = path.read_text()
    path.write_text("tool: [unclosed\n")
    assert isinstance(reload(registry, path)[0], ManifestRejected)

    path.write_text(original.replace("max_attempts: 3", "max_attempts: 2"))
    (event,) = reload(registry, path)

    assert isinstance(event, ManifestLoaded)
    assert event.previous_digest == good.digest
    assert registry.rejected == {}
    assert registry.get("custom_api").retry_policy.max_attempts == 2


def test_reverting_a_rejected_file_to_the_good_version_clears_the_rejection(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    good = registry.entries["custom_api"]
    path = bundled / "custom_api.yaml"
    original = path.read_text()
    path.write_text(original.replace("max_attempts: 3", "max_attempts: -3"))
    reload(registry, path)

    path.write_text(original)
    (event,) = reload(registry, path)

    assert isinstance(event, ManifestLoaded)
    assert event.digest == event.previous_digest == good.digest
    assert event.version == good.version
    assert registry.rejected == {}
    assert registry.entries["custom_api"] is good
    assert reload(registry, path) == []


def test_deleting_a_file_removes_the_tool_which_falls_back_to_defaults(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    version = registry.version
    path = bundled / "custom_api.yaml"
    path.unlink()

    (event,) = reload(registry, path)

    assert isinstance(event, ManifestRemoved)
    assert (event.tool_id, event.path, event.version) == ("custom_api", str(path), version + 1)
    assert "custom_api" not in registry.entries
    fallback = registry.get("custom_api")
    assert fallback.id == "custom_api"
    assert fallback.classification == ()
    assert fallback.timeout_ms == 30000
    assert fallback.retry_policy == RetryPolicy()  # defaults.yaml matches spec-map retry.defaults
    assert reload(registry, path) == []


def test_deleting_a_rejected_file_removes_the_last_good_version(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    path = bundled / "custom_api.yaml"
    path.write_text("garbage: [")
    reload(registry, path)
    path.unlink()

    (event,) = reload(registry, path)

    assert isinstance(event, ManifestRemoved)
    assert registry.rejected == {}


def test_new_rejected_file_deleted_leaves_nothing(tmp_path: Path) -> None:
    registry = ManifestRegistry.from_directory(tmp_path)
    path = write(tmp_path / "new.yaml", "tool:\n  id: new\n  timeout_ms: -1\n  side_effect: read_only\n")
    (event,) = reload(registry, path)
    assert isinstance(event, ManifestRejected)
    assert event.kept_digest is None

    path.unlink()

    assert reload(registry, path) == []
    assert registry.rejected == {}
    assert registry.entries == {}


def test_added_file_loads_and_renamed_id_replaces_the_old_tool(tmp_path: Path) -> None:
    registry = ManifestRegistry.from_directory(tmp_path)
    path = write(tmp_path / "search.yaml", "tool:\n  id: search\n  side_effect: read_only\n")
    (added,) = reload(registry, path)
    assert isinstance(added, ManifestLoaded)
    assert added.previous_digest is None
    assert "loaded from" in added.describe()

    write(path, "tool:\n  id: search_v2\n  side_effect: read_only\n")
    removed, loaded = reload(registry, path)

    assert isinstance(removed, ManifestRemoved)
    assert removed.tool_id == "search"
    assert isinstance(loaded, ManifestLoaded)
    assert loaded.tool_id == "search_v2"
    assert set(registry.entries) == {"search_v2"}


def test_duplicate_id_in_new_file_is_rejected_and_original_kept(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    good = registry.entries["custom_api"]
    copy = write(bundled / "custom_api_copy.yaml", "tool:\n  id: custom_api\n  side_effect: read_only\n")

    (event,) = reload(registry, copy)

    assert isinstance(event, ManifestRejected)
    assert event.errors == (
        f"{copy}:2: tool.id: 'custom_api' is already defined in {bundled / 'custom_api.yaml'}",
    )
    assert registry.entries["custom_api"] is good


def test_defaults_change_that_breaks_a_tool_is_rejected_as_a_whole(bundled: Path) -> None:
    slow = write(
        bundled / "slow.yaml",
        "tool:\n  id: slow\n  idle_timeout_ms: 20000\n  side_effect: read_only\n",
    )
    registry = ManifestRegistry.from_directory(bundled)
    entries = dict(registry.entries)
    version = registry.version
    defaults = bundled / DEFAULTS_FILE
    original = defaults.read_text()
    # valid on its own, and fine for the tools with timeouts of their own, but below slow's idle window
    defaults.write_text(original.replace("defaults:\n  timeout_ms: 30000", "defaults:\n  timeout_ms: 10000"))

    (event,) = reload(registry, defaults)

    assert isinstance(event, ManifestRejected)
    assert event.path == str(defaults)
    assert event.errors == (
        f"{defaults}: these defaults break {slow}:3: "
        "tool.idle_timeout_ms: must be less than timeout_ms (10000), the hard cap",
    )
    assert_one_line(event.errors[0])
    assert registry.entries == entries  # all or nothing: no tool got the new defaults
    assert registry.version == version
    assert set(registry.rejected) == {str(defaults)}
    assert registry.get("not_in_any_file").timeout_ms == 30000

    # restoring the last good defaults clears the rejection, with nothing to reload
    defaults.write_text(original)
    assert reload(registry, defaults) == []
    assert registry.rejected == {}
    assert registry.entries == entries


def test_invalid_defaults_file_is_rejected_and_old_defaults_stay(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    defaults = bundled / DEFAULTS_FILE
    defaults.write_text("defaults:\n  retry_policy:\n    max_attemps: 9\n")

    (event,) = reload(registry, defaults)

    assert isinstance(event, ManifestRejected)
    assert event.errors == (f"{defaults}:3: defaults.retry_policy.max_attemps: unknown key",)
    assert event.kept_digest is not None
    assert registry.get("unknown_tool").retry_policy.max_attempts == 5


def test_valid_defaults_change_reapplies_to_every_tool(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    before = {tool_id: entry.digest for tool_id, entry in registry.entries.items()}
    assert registry.get("unlisted").circuit_breaker.failure_threshold == 5
    defaults = bundled / DEFAULTS_FILE
    defaults.write_text(
        defaults.read_text()
        .replace("failure_threshold: 5", "failure_threshold: 9")
        .replace("max_attempts: 5", "max_attempts: 6")
    )

    events = reload(registry, defaults)

    assert all(isinstance(e, ManifestLoaded) for e in events)
    assert {e.tool_id for e in events} == BUNDLED_TOOLS
    for event in events:
        assert event.previous_digest == before[event.tool_id]
    for tool_id in BUNDLED_TOOLS:
        assert registry.get(tool_id).circuit_breaker.failure_threshold == 9
    # tools that set max_attempts keep their own; the rest inherit the new default
    assert registry.get("custom_api").retry_policy.max_attempts == 3
    assert registry.get("create_itinerary").retry_policy.max_attempts == 2
    assert registry.get("hotel_search").retry_policy.max_attempts == 6
    # tools without a file run on the new defaults too
    assert registry.get("unlisted").circuit_breaker.failure_threshold == 9
    assert registry.get("unlisted").retry_policy.max_attempts == 6


def test_defaults_change_retries_files_rejected_under_the_old_defaults(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    slow = write(
        bundled / "slow.yaml",
        "tool:\n  id: slow\n  idle_timeout_ms: 40000\n  side_effect: read_only\n",
    )
    still_bad = write(bundled / "bad.yaml", "tool:\n  id: bad\n  timeout_ms: -1\n  side_effect: read_only\n")
    rejected = reload(registry, slow, still_bad)
    assert [type(e) for e in rejected] == [ManifestRejected, ManifestRejected]
    defaults = bundled / DEFAULTS_FILE
    defaults.write_text(
        defaults.read_text().replace("defaults:\n  timeout_ms: 30000", "defaults:\n  timeout_ms: 60000")
    )

    events = reload(registry, defaults)

    loaded = {e.tool_id for e in events if isinstance(e, ManifestLoaded)}
    assert "slow" in loaded
    assert not any(isinstance(e, ManifestRejected) for e in events)
    assert registry.get("slow").idle_timeout_ms == 40000
    assert set(registry.rejected) == {str(still_bad)}


def test_a_rejected_file_broken_further_is_not_retried_from_its_old_content(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    slow = write(
        bundled / "slow.yaml",
        "tool:\n  id: slow\n  idle_timeout_ms: 40000\n  side_effect: read_only\n",
    )
    reload(registry, slow)
    slow.write_text("tool: [")
    reload(registry, slow)
    defaults = bundled / DEFAULTS_FILE
    defaults.write_text(
        defaults.read_text().replace("defaults:\n  timeout_ms: 30000", "defaults:\n  timeout_ms: 60000")
    )

    events = reload(registry, defaults)

    assert "slow" not in {getattr(e, "tool_id", None) for e in events}
    assert "slow" not in registry.entries
    assert set(registry.rejected) == {str(slow)}


def test_deleting_defaults_falls_back_to_built_in_defaults(tmp_path: Path) -> None:
    defaults = write(tmp_path / DEFAULTS_FILE, DEFAULTS)
    write(tmp_path / "search.yaml", "tool:\n  id: search\n  side_effect: idempotent\n")
    registry = ManifestRegistry.from_directory(tmp_path)
    assert registry.get("search").timeout_ms == 12000
    defaults.unlink()

    (event,) = reload(registry, defaults)

    assert isinstance(event, ManifestLoaded)
    assert registry.get("search") == ToolManifest(id="search")
    assert registry.get("other") == ToolManifest(id="other")


def test_get_unknown_tool_returns_defaults_with_its_id(tmp_path: Path) -> None:
    write(tmp_path / DEFAULTS_FILE, DEFAULTS)
    registry = ManifestRegistry.from_directory(tmp_path)

    manifest = registry.get("brand_new")

    assert manifest.id == "brand_new"
    assert manifest.timeout_ms == 12000
    assert manifest.retry_policy.max_attempts == 4
    assert manifest.circuit_breaker.failure_threshold == 7
    assert registry.get("brand_new") is manifest  # cached until the defaults change
    assert "brand_new" not in registry.entries
    assert ManifestRegistry().get("x") == ToolManifest(id="x")


def test_watcher_paths_in_another_form_name_the_same_file(
    bundled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """watchfiles reports absolute paths even for a registry opened with a relative one."""
    monkeypatch.chdir(bundled.parent)
    registry = ManifestRegistry.from_directory("manifests")
    absolute = bundled / "custom_api.yaml"
    assert registry.is_manifest_file(absolute)
    assert registry.is_manifest_file(Path("manifests/custom_api.yaml"))
    assert not registry.is_manifest_file(bundled.parent / "custom_api.yaml")
    assert not registry.is_manifest_file(bundled / "notes.txt")
    absolute.write_text(absolute.read_text().replace("max_attempts: 3", "max_attempts: 4"))

    (event,) = reload(registry, absolute)

    assert isinstance(event, ManifestLoaded), event
    assert event.path == str(Path("manifests/custom_api.yaml"))
    assert registry.get("custom_api").retry_policy.max_attempts == 4
    assert registry.rejected == {}


# --- files that cannot be read: refused, the last good version stays ----------------------


def test_truncated_file_without_side_effect_is_rejected_and_the_booking_stays_side_effecting(
    bundled: Path,
) -> None:
    """A file cut before ``side_effect`` used to load as idempotent: a booking re-sent on retry."""
    registry = ManifestRegistry.from_directory(bundled)
    good = registry.entries["create_itinerary"]
    path = bundled / "create_itinerary.yaml"
    whole = path.read_text()
    path.write_text(whole[: whole.index("  side_effect:")])

    (event,) = reload(registry, path)

    assert isinstance(event, ManifestRejected)
    assert event.errors[0] == f"{path}:1: tool.side_effect: {SIDE_EFFECT_REQUIRED}"
    assert event.kept_digest == good.digest
    assert registry.get("create_itinerary").side_effect is SideEffect.SIDE_EFFECTING

    path.write_text(whole)
    (fixed,) = reload(registry, path)
    assert isinstance(fixed, ManifestLoaded)
    assert registry.rejected == {}


def test_manifests_built_in_code_keep_the_idempotent_default() -> None:
    assert ToolManifest(id="x").side_effect is SideEffect.IDEMPOTENT


def replace_with_symlink(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


@pytest.mark.timeout(20)  # before the fix, reading the FIFO blocked for good
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(lambda p: os.mkfifo(p), "not a regular file (a FIFO)", id="fifo"),
        pytest.param(lambda p: p.mkdir(), "not a regular file (a directory)", id="directory"),
        pytest.param(
            lambda p: p.symlink_to(p.parent / "nowhere.yaml"),
            "dangling symlink (its target does not exist)",
            id="dangling-symlink",
        ),
        pytest.param(lambda p: p.symlink_to(p.name), "symlink loop", id="symlink-loop"),
        pytest.param(
            lambda p: p.write_bytes(b"#" * int(1.6 * 1024 * 1024)),
            "larger than 1 MiB (1.6 MiB)",
            id="too-large",
        ),
    ],
)
def test_an_unreadable_file_in_place_of_a_manifest_is_refused_and_the_last_good_stays(
    bundled: Path, make: Any, reason: str
) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    good = registry.entries["hotel_search"]
    version = registry.version
    path = bundled / "hotel_search.yaml"
    path.unlink()
    make(path)

    (event,) = reload(registry, path)

    assert isinstance(event, ManifestRefused)
    assert (event.path, event.kept_digest) == (str(path), good.digest)
    assert event.reason == reason
    assert event.describe() == f"manifest refused: {path}: {event.reason}; keeping {good.digest}"
    assert registry.entries["hotel_search"] is good
    assert registry.get("hotel_search").side_effect is SideEffect.READ_ONLY  # not the idempotent default
    assert registry.version == version
    assert registry.refused == {str(path): event.reason}
    assert path in registry.tracked_files()

    # only a file that is really gone removes the tool
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()
    (removed,) = reload(registry, path)
    assert isinstance(removed, ManifestRemoved)
    assert registry.refused == {}


def test_a_refused_file_restored_is_loaded_again(bundled: Path) -> None:
    registry = ManifestRegistry.from_directory(bundled)
    path = bundled / "hotel_search.yaml"
    saved = bundled.parent / "hotel_search.saved"
    path.rename(saved)
    path.symlink_to(bundled / "gone.yaml")
    assert isinstance(reload(registry, path)[0], ManifestRefused)

    path.unlink()
    saved.rename(path)
    (event,) = reload(registry, path)

    assert isinstance(event, ManifestLoaded)
    assert event.digest == event.previous_digest  # the same policy: only the file is good again
    assert registry.refused == {}


def test_size_cap_is_configurable_and_says_both_sizes(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"tool:\n  id: big\n  side_effect: read_only\n# padding\n".ljust(2048, b"#"))
    write(tmp_path / "small.yaml", "tool:\n  id: small\n  side_effect: read_only\n")

    registry = ManifestRegistry.from_directory(tmp_path, max_bytes=1024)

    assert set(registry.entries) == {"small"}
    assert registry.refused == {str(big): "larger than 1 KiB (2 KiB)"}
    assert "big" in ManifestRegistry.from_directory(tmp_path).entries  # under the default 1 MiB
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"x" * int(1.6 * 1024 * 1024))
    (event,) = reload(ManifestRegistry.from_directory(tmp_path), huge)
    assert isinstance(event, ManifestRefused)
    assert event.reason == "larger than 1 MiB (1.6 MiB)"


@pytest.mark.timeout(20)  # before the fix, a FIFO named like a manifest hung the start-up for good
def test_files_skipped_at_start_up_are_reported(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", "tool:\n  id: good\n  side_effect: read_only\n")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "folder.yml").mkdir()
    (tmp_path / "notes.txt").write_text("not a manifest")

    registry = ManifestRegistry.from_directory(tmp_path, at=7.0)

    assert set(registry.entries) == {"good"}
    assert registry.refused == {
        str(tmp_path / "dangling.yaml"): "dangling symlink (its target does not exist)",
        str(tmp_path / "fifo.yaml"): "not a regular file (a FIFO)",
        str(tmp_path / "folder.yml"): "not a regular file (a directory)",
    }
    events = registry.refusal_events(at=7.0, t=0.0)
    assert [(e.path, e.reason) for e in events] == list(registry.refused.items())
    assert all(isinstance(e, ManifestRefused) and e.kept_digest is None for e in events)


@pytest.mark.anyio
async def test_a_started_engine_says_which_files_it_skipped(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", "tool:\n  id: good\n  side_effect: read_only\n")
    os.mkfifo(tmp_path / "fifo.yaml")
    engine = Engine(tmp_path)  # not watching: started all the same, it must say so
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)
    async with engine:
        pass
    assert [(type(e), e.path) for e in events] == [(ManifestRefused, str(tmp_path / "fifo.yaml"))]


@pytest.mark.timeout(20)
def test_load_manifest_and_other_config_readers_refuse_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    assert str(load_error(fifo)) == f"{fifo}: not a regular file (a FIFO)"


def test_a_read_done_earlier_is_applied_under_the_defaults_in_force(bundled: Path) -> None:
    """The watcher reads and validates in a worker thread; the registry applies on the loop."""
    registry = ManifestRegistry.from_directory(bundled)
    path = bundled / "hotel_search.yaml"
    path.write_text(path.read_text().replace("timeout_ms: 30000", "timeout_ms: 25000"))
    read = registry.read(path)
    assert read.checked is not None
    defaults = bundled / DEFAULTS_FILE
    defaults.write_text(defaults.read_text().replace("max_attempts: 5", "max_attempts: 6"))
    reload(registry, defaults)

    (event,) = registry.reload([read], at=1.0, t=2.0)

    assert isinstance(event, ManifestLoaded)
    hotel = registry.get("hotel_search")
    assert (hotel.timeout_ms, hotel.retry_policy.max_attempts) == (25000, 6)  # re-validated
    assert registry.seen(path) == read.key == read.digest
    assert registry.peek(path) == read.key


# --- property: garbage in, ManifestError out ----------------------------------------------

_FIELDS = [
    "id", "timeout_ms", "retry_policy", "circuit_breaker", "classification", "alternatives",
    "side_effect", "retry_ambiguous", "description", "initial_delay_ms", "max_attempts",
    "failure_threshold", "status_code", "treat_as", "kind", "exception", "strategy",
]  # fmt: skip
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["permanent", "transient", "flaky", "fixed", "read_only", "503"])
)
_keys = st.sampled_from(_FIELDS) | st.text(max_size=10)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def fuzz_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "fuzz.yaml"


def _check_load(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        result: ToolManifest | ManifestError = load_manifest(path)
    except ManifestError as exc:
        result = exc
    if isinstance(result, ToolManifest):
        return
    assert result.issues
    assert_one_line(str(result))
    for issue in result.issues:
        assert issue.path == str(path)
        assert issue.line is None or 1 <= issue.line <= data.count(b"\n") + 2


_FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@_FUZZ
@given(st.binary(max_size=300))
def test_garbage_bytes_only_raise_manifest_error(fuzz_path: Path, data: bytes) -> None:
    _check_load(fuzz_path, data)


@_FUZZ
@given(st.text(max_size=200))
def test_garbage_text_only_raises_manifest_error(fuzz_path: Path, text: str) -> None:
    _check_load(fuzz_path, text.encode("utf-8", "surrogatepass"))


@settings(_FUZZ, max_examples=60)
@given(st.dictionaries(_keys, _values, max_size=5), st.booleans())
def test_random_yaml_only_raises_manifest_error(
    fuzz_path: Path, body: dict[str, Any], under_tool: bool
) -> None:
    document = {"tool": body} if under_tool else body
    _check_load(fuzz_path, yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass"))


_VALID = (BUNDLED / "custom_api.yaml").read_text(encoding="utf-8")


@_FUZZ
@given(
    st.integers(0, len(_VALID)),
    st.integers(0, 20),
    st.text(alphabet=st.sampled_from([*":-[]{}&*!|>'\"#%@` \n\t\x00\x85", "x"]), max_size=8),
)
def test_mangled_manifest_only_raises_manifest_error(fuzz_path: Path, at: int, cut: int, junk: str) -> None:
    _check_load(fuzz_path, (_VALID[:at] + junk + _VALID[at + cut :]).encode("utf-8", "surrogatepass"))
