"""The demo's keyed booking (issue 24, "For every strategy": a keyed booking retried safely after a
timeout): the manifest, tool, turn and fault step proposed for ``manifests/`` and ``engine/demo.py``,
run here as the demo runs them — a scenario file and its fault plan, on the demo's seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.demo import _number, _work
from engine.faults import FaultInjector
from engine.handler import Decision
from engine.manifest import load_manifest
from engine.scenario import load_scenario, run_scenario
from tests.engine.conftest import new_engine, recorded

pytestmark = pytest.mark.anyio

DEMO_DEFAULTS = Path(__file__).parents[3] / "manifests" / "defaults.yaml"

MANIFEST = """\
tool:
  id: book_trip
  description: Book the chosen trip with the partner, keyed so a lost answer is re-sent safely.
  timeout_ms: 1000                 # within the retry policy's 2 s time budget: time to re-send
  side_effect: side_effecting
  retry_policy:
    max_attempts: 3
  idempotency: {key: request_id}   # the partner books once per request_id, however often it is sent
"""

TURN = """\
    - id: keyed-booking             # book_trip's first answer is lost: re-sent under the same key
      after_ms: 1000
      calls:
        - {id: book, tool: book_trip, args: {choice: {total: 420}, traveller: ada}}
"""

FAULT = """\
    # book_trip, keyed-booking turn: the partner never answers the first request (a timeout:
    # it may have booked). The call carries an idempotency key, so the engine re-sends it under
    # the same key, and the partner answers with the booking it made.
    - match: {turn: keyed-booking, call_id: book}
      sequence:
        - {type: hang}
        - {type: ok}
"""


async def book_trip(choice: dict[str, Any], traveller: str = "guest", request_id: str = "") -> dict[str, Any]:
    """The demo partner's booking: its reference depends on the request id only, as a service that
    deduplicates by key answers a re-sent request with the booking it already made."""
    await _work("booking", traveller, request_id)
    reference = f"BK-{_number(request_id, modulo=10**6):06d}"
    return {"reference": reference, "request_id": request_id, "traveller": traveller, **choice}


def scenario_files(tmp_path: Path, manifest: str) -> tuple[Path, Path]:
    (tmp_path / "book_trip.yaml").write_text(manifest)
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "faults.yaml").write_text(f"fault_plan:\n  name: demo outage\n  steps:\n{FAULT}")
    scenario = "scenario:\n  name: travel agent under fire\n  seed: 2025\n  faults: faults.yaml\n  turns:\n"
    (demo / "scenario.yaml").write_text(scenario + TURN)
    return tmp_path / "book_trip.yaml", demo / "scenario.yaml"


async def run_demo_turn(tmp_path: Path, manifest: str) -> tuple[Any, Any, list[str]]:
    manifest_path, scenario_path = scenario_files(tmp_path, manifest)
    scenario = load_scenario(scenario_path)
    assert scenario.faults is not None
    defaults = yaml.safe_load(DEMO_DEFAULTS.read_text())["defaults"]  # the bundled demo's
    engine = await new_engine(
        load_manifest(manifest_path, defaults), seed=scenario.spec.seed, faults=FaultInjector(scenario.faults)
    )
    keys: list[str] = []

    async def booking(**args: Any) -> dict[str, Any]:
        keys.append(args["request_id"])
        return await book_trip(**args)

    engine.register("book_trip", booking)
    events = recorded(engine)
    [result] = await run_scenario(engine, scenario, run="run-1")
    return result.outcomes["book"], (engine, events), keys


async def test_the_keyed_booking_is_re_sent_after_a_timeout_under_the_same_key(tmp_path: Path) -> None:
    outcome, (engine, events), keys = await run_demo_turn(tmp_path, MANIFEST)
    key = "run-1/keyed-booking:book"
    assert outcome.ok and outcome.attempts == 2
    assert outcome.value["request_id"] == key and outcome.value["reference"].startswith("BK-")
    assert keys == [key], "the first request hung before the partner answered; the re-send carried the key"
    [assigned] = events.of("IdempotencyKeyAssigned")
    assert (assigned.key, assigned.source, assigned.argument) == (key, "turn", "request_id")
    [failed] = events.of("ToolError")
    assert failed.kind == "timeout" and failed.decision is Decision.RETRY
    assert failed.decision_reason.startswith(f"ambiguous timeout, re-sent safely under idempotency key {key}")
    assert engine.stats()["book_trip"].strategies["idempotency"]["resends"] == 1


async def test_without_the_key_the_same_booking_is_never_re_sent(tmp_path: Path) -> None:
    unkeyed = MANIFEST.replace("  idempotency: {key: request_id}", "  # no idempotency section")
    outcome, (_, events), keys = await run_demo_turn(tmp_path, unkeyed)
    assert not outcome.ok and outcome.attempts == 1 and keys == []
    assert "side-effecting tool: not re-sent after an ambiguous timeout" in outcome.reason
    assert events.of("IdempotencyKeyAssigned") == []
