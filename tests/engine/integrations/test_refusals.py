"""Every refused call counted, the same way everywhere (issue 22 §3): a call the LLM executor or an
adapter refuses before any attempt — a tool the model made up, arguments that are not JSON or do not
fit the tool, an id the message repeats — is refused by the engine as an unknown engine call is
(``CallFailed`` with no attempt), so ``engine.stats()``, Prometheus (read back by prometheus-client's
parser), OpenTelemetry (the SDK's in-memory exporter) and the console's model count it alike, while
the model is answered exactly as before: one result per call id, the seed-003 text.

:class:`Counted` is shared with the adapters' tests (LangGraph, OpenAI Agents). Every engine test runs
in both engine modes on both backends (tests/engine/conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry, generate_latest

from console.model.fold import ConsoleModel
from engine import Engine, ToolCallExecutor, ToolManifest
from engine.events import CallFailed
from engine.exporters.otel import OtelExporter
from engine.exporters.prometheus import UNKNOWN_TOOL_LABEL, PrometheusMetrics
from engine.llm import parse_openai_tool_calls
from engine.metrics import Counts
from engine.replay import Recording, replay
from tests.engine.conftest import Recorder, Scripted, new_engine, recorded
from tests.engine.integrations.test_otel import Otel
from tests.engine.integrations.test_prometheus import Samples, errors, metric, scrape

pytestmark = pytest.mark.anyio

UNKNOWN = UNKNOWN_TOOL_LABEL


class Counted:
    """One engine's figures, as each consumer of its events keeps them: ``engine.stats()``,
    Prometheus, OpenTelemetry spans and the console's model (fed every event, as an attached
    console is)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.otel = otel = Otel("sdk")
        self.registry = CollectorRegistry()
        self.prometheus = PrometheusMetrics(engine, self.registry)
        self.exporter: OtelExporter = otel.attach(engine)
        self.events: Recorder = recorded(engine)

    def close(self) -> None:
        self.prometheus.close()
        self.exporter.close()
        self.otel.tracer_provider.shutdown()
        self.otel.meter_provider.shutdown()

    def samples(self) -> Samples:
        return scrape(self.registry)

    def failed(self, tool: str, kind: str) -> tuple[float, float]:
        """Prometheus: the tool's failed calls, and its permanent errors of ``kind``."""
        samples = self.samples()
        return (
            metric(samples, "tripwire_calls_total", tool=tool, outcome="failed"),
            errors(samples, tool, kind, "permanent"),
        )

    def life(self, tool: str) -> Counts:
        """``engine.stats()``'s lifetime figures of ``tool`` — and the console's, which must agree."""
        stats = self.engine.stats()
        model = ConsoleModel()
        model.apply(list(self.events))
        console = model.tools[tool].metrics.snapshot(model.last_t or 0.0).life
        assert console == stats[tool].life, f"the console counts {tool} as the engine does"
        return stats[tool].life

    def spans(self, call_id: str) -> list[ReadableSpan]:
        """The ``execute_tool`` spans of one call id."""
        return [
            span
            for span in self.otel.finished(self.exporter)
            if span.name.startswith("execute_tool ")
            and dict(span.attributes or {}).get("gen_ai.tool.call.id") == call_id
        ]

    def not_run(self, call_id: str, kind: str) -> ReadableSpan:
        """The one span of a call refused before any attempt."""
        (span,) = self.spans(call_id)
        attributes = dict(span.attributes or {})
        assert span.status.status_code is StatusCode.ERROR
        assert attributes["error.type"] == kind
        assert attributes["tripwire.call.status"] == "not_run"
        assert attributes["tripwire.attempts"] == 0
        return span

    def refused(self) -> list[CallFailed]:
        return [e for e in self.events if isinstance(e, CallFailed) and e.attempts == 0]


def oa_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_the_issues_repro_a_tool_the_model_made_up_is_counted_as_unknown() -> None:
    engine = await new_engine()
    engine.register("weather", Scripted("sunny"))
    counted = Counted(engine)

    answers = await ToolCallExecutor(engine).run_openai(
        {"tool_calls": [oa_call("call_1", "made_up_by_model", '{"x": 1}')]}
    )

    assert [a["tool_call_id"] for a in answers] == ["call_1"]
    assert answers[0]["content"] == (
        "Tool Execution Failed\nTool: made_up_by_model\nError Type: unknown_tool\n"
        "Message: unknown tool 'made_up_by_model'; available tools: weather\n\n"
        "No tool by that name exists."
    )
    assert counted.failed(UNKNOWN, "unknown_tool") == (1, 1)
    assert "made_up_by_model" not in generate_latest(counted.registry).decode()
    life = counted.life(UNKNOWN)
    assert (life.calls, life.failures, life.error_count) == (1, 1, 0)
    counted.not_run("call_1", "unknown_tool")
    counted.close()


async def test_every_refusal_of_the_executor_is_counted_like_a_refused_engine_call() -> None:
    engine = await new_engine(ToolManifest(id="weather"))
    tool = Scripted("sunny")
    engine.register("weather", tool)
    counted = Counted(engine)

    message = {
        "tool_calls": [
            oa_call("call_1", "weather", '{"city": "Paris"}'),
            oa_call("call_2", "made_up_by_model", "{}"),  # unknown
            oa_call("call_3", "weather", '{"city": '),  # not JSON
            oa_call("call_1", "weather", '{"city": "Oslo"}'),  # repeats an id the turn ran
            oa_call("call_5", "also_made_up", '{"city": '),  # a made-up name with broken JSON
        ]
    }
    batch = await ToolCallExecutor(engine).run(parse_openai_tool_calls(message))
    result = await engine.try_call("nope")  # a refused engine call, for comparison

    assert [i.call_id for i in batch.items] == ["call_1", "call_2", "call_3", "call_1", "call_5"]
    assert [i.status for i in batch.items] == ["succeeded", "not_run", "not_run", "not_run", "not_run"]
    assert tool.calls == 1, "no refused call reached the tool"
    assert result.error is not None
    # One way: the executor's refusals are the engine's refusals, announced before each answer.
    refused = counted.refused()
    assert [(e.tool_id, e.call_id, str(e.kind)) for e in refused] == [
        ("made_up_by_model", "call_2", "unknown_tool"),
        ("weather", "call_3", "invalid_parameters"),
        ("weather", "call_1", "invalid_parameters"),
        ("also_made_up", "call_5", "invalid_parameters"),
        ("nope", refused[-1].call_id, "unknown_tool"),
    ]
    assert batch.turn is not None
    turn = batch.turn.turn_id
    assert [e.turn_id for e in refused] == [turn, turn, None, turn, None]  # the repeated c1 is not the turn's
    assert [e.counted_tool for e in refused] == [UNKNOWN, "weather", "weather", UNKNOWN, UNKNOWN]

    # Prometheus: two unknown-tool refusals and a made-up name's bad JSON under "(unknown)".
    assert counted.failed(UNKNOWN, "unknown_tool") == (3, 2)
    assert counted.failed(UNKNOWN, "invalid_parameters")[1] == 1
    assert counted.failed("weather", "invalid_parameters") == (2, 2)
    assert metric(counted.samples(), "tripwire_calls_total", tool="weather", outcome="ok") == 1
    exposition = generate_latest(counted.registry).decode()
    assert "made_up" not in exposition and "nope" not in exposition
    # engine.stats() and the console: calls and failures, no attempt (no error, no latency).
    weather, unknown = counted.life("weather"), counted.life(UNKNOWN)
    assert (weather.calls, weather.successes, weather.failures, weather.error_count) == (3, 1, 2, 0)
    assert (unknown.calls, unknown.failures, unknown.error_count) == (3, 3, 0)
    # OpenTelemetry: one not_run span per refused call, never two.
    counted.not_run("call_2", "unknown_tool")
    counted.not_run("call_3", "invalid_parameters")
    counted.not_run("call_5", "invalid_parameters")
    assert len(counted.spans("call_1")) == 2  # the call that ran, and the refused repeat of its id
    counted.close()


async def test_arguments_that_do_not_fit_the_tool_are_refused_and_counted() -> None:
    engine = await new_engine()

    async def weather(city: str) -> str:
        return f"sunny in {city}"

    engine.register("weather", weather)
    counted = Counted(engine)

    answers = await ToolCallExecutor(engine).run_openai(
        {"tool_calls": [oa_call("c1", "weather", '{"town": "Paris"}')]}
    )

    assert answers[0]["content"] == (
        "Tool Execution Failed\nTool: weather\nError Type: invalid_parameters\n"
        "Message: invalid arguments: missing a required argument: 'city'\n\n"
        "Fix the arguments and call the tool again."
    )
    assert counted.failed("weather", "invalid_parameters") == (1, 1)
    life = counted.life("weather")
    assert (life.calls, life.failures, life.error_count) == (1, 1, 0)
    counted.not_run("c1", "invalid_parameters")
    counted.close()


async def test_a_turn_with_a_refused_call_still_replays_identically() -> None:
    engine = await new_engine(record=True)
    engine.register("weather", Scripted("sunny"))
    message = {"tool_calls": [oa_call("c1", "weather", "{}"), oa_call("c2", "made_up_by_model", "{}")]}

    batch = await ToolCallExecutor(engine).run(parse_openai_tool_calls(message))

    assert batch.turn is not None
    events = batch.turn.trace.events
    assert any(isinstance(e, CallFailed) and e.call_id == "c2" for e in events)  # after the turn's end
    manifests = {engine.manifests.digest("weather"): engine.manifest("weather").model_dump(mode="json")}
    report = await replay(Recording.from_events(events, manifests.get))
    assert report.matches, report.mismatches
