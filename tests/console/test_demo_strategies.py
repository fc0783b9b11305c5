"""The bundled demo's strategies through ``tripwire run`` (issue 23): custom_api's bulkhead queues one
call and refuses another, activity_search's retry budget holds a storm back, and the report says
so, call by call, with the strategies' own reasons."""

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
    """The demo's bulkhead and budget are the manifests' doing: strip the two sections and latam
    is served, the storm's calls are retried until activity_search's breaker opens."""
    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, manifests)
    for name, key in (("custom_api.yaml", "  bulkhead:"), ("activity_search.yaml", "  retry_budget:")):
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
