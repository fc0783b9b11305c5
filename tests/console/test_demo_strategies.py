"""The bundled demo's strategies through ``tripwire run`` (issues 23 and 24): custom_api's bulkhead
queues one call and refuses another, activity_search's retry budget holds a storm back,
exchange_rates' rate limit spaces a burst of lookups out and a 429 pauses the tool for every
caller, and the report says so, call by call, with the strategies' own reasons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from console.cli import main

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "manifests"
DEMO = MANIFESTS / "demo" / "scenario.yaml"
STORM = ("madrid", "berlin", "vienna", "lisbon")
SPENT = "1 retries over 5 calls in 10 s"
BUDGET_SPENT = f"retry budget spent: {SPENT}"
QUEUED = "apac custom_api attempt 1 queued by the bulkhead (2 in flight, 1 queued); served after 1.62 s"
BUDGET_STATE = "activity_search retry_budget calls 5, retries 1, allowed 1, refused 4, window_s 10, shared no"
BULKHEAD_STATE = "custom_api bulkhead in_flight 0, max_concurrent 2, queued 0, max_queued 1, rejected_full 1"
AFTER_429 = ("aud", "sgd", "nok")
COOLING = "rate limit: cooling down for 20 s more, max wait 2 s"


def run_json(capsys: pytest.CaptureFixture[str], manifests: Path = MANIFESTS) -> dict[str, Any]:
    assert main(["run", str(DEMO), "--manifests", str(manifests), "--json", "--no-record"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def turn(report: dict[str, Any], turn_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [t for t in report["turns"] if t["turn_id"] == turn_id]
    assert len(found) == 1
    return found[0]


def section(out: str, turn_id: str) -> str:
    """A turn's part of the human report, its whitespace collapsed (notes wrap at any width)."""
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(f"{turn_id}  +"))
    end = next((n for n in range(start, len(lines)) if not lines[n].strip()), len(lines))
    return " ".join(" ".join(lines[start:end]).split())


def test_the_bulkhead_queues_a_call_that_is_then_served_and_refuses_one_unsent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = run_json(capsys)
    quotes = turn(report, "regional-quotes")
    outcomes = quotes["outcomes"]
    assert {c: (outcomes[c]["status"], outcomes[c]["attempts"]) for c in ("eu", "us", "apac", "latam")} == {
        "eu": ("succeeded", 1),
        "us": ("succeeded", 1),
        "apac": ("succeeded", 1),
        "latam": ("failed", 0),
    }, "apac waited for a slot and ran; latam never reached the partner"
    assert outcomes["latam"]["reason"].startswith("bulkhead_full: bulkhead full: 2 in flight, 1 queued")
    decided = [(e["event_type"], e["call_id"], e.get("reason")) for e in quotes["strategy_events"]]
    assert decided == [
        ("BulkheadQueued", "apac", None),
        ("BulkheadRejected", "latam", "bulkhead full: 2 in flight, 1 queued"),
    ]
    bulkhead = report["metrics"]["custom_api"]["strategies"]["bulkhead"]
    assert (bulkhead["rejected_full"], bulkhead["rejected_timeout"], bulkhead["in_flight"]) == (1, 0, 0)
    assert bulkhead["wait_p95_ms"] == pytest.approx(1616, abs=1), "apac waited for us's slot"


def test_the_retry_budget_refuses_the_storms_retries_and_the_breaker_stays_closed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = run_json(capsys)
    storm = turn(report, "activity-storm")
    outcomes = storm["outcomes"]
    assert (outcomes["rome"]["status"], outcomes["rome"]["attempts"]) == ("succeeded", 2), "the one retry"
    for call_id in STORM:
        outcome = outcomes[call_id]
        assert (outcome["status"], outcome["attempts"], outcome["decision"]) == ("failed", 1, "escalate")
        assert outcome["reason"].endswith(f"→ escalate: retry refused: {BUDGET_SPENT}")
    spent = [(e["event_type"], e["call_id"], e["reason"]) for e in storm["strategy_events"]]
    assert spent == [("RetryBudgetSpent", c, BUDGET_SPENT) for c in STORM]
    activity = report["metrics"]["activity_search"]
    budget = activity["strategies"]["retry_budget"]
    assert (budget["calls"], budget["retries"], budget["refused"]) == (5, 1, 4)
    assert activity["life"]["circuit_breaker_opens"] == 0


def test_without_the_sections_the_queue_and_the_refusals_are_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's bulkhead, budget and rate limit are the manifests' doing: strip the sections and
    latam is served, the storm's calls are retried until activity_search's breaker opens, and the
    lookups after chf's 429 reach the partner."""
    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, manifests)
    stripped = (
        ("custom_api.yaml", "  bulkhead:"), ("activity_search.yaml", "  retry_budget:"),
        ("exchange_rates.yaml", "  rate_limit:"),
    )  # fmt: skip
    for name, key in stripped:
        path = manifests / name
        lines = path.read_text().splitlines(keepends=True)
        assert any(line.startswith(key) for line in lines)
        path.write_text("".join(line for line in lines if not line.startswith(key)))
    report = run_json(capsys, manifests)
    assert turn(report, "regional-quotes")["outcomes"]["latam"]["status"] == "succeeded"
    storm = turn(report, "activity-storm")
    assert sum(storm["outcomes"][c]["attempts"] for c in STORM) > len(STORM)
    assert all(not t["strategy_events"] for t in report["turns"])
    assert report["metrics"]["activity_search"]["life"]["circuit_breaker_opens"] == 1
    rates = turn(report, "currency-storm")["outcomes"]
    assert [rates[c]["status"] for c in AFTER_429] == ["succeeded"] * 3


def test_the_rate_limit_spaces_the_lookups_and_a_429_pauses_the_tool_for_every_caller(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = run_json(capsys)
    storm = turn(report, "currency-storm")
    outcomes = storm["outcomes"]
    assert [outcomes[c]["status"] for c in ("eur", "gbp", "jpy", "cad")] == ["succeeded"] * 4
    assert (outcomes["chf"]["status"], outcomes["chf"]["attempts"]) == ("failed", 1)
    assert outcomes["chf"]["reason"].startswith("rate_limit: HTTP 429")
    for call_id in AFTER_429:
        outcome = outcomes[call_id]
        assert (outcome["status"], outcome["attempts"]) == ("failed", 0), "never sent"
        assert outcome["reason"].startswith(f"throttled: {COOLING}")
    decided = [(e["event_type"], e["call_id"]) for e in storm["strategy_events"]]
    assert decided == [
        ("RateLimitWaited", "cad"),
        ("RateLimitWaited", "jpy"),
        ("CooldownStarted", "chf"),
        *[("RateLimitRejected", c) for c in AFTER_429],
    ], "asked after the burst, cad and jpy waited for their turn; after chf's 429, none was sent"
    started = next(e for e in storm["strategy_events"] if e["event_type"] == "CooldownStarted")
    assert (started["cooldown_s"], started["retry_after_s"], started["extended"]) == (20.0, 20.0, False)
    limit = report["metrics"]["exchange_rates"]["strategies"]["rate_limit"]
    assert (limit["waited"], limit["rejected"], limit["cooldowns"]) == (2, 3, 1)
    assert limit["cooldown_started_by"] == "chf" and 19.0 < limit["cooldown_remaining_s"] <= 20.0


def test_the_report_prints_each_strategy_decision_with_its_reason(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["demo", "--manifests", str(MANIFESTS), "--no-record"]) == 0
    out = capsys.readouterr().out
    quotes = section(out, "regional-quotes")
    assert "call tool strategy decision" in quotes
    assert QUEUED in quotes
    assert "latam custom_api attempt 1 rejected: bulkhead full: 2 in flight, 1 queued" in quotes
    storm = section(out, "activity-storm")
    for call_id in STORM:
        refused = f"{call_id} activity_search retry after attempt 1 refused by the retry budget: {SPENT}"
        assert refused in storm
    assert "strategy decision" not in section(out, "plan-trip"), "only turns whose strategies spoke"
    state = " ".join(out[out.index("per-tool strategies") :].split())
    assert BUDGET_STATE in state
    assert BULKHEAD_STATE in state
    rates = section(out, "currency-storm")
    assert "chf exchange_rates cooldown started for 20 s by chf's rate-limit error" in rates
    for call_id in AFTER_429:
        assert f"{call_id} exchange_rates attempt 1 rejected: {COOLING}" in rates
    assert "exchange_rates rate_limit rate_per_s 4, burst 2," in state
    assert "waited 2, rejected 3, cooldowns 1," in state and "cooldown_started_by chf" in state
