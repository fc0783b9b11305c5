"""Fault injection (engine/faults/): plans, one-line errors, matching, chaos, and each fault.

Plans are loaded from ``tmp_path`` files or dicts; every pick is made with explicit ordinals.
Fault behaviour runs on trio's ``MockClock`` (tests/conftest.py), so a 40 s timeout takes no
real time, and every exception a fault raises goes through :func:`engine.classify`.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import Engine
from engine.classify import classify
from engine.config import ConfigError
from engine.demo import DEMO_TOOLS
from engine.errors import ToolError
from engine.faults import (
    CHAOS_FAULT_TYPES,
    FAULT_TYPES,
    INJECTED_ATTR,
    APIStatusError,
    BaseFault,
    ConnectionResetFault,
    FaultInjector,
    FaultPlan,
    FaultPlanError,
    FiredFault,
    HangFault,
    HttpErrorFault,
    InternalServerError,
    InvalidParametersFault,
    LatencyFault,
    LengthFinishReasonError,
    MalformedResponseFault,
    OkFault,
    PartialResponseFault,
    RateLimitError,
    RemoteProtocolError,
    StreamTruncateFault,
    TimeoutFault,
    ToolCallFault,
    chaos_unit,
    corrupt_tool_call,
    load_fault_plan,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.manifest import ManifestRegistry
from engine.strategies.breaker.machine import BreakerState

pytestmark = pytest.mark.anyio

K = ErrorKind
T, P = ErrorClass.TRANSIENT, ErrorClass.PERMANENT

ROOT = Path(__file__).resolve().parents[2]
DEMO_PLAN = ROOT / "manifests" / "demo" / "faults.yaml"
BUNDLED = ROOT / "manifests"
WALL = 1_762_338_645.0


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def plan_of(steps: list[dict[str, Any]], chaos: dict[str, Any] | None = None) -> FaultPlan:
    data: dict[str, Any] = {"name": "test", "steps": steps}
    if chaos is not None:
        data["chaos"] = chaos
    return FaultPlan.from_dict(data)


def types_of(
    injector: FaultInjector, tool: str, picks: list[tuple[int, int]], **ids: Any
) -> list[str | None]:
    """The fault type picked for each (call, attempt), None when the real tool runs unplanned."""
    out: list[str | None] = []
    for call, attempt in picks:
        fault = injector.pick(tool, call=call, attempt=attempt, **ids)
        out.append(fault.fault_type if fault is not None else None)
    return out


# --- loading --------------------------------------------------------------------------------

BRIEF_EXAMPLE = """
fault_plan:
  name: demo outage
  steps:
    - match: {tool: flight_search}             # the tool's attempts in order, across its calls
      sequence:
        - {type: connection_reset}
        - {type: http_error, status_code: 503, headers: {Retry-After: "1"}}
        - {type: ok}                           # a success: the real tool runs
    - match: {tool: hotel_search, call: 2}     # only the tool's 2nd call (1-based)
      sequence: [{type: timeout, after_ms: 40000}]
      repeat: true
    - match: {turn: plan-trip, call_id: hotels}
      sequence: [{type: hang}]
  chaos:
    seed: 42
    rates: {connection_reset: 0.05, http_error: 0.02}
    defaults: {http_error: {status_code: 503}}
"""


def test_the_documented_format_loads(tmp_path: Path) -> None:
    plan = load_fault_plan(write(tmp_path / "plan.yaml", BRIEF_EXAMPLE))

    assert plan.name == "demo outage"
    assert [s.match.level for s in plan.steps] == ["tool", "call", "call_id"]
    first = plan.steps[0].sequence
    assert [f.fault_type for f in first] == ["connection_reset", "http_error", "ok"]
    assert isinstance(first[1], HttpErrorFault)
    assert first[1].status_code == 503
    assert first[1].headers == {"Retry-After": "1"}
    assert plan.steps[1].repeat is True
    assert isinstance(plan.steps[1].sequence[0], TimeoutFault)
    assert plan.steps[1].sequence[0].after_ms == 40000
    assert isinstance(plan.steps[2].sequence[0], HangFault)
    assert plan.chaos is not None
    assert plan.chaos.seed == 42
    assert plan.chaos.rates == {"connection_reset": 0.05, "http_error": 0.02}
    assert plan.chaos.defaults["http_error"] == HttpErrorFault(status_code=503)
    assert plan.tools == {"flight_search", "hotel_search"}


def test_every_fault_type_loads_with_its_parameters() -> None:
    plan = plan_of(
        [
            {
                "match": {"tool": "t"},
                "sequence": [
                    {"type": "ok"},
                    {"type": "latency", "ms": 250},
                    {"type": "hang"},
                    {"type": "timeout", "after_ms": 5000},
                    {"type": "http_error", "status_code": 429, "headers": {"Retry-After": 30}, "body": "x"},
                    {"type": "malformed_response", "raw": "not valid json"},
                    {"type": "stream_truncate", "after_chunks": 3, "raise": "RemoteProtocolError"},
                    {"type": "connection_reset"},
                    {"type": "partial_response", "content": "The answer is"},
                    {"type": "invalid_parameters", "message": "Invalid airport code: XYZ"},
                    {"type": "tool_call_fault", "mode": "unknown_tool"},
                ],
            }
        ]
    )
    sequence = plan.steps[0].sequence
    assert tuple(f.fault_type for f in sequence) == FAULT_TYPES
    assert set(CHAOS_FAULT_TYPES) == set(FAULT_TYPES) - {"ok"}
    http = sequence[4]
    assert isinstance(http, HttpErrorFault)
    assert http.headers == {"Retry-After": "30"}  # numbers in YAML become header text
    stream = sequence[6]
    assert isinstance(stream, StreamTruncateFault)
    assert (stream.after_chunks, stream.raise_) == (3, "RemoteProtocolError")


def test_from_dict_takes_the_file_mapping_or_the_plan_itself() -> None:
    steps = [{"match": {"tool": "t"}, "sequence": [{"type": "connection_reset"}]}]
    assert FaultPlan.from_dict({"fault_plan": {"steps": steps}}) == FaultPlan.from_dict({"steps": steps})
    assert FaultPlan.from_dict({}) == FaultPlan()


def test_the_demo_plan_loads_and_names_only_bundled_tools() -> None:
    plan = load_fault_plan(DEMO_PLAN)
    registry = ManifestRegistry.from_directory(BUNDLED)

    assert plan.tools <= set(registry.entries)
    assert plan.chaos is None  # the demo is deterministic; chaos is for soak runs
    # the hotel_search timeout outlasts the tool's own timeout, so the engine's fires first
    (hotel,) = [s for s in plan.steps if s.match.tool == "hotel_search"]
    assert isinstance(hotel.sequence[0], TimeoutFault)
    assert hotel.sequence[0].after_ms > registry.get("hotel_search").timeout_ms


def test_the_demo_plan_fires_the_outage_in_order() -> None:
    registry = ManifestRegistry.from_directory(BUNDLED)
    injector = FaultInjector(load_fault_plan(DEMO_PLAN))
    breaker = registry.get("flight_search").circuit_breaker
    attempts = registry.get("flight_search").retry_policy.max_attempts

    # flight_search: fail twice, then succeed
    assert types_of(injector, "flight_search", [(1, 1), (1, 2), (1, 3)]) == [
        "connection_reset",
        "http_error",
        "ok",
    ]
    # then down hard: every attempt of call 2 resets, enough to open the breaker
    hard = types_of(injector, "flight_search", [(2, a) for a in range(1, attempts + 1)])
    assert hard == ["connection_reset"] * attempts
    assert attempts >= breaker.failure_threshold
    # the half-open probe (a later call) and the backup run for real
    assert injector.pick("flight_search", call=3, attempt=1) is None
    assert injector.pick("flight_search_backup", call=1, attempt=1) is None
    # the others fail once, then run for real
    assert types_of(injector, "hotel_search", [(1, 1), (2, 1)]) == ["timeout", None]
    assert types_of(injector, "activity_search", [(1, 1), (1, 2)]) == ["http_error", "ok"]
    assert types_of(injector, "custom_api", [(1, 1), (2, 1)]) == ["http_error", None]
    assert types_of(injector, "compare_prices", [(1, 1), (2, 1)]) == [None, None]
    # the scenario's later turns are keyed by turn and call id
    assert injector.pick("compare_prices", call=9, attempt=1, turn_id="while-open", call_id="compare")
    assert injector.pick("create_itinerary", call=9, attempt=1, turn_id="flights-down", call_id="book")


def test_the_demo_faults_classify_as_the_demo_needs() -> None:
    registry = ManifestRegistry.from_directory(BUNDLED)
    injector = FaultInjector(load_fault_plan(DEMO_PLAN))

    def error_of(tool: str, call: int = 1, attempt: int = 1) -> BaseException:
        fault = injector.pick(tool, call=call, attempt=attempt)
        assert fault is not None
        error = fault.exception()
        assert error is not None
        return error

    flight = registry.get("flight_search")
    assert classify(error_of("flight_search"), flight).kind is K.CONNECTION_RESET
    unavailable = classify(error_of("flight_search", attempt=2), flight)
    assert (unavailable.kind, unavailable.retry_after_s) == (K.SERVICE_UNAVAILABLE, 1.0)
    limited = classify(error_of("activity_search"), registry.get("activity_search"))
    assert (limited.kind, limited.error_class, limited.retry_after_s) == (K.RATE_LIMIT, T, 1.0)
    region = classify(error_of("custom_api"), registry.get("custom_api"))
    assert (region.kind, region.error_class, region.status_code) == (K.SERVICE_UNAVAILABLE, P, 503)
    malformed = injector.pick("compare_prices", call=1, attempt=1, turn_id="while-open", call_id="compare")
    assert malformed is not None
    assert classify(malformed.exception() or Exception()).kind is K.INVALID_RESPONSE


async def test_the_demo_plan_through_the_engine_retries_opens_the_breaker_and_falls_back() -> None:
    """The demo plan against the bundled tools: faults take the real retry, breaker and fallback paths."""
    injector = FaultInjector(load_fault_plan(DEMO_PLAN))
    engine = Engine(BUNDLED, rng=random.Random(1), wall_clock=lambda: WALL, faults=injector)
    for name, fn in DEMO_TOOLS.items():
        engine.register(name, fn)
    events: list[Any] = []
    engine.subscribe(events.append, direct=True)
    start = anyio.current_time()

    retried = await engine.try_call("flight_search", origin="SFO", destination="JFK")
    assert (retried.ok, retried.attempts, retried.served_by) == (True, 3, None)
    assert engine.state("flight_search") is BreakerState.CLOSED

    down = await engine.try_call("flight_search", origin="SFO", destination="JFK")
    assert engine.state("flight_search") is BreakerState.OPEN
    assert [e.tool_id for e in events if e.event_type == "BreakerOpened"] == ["flight_search"]
    assert down.served_by == "flight_search_backup"
    assert down.ok

    timed_out = await engine.try_call("hotel_search", city="Paris")
    assert timed_out.error is not None
    assert timed_out.error.kind is K.TIMEOUT
    assert [e.tool_id for e in events if e.event_type == "ToolTimeout"] == ["hotel_search"]

    limited = await engine.try_call("activity_search", city="Paris")
    assert (limited.ok, limited.attempts) == (True, 2)

    region = await engine.try_call("custom_api", region="mars")
    assert region.error is not None
    assert (region.error.kind, region.attempts) == (K.SERVICE_UNAVAILABLE, 1)
    assert region.error.classification is not None
    assert region.error.classification.error_class is P

    assert (await engine.try_call("compare_prices", flights=[{"price": 100}])).ok

    assert anyio.current_time() - start < 60  # within the demo's first minute
    assert injector.counters == {
        "connection_reset": 6,
        "http_error": 3,
        "timeout": 1,
    }
    failed = [e for e in events if e.event_type == "ToolError"]
    assert [e.fault_type for e in failed] == [f.fault_type for f in injector.fired]


# --- one-line errors naming file, line, step and field ---------------------------------------

ERROR_CASES: list[tuple[str, str, int, str, str]] = [
    (
        "status code not a number",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence: [{type: ok}]
            - match: {tool: b}
              sequence:
                - {type: http_error, status_code: "abc"}
        """,
        7,
        "steps[1].sequence[0].status_code",
        "Input should be a valid integer",
    ),
    (
        "status code out of range",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - type: http_error
                  status_code: 700
        """,
        6,
        "steps[0].sequence[0].status_code",
        "less than or equal to 599",
    ),
    (
        "unknown fault type",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: explode}
        """,
        5,
        "steps[0].sequence[0].type",
        "unknown fault type 'explode'; expected one of: ok, latency, hang, timeout, http_error, "
        "malformed_response, stream_truncate, connection_reset, partial_response, "
        "invalid_parameters, tool_call_fault",
    ),
    (
        "fault without a type",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: ok}
                - {status_code: 503}
        """,
        6,
        "steps[0].sequence[1]",
        "missing 'type'; expected one of: ok, latency",
    ),
    (
        "fault written as a bare word",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - connection_reset
        """,
        5,
        "steps[0].sequence[0]",
        "a fault is a mapping with a 'type'",
    ),
    (
        "unknown fault parameter",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - type: http_error
                  status_code: 503
                  header: {Retry-After: "1"}
        """,
        7,
        "steps[0].sequence[0].header",
        "unknown key (http_error takes status_code, headers, body)",
    ),
    (
        "missing required parameter",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: timeout}
        """,
        5,
        "steps[0].sequence[0].after_ms",
        "required",
    ),
    (
        "negative latency",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: latency, ms: -5}
        """,
        5,
        "steps[0].sequence[0].ms",
        "greater than or equal to 0",
    ),
    (
        "unknown stream exception",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: stream_truncate, after_chunks: 2, raise: BrokenPipe}
        """,
        5,
        "steps[0].sequence[0].raise",
        "Input should be 'ConnectionError', 'ConnectionResetError', 'TimeoutError' or 'RemoteProtocolError'",
    ),
    (
        "malformed response that parses",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - type: malformed_response
                  raw: '{"ok": true}'
        """,
        6,
        "steps[0].sequence[0].raw",
        "is valid JSON",
    ),
    (
        "unknown tool_call_fault mode",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: tool_call_fault, mode: garbled}
        """,
        5,
        "steps[0].sequence[0].mode",
        "Input should be 'malformed_arguments', 'unknown_tool' or 'missing_arguments'",
    ),
    (
        "header given twice",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - type: http_error
                  status_code: 429
                  headers: {Retry-After: "1", retry-after: "2"}
        """,
        7,
        "steps[0].sequence[0].headers",
        "'retry-after' repeats 'Retry-After'",
    ),
    (
        "empty match",
        """
        fault_plan:
          steps:
            - match: {}
              sequence: [{type: ok}]
        """,
        3,
        "steps[0].match",
        "empty match: give {tool}, {tool, call} or {turn, call_id}",
    ),
    (
        "no match",
        """
        fault_plan:
          steps:
            - sequence: [{type: ok}]
        """,
        3,
        "steps[0].match",
        "required",
    ),
    (
        "call ordinal zero",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence: [{type: ok}]
            - match:
                tool: a
                call: 0
              sequence: [{type: ok}]
        """,
        7,
        "steps[1].match.call",
        "greater than or equal to 1",
    ),
    (
        "call without tool",
        """
        fault_plan:
          steps:
            - match: {call: 2}
              sequence: [{type: ok}]
        """,
        3,
        "steps[0].match",
        "call needs tool",
    ),
    (
        "turn without call_id",
        """
        fault_plan:
          steps:
            - match: {turn: plan-trip}
              sequence: [{type: ok}]
        """,
        3,
        "steps[0].match",
        "turn and call_id go together",
    ),
    (
        "turn with a call ordinal",
        """
        fault_plan:
          steps:
            - match: {turn: plan-trip, call_id: hotels, tool: a, call: 1}
              sequence: [{type: ok}]
        """,
        3,
        "steps[0].match",
        "takes no call ordinal",
    ),
    (
        "unknown match key",
        """
        fault_plan:
          steps:
            - match: {tool: a, attempt: 2}
              sequence: [{type: ok}]
        """,
        3,
        "steps[0].match.attempt",
        "unknown key",
    ),
    (
        "bad tool id",
        """
        fault_plan:
          steps:
            - match: {tool: "flight search"}
              sequence: [{type: ok}]
        """,
        3,
        "steps[0].match.tool",
        "String should match pattern",
    ),
    (
        "empty sequence",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence: []
        """,
        4,
        "steps[0].sequence",
        "at least 1 item",
    ),
    (
        "repeat not a boolean",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence: [{type: ok}]
              repeat: sometimes
        """,
        5,
        "steps[0].repeat",
        "Input should be a valid boolean",
    ),
    (
        "two steps with the same match",
        """
        fault_plan:
          steps:
            - match: {tool: a, call: 2}
              sequence: [{type: ok}]
            - match: {tool: b}
              sequence: [{type: ok}]
            - match: {call: 2, tool: a}
              sequence: [{type: hang}]
        """,
        7,
        "steps[2].match",
        "same match as steps[0] ({tool: a, call: 2})",
    ),
    (
        "unknown step key",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence: [{type: ok}]
              repeats: true
        """,
        5,
        "steps[0].repeats",
        "unknown key",
    ),
    (
        "unknown plan key",
        """
        fault_plan:
          name: x
          step: []
        """,
        3,
        "step",
        "unknown key",
    ),
    (
        "rate above 1",
        """
        fault_plan:
          chaos:
            seed: 1
            rates:
              connection_reset: 1.5
        """,
        5,
        "chaos.rates.connection_reset",
        "less than or equal to 1",
    ),
    (
        "negative rate",
        """
        fault_plan:
          chaos:
            seed: 1
            rates: {connection_reset: -0.1}
        """,
        4,
        "chaos.rates.connection_reset",
        "greater than or equal to 0",
    ),
    (
        "rates adding up past 1",
        """
        fault_plan:
          chaos:
            seed: 1
            rates: {connection_reset: 0.6, hang: 0.5}
        """,
        4,
        "chaos.rates",
        "rates add up to 1.1",
    ),
    (
        "unknown chaos fault type",
        """
        fault_plan:
          chaos:
            seed: 1
            rates:
              meteor: 0.1
        """,
        5,
        "chaos.rates.meteor",
        "Input should be 'latency', 'hang'",
    ),
    (
        "ok is no chaos fault",
        """
        fault_plan:
          chaos:
            seed: 1
            rates: {ok: 0.5}
        """,
        4,
        "chaos.rates.ok",
        "Input should be 'latency'",
    ),
    (
        "rated type without its required defaults",
        """
        fault_plan:
          chaos:
            seed: 1
            rates:
              connection_reset: 0.1
              http_error: 0.1
        """,
        6,
        "chaos.defaults.http_error.status_code",
        "required",
    ),
    (
        "bad chaos default",
        """
        fault_plan:
          chaos:
            seed: 1
            rates: {timeout: 0.1}
            defaults:
              timeout:
                after_ms: soon
        """,
        7,
        "chaos.defaults.timeout.after_ms",
        "Input should be a valid number",
    ),
    (
        "defaults for a type without a rate",
        """
        fault_plan:
          chaos:
            seed: 1
            rates: {hang: 0.1}
            defaults: {latency: {ms: 100}}
        """,
        5,
        "chaos.defaults",
        "latency has no rate in chaos.rates",
    ),
    (
        "chaos without a seed",
        """
        fault_plan:
          chaos:
            rates: {hang: 0.1}
        """,
        2,
        "chaos.seed",
        "required",
    ),
    (
        "duplicate YAML key",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence: [{type: ok}]
              sequence: [{type: hang}]
        """,
        5,
        "steps[0].sequence",
        "duplicate key (first on line 4)",
    ),
    (
        "YAML syntax error",
        """
        fault_plan:
          steps: [{match: {tool: a}
        """,
        3,
        "",
        "YAML syntax error",
    ),
    (
        "unsafe YAML tag",
        """
        fault_plan:
          name: !!python/object/apply:os.system ["echo pwned"]
        """,
        2,
        "",
        "YAML syntax error: could not determine a constructor",
    ),
    (
        "not a fault plan",
        """
        tool:
          id: flight_search
        """,
        1,
        "",
        "expected a top-level 'fault_plan:' mapping (found ['tool'])",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_invalid_plans_fail_with_one_line_naming_file_line_step_and_field(
    tmp_path: Path, text: str, line: int, field: str, message: str
) -> None:
    path = write(tmp_path / "plan.yaml", text)
    with pytest.raises(FaultPlanError) as info:
        load_fault_plan(path)

    error = info.value
    assert isinstance(error, ConfigError)  # the CLI's one-line, exit-2 handling applies
    first = str(error.issues[0])
    assert len(first.splitlines()) == 1
    assert len(str(error).splitlines()) == 1
    where = f"{path}:{line}: {field}: " if field else f"{path}:{line}: "
    assert first.startswith(where), first
    assert message in first, first


def test_every_problem_is_reported_and_str_shows_the_first(tmp_path: Path) -> None:
    path = write(
        tmp_path / "plan.yaml",
        """
        fault_plan:
          steps:
            - match: {tool: a}
              sequence:
                - {type: http_error, status_code: 0}
                - {type: latency}
            - match: {}
              sequence: [{type: ok}]
        """,
    )
    with pytest.raises(FaultPlanError) as info:
        load_fault_plan(path)

    shown = [str(issue) for issue in info.value.issues]
    assert shown == [
        f"{path}:5: steps[0].sequence[0].status_code: Input should be greater than or equal to 100",
        f"{path}:6: steps[0].sequence[1].ms: required",
        f"{path}:7: steps[1].match: empty match: give {{tool}}, {{tool, call}} or {{turn, call_id}} "
        "(optionally with tool)",
    ]
    assert str(info.value) == f"{shown[0]} (and 2 more)"


def test_inline_plans_name_their_source_without_a_line() -> None:
    with pytest.raises(FaultPlanError) as info:
        FaultPlan.from_dict(
            {"steps": [{"match": {"tool": "a"}, "sequence": [{"type": "timeout", "after_ms": "x"}]}]},
            source="tests:plan",
        )
    assert str(info.value).startswith("tests:plan: steps[0].sequence[0].after_ms: Input should be")


def test_unreadable_and_missing_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(FaultPlanError, match=r"missing\.yaml: cannot read"):
        load_fault_plan(tmp_path / "missing.yaml")
    (tmp_path / "binary.yaml").write_bytes(b"fault_plan:\n  name: \xff\n")
    with pytest.raises(FaultPlanError, match=r"binary\.yaml:2: not UTF-8"):
        load_fault_plan(tmp_path / "binary.yaml")


# --- matching ----------------------------------------------------------------------------------


def test_fail_twice_then_succeed_then_the_real_tool() -> None:
    injector = FaultInjector(
        plan_of(
            [
                {
                    "match": {"tool": "flight_search"},
                    "sequence": [
                        {"type": "connection_reset"},
                        {"type": "http_error", "status_code": 503},
                        {"type": "ok"},
                    ],
                }
            ]
        )
    )
    picks = [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)]
    assert types_of(injector, "flight_search", picks) == ["connection_reset", "http_error", "ok", None, None]
    assert injector.pick("hotel_search", call=1, attempt=1) is None


def test_a_tool_step_consumes_one_element_per_attempt_across_calls() -> None:
    injector = FaultInjector(
        plan_of(
            [
                {
                    "match": {"tool": "t"},
                    "sequence": [{"type": "connection_reset"}, {"type": "ok"}, {"type": "hang"}],
                }
            ]
        )
    )
    # call 1 fails then succeeds; call 2's first attempt gets the third element
    assert types_of(injector, "t", [(1, 1), (1, 2), (2, 1), (2, 2)]) == [
        "connection_reset",
        "ok",
        "hang",
        None,
    ]


def test_call_and_call_id_steps_index_by_attempt_whatever_the_order() -> None:
    plan = plan_of(
        [
            {
                "match": {"tool": "t", "call": 2},
                "sequence": [{"type": "connection_reset"}, {"type": "hang"}, {"type": "ok"}],
            },
            {
                "match": {"turn": "plan-trip", "call_id": "hotels"},
                "sequence": [{"type": "partial_response"}, {"type": "latency", "ms": 5}],
            },
        ]
    )
    injector = FaultInjector(plan)
    # attempts picked out of order (concurrent calls) still get their own element
    assert types_of(injector, "t", [(2, 3), (1, 1), (2, 1), (2, 2), (2, 4)]) == [
        "ok",
        None,
        "connection_reset",
        "hang",
        None,
    ]
    ids = {"turn_id": "plan-trip", "call_id": "hotels"}
    assert types_of(injector, "hotel_search", [(9, 2), (9, 1), (9, 3)], **ids) == [
        "latency",
        "partial_response",
        None,
    ]


def test_the_most_specific_step_wins() -> None:
    plan = plan_of(
        [
            {"match": {"tool": "t"}, "sequence": [{"type": "connection_reset"}], "repeat": True},
            {"match": {"tool": "t", "call": 2}, "sequence": [{"type": "http_error", "status_code": 503}]},
            {"match": {"turn": "trip", "call_id": "c1"}, "sequence": [{"type": "hang"}]},
            {
                "match": {"turn": "trip", "call_id": "c1", "tool": "t"},
                "sequence": [{"type": "latency", "ms": 1}],
            },
        ]
    )
    injector = FaultInjector(plan)

    def picked(tool: str, call: int, turn: str | None = None, call_id: str | None = None) -> str | None:
        fault = injector.pick(tool, call=call, attempt=1, turn_id=turn, call_id=call_id)
        return fault.fault_type if fault is not None else None

    assert picked("t", 2, "trip", "c1") == "latency"  # turn + call_id + tool
    assert picked("backup", 1, "trip", "c1") == "hang"  # turn + call_id: any tool serving the call
    assert picked("t", 2, "trip", "c2") == "http_error"  # tool + call
    assert picked("t", 2) == "http_error"
    assert picked("t", 1, "trip", "c2") == "connection_reset"  # tool
    assert picked("t", 3) == "connection_reset"
    assert picked("other", 1, "other-turn", "c1") is None


def test_a_tool_step_cursor_moves_only_on_attempts_it_governs() -> None:
    plan = plan_of(
        [
            {"match": {"tool": "t"}, "sequence": [{"type": "connection_reset"}, {"type": "hang"}]},
            {"match": {"tool": "t", "call": 1}, "sequence": [{"type": "ok"}]},
        ]
    )
    injector = FaultInjector(plan)
    # call 1 is governed by the {tool, call} step (and exhausted after attempt 1): the {tool}
    # step's cursor only moves for call 2 and later
    assert types_of(injector, "t", [(1, 1), (1, 2), (2, 1), (3, 1), (4, 1)]) == [
        "ok",
        None,
        "connection_reset",
        "hang",
        None,
    ]


def test_repeat_keeps_the_last_element_and_without_it_the_real_tool_runs() -> None:
    plan = plan_of(
        [
            {
                "match": {"tool": "down"},
                "sequence": [{"type": "latency", "ms": 10}, {"type": "connection_reset"}],
                "repeat": True,
            },
            {
                "match": {"tool": "hotel_search", "call": 2},
                "sequence": [{"type": "timeout", "after_ms": 40000}],
            },
            {
                "match": {"tool": "hotel_search", "call": 3},
                "sequence": [{"type": "timeout", "after_ms": 40000}],
                "repeat": True,
            },
        ]
    )
    injector = FaultInjector(plan)
    down = types_of(injector, "down", [(c, 1) for c in range(1, 6)])
    assert down == ["latency"] + ["connection_reset"] * 4
    assert types_of(injector, "hotel_search", [(2, 1), (2, 2), (3, 1), (3, 2), (3, 7)]) == [
        "timeout",
        None,
        "timeout",
        "timeout",
        "timeout",
    ]


def test_ordinals_are_one_based() -> None:
    injector = FaultInjector(plan_of([]))
    with pytest.raises(ValueError, match="1-based"):
        injector.pick("t", call=0, attempt=1)
    with pytest.raises(ValueError, match="1-based"):
        injector.pick("t", call=1, attempt=0)


def test_the_same_plan_fires_the_same_faults_on_every_run() -> None:
    plan = load_fault_plan(DEMO_PLAN)
    picks = [("flight_search", 1, a) for a in (1, 2, 3)] + [("flight_search", 2, a) for a in range(1, 6)]
    picks += [
        ("hotel_search", 1, 1),
        ("custom_api", 1, 1),
        ("activity_search", 1, 1),
        ("activity_search", 1, 2),
    ]

    def run(injector: FaultInjector) -> list[str | None]:
        out = []
        for tool, call, attempt in picks:
            fault = injector.pick(tool, call=call, attempt=attempt)
            out.append(fault.fault_type if fault else None)
        return out

    first_injector = FaultInjector(plan)
    first = run(first_injector)
    assert run(FaultInjector(plan)) == first
    first_injector.reset()
    assert first_injector.counters == {}
    assert first_injector.fired == []
    assert run(first_injector) == first


# --- counters and the fired list -----------------------------------------------------------------


def test_counters_and_fired_list_record_every_injected_fault_but_not_ok() -> None:
    plan = plan_of(
        [
            {
                "match": {"tool": "t"},
                "sequence": [
                    {"type": "connection_reset"},
                    {"type": "http_error", "status_code": 503},
                    {"type": "ok"},
                    {"type": "connection_reset"},
                ],
            },
            {"match": {"turn": "trip", "call_id": "c9"}, "sequence": [{"type": "latency", "ms": 5}]},
        ]
    )
    injector = FaultInjector(plan)
    for attempt in (1, 2, 3):
        injector.pick("t", call=1, attempt=attempt)
    injector.pick("t", call=2, attempt=1)
    injector.pick("t", call=3, attempt=1)  # exhausted: the real tool, nothing recorded
    injector.pick("u", call=4, attempt=1, turn_id="trip", call_id="c9")

    assert injector.counters == {"connection_reset": 2, "http_error": 1, "latency": 1}
    assert injector.fired == [
        FiredFault("t", 1, 1, None, None, "connection_reset", "steps[0].sequence[0]"),
        FiredFault("t", 1, 2, None, None, "http_error", "steps[0].sequence[1]"),
        FiredFault("t", 2, 1, None, None, "connection_reset", "steps[0].sequence[3]"),
        FiredFault("u", 4, 1, "trip", "c9", "latency", "steps[1].sequence[0]"),
    ]
    assert injector.fired[-1].to_dict() == {
        "tool_id": "u",
        "call": 4,
        "attempt": 1,
        "turn_id": "trip",
        "call_id": "c9",
        "fault_type": "latency",
        "source": "steps[1].sequence[0]",
    }


# --- chaos -----------------------------------------------------------------------------------

CHAOS = {
    "seed": 42,
    "rates": {"connection_reset": 0.1, "http_error": 0.05, "latency": 0.1},
    "defaults": {"http_error": {"status_code": 503}, "latency": {"ms": 200}},
}
KEYS = [
    (tool, call, attempt, turn, call_id)
    for tool in ("flight_search", "hotel_search", "custom_api")
    for call in range(1, 21)
    for attempt in range(1, 4)
    for turn, call_id in ((None, None), ("trip", f"c{call}"))
]


def chaos_run(plan: FaultPlan, keys: list[tuple[str, int, int, str | None, str | None]]) -> dict[Any, Any]:
    injector = FaultInjector(plan)
    out = {}
    for tool, call, attempt, turn, call_id in keys:
        fault = injector.pick(tool, call=call, attempt=attempt, turn_id=turn, call_id=call_id)
        out[(tool, call, attempt, turn, call_id)] = fault
    return out


def test_chaos_is_reproducible_from_its_seed() -> None:
    plan = plan_of([], CHAOS)
    first = chaos_run(plan, KEYS)
    assert chaos_run(plan, KEYS) == first
    assert chaos_run(plan_of([], CHAOS), KEYS) == first  # the same plan loaded again
    fired = [f for f in first.values() if f is not None]
    assert {f.fault_type for f in fired} == {"connection_reset", "http_error", "latency"}
    other_seed = chaos_run(plan_of([], {**CHAOS, "seed": 43}), KEYS)
    assert other_seed != first


def test_chaos_does_not_depend_on_the_order_of_picks() -> None:
    plan = plan_of([], CHAOS)
    in_order = chaos_run(plan, KEYS)
    for shuffle_seed in range(5):
        keys = list(KEYS)
        random.Random(shuffle_seed).shuffle(keys)
        assert chaos_run(plan, keys) == in_order


def test_chaos_draws_are_a_stable_hash_of_the_attempt() -> None:
    # pinned: a change here changes every soak run's faults
    assert chaos_unit(42, "flight_search", 1, 1, None, None) == 0.06369350395344515
    assert chaos_unit(42, "flight_search", 1, 2, None, None) != chaos_unit(
        42, "flight_search", 1, 1, None, None
    )
    assert chaos_unit(42, "t", 1, 1, "trip", "c1") != chaos_unit(42, "t", 1, 1, None, None)


def test_chaos_rates_and_default_parameters_are_honoured() -> None:
    plan = plan_of([], CHAOS)
    injector = FaultInjector(plan)
    n = 20_000
    for call in range(1, n + 1):
        injector.pick("t", call=call, attempt=1)
    assert injector.counters["connection_reset"] / n == pytest.approx(0.10, abs=0.01)
    assert injector.counters["http_error"] / n == pytest.approx(0.05, abs=0.01)
    assert injector.counters["latency"] / n == pytest.approx(0.10, abs=0.01)
    assert {f.source for f in injector.fired} == {"chaos"}
    http = next(f for f in chaos_run(plan, KEYS).values() if f is not None and f.fault_type == "http_error")
    assert http == HttpErrorFault(status_code=503)
    latency = next(f for f in chaos_run(plan, KEYS).values() if f is not None and f.fault_type == "latency")
    assert latency == LatencyFault(ms=200)


def test_chaos_applies_only_where_no_step_governs_or_the_sequence_ran_out() -> None:
    chaos = {"seed": 1, "rates": {"hang": 1.0}}
    plan = plan_of(
        [
            {"match": {"tool": "steady"}, "sequence": [{"type": "ok"}], "repeat": True},
            {"match": {"tool": "brief", "call": 1}, "sequence": [{"type": "connection_reset"}]},
        ],
        chaos,
    )
    injector = FaultInjector(plan)
    assert types_of(injector, "steady", [(1, 1), (2, 1), (3, 5)]) == ["ok", "ok", "ok"]
    assert types_of(injector, "brief", [(1, 1), (1, 2), (2, 1)]) == ["connection_reset", "hang", "hang"]
    assert types_of(injector, "anything", [(1, 1)]) == ["hang"]
    assert [f.source for f in injector.fired] == ["steps[1].sequence[0]", "chaos", "chaos", "chaos"]


def test_zero_rates_never_fire() -> None:
    injector = FaultInjector(plan_of([], {"seed": 3, "rates": {"hang": 0.0}}))
    assert all(injector.pick("t", call=c, attempt=1) is None for c in range(1, 500))
    assert injector.counters == {}


# --- each fault's behaviour, on the virtual clock --------------------------------------------------


class Tool:
    """The real tool behind a fault: counts invocations and returns a value."""

    def __init__(self) -> None:
        self.invoked = 0

    async def __call__(self) -> str:
        self.invoked += 1
        return "real result"


async def test_ok_runs_the_real_tool() -> None:
    tool = Tool()
    assert await OkFault().run(tool) == "real result"
    assert tool.invoked == 1
    assert OkFault().is_ok
    assert OkFault().exception() is None


async def test_latency_delays_then_runs_the_real_tool() -> None:
    tool = Tool()
    start = anyio.current_time()
    assert await LatencyFault(ms=2500).run(tool) == "real result"
    assert anyio.current_time() - start == pytest.approx(2.5)
    assert tool.invoked == 1


async def test_hang_never_answers_until_the_timeout_cuts_it_off() -> None:
    tool = Tool()
    start = anyio.current_time()
    with anyio.move_on_after(30) as scope:
        await HangFault().run(tool)
    assert scope.cancelled_caught
    assert anyio.current_time() - start == pytest.approx(30)
    assert tool.invoked == 0


async def test_timeout_raises_after_its_delay() -> None:
    tool = Tool()
    start = anyio.current_time()
    with pytest.raises(TimeoutError) as info:
        await TimeoutFault(after_ms=40000).run(tool)
    assert anyio.current_time() - start == pytest.approx(40)
    assert tool.invoked == 0
    assert getattr(info.value, INJECTED_ATTR) == "timeout"
    assert classify(info.value).kind is K.TIMEOUT


async def test_a_timeout_longer_than_the_tools_own_is_cut_off_by_the_tools() -> None:
    start = anyio.current_time()
    with anyio.move_on_after(30) as scope:  # the engine's per-attempt scope, hotel_search's 30 s
        await TimeoutFault(after_ms=40000).run(Tool())
    assert scope.cancelled_caught
    assert anyio.current_time() - start == pytest.approx(30)


# (fault, exception class name, kind, class, retry_after_s)
RAISING: list[tuple[str, BaseFault, str, ErrorKind, ErrorClass, float | None]] = [
    (
        "429 with Retry-After",
        HttpErrorFault(status_code=429, headers={"Retry-After": "7"}, body="Rate limit exceeded"),
        "RateLimitError",
        K.RATE_LIMIT,
        T,
        7.0,
    ),
    ("503", HttpErrorFault(status_code=503), "InternalServerError", K.SERVICE_UNAVAILABLE, T, None),
    (
        "502 with retry-after-ms",
        HttpErrorFault(status_code=502, headers={"retry-after-ms": "1500"}),
        "InternalServerError",
        K.SERVICE_UNAVAILABLE,
        T,
        1.5,
    ),
    ("400", HttpErrorFault(status_code=400), "BadRequestError", K.INVALID_PARAMETERS, P, None),
    ("401", HttpErrorFault(status_code=401), "AuthenticationError", K.AUTH_ERROR, P, None),
    ("404", HttpErrorFault(status_code=404), "NotFoundError", K.NOT_FOUND, P, None),
    ("418", HttpErrorFault(status_code=418), "APIStatusError", K.INVALID_PARAMETERS, P, None),
    (
        "200 with an overloaded_error body",
        HttpErrorFault(
            status_code=200, body={"error": {"type": "overloaded_error", "message": "Overloaded"}}
        ),
        "APIStatusError",
        K.RATE_LIMIT,
        T,
        None,
    ),
    (
        "529 with a JSON text body",
        HttpErrorFault(status_code=529, body='{"type": "error", "error": {"type": "overloaded_error"}}'),
        "InternalServerError",
        K.RATE_LIMIT,
        T,
        None,
    ),
    (
        "429 with insufficient_quota",
        HttpErrorFault(status_code=429, body={"error": {"code": "insufficient_quota"}}),
        "RateLimitError",
        K.QUOTA_EXCEEDED,
        P,
        None,
    ),
    ("connection reset", ConnectionResetFault(), "ConnectionResetError", K.CONNECTION_RESET, T, None),
    (
        "malformed response",
        MalformedResponseFault(raw="<html>502</html>"),
        "JSONDecodeError",
        K.INVALID_RESPONSE,
        P,
        None,
    ),
    (
        "partial response",
        PartialResponseFault(content="The answer"),
        "LengthFinishReasonError",
        K.PARTIAL_RESULT,
        T,
        None,
    ),
    (
        "invalid parameters",
        InvalidParametersFault(message="Invalid airport code: XYZ"),
        "ToolError",
        K.INVALID_PARAMETERS,
        P,
        None,
    ),
    ("tool call fault", ToolCallFault(mode="missing_arguments"), "ToolError", K.INVALID_PARAMETERS, P, None),
    (
        "stream cut by ConnectionError",
        StreamTruncateFault(after_chunks=2),
        "ConnectionError",
        K.NETWORK_ERROR,
        T,
        None,
    ),
    (
        "stream cut by ConnectionResetError",
        StreamTruncateFault(after_chunks=2, raise_="ConnectionResetError"),
        "ConnectionResetError",
        K.CONNECTION_RESET,
        T,
        None,
    ),
    (
        "stream cut by TimeoutError",
        StreamTruncateFault(after_chunks=2, raise_="TimeoutError"),
        "TimeoutError",
        K.TIMEOUT,
        T,
        None,
    ),
    (
        "stream cut by RemoteProtocolError",
        StreamTruncateFault(after_chunks=2, raise_="RemoteProtocolError"),
        "RemoteProtocolError",
        K.CONNECTION_RESET,
        T,
        None,
    ),
]


@pytest.mark.parametrize(
    ("fault", "class_name", "kind", "error_class", "retry_after_s"),
    [case[1:] for case in RAISING],
    ids=[case[0] for case in RAISING],
)
async def test_raising_faults_raise_real_shaped_errors_that_classify_like_real_ones(
    fault: BaseFault, class_name: str, kind: ErrorKind, error_class: ErrorClass, retry_after_s: float | None
) -> None:
    tool = Tool()
    start = anyio.current_time()
    with pytest.raises(Exception) as info:
        await fault.run(tool)
    error = info.value

    assert anyio.current_time() == start  # immediate
    assert tool.invoked == 0
    assert type(error).__name__ == class_name
    assert getattr(error, INJECTED_ATTR) == fault.fault_type
    decided = classify(error)
    assert (decided.kind, decided.error_class, decided.retry_after_s) == (kind, error_class, retry_after_s)
    assert decided.error_type == class_name


def test_http_errors_carry_status_headers_body_and_a_response() -> None:
    fault = HttpErrorFault(status_code=429, headers={"Retry-After": "30"}, body="Rate limit exceeded")
    error = fault.exception()

    assert isinstance(error, RateLimitError)
    assert isinstance(error, APIStatusError)
    assert str(error) == "HTTP 429: Rate limit exceeded"
    assert error.status_code == 429
    assert error.body == "Rate limit exceeded"
    assert error.headers["retry-after"] == "30"  # case-insensitive, like httpx
    assert error.headers["RETRY-AFTER"] == "30"
    assert "Retry-After" in error.headers
    assert dict(error.headers) == {"Retry-After": "30"}
    assert error.response.status_code == 429
    assert error.response.headers["retry-after"] == "30"
    assert error.response.text == "Rate limit exceeded"

    json_body = HttpErrorFault(status_code=503, body={"error": {"type": "api_error"}}).exception()
    assert isinstance(json_body, InternalServerError)
    assert json_body.body == {"error": {"type": "api_error"}}
    assert json_body.response.json() == {"error": {"type": "api_error"}}
    assert str(json_body) == 'HTTP 503: {"error": {"type": "api_error"}}'
    assert str(HttpErrorFault(status_code=503).exception()) == "HTTP 503: Service Unavailable"
    assert type(HttpErrorFault(status_code=409).exception()).__name__ == "ConflictError"


def test_a_503_is_permanent_for_custom_api_as_its_manifest_says() -> None:
    registry = ManifestRegistry.from_directory(BUNDLED)
    error = HttpErrorFault(status_code=503).exception()
    assert classify(error).error_class is T
    decided = classify(error, registry.get("custom_api"))
    assert (decided.kind, decided.error_class) == (K.SERVICE_UNAVAILABLE, P)


def test_malformed_and_partial_responses_look_like_parse_failures() -> None:
    malformed = MalformedResponseFault(raw="not valid json").exception()
    assert isinstance(malformed, json.JSONDecodeError)
    assert malformed.doc == "not valid json"
    assert (malformed.lineno, malformed.colno) == (1, 1)

    partial = PartialResponseFault(content="The answer is").exception()
    assert isinstance(partial, LengthFinishReasonError)
    assert partial.completion["content"] == "The answer is"
    assert partial.completion["finish_reason"] == "length"
    assert partial.completion["usage"]["completion_tokens"] == 0


def test_connection_reset_is_ambiguous() -> None:
    error = ConnectionResetFault().exception()
    assert isinstance(error, ConnectionResetError)
    assert "Connection reset by peer" in str(error)
    assert classify(error).kind.info.ambiguous


def test_invalid_parameters_and_tool_call_faults_are_tool_errors() -> None:
    error = InvalidParametersFault(message="Invalid airport code: XYZ").exception()
    assert isinstance(error, ToolError)
    assert (error.kind, error.message) == (K.INVALID_PARAMETERS, "Invalid airport code: XYZ")
    default = InvalidParametersFault().exception()
    assert isinstance(default, ToolError)
    assert default.message == K.INVALID_PARAMETERS.info.description
    for mode in ("malformed_arguments", "unknown_tool", "missing_arguments"):
        fallback = ToolCallFault(mode=mode).exception()
        assert isinstance(fallback, ToolError)
        assert fallback.kind is K.INVALID_PARAMETERS
        assert mode in fallback.message


# --- streams -------------------------------------------------------------------------------------


class Stream:
    """A real async stream of ``n`` chunks that records whether it was closed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False

    async def chunks(self) -> AsyncGenerator[str, None]:
        try:
            for i in range(self.n):
                await anyio.sleep(0.1)
                yield f"chunk{i}"
        finally:
            self.closed = True


async def collect(fault: StreamTruncateFault, stream: Stream) -> tuple[list[str], BaseException | None]:
    got: list[str] = []
    try:
        async with aclosing(fault.wrap_stream(stream.chunks())) as chunks:
            async for chunk in chunks:
                got.append(chunk)
    except Exception as exc:
        return got, exc
    return got, None


async def test_wrap_stream_truncates_after_n_chunks_then_raises() -> None:
    stream = Stream(10)
    got, error = await collect(StreamTruncateFault(after_chunks=3, raise_="RemoteProtocolError"), stream)

    assert got == ["chunk0", "chunk1", "chunk2"]
    assert isinstance(error, RemoteProtocolError)
    assert getattr(error, INJECTED_ATTR) == "stream_truncate"
    assert classify(error).kind is K.CONNECTION_RESET
    assert stream.closed  # the real stream is closed, not left dangling


async def test_wrap_stream_cuts_a_short_stream_at_its_end_and_zero_at_once() -> None:
    got, error = await collect(StreamTruncateFault(after_chunks=5, raise_="TimeoutError"), Stream(2))
    assert got == ["chunk0", "chunk1"]
    assert isinstance(error, TimeoutError)

    source = Stream(4).chunks()
    wrapped = StreamTruncateFault(after_chunks=0).wrap_stream(source)
    with pytest.raises(ConnectionError) as info:
        await anext(wrapped)
    assert type(info.value) is ConnectionError
    with pytest.raises(StopAsyncIteration):  # closed before it ever started
        await anext(source)


async def test_a_consumer_that_stops_early_sees_no_error_and_the_stream_is_closed() -> None:
    stream = Stream(10)
    async with aclosing(StreamTruncateFault(after_chunks=5).wrap_stream(stream.chunks())) as chunks:
        async for chunk in chunks:
            assert chunk == "chunk0"
            break
    assert stream.closed


# --- tool call corruption -----------------------------------------------------------------------


def parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_corrupt_tool_call_per_mode() -> None:
    arguments = json.dumps({"origin": "SFO", "destination": "JFK"})

    name, args = corrupt_tool_call("flight_search", arguments, mode="malformed_arguments")
    assert name == "flight_search"
    assert not parses(args)
    assert arguments.startswith(args)  # cut short, as a truncated generation is

    assert corrupt_tool_call("flight_search", arguments, mode="unknown_tool") == (
        "flight_search_unknown",
        arguments,
    )
    assert corrupt_tool_call("flight_search", arguments, mode="missing_arguments") == ("flight_search", "{}")
    assert ToolCallFault(mode="unknown_tool").corrupt_tool_call("a", "{}") == ("a_unknown", "{}")
    assert ToolCallFault().mode == "malformed_arguments"
    assert not parses(corrupt_tool_call("a", "", mode="malformed_arguments")[1])
    assert not parses(corrupt_tool_call("a", "1", mode="malformed_arguments")[1])


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8) | st.booleans(), max_size=5))
def test_malformed_arguments_never_parse_and_are_deterministic(arguments: dict[str, Any]) -> None:
    text = json.dumps(arguments)
    corrupted = corrupt_tool_call("t", text, mode="malformed_arguments")
    assert not parses(corrupted[1])
    assert corrupt_tool_call("t", text, mode="malformed_arguments") == corrupted
