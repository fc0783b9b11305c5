"""The catalogue of kinds: complete, without duplicates, and documented from code."""

from __future__ import annotations

from pathlib import Path

from engine.kinds import KIND_INFO, KIND_SOURCES, ErrorClass, ErrorKind, kinds_table_markdown

README = Path(__file__).parents[2] / "README.md"

SEED_004_TOOL = {
    "unknown_tool", "not_permitted", "invalid_parameters", "limit_exceeded", "canceled",
    "timeout", "transport_error", "execution_error", "internal_error",
}  # fmt: skip
SEED_004_LLM = {"rate_limit", "auth_error", "quota_exceeded", "model_error", "timeout", "network_error"}
SPEC_CATEGORIES = {
    "rate limited": "rate_limit",
    "service unavailable": "service_unavailable",
    "connection reset": "connection_reset",
    "partial result": "partial_result",
    "authentication/permission": "auth_error",
    "not found": "not_found",
    "unsupported": "unsupported",
    "response/schema validation": "invalid_response",
    "circuit open": "circuit_open",
}
STRATEGY_KINDS = {"bulkhead_full": "strategies.bulkhead", "throttled": "strategies.rate_limit"}
"""The refusals of engine.strategies, each sourced to its strategy's package."""


def test_every_required_kind_is_in_the_catalogue_once() -> None:
    values = [k.value for k in ErrorKind]
    assert len(values) == len(set(values))
    required = SEED_004_TOOL | SEED_004_LLM | set(SPEC_CATEGORIES.values()) | set(STRATEGY_KINDS)
    assert required == set(values), (
        "no kind missing, none invented beyond the three sources and the strategies"
    )
    for name, package in STRATEGY_KINDS.items():
        assert KIND_SOURCES[ErrorKind(name)] == (package,)


def test_every_kind_carries_its_meaning_in_code() -> None:
    assert set(KIND_INFO) == set(ErrorKind) == set(KIND_SOURCES)
    for kind, info in KIND_INFO.items():
        assert info.description.endswith("."), kind
        assert isinstance(info.default_class, ErrorClass)


def test_seed_004_executed_flags() -> None:
    not_executed = {"unknown_tool", "not_permitted", "invalid_parameters", "limit_exceeded", "canceled"}
    for name in SEED_004_TOOL:
        assert ErrorKind(name).executed is (name not in not_executed), name
    assert not ErrorKind.CIRCUIT_OPEN.executed
    assert not ErrorKind.BULKHEAD_FULL.executed
    assert not ErrorKind.THROTTLED.executed


def test_spec_classes() -> None:
    transient = {"timeout", "rate_limit", "service_unavailable", "connection_reset", "partial_result"}
    permanent = {
        "invalid_parameters",
        "auth_error",
        "not_found",
        "unsupported",
        "invalid_response",
        "unknown_tool",
    }
    assert all(ErrorKind(k).transient for k in transient)
    assert not any(ErrorKind(k).transient for k in permanent)


def test_readme_table_is_generated_from_the_catalogue() -> None:
    assert kinds_table_markdown() in README.read_text(encoding="utf-8"), (
        "README's kinds table is stale: paste engine.kinds.kinds_table_markdown()"
    )
